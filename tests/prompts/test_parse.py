"""parse_move in each answer format, the spec's validation, and the invalid-move policies."""

from __future__ import annotations

import pytest

from spiral.games.base import State
from spiral.prompts import PromptSpec, invalid_policy, parse_move
from spiral.prompts.invalid import INVALID_POLICIES

BOXED = PromptSpec(template="plain", answer_format="boxed")
BRACKET = PromptSpec(template="plain", answer_format="bracket")
CONSTRAINED = PromptSpec(template="plain", answer_format="constrained")


# ---- boxed --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "move", "answer"),
    [
        ("Center is best. \\boxed{[4]}", "[4]", "[4]"),
        ("\\boxed{4}", "[4]", "4"),
        ("\\boxed{ 4 }", "[4]", " 4 "),
        ("maybe \\boxed{[0]}... no: \\boxed{[8]}", "[8]", "[8]"),
        ("\\boxed{\\text{[2]}}", "[2]", "[2]"),
        ("\\boxed{\\boxed{3}}", "[3]", "3"),
    ],
)
def test_boxed_grid(grid: State, text: str, move: str, answer: str) -> None:
    result = parse_move(text, grid, BOXED)
    assert result.ok and result.failure is None
    assert (result.move, result.answer) == (move, answer)


@pytest.mark.parametrize(
    ("text", "move"),
    [
        ("\\boxed{check}", "[check]"),
        ("\\boxed{[Check]}", "[check]"),  # case-insensitive (the original said invalid)
        ("\\boxed{BET}", "[bet]"),
    ],
)
def test_boxed_poker(poker: State, text: str, move: str) -> None:
    assert parse_move(text, poker, BOXED).move == move


def test_boxed_bid(bids: State) -> None:
    assert parse_move("\\boxed{Bid: 3, 5}", bids, BOXED).move == "[Bid: 3, 5]"
    assert parse_move("\\boxed{[bid: 4,  2]}", bids, BOXED).move == "[Bid: 4, 2]"
    assert parse_move("\\boxed{call}", bids, BOXED).move == "[Call]"


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("", "no_answer"),
        ("I play [4]", "no_answer"),  # no fallback to the whole reply
        ("\\boxed{[4]", "no_answer"),  # unclosed
        ("\\fbox{[4]}", "no_answer"),
        ("\\boxed{}", "no_answer"),
        ("\\boxed{  }", "no_answer"),
        ("\\boxed{[9]}", "not_legal"),
        ("\\boxed{center}", "not_legal"),
        ("\\boxed{I will play cell number four now}", "not_legal"),
    ],
)
def test_boxed_failures(grid: State, text: str, kind: str) -> None:
    result = parse_move(text, grid, BOXED)
    assert result.move is None
    assert result.failure is not None and result.failure.kind == kind


def test_boxed_taken_cell_is_not_legal(grid: State) -> None:
    grid.apply_action("[4]")
    result = parse_move("\\boxed{[4]}", grid, BOXED)
    assert result.failure is not None and result.failure.kind == "not_legal"
    assert result.answer == "[4]"


# ---- bracket ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "move"),
    [
        ("[4]", "[4]"),
        ("I considered [0] and [8].\nI play [4].", "[4]"),
        ("[4] is best. Final answer: [ 4 ]", "[4]"),  # same move twice on the last line
        ("I play [4].\nGood luck!", "[4]"),  # final line has no move: last legal wins
        ("[4] [9]", "[4]"),  # [9] is not legal, [4] is the last legal span
        ("\\boxed{[6]}", "[6]"),
        ("[Bid: 3, 5]", None),  # not a Grid move
    ],
)
def test_bracket_grid(grid: State, text: str, move: str | None) -> None:
    assert parse_move(text, grid, BRACKET).move == move


def test_bracket_case_insensitive(poker: State) -> None:
    result = parse_move("I will [Check].", poker, BRACKET)
    assert (result.move, result.answer) == ("[check]", "[Check]")


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("", "no_answer"),
        ("I play four", "no_answer"),
        ("I play [nine]", "not_legal"),
        ("[3] or [4]", "ambiguous"),
        ("thinking...\nAvailable Moves: '[0]', '[1]', '[2]'", "ambiguous"),
    ],
)
def test_bracket_failures(grid: State, text: str, kind: str) -> None:
    result = parse_move(text, grid, BRACKET)
    assert result.move is None
    assert result.failure is not None and result.failure.kind == kind


def test_bracket_not_legal_keeps_last_span(grid: State) -> None:
    result = parse_move("[a] then [b]", grid, BRACKET)
    assert result.answer == "[b]"


# ---- constrained --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "move"),
    [
        (" [4]", "[4]"),  # the prompt ended with the marker
        ("[4]", "[4]"),
        ("Center wins.\nMove: [4]", "[4]"),  # think_budget > 0: free text, marker, move
        ("Move: [0]\nMove: [8]", "[8]"),
    ],
)
def test_constrained_ok(grid: State, text: str, move: str) -> None:
    assert parse_move(text, grid, CONSTRAINED).move == move


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("", "no_answer"),
        ("Move:", "no_answer"),
        ("[4] because", "not_legal"),  # exactly one move, nothing else
        ("Move: [9]", "not_legal"),
    ],
)
def test_constrained_failures(grid: State, text: str, kind: str) -> None:
    result = parse_move(text, grid, CONSTRAINED)
    assert result.failure is not None and result.failure.kind == kind


# ---- truncation ---------------------------------------------------------------------


def test_truncated_replaces_failure_but_not_success(grid: State) -> None:
    cut = parse_move("Let me think about \\boxed{[4", grid, BOXED, truncated=True)
    assert cut.failure is not None and cut.failure.kind == "truncated"
    assert "no_answer" in cut.failure.detail
    illegal = parse_move("\\boxed{[9]} and then", grid, BOXED, truncated=True)
    assert illegal.failure is not None and illegal.failure.kind == "truncated"
    assert illegal.answer == "[9]"
    ok = parse_move("\\boxed{[4]} and then", grid, BOXED, truncated=True)
    assert ok.move == "[4]" and ok.failure is None


# ---- spec validation ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"template": "qwen4"}, "valid: chat, qwen3"),
        ({"answer_format": "json"}, "valid: boxed, bracket, constrained"),
        ({"obs_style": "full"}, "history, latest"),
        ({"think_budget": -1}, ">= 0"),
        ({"think_budget": 16}, "only applies to answer_format='constrained'"),
    ],
)
def test_spec_rejects_bad_values(kwargs: dict[str, object], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        PromptSpec(**kwargs)  # type: ignore[arg-type]


def test_spec_defaults() -> None:
    spec = PromptSpec()
    assert (spec.template, spec.answer_format, spec.obs_style) == ("chat", "bracket", None)
    assert PromptSpec(answer_format="constrained", think_budget=32).think_budget == 32


# ---- invalid-move policies ----------------------------------------------------------


def test_invalid_policies() -> None:
    spiral = invalid_policy("spiral")
    assert (spiral.offender, spiral.other) == (-1.5, 0.5)
    assert spiral.returns(0) == (-1.5, 0.5) and spiral.returns(1) == (0.5, -1.5)
    assert not spiral.zero_sum
    assert invalid_policy("strict").returns(1) == (1.0, -1.0) and invalid_policy("strict").zero_sum
    assert invalid_policy("loss").returns(0) == (-1.0, 0.0)
    assert set(INVALID_POLICIES) == {"spiral", "strict", "loss"}
    with pytest.raises(KeyError, match="valid: spiral, strict, loss"):
        invalid_policy("harsh")
    with pytest.raises(ValueError, match="0 or 1"):
        spiral.returns(2)
