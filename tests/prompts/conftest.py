"""Test-only games and a tiny real tokenizer for the prompts tests.

- `GridState`: nine cells "[0]".."[8]", seats alternate, every move fills a cell; the
  observation ends with TicTacToe-style "Available Moves: '[0]', ...".
- `MenuState`: one decision from a fixed menu of moves (e.g. "[check]", "[bet]",
  "[Bid: 3, 5]"), then the game is over.
- `make_tokenizer(...)`: a byte-level BPE trained in milliseconds on game text, wrapped
  in transformers' fast tokenizer class with a chat template, so the `chat` template,
  BOS handling and answer constraints run against real tokenizer code.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from spiral.games.base import State
from spiral.types import Move, Seat

GRID_RULES = (
    "You are playing Grid. Take one free cell per turn; the game ends when all nine are taken."
)
MENU_RULES = "You are playing Menu. Pick one of the offered actions."


class GridState(State):
    game_id = "Grid-test"

    def __init__(self, seed: int = 0, max_turns: int | None = None) -> None:
        super().__init__(seed, max_turns)
        self.cells: list[Seat | None] = [None] * 9
        self._broadcast(GRID_RULES)
        self._tell(0, self._moves_message())

    def _moves_message(self) -> str:
        listed = ", ".join(f"'{m}'" for m in self._legal_actions())
        return f"Available Moves: {listed}"

    def _current_player(self) -> Seat:
        return len(self.move_history) % 2

    def _legal_actions(self) -> list[Move]:
        return [f"[{i}]" for i, owner in enumerate(self.cells) if owner is None]

    def _apply(self, move: Move) -> None:
        seat = (len(self.move_history) - 1) % 2
        self.cells[int(move[1:-1])] = seat
        self._broadcast(f"Player {seat} took cell {move}.")
        if not self._game_over():
            self._tell(1 - seat, self._moves_message())

    def _game_over(self) -> bool:
        return all(owner is not None for owner in self.cells)

    def _returns(self) -> tuple[float, float]:
        return (0.0, 0.0)


class MenuState(State):
    game_id = "Menu-test"
    default_obs_style = "latest"

    def __init__(self, moves: list[Move], seed: int = 0) -> None:
        super().__init__(seed)
        self.moves = list(moves)
        self.done = False
        self._broadcast(MENU_RULES)
        self._tell(0, f"Your available actions are: {', '.join(self.moves)}")

    def _current_player(self) -> Seat:
        return 0

    def _legal_actions(self) -> list[Move]:
        return list(self.moves)

    def _apply(self, move: Move) -> None:
        self.done = True

    def _game_over(self) -> bool:
        return self.done

    def _returns(self) -> tuple[float, float]:
        return (1.0, -1.0)


POKER_MOVES = ["[check]", "[bet]"]
BID_MOVES = ["[Bid: 3, 5]", "[Bid: 4, 2]", "[Call]"]

SPECIALS = ["<s>", "</s>", "<|begin_of_text|>", "<|im_start|>", "<|im_end|>", "<|eot_id|>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_CORPUS = [
    GRID_RULES,
    MENU_RULES,
    "You are playing a two-player zero-sum game. Make valid actions to win.",
    "Observation: [GAME] Available Moves: '[0]', '[1]', '[2]', '[3]', '[4]', '[5]'",
    "Answer with exactly one of the available moves, written in square brackets, e.g. [4].",
    "Move: [4]\nMove: [check]\nMove: [bet] [fold] [call] [Bid: 3, 5] [Call]",
    "Please reason step by step, and put your final answer within \\boxed{}.",
]


@cache
def _trained(adds_bos: bool, bos: str) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 4, trainer)
    if adds_bos:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", special_tokens=[(bos, tok.token_to_id(bos))]
        )
    return tok


def make_tokenizer(
    adds_bos: bool = True, chat_template: str | None = CHAT_TEMPLATE, bos: str = "<s>"
) -> Any:
    """A fast tokenizer: byte-level BPE, BOS `bos` added on encode if `adds_bos`."""
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_trained(adds_bos, bos).to_str()),
        bos_token=bos,
        eos_token="</s>",
    )
    tok.chat_template = chat_template
    return tok


@pytest.fixture(scope="session")
def tokenizer() -> Any:
    return make_tokenizer()


@pytest.fixture
def grid() -> GridState:
    return GridState()


@pytest.fixture
def poker() -> MenuState:
    return MenuState(POKER_MOVES)


@pytest.fixture
def bids() -> MenuState:
    return MenuState(BID_MOVES)


@pytest.fixture
def make_menu() -> type[MenuState]:
    """The MenuState class, for tests that need their own menu of moves."""
    return MenuState


@pytest.fixture(scope="session")
def bare_tokenizer() -> Any:
    """Same vocabulary, no chat template and no BOS of its own (like a base model's)."""
    return make_tokenizer(adds_bos=False, chat_template=None)


@pytest.fixture(scope="session")
def llama_tokenizer() -> Any:
    """Adds "<|begin_of_text|>" as its BOS, as Llama-3 tokenizers do."""
    return make_tokenizer(bos="<|begin_of_text|>", chat_template=None)


@pytest.fixture(scope="session")
def fuzz_states() -> list[State]:
    """States the fuzz tests read but never change (session scope suits hypothesis)."""
    return [GridState(), MenuState(POKER_MOVES), MenuState(BID_MOVES)]
