"""Spiral's earlier names for settings that are one key now, read wherever they appear: on
a command line (`entropy_coef_final=0.1`, `lr_schedule=step lr_step_at=30`, `preset=`)
and in a run folder's config.json written before (so old folders resume and old commands
run). `fold` turns them into today's keys; nothing else reads them.

- `learning_rate` with `lr_schedule` (constant | linear | cosine | step), `lr_step_at`
  and `lr_step_factor` -> one schedule: `step` as `LR*FACTOR@AT`; `linear` and `cosine`
  as `LR->0` and `cosine:LR->0` (these now reach 0 at the run's last step, where they
  reached it one step after: the last steps' rates differ by LR/steps at most).
- `X` with `X_final` (entropy_coef, kl_coef, private_centering) -> `X=START->FINAL`.
- `preset` -> `recipe`.
- A mode's keys beside its switch set off (`fsp_enabled=false fsp_pool_size=25`, as every
  config.json wrote them before the modes became optional groups) are dropped.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Collection
from typing import Any

import chz

from spiral.algo import schedule
from spiral.args import checked_value, is_integer
from spiral.errors import UsageError
from spiral.train.config_groups import AsyncConfig, PopulationConfig

LR_KEYS = ("lr_schedule", "lr_step_at", "lr_step_factor")
KINDS = ("constant", "linear", "cosine", "step")  # what lr_schedule took
FINAL_KEYS = ("entropy_coef", "kl_coef", "private_centering")
NAMES = frozenset({*LR_KEYS, *(f"{k}_final" for k in FINAL_KEYS), "preset"})


def fold(values: dict[str, Any], typed: Collection[str] = ()) -> dict[str, Any]:
    """`values` (key -> a command-line word or a config.json value) with the earlier names
    folded into today's; keys of neither kind pass through unchanged. `typed` are the keys
    the user wrote (not a recipe's): an earlier key may adjust a recipe's schedule, but
    beside a schedule written out in full it is a contradiction, refused in one line."""
    out = dict(values)
    _refuse_two_spellings(out, typed)
    if "preset" in out:
        preset = out.pop("preset")
        out.setdefault("recipe", preset)
    for group in (PopulationConfig, AsyncConfig):  # a mode set off: its keys say nothing
        if group.SWITCH in out and str(out[group.SWITCH]).lower() in ("false", "0"):
            for key, field in chz.chz_fields(group).items():
                if key in out:  # still a value its key takes, or one line
                    checked_value(field, key, cli_word(out.pop(key)))
                    if key in typed:
                        note(f"{key} does nothing with {group.SWITCH}=false; dropped")
    if any(k in out for k in LR_KEYS):
        out["learning_rate"] = _learning_rate(out, typed).to_json()
        for key in LR_KEYS:
            out.pop(key, None)
    for key in FINAL_KEYS:
        final = out.pop(f"{key}_final", None)
        if final is None or str(final) in ("None", ""):
            continue
        now = _schedule(key, out.get(key, 0.0))
        if now.kind not in ("constant", "linear"):
            raise UsageError(
                f"{key}_final={final} cannot end {key}={now}, which is not linear; give the "
                f"schedule alone (e.g. {key}={now.start!r}->{final})"
            )
        start = now.start
        out[key] = schedule.linear(start, _number(f"{key}_final", final)).to_json()
    return out


def _refuse_two_spellings(values: dict[str, Any], typed: Collection[str]) -> None:
    """A schedule typed in today's form beside an earlier key that would rewrite it."""
    if "learning_rate" in typed and any(k in typed for k in LR_KEYS):
        now = _schedule("learning_rate", values["learning_rate"])
        if now.kind != "constant":
            extra = next(k for k in LR_KEYS if k in typed)
            raise UsageError(
                f"learning_rate={now} is a schedule already; {extra}= would rewrite it: give "
                "the schedule alone"
            )
    for key in FINAL_KEYS:
        if key in typed and f"{key}_final" in typed:
            now = _schedule(key, values[key])
            if now.kind != "constant":
                raise UsageError(
                    f"{key}={now} has its end already; {key}_final= would rewrite it: give "
                    "the schedule alone"
                )


def note(line: str) -> None:
    """A one-line note on stderr: the command goes on."""
    print(f"note: {line}", file=sys.stderr)


def _learning_rate(values: dict[str, Any], typed: Collection[str] = ()) -> schedule.Schedule:
    """The one schedule the earlier keys stand for. A step key typed beside another kind
    (`lr_schedule=linear lr_step_at=30`) would be dropped: refused, naming it. A saved
    config.json wrote all three keys whatever the kind: there they fold without a word."""
    now = _schedule("learning_rate", values.get("learning_rate", 1e-4))
    if len(now.drops) > 1 or now.kind in ("linear", "cosine"):
        raise UsageError(
            f"learning_rate={now} is a schedule the older lr_schedule, lr_step_at and "
            "lr_step_factor keys cannot change; give the schedule alone"
        )
    lr, (at, factor) = now.start, (now.drops[0] if now.drops else (0, 0.1))
    if "lr_step_at" in values:  # an integer even where the schedule does not read it
        _integer("lr_step_at", values["lr_step_at"])
    if "lr_schedule" not in values and now.kind != "steps":
        given = next(k for k in LR_KEYS if k in values)
        raise UsageError(
            f"{given}={values[given]} does nothing without lr_schedule=step; today's form is "
            f"one key: learning_rate={now.start!r}*{values.get('lr_step_factor', 0.1)}"
            f"@{values.get('lr_step_at', 'STEP')}"
        )
    kind = str(values.get("lr_schedule", "step" if now.kind == "steps" else "constant"))
    ignored = [k for k in ("lr_step_at", "lr_step_factor") if k in typed and k in values]
    if kind != "step" and kind in KINDS and ignored:
        key = ignored[0]
        raise UsageError(
            f"{key}={values[key]} does nothing with lr_schedule={kind} (lr_schedule=step "
            f"alone reads it): drop it, or give the schedule as one key, e.g. "
            f"learning_rate={now.start!r}*{values.get('lr_step_factor', 0.1)}"
            f"@{values.get('lr_step_at', 'STEP')} (a drop) or {_today(kind, now.start)}"
        )
    if kind == "step":
        at = _integer("lr_step_at", values.get("lr_step_at", at))
        if at <= 0:
            raise UsageError(
                "lr_schedule=step needs lr_step_at > 0, the first step at the lower rate "
                "(today's form: learning_rate=1e-3*0.1@60)"
            )
        factor = _number("lr_step_factor", values.get("lr_step_factor", factor))
        return schedule.Schedule("steps", lr, drops=((at, factor),))
    if kind == "linear":
        return schedule.linear(lr, 0.0)
    if kind == "cosine":
        return schedule.Schedule("cosine", lr, 0.0)
    if kind == "constant":
        return schedule.constant(lr)
    raise UsageError(
        f"lr_schedule={kind!r} is not valid: expected one of constant, linear, cosine, step"
    )


def _today(kind: str, lr: float) -> str:
    """`lr_schedule=KIND` with `learning_rate=LR` as today's one key."""
    forms = {"constant": f"{lr!r}", "linear": f"{lr!r}->0", "cosine": f"cosine:{lr!r}->0"}
    return f"learning_rate={forms[kind]}"


def _schedule(key: str, value: Any) -> schedule.Schedule:
    try:
        return schedule.parse(str(value))
    except UsageError as err:
        raise UsageError(f"{key}={err}") from None


def _number(key: str, value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number):
        raise UsageError(f"{key}={value!r} is not valid: expected a finite number")
    return number


def _integer(key: str, value: Any) -> int:
    """An integer written as one (`30`; config.json's 30 or 30.0), below 2**63."""
    word = str(value).strip()
    if isinstance(value, float) and value.is_integer():
        word = str(int(value))
    if not is_integer(word):
        raise UsageError(f"{key}={value!r} is not valid: expected an integer")
    return int(word)


def cli_word(value: Any) -> str:
    """A config.json value as the command line writes it (a list comma-separated, true
    and false in lower case)."""
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
