"""A one-line progress report for the terminal.

    step 12/400 (3%) | invalid 0.125 | draw 0.300 | win@random 0.62 | kl 0.0012 |
    sample 4.1s train 2.0s | 5.2s/step | ETA 33m38s

(one line in the terminal; wrapped here). Choices made here:

- Plain text, no colour codes, so it reads the same in a terminal, a log file and CI.
- A short, fixed list of headline metrics, each the mean of the keys that match a
  pattern (so "win@random" averages every game and seat evaluated against random);
  a metric with no matching key is simply left out. Patterns start with "*" where the
  loop may add a namespace (it logs assemble's metrics as "train/assemble/...").
- Every `time/<phase>` key is shown as "<phase> N.Ns", in the order the loop logged them.
- `step` counts completed steps and `first` is the step this process started from (a
  resumed run's earlier steps took no time here), so the ETA is
  elapsed / (step - first) * (total - step).
"""

from __future__ import annotations

from collections.abc import Mapping
from fnmatch import fnmatchcase

# (label, key pattern, format): the headline metrics, in display order.
HEADLINE: tuple[tuple[str, str, str], ...] = (
    ("invalid", "train/overall/invalid_rate", "{:.3f}"),
    ("draw", "train/overall/draw_rate", "{:.3f}"),
    ("win@random", "eval/*/random/*win_rate", "{:.2f}"),
    ("adv_std", "*assemble/std_advantage", "{:.3f}"),
    ("exploitability", "full_width/*/exploitability", "{:.3f}"),  # rollout=full_width
    ("entropy", "train/entropy", "{:.3f}"),
    ("kl", "*approx_kl", "{:.4f}"),  # the sampler's rows against the learner's
    ("kl_magnet", "train/kl_to_magnet", "{:.4f}"),  # logged only with a KL magnet
    ("floor", "*move_floor_deficit", "{:.4f}"),  # logged only when the move floor is on
    ("clip", "*clip_frac", "{:.3f}"),
    ("tokens", "train/*/seat*/mean_response_tokens", "{:.0f}"),
    ("games/s", "perf/games_per_s", "{:.1f}"),
    ("tok/s", "perf/sample_tokens_per_s", "{:.0f}"),
)


def format_duration(seconds: float) -> str:
    """Compact duration: 45s, 3m05s, 2h03m."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f}s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _mean_matching(metrics: Mapping[str, float], pattern: str) -> float | None:
    values = [float(v) for k, v in metrics.items() if fnmatchcase(k, pattern) and v is not None]
    return sum(values) / len(values) if values else None


def format_progress(
    step: int, total: int, metrics: Mapping[str, float], elapsed_s: float, first: int = 0
) -> str:
    """One plain-text line: progress, headline metrics, time per phase, ETA; `first` is the
    step this process started from."""
    percent = 100.0 * step / total if total > 0 else 0.0
    parts = [f"step {step}/{total} ({percent:.0f}%)"]
    for label, pattern, fmt in HEADLINE:
        value = _mean_matching(metrics, pattern)
        if value is not None:
            parts.append(f"{label} {fmt.format(value)}")
    phases = [
        f"{key.removeprefix('time/')} {float(value):.1f}s"
        for key, value in metrics.items()
        if key.startswith("time/") and value is not None
    ]
    if phases:
        parts.append(" ".join(phases))
    if step > first:
        per_step = elapsed_s / (step - first)
        parts.append(f"{per_step:.1f}s/step")
        parts.append(f"ETA {format_duration(per_step * max(0, total - step))}")
    else:
        parts.append(f"elapsed {format_duration(elapsed_s)}")
    return " | ".join(parts)


# (label, key pattern, format): what an evaluation line shows, in display order.
EVAL_HEADLINE: tuple[tuple[str, str, str], ...] = (
    ("win@random", "eval/*/random/seat*/win_rate", "{:.2f}"),
    ("win@optimal", "eval/*/optimal/seat*/win_rate", "{:.2f}"),
    ("invalid", "eval/*/seat*/invalid_rate", "{:.3f}"),
    ("exploitability", "eval/*/exploitability_t1", "{:.3f}"),
    ("averaged", "eval/*/averaged/exploitability_t1", "{:.3f}"),
    ("pool average", "eval/*/pool_average/exploitability_t1", "{:.3f}"),
)


def format_eval(step: int, metrics: Mapping[str, float]) -> str:
    """One plain line per evaluation: `eval @ step 10 | win@random 0.62 | ... | 4.1s`.
    Exploitability is of the live weights (`eval/<game>/exploitability_t1`), apart from
    the averaged weights and the pool average."""
    parts = [f"eval @ step {step}"]
    for label, pattern, fmt in EVAL_HEADLINE:
        keys = [k for k in metrics if fnmatchcase(k, pattern)]
        if label == "exploitability":
            keys = [k for k in keys if "/averaged/" not in k and "/pool_average/" not in k]
        values = [float(metrics[k]) for k in keys if metrics[k] is not None]
        if values:
            parts.append(f"{label} {fmt.format(sum(values) / len(values))}")
    if "time/eval" in metrics:
        parts.append(f"{float(metrics['time/eval']):.1f}s")
    return " | ".join(parts)
