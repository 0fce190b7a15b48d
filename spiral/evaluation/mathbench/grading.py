"""Grading a model's final math answer against a reference answer.

`grade(prediction, gold)` asks the maintained verifier math-verify (`parse`, `verify`)
whether the two answers are mathematically equal (1/2 = 0.5, sets in any order, equal
intervals, LaTeX against plain numbers), and also accepts a normalised string match, which
covers what math-verify cannot parse (words, units in text, multiple-choice letters).
It never raises on arbitrary text: anything unparseable is simply not correct.

Choices:

- Both answers are wrapped in `$...$` before parsing (unless they already carry `$` or
  `\\boxed`), because math-verify only reads bare LaTeX such as `\\frac12` or a bare
  letter inside math delimiters.
- One deadline bounds the whole grade (both parses and the comparison), not each step.
  math-verify's own timeouts are per step, whole seconds, and signal-based; we switch
  them off and arm our own `setitimer` deadline instead, so `timeout_s` can be 0.5 s.
  math-verify logs "Timeout is disabled..." once when its timeouts are off; we drop
  exactly that message because we do provide the deadline it asks for.
- Signals only work in the main thread. From any other thread (an evaluation running
  beside training, say) `grade` sends the work to one long-lived child process (a fresh
  `python -c`, not a fork, so no locks held by other threads are inherited and the
  caller's script is not re-imported). The child grades under the same signal deadline;
  the parent waits `timeout_s` plus a grace period and kills and replaces the child if it
  has not answered, which also covers C-level loops that a signal cannot interrupt.
  Calls from threads are serialised through that one child (POSIX only: it uses select).
- A timer already armed by someone else (pytest-timeout, say) is paused while we grade
  and re-armed afterwards with the time it had left.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from math_verify import parse, verify

logger = logging.getLogger(__name__)

# Extra seconds the parent waits for the grading child beyond `timeout_s`: the child
# enforces `timeout_s` itself, so the grace only has to cover pipe latency.
WORKER_GRACE_S = 2.0
# Spawning the child imports sympy and math-verify; on a busy machine that takes seconds.
WORKER_START_TIMEOUT_S = 120.0


class _DeadlineExceeded(BaseException):
    """Raised by our SIGALRM handler. A BaseException so math-verify's own
    `except Exception` blocks cannot swallow it."""


class _DropDisabledTimeoutWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Timeout is disabled")


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_DropDisabledTimeoutWarning())


def grade(prediction: str | None, gold: str, timeout_s: float = 5.0) -> bool:
    """True when `prediction` is the same answer as `gold`. Never raises on any text.

    `prediction` is the extracted final answer (e.g. the content of the last `\\boxed{}`);
    a whole `\\boxed{...}` or `$...$` expression also works. `None` or blank is wrong.
    `timeout_s` bounds the whole grade; an answer that takes longer counts as wrong.
    """
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s}")
    if prediction is None or not prediction.strip() or not gold.strip():
        return False
    if threading.current_thread() is threading.main_thread():
        return _grade_with_deadline(prediction, gold, timeout_s)
    return _THREAD_WORKER.grade(prediction, gold, timeout_s)


# --- comparison ----------------------------------------------------------------------


def _as_math(text: str) -> str:
    text = text.strip()
    if "$" in text or "\\boxed" in text or "\\(" in text or "\\[" in text:
        return text
    return f"${text}$"


def _parse(text: str) -> list[Any]:
    try:
        return list(parse(_as_math(text), parsing_timeout=None))
    except Exception as exc:  # math-verify catches most errors itself; this is the rest
        logger.debug("math-verify could not parse %r: %s", text[:200], exc)
        return []


def _grade_unbounded(prediction: str, gold: str) -> bool:
    """The comparison itself, with no time limit: callers must bound it."""
    gold_parsed = _parse(gold)
    pred_parsed = _parse(prediction)
    if gold_parsed and pred_parsed:
        try:
            if verify(gold_parsed, pred_parsed, timeout_seconds=None):
                return True
        except Exception as exc:
            logger.debug("math-verify could not compare %r: %s", prediction[:200], exc)
    return normalise_answer(prediction) == normalise_answer(gold)


_BOXED = re.compile(r"^\\(?:boxed|fbox)\s*\{(.*)\}$", re.DOTALL)
_TEXT = re.compile(r"\\(?:text|textbf|mathrm|mathbf|operatorname)\s*\{([^{}]*)\}")
_DROP = (
    "\\left",
    "\\right",
    "\\!",
    "\\,",
    "\\;",
    "\\:",
    "\\ ",
    "^\\circ",
    "^{\\circ}",
    "\\%",
    "%",
    "\\$",
    "$",
)
_SYNONYMS = (("\\dfrac", "\\frac"), ("\\tfrac", "\\frac"), ("\\le ", "\\leq "))


def normalise_answer(text: str) -> str:
    """A canonical spelling for string comparison: no `$`, `\\boxed`, `\\text`, spacing
    commands, degree or percent signs, trailing full stop, whitespace or case."""
    text = text.strip()
    for _ in range(3):  # nested wrappers such as $\boxed{\text{x}}$
        text = text.strip().rstrip(".").strip().strip("$").strip()
        match = _BOXED.match(text)
        if match:
            text = match.group(1)
    text = _TEXT.sub(r"\1", text)
    for old, new in _SYNONYMS:
        text = text.replace(old, new)
    for token in _DROP:
        text = text.replace(token, "")
    text = re.sub(r"\s+", "", text).rstrip(".").lower()
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", text):  # 1,234 -> 1234
        text = text.replace(",", "")
    return text


# --- the deadline in the main thread ----------------------------------------------------


def _on_alarm(signum: int, frame: Any) -> None:
    raise _DeadlineExceeded()


def _grade_with_deadline(prediction: str, gold: str, timeout_s: float) -> bool:
    """Grade under a SIGALRM deadline. Only callable from the main thread."""
    previous_handler = signal.signal(signal.SIGALRM, _on_alarm)
    previous_delay, previous_interval = signal.setitimer(signal.ITIMER_REAL, timeout_s)
    started = time.monotonic()
    try:
        try:
            return _grade_unbounded(prediction, gold)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _DeadlineExceeded:
        # Nested try: the alarm can also land in the inner `finally` before the timer is
        # cleared; the outer handler catches that case too.
        logger.warning("grading timed out after %.1f s: %r", timeout_s, prediction[:200])
        return False
    finally:
        signal.signal(signal.SIGALRM, previous_handler)
        if previous_delay > 0:
            left = previous_delay - (time.monotonic() - started)
            signal.setitimer(signal.ITIMER_REAL, max(left, 1e-3), previous_interval)


# --- the child process for other threads ----------------------------------------------

# The child runs this module's `_child_loop`: a plain `python -c` process rather than a
# multiprocessing spawn, so it never re-imports the caller's `__main__` script.
_CHILD_CODE = "from spiral.evaluation.mathbench.grading import _child_loop; _child_loop()"


def _child_loop() -> None:
    """Child process loop: one JSON request per stdin line, one JSON answer per line."""
    print(json.dumps("ready"), flush=True)
    for line in sys.stdin:
        prediction, gold, timeout_s = json.loads(line)
        print(json.dumps(_grade_with_deadline(prediction, gold, timeout_s)), flush=True)


class _GradingWorker:
    """One child process that grades for non-main threads; replaced when it overruns."""

    def __init__(self, grace_s: float = WORKER_GRACE_S) -> None:
        self._grace_s = grace_s
        self._lock = threading.Lock()
        self._process: subprocess.Popen[str] | None = None

    def grade(self, prediction: str, gold: str, timeout_s: float) -> bool:
        with self._lock:
            request = json.dumps([prediction, gold, timeout_s]) + "\n"
            try:
                process = self._send(self._started(), request)
            except OSError:  # the child died since the last call: one fresh try
                self.stop()
                process = self._send(self._started(), request)
            answer = self._read_line(process, timeout_s + self._grace_s)
            if isinstance(answer, bool):
                return answer
            logger.warning("grading child overran %.1f s or died; replacing it", timeout_s)
            self.stop()
            return False

    @staticmethod
    def _send(process: subprocess.Popen[str], request: str) -> subprocess.Popen[str]:
        assert process.stdin is not None
        process.stdin.write(request)
        process.stdin.flush()
        return process

    @staticmethod
    def _read_line(process: subprocess.Popen[str], timeout_s: float) -> object:
        """The child's next JSON answer, or None when none came in time or it exited."""
        assert process.stdout is not None
        readable, _, _ = select.select([process.stdout], [], [], timeout_s)
        if not readable:
            return None
        line = process.stdout.readline()
        try:
            return json.loads(line) if line else None
        except json.JSONDecodeError:  # something else wrote to the child's stdout
            logger.warning("grading child wrote %r instead of an answer", line[:200])
            return None

    def _started(self) -> subprocess.Popen[str]:
        if self._process is not None and self._process.poll() is None:
            return self._process
        self.stop()
        # The child must import this same `spiral`, even when it is not installed.
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        process = subprocess.Popen(
            [sys.executable, "-c", _CHILD_CODE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        if self._read_line(process, WORKER_START_TIMEOUT_S) != "ready":
            process.kill()
            process.wait()
            raise RuntimeError(
                "the math grading child process exited or did not answer within "
                f"{WORKER_START_TIMEOUT_S:.0f} s (its stderr is above); grade from the main "
                f"thread instead, or check that `{sys.executable} -c '{_CHILD_CODE}'` runs"
            )
        self._process = process
        return process

    def stop(self) -> None:
        """Kill the child (if any); the next `grade` starts a fresh one."""
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            for stream in (self._process.stdin, self._process.stdout):
                if stream is not None:
                    stream.close()
        self._process = None


_THREAD_WORKER = _GradingWorker()
atexit.register(_THREAD_WORKER.stop)
