"""Property tests: extraction and parsing never raise, and their results keep their promises
on adversarial text (braces, backslashes, brackets, markers, unicode look-alikes)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from spiral.games.base import State
from spiral.prompts import PromptSpec, extract_boxed, find_bracketed, normalize_answer, parse_move
from spiral.prompts.spec import ANSWER_FORMATS

PIECES = [
    "\\",
    "{",
    "}",
    "[",
    "]",
    "\\boxed",
    "\\boxed{",
    "\\boxed {",
    "\\text{",
    "\\fbox{",
    "\\{",
    "\\}",
    "\\\\",
    "[4]",
    "[check]",
    "[Bid: 3, 5]",
    "Bid: 3, 5",
    "4",
    "check",
    "Move:",
    "\n",
    " ",
    "\t",
    "é",
    "\U0001f0a1",
    "\u200b",
    "\uff3b",
    "\uff3d",
    "\u3000",
    "$",
    "}}",
    "{{",
]
adversarial = st.one_of(
    st.lists(st.sampled_from(PIECES), max_size=30).map("".join),
    st.text(max_size=60),
    st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=4)), max_size=20).map("".join),
)
SPECS = [PromptSpec(template="plain", answer_format=fmt) for fmt in ANSWER_FORMATS]
FAILURE_KINDS = {"no_answer", "ambiguous", "not_legal", "truncated"}
FUZZ = settings(max_examples=300, deadline=None)


@FUZZ
@given(adversarial)
def test_extract_boxed_returns_a_substring_or_none(text: str) -> None:
    content = extract_boxed(text)
    assert content is None or content in text


@FUZZ
@given(adversarial)
def test_normalize_answer_is_collapsed(text: str) -> None:
    out = normalize_answer(text)
    assert out == " ".join(out.split())
    if "[" not in out and "]" not in out:
        assert len(out.split()) > 5  # answers of five words or fewer are always wrapped


@FUZZ
@given(adversarial)
def test_find_bracketed_spans_are_innermost_and_ordered(text: str) -> None:
    position = 0
    for span in find_bracketed(text):
        assert span[0] == "[" and span[-1] == "]"
        assert not any(ch in span[1:-1] for ch in "[]\n")
        found = text.find(span, position)
        assert found >= position
        position = found + len(span)


@FUZZ
@given(adversarial, st.booleans())
def test_parse_move_never_raises(fuzz_states: list[State], text: str, truncated: bool) -> None:
    for state in fuzz_states:
        for spec in SPECS:
            result = parse_move(text, state, spec, truncated=truncated)
            assert (result.move is None) == (result.failure is not None)
            if result.move is not None:
                assert result.move in state.legal_actions()
            else:
                assert result.failure is not None and result.failure.kind in FAILURE_KINDS
                assert not truncated or result.failure.kind == "truncated"


safe_noise = st.text(max_size=40).filter(lambda s: "\\boxed" not in s)


@FUZZ
@given(safe_noise, st.data())
def test_a_legal_answer_after_any_noise_is_found(
    fuzz_states: list[State], noise: str, data: st.DataObject
) -> None:
    for state in fuzz_states:
        move = data.draw(st.sampled_from(state.legal_actions()))
        boxed = PromptSpec(template="plain", answer_format="boxed")
        assert parse_move(f"{noise}\\boxed{{{move}}}", state, boxed).move == move
        bracket = PromptSpec(template="plain", answer_format="bracket")
        assert parse_move(f"{noise}\n{move}", state, bracket).move == move
        constrained = PromptSpec(template="plain", answer_format="constrained")
        assert parse_move(f"{noise}\nMove: {move}", state, constrained).move == move


def _states_of_every_game() -> list[State]:
    """Each registered game at its start and after a few random moves."""
    import random

    from spiral import games

    states: list[State] = []
    for game_id in games.ids():
        state = games.make(game_id, seed=0)
        states.append(state.clone())
        rng = random.Random(0)
        for _ in range(3):
            if state.is_terminal():
                break
            state.apply_action(rng.choice(state.legal_actions()))
            states.append(state.clone())
    return states


def test_adversarial_corpus_never_raises_in_any_game_or_format() -> None:
    from .adversarial import CORPUS

    states = _states_of_every_game()
    for text in CORPUS:
        extract_boxed(text)
        normalize_answer(text[:20_000])
        find_bracketed(text)
        for state in states:
            assert state.parse_action(text) is None or text.strip()
            for spec in SPECS:
                result = parse_move(text, state, spec)
                assert (result.move is None) != (result.failure is None)
