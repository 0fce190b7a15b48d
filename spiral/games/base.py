"""The State base class every game implements (OpenSpiel-shaped, text observations).

Choices:
- Moves are canonical strings ("[4]", "[bet]", "[Bid: 3, 5]"). `legal_actions()` is a
  finite list; for open action spaces (negotiation offers) it is a representative menu
  and `parse_action()` accepts any well-formed legal move beyond it.
- Chance (cards, dice, values) comes from `self.rng`, a `random.Random(seed)` owned by the
  state, so the same seed gives the same game. `clone()` deep-copies everything.
- Each seat has its own message log, exactly what that seat has been told. Observations
  are rendered from it in one of two styles, as the original's TextArena wrappers did:
  "history" (every message, `[GAME] ...` lines) or "latest" (the first message, i.e. the
  rules, then the latest one, the game's `situation(seat)` where it has one so that a
  poker seat still sees its card, then "Next Action:"). Each game has a default style;
  a run's `use_llm_obs_wrappers` picks one per game, as the original's wrappers did.
- An illegal move raises `IllegalMoveError` and changes nothing. Whose turn it is comes
  from the game: a seat moving twice in a row (a Pig roll, the loser of a Liar's Dice
  call) is normal, never read as an illegal move.
- A game that can list its deals takes a fixed one (`cards=`, checked by `fixed_deal`)
  and lists them all (`chance_outcomes`), so training can deal each equally often and
  evaluation can enumerate them.
- A turn limit (`max_turns`, counting moves by both seats) ends the game as a draw with
  `truncated()` True. Returns are +1 / -1 / 0 for win / loss / draw.
"""

from __future__ import annotations

import copy
import numbers
import random
from abc import ABC, abstractmethod
from typing import Any, Literal

from spiral.types import Move, Seat

ObsStyle = Literal["history", "latest"]
TERMINAL: Seat = -1


class IllegalMoveError(ValueError):
    """Raised by `apply_action` for a move that is not legal in this state."""


def fixed_deal(cards: Any, size: int, deck: int) -> tuple[int, ...] | None:
    """`cards` as `size` different whole numbers in 0..deck-1 (a fixed deal), or None when
    it is not one: floats, booleans, strings and repeated cards are not deals."""
    if not isinstance(cards, (tuple, list)) or len(cards) != size:
        return None
    if not all(isinstance(c, numbers.Integral) and not isinstance(c, bool) for c in cards):
        return None
    deal = tuple(int(c) for c in cards)
    return deal if len(set(deal)) == size and all(0 <= c < deck for c in deal) else None


def normalize_move_text(text: str) -> str:
    """Case-fold, collapse whitespace and drop it inside the brackets' edges ("[  Check ]"
    -> "[check]"), for tolerant matching against legal moves."""
    collapsed = " ".join(text.split()).replace("[ ", "[").replace(" ]", "]")
    return collapsed.casefold()


class State(ABC):
    """A game in progress. Subclasses implement the rules hooks marked abstract."""

    game_id: str = ""
    default_obs_style: ObsStyle = "history"
    default_max_turns: int | None = None

    def __init__(self, seed: int = 0, max_turns: int | None = None) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.max_turns = self.default_max_turns if max_turns is None else max_turns
        self.move_history: list[tuple[Seat, Move]] = []
        self._messages: tuple[list[tuple[str, str]], list[tuple[str, str]]] = ([], [])
        self._truncated = False

    # ---- rules hooks -------------------------------------------------------------
    @abstractmethod
    def _current_player(self) -> Seat:
        """Seat to move; only called while the game is not over."""

    @abstractmethod
    def _legal_actions(self) -> list[Move]:
        """Canonical legal moves for the seat to move."""

    @abstractmethod
    def _apply(self, move: Move) -> None:
        """Apply a canonical legal move (already validated) and tell the seats."""

    @abstractmethod
    def _game_over(self) -> bool:
        """True once the rules end the game (the turn limit is handled here)."""

    @abstractmethod
    def _returns(self) -> tuple[float, float]:
        """Per-seat returns of a game the rules ended."""

    # ---- public surface ----------------------------------------------------------
    def current_player(self) -> Seat:
        return TERMINAL if self.is_terminal() else self._current_player()

    def legal_actions(self) -> list[Move]:
        return [] if self.is_terminal() else self._legal_actions()

    def parse_action(self, text: str) -> Move | None:
        """The canonical legal move that `text` denotes, or None.

        Default: case-insensitive, whitespace-tolerant lookup among `legal_actions()`.
        Games with open action spaces override this to accept any well-formed move.
        """
        wanted = normalize_move_text(text)
        for move in self.legal_actions():
            if normalize_move_text(move) == wanted:
                return move
        return None

    def move_example(self) -> Move:
        """A well-formed move for the seat to move, shown in prompts as the pattern to
        answer in: the first legal move, or a placeholder in a game that lists none
        (adapters of such games give the game's own example)."""
        legal = self.legal_actions()
        return legal[0] if legal else "[move]"

    def apply_action(self, move: Move) -> None:
        if self.is_terminal():
            raise IllegalMoveError(f"{self.game_id}: the game is over; no move can be applied")
        if not isinstance(move, str):
            legal = self.legal_actions()  # an open game may list none
            example = f" such as {legal[0]!r}" if legal else ""
            raise IllegalMoveError(
                f"{self.game_id}: a move is text{example}; got {type(move).__name__} {move!r}"
            )
        canonical = self.parse_action(move)
        if canonical is None:
            legal = ", ".join(self.legal_actions()[:20])
            raise IllegalMoveError(f"{self.game_id}: {move!r} is not legal here; legal: {legal}")
        seat = self._current_player()
        self.move_history.append((seat, canonical))
        self._apply(canonical)
        if (
            not self._game_over()
            and self.max_turns is not None
            and len(self.move_history) >= self.max_turns
        ):
            self._truncated = True
            self._broadcast(f"The turn limit ({self.max_turns}) was reached. The game is a draw.")

    def is_terminal(self) -> bool:
        return self._truncated or self._game_over()

    def truncated(self) -> bool:
        return self._truncated

    def returns(self) -> tuple[float, float]:
        if not self.is_terminal():
            return (0.0, 0.0)
        return (0.0, 0.0) if self._truncated else self._returns()

    def winner(self) -> Seat | None:
        r0, r1 = self.returns()
        if not self.is_terminal() or r0 == r1:
            return None
        return 0 if r0 > r1 else 1

    def observation(self, seat: Seat, style: ObsStyle | None = None) -> str:
        """What `seat` may see, rendered in `style` (the game's default if None)."""
        style = style or self.default_obs_style
        messages = self._messages[seat]
        if style == "history":
            return "".join(f"\n[{sender}] {text}" for sender, text in messages).lstrip("\n")
        if not messages:
            return "Next Action:"
        first = messages[0][1]
        last = messages[-1][1] if len(messages) > 1 else ""
        # The latest message alone may not say what the seat holds (a poker seat's card
        # was told once, at the deal): the game's situation, where it has one, says it.
        situation = self.situation(seat)
        return "\n\n".join(p for p in (first, last, situation) if p) + "\n\nNext Action:"

    def private_info(self, seat: Seat) -> tuple[object, ...]:
        """This seat's hidden information (cards, dice, values); () for perfect-info games.

        The conformance test uses it: two states with equal public history and equal
        `private_info(seat)` must give `seat` the same observation.
        """
        return ()

    @classmethod
    def chance_outcomes(cls) -> tuple[dict[str, object], ...] | None:
        """Every chance outcome of a game, each as constructor keyword arguments that fix
        it (Kuhn: the six deals as `cards=(c0, c1)`), so a batch can deal each equally
        often; () for a game without chance; None when they cannot be enumerated."""
        return None

    def situation(self, seat: Seat) -> str | None:
        """A short statement of what `seat` must decide now: its private information and
        the public situation (Kuhn: "Your card: K. Player 0 bet 1 chip."), for prompt
        styles that put it right before the answer. None: the game has no such summary
        (its observation already ends with the situation, as TicTacToe's board does)."""
        return None

    def brief(self, seat: Seat) -> str | None:
        """The whole decision in a few lines, for the "brief" prompt style: the rules in
        one sentence and the position as `seat` sees it (TicTacToe: its mark and the
        board; Kuhn: the deck, the stakes, the betting and its card). None: the game has
        no brief form, and the brief style renders the focused prompt instead."""
        return None

    def clone(self) -> State:
        """An independent copy that continues identically (rng included). The message
        logs, most of a state's size, hold immutable pairs, so they are copied as lists;
        the game's own state is deep-copied (a whole-TicTacToe search clones ~16,000
        times: 45 s with a deepcopy of everything, ~1 s like this)."""
        twin = copy.copy(self)
        twin.rng = random.Random()
        twin.rng.setstate(self.rng.getstate())
        twin.move_history = list(self.move_history)
        twin._messages = (list(self._messages[0]), list(self._messages[1]))
        # Seeded so a game attribute that refers to these parts keeps referring to the
        # twin's.
        memo: dict[int, Any] = {
            id(self): twin,
            id(self.rng): twin.rng,
            id(self.move_history): twin.move_history,
            id(self._messages): twin._messages,
        }
        shared = ("rng", "move_history", "_messages")
        for name, value in vars(self).items():
            if name not in shared:
                setattr(twin, name, copy.deepcopy(value, memo))
        return twin

    def rules_text(self, seat: Seat) -> str:
        """The rules message this seat got first (for a system prompt)."""
        return self._messages[seat][0][1] if self._messages[seat] else ""

    # ---- helpers for subclasses --------------------------------------------------
    def _tell(self, seat: Seat, text: str, sender: str = "GAME") -> None:
        self._messages[seat].append((sender, text))

    def _broadcast(self, text: str, sender: str = "GAME") -> None:
        for seat in (0, 1):
            self._tell(seat, text, sender)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(seed={self.seed}, moves={self.move_history})"
