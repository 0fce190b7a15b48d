"""extract_boxed / normalize_answer / find_bracketed on the original's edge cases
(docs/original.md)."""

from __future__ import annotations

import pytest

from spiral.prompts.extract import extract_boxed, find_bracketed, normalize_answer


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I play \\boxed{[4]}.", "[4]"),
        ("\\boxed{4}", "4"),
        ("first \\boxed{[1]} then \\boxed{[2]} finally \\boxed{[7]}", "[7]"),  # last wins
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),  # nested braces
        ("\\boxed{{a}{b{c}}}", "{a}{b{c}}"),
        ("\\boxed{\\text{[check]}}", "[check]"),  # \text{} unwrapped
        ("\\boxed{ \\text{bet} }", "bet"),
        ("\\boxed{\\text{a} b}", "\\text{a} b"),  # \text{} plus more: kept whole
        ("\\boxed {5}", "5"),  # a space before the brace is LaTeX-legal
        ("\\boxed{\\{x\\}}", "\\{x\\}"),  # escaped braces do not count
        ("\\boxed{}", ""),
        ("\\boxed{\\boxed{3}}", "3"),  # the last \boxed is the inner one
        ("$\\boxed{Bid: 3, 5}$", "Bid: 3, 5"),
    ],
)
def test_extract_boxed_finds_last_box(text: str, expected: str) -> None:
    assert extract_boxed(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "no box here [4]",
        "\\boxed{[4]",  # unclosed
        "\\boxed{[4]} and then \\boxed{[5]",  # the LAST box is unclosed: no fallback
        "\\fbox{[4]}",  # \fbox is not an answer
        "\\boxed 4",  # no brace group
        "\\boxedx{4}",  # another command
        "\\boxed{a\\}",  # the only closing brace is escaped
        "}{\\boxed}{",
    ],
)
def test_extract_boxed_none(text: str) -> None:
    assert extract_boxed(text) is None


def test_extract_boxed_skips_longer_command_and_finds_earlier_box() -> None:
    assert extract_boxed("\\boxed{[2]} \\boxedx{9}") == "[2]"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("check", "[check]"),
        ("4", "[4]"),
        ("[4]", "[4]"),
        ("Bid: 3, 5", "[Bid: 3, 5]"),
        ("  check  ", "[check]"),
        ("one two three four five", "[one two three four five]"),
        ("one two three four five six", "one two three four five six"),  # > 5 words: as is
        ("I  accept\n the\tdeal [Accept]", "I accept the deal [Accept]"),
        ("\\boxed{check}", "[check]"),  # inner \boxed{x} -> [x]
        ("play \\boxed{2} now", "play [2] now"),
        ("\\boxed{unclosed", "[\\boxed{unclosed]"),  # no group: left alone, then wrapped
        ("", "[]"),
    ],
)
def test_normalize_answer(raw: str, expected: str) -> None:
    assert normalize_answer(raw) == expected


def test_find_bracketed_in_order() -> None:
    text = "Moves: '[0]', '[4]'. I pick [Bid: 3, 5] not [x\ny] but [a [b] c]"
    assert find_bracketed(text) == ["[0]", "[4]", "[Bid: 3, 5]", "[b]"]
    assert find_bracketed("") == []
    assert find_bracketed("[] ][") == ["[]"]
