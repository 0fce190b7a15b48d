"""grade(): equal values in different spellings pass, different values and garbage fail,
nothing raises, and pathological answers are cut off by the deadline in any thread."""

from __future__ import annotations

import threading

import pytest

from spiral.evaluation.mathbench.grading import _GradingWorker, grade, normalise_answer

EQUAL = [
    ("\\frac{1}{2}", "0.5"),  # fraction vs decimal
    ("0.5", "\\frac12"),
    ("\\dfrac{3}{4}", "\\frac{3}{4}"),
    ("\\boxed{\\frac{19}{24}}", "\\frac{19}{24}"),  # boxed prediction
    ("$\\boxed{7}$", "7"),
    ("[2, 3]", "[2,3]"),  # closed interval, spacing differs
    ("(-\\infty, 3]", "(-\\infty,3]"),
    ("[1,\\infty) \\cup (-\\infty,-2)", "(-\\infty,-2) \\cup [1,\\infty)"),  # union, reordered
    ("\\{1, 2\\}", "\\{2, 1\\}"),  # sets are unordered
    ("4, 3", "3, 4"),  # a list of answers compares as a set
    ("42", "42.0"),  # LaTeX / plain numbers
    ("1,000", "1000"),
    ("6\\sqrt{2}", "\\sqrt{72}"),
    ("x = 3", "3"),
    ("\\text{Monday}", "Monday"),  # words fall back to the normalised string
    ("\\$150", "150"),  # unparseable for math-verify; normalised string matches
    ("50\\%", "50"),
]

DIFFERENT = [
    ("7", "8"),
    ("\\frac{1}{3}", "0.33"),
    ("(1,2)", "(2,1)"),  # ordered pairs are ordered
    ("[2,3)", "[2,3]"),
    ("3", "3, 4"),
    ("x^2", "2x"),
    ("\\text{Tuesday}", "Monday"),
]

GARBAGE = [
    "",
    "   ",
    "}}}{{\\frac",
    "\\boxed{",
    "hello world",
    "\\left(",
    "$$$",
    "\x00\uffff",
    "9" * 5000,
]


@pytest.mark.parametrize(("prediction", "gold"), EQUAL)
def test_equal_answers_are_correct(prediction: str, gold: str) -> None:
    assert grade(prediction, gold) is True


@pytest.mark.parametrize(("prediction", "gold"), DIFFERENT)
def test_different_answers_are_wrong(prediction: str, gold: str) -> None:
    assert grade(prediction, gold) is False


@pytest.mark.parametrize("prediction", GARBAGE)
def test_garbage_is_wrong_and_never_raises(prediction: str) -> None:
    assert grade(prediction, "3") is False


def test_missing_prediction_or_gold_is_wrong() -> None:
    assert grade(None, "3") is False
    assert grade("3", "") is False


def test_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="timeout_s"):
        grade("1", "1", timeout_s=0)


def test_pathological_answer_is_cut_off_in_main_thread() -> None:
    # 9^(9^(9^9)) makes sympy work for minutes; the deadline turns it into "wrong".
    assert grade("9^{9^{9^{9}}}", "1", timeout_s=0.3) is False
    assert grade("2", "2.0") is True  # the alarm handler was restored and nothing is left armed


def test_grading_from_another_thread_uses_a_child_process() -> None:
    results: list[bool] = []

    def work() -> None:
        results.extend([grade("\\frac{1}{2}", "0.5"), grade("3", "4")])
        results.append(grade("9^{9^{9^{9}}}", "1", timeout_s=0.3))

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert results == [True, False, False]


def test_worker_that_overruns_is_replaced() -> None:
    # With no grace the parent may give up before the child answers: either way the answer
    # is "wrong", and the next call must work (on the same or a fresh child).
    worker = _GradingWorker(grace_s=0.0)
    try:
        assert worker.grade("9^{9^{9^{9}}}", "1", 0.2) is False
        assert worker.grade("2", "2.0", 5.0) is True
    finally:
        worker.stop()


def test_normalise_answer_strips_wrappers() -> None:
    assert normalise_answer("$\\boxed{\\text{ Monday }}$.") == "monday"
    assert normalise_answer("\\left( 1, 2 \\right)") == "(1,2)"
    assert normalise_answer("12^\\circ") == "12"
    assert normalise_answer("1,234,567") == "1234567"
