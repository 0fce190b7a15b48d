"""Games that take free-form moves (a TextArena env that prints no move list, e.g. Nim):
the answer goes to the game, which judges it; a move it rejects ends the game under the
declared invalid-move policy, and what needs a move list is refused in one line."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from spiral.agents import make as make_agent
from spiral.agents.base import Agent
from spiral.errors import SpiralError
from spiral.evaluation.eval_args import parse_eval_args, validate
from spiral.games import registry
from spiral.games.base import State
from spiral.prompts.invalid import invalid_policy
from spiral.prompts.parse import parse_move
from spiral.prompts.render import build_prompt
from spiral.prompts.spec import PromptSpec
from spiral.rollout.play import GameSpec, play_games
from spiral.types import Move

pytest.importorskip("textarena")
NIM = "textarena:Nim-v0"
_PILE = re.compile(r"pile (\d+): (\d+)")


class NimTaker(Agent):
    """Takes one object from the first pile that has any, read off what it was told (the
    newest pile listing): legal free-form moves, never a listed one."""

    name = "taker"

    def act(self, state: State) -> Move:
        told = state.observation(state.current_player(), "history")
        listing = told.rsplit("Current Pile:", 1)[-1]
        pile = next(p for p, n in _PILE.findall(listing) if int(n) > 0)
        return f"[{pile} 1]"


class Fixed(Agent):
    """Always answers the same text."""

    def __init__(self, text: str) -> None:
        self.text, self.name = text, f"fixed:{text}"

    def act(self, state: State) -> Move:
        return self.text


def test_nim_lists_no_moves_and_is_played_free_form() -> None:
    assert registry.unplayable(NIM) is None
    assert registry.takes_free_moves(NIM)
    assert not registry.takes_free_moves("textarena:TicTacToe-v0")
    assert not registry.takes_free_moves("TicTacToe-v0")
    state = registry.make(NIM, seed=0)
    assert state.legal_actions() == [] and state.move_example() == "[0 3]"


@pytest.mark.parametrize("answer_format", ["bracket", "boxed"])
def test_the_prompt_shows_the_rules_example_and_the_answer_reaches_the_game(
    answer_format: str,
) -> None:
    state = registry.make(NIM, seed=0)
    spec = PromptSpec(template="plain", answer_format=answer_format)  # type: ignore[arg-type]
    prompt = build_prompt(state, 0, spec)
    assert "pile 2: 5" in prompt
    if answer_format == "bracket":
        assert "e.g. [0 3]" in prompt
    reply = "I take two.\n\\boxed{[1 2]}" if answer_format == "boxed" else "I take two: [1 2]"
    parsed = parse_move(reply, state, spec)
    assert parsed.move == "[1 2]"
    state.apply_action(parsed.move)
    assert "removes 2 from pile 1" in state.observation(1)


def test_legal_free_form_moves_play_to_a_zero_sum_end() -> None:
    specs = [GameSpec(NIM, seed=s, seats=("a", "b")) for s in range(3)]
    episodes = play_games(specs, {"a": NimTaker(), "b": NimTaker()}, invalid_policy("spiral"))
    for ep in episodes:
        assert ep.outcome == "win" and sum(ep.returns) == 0 and abs(ep.returns[0]) == 1
        assert len(ep.moves) == 12  # 3 + 4 + 5 objects, one at a time
    assert episodes[0].winner == 1  # twelve single takes: the second mover takes the last


@pytest.mark.parametrize("policy,returns", [("spiral", (0.5, -1.5)), ("strict", (1.0, -1.0))])
def test_a_move_the_game_rejects_ends_the_game_as_an_invalid_answer(
    policy: str, returns: tuple[float, float]
) -> None:
    specs = [GameSpec(NIM, seed=0, seats=("a", "b"))]
    (ep,) = play_games(specs, {"a": NimTaker(), "b": Fixed("[9 9]")}, invalid_policy(policy))
    assert ep.outcome == "invalid" and ep.offender == 1 and ep.returns == returns
    bad = ep.turns[-1]
    assert bad.move is None and bad.parse is not None and bad.parse.failure is not None
    assert bad.parse.failure.kind == "not_legal" and "out of range" in bad.parse.failure.detail
    assert len(ep.moves) == 1  # the rejected move changed nothing


@pytest.mark.parametrize(
    "keys,said",
    [
        (["opponents=random"], "the random opponent"),
        (["opponents=checkpoint:base", "answer_format=constrained"], "answer_format=bracket"),
    ],
)
def test_what_needs_a_move_list_is_refused_in_one_line(keys: list[str], said: str) -> None:
    args = parse_eval_args(["checkpoint=base", f"env_ids=TicTacToe-v0,{NIM}", *keys])
    with pytest.raises(SpiralError) as refused:
        validate(args)
    assert said in str(refused.value) and "\n" not in str(refused.value)
    assert NIM in str(refused.value) and "TicTacToe-v0" not in str(refused.value)


def test_spiral_train_refuses_the_random_evaluator_before_loading() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "spiral", "train", f"env_ids={NIM}", "model_name=/nonexistent"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "eval_opponent_names" in lines[0] and "eval_every=0" in lines[0]


def test_a_free_form_game_is_still_a_game_with_a_random_opponent_elsewhere() -> None:
    # The refusal is about the free-form game only: listed-move games keep `random`.
    args = parse_eval_args(
        ["checkpoint=base", "env_ids=textarena:TicTacToe-v0", "opponents=random"]
    )
    validate(args)
    assert make_agent("random", seed=0).act(registry.make("textarena:TicTacToe-v0")) in {
        f"[{k}]" for k in range(9)
    }


def test_a_constrained_answer_where_no_moves_are_listed_is_one_line() -> None:
    from spiral.errors import UsageError
    from spiral.prompts.render import constraint_for

    spec = PromptSpec(template="plain", answer_format="constrained")
    with pytest.raises(UsageError, match="answer_format=bracket") as refused:
        constraint_for(registry.make(NIM, seed=0), spec, tokenizer=None)
    assert "\n" not in str(refused.value)


def test_a_listed_pattern_is_not_a_move() -> None:
    """IndianPoker lists '[bet X]': a pattern, so its moves are free-form and the env
    judges '[bet 3]'."""
    state = registry.make("textarena:IndianPoker-v0", seed=0)
    assert state.legal_actions() == [] and registry.takes_free_moves("textarena:IndianPoker-v0")
    state.apply_action("[bet 1]")
    assert state.move_history[-1][1] == "[bet 1]"


def test_an_env_that_breaks_in_its_own_step_is_one_line_and_changes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from spiral.games.adapters import LibraryFailure

    state = registry.make("textarena:TicTacToe-v0", seed=0)
    before = state.observation(0)

    def broken(move: str) -> None:
        raise TypeError("'NoneType' object is not subscriptable")

    monkeypatch.setattr(state._env, "step", broken)  # noqa: SLF001
    with pytest.raises(LibraryFailure, match="failed inside its own step on '\\[4\\]'") as broke:
        state.apply_action("[4]")
    assert "\n" not in str(broke.value) and "TypeError" in str(broke.value)
    assert state.move_history == [] and state.observation(0) == before


def test_a_list_the_env_rejects_throughout_is_not_the_moves() -> None:
    """TwoDollar lists '[Propose]', '[Accept]', '[Reject]', but a proposal's amount follows
    the bracket and there is nothing to accept yet: tried on copies, every listed move is
    rejected, so the position is free-form and the env judges the whole answer."""
    game = "textarena:TwoDollar-v0"
    state = registry.make(game, seed=0)
    assert state.legal_actions() == [] and registry.takes_free_moves(game)
    assert state.move_history == []  # the trials left the game as it was
    state.apply_action("I think this is fair. [Propose] $1.20")
    assert len(state.move_history) == 1 and "1.20" in state.observation(1)
    ttt = registry.make("textarena:TicTacToe-v0", seed=0)
    assert len(ttt.legal_actions()) == 9  # a list the env takes stays the list
