"""What a run was made with, written once at its start as run_folder/run_info.json: the
git revision of the code (when it runs from a checkout), the machine and the start time.
The HTML report shows it; nothing reads it back to train."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any


def git_revision(where: Path) -> str:
    """The checkout's commit (with "+dirty" for uncommitted changes), or "unknown"."""
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"],
            cwd=where, capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=where, capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{rev}+dirty" if dirty else rev


def run_info() -> dict[str, Any]:
    import torch

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    return {
        "git_revision": git_revision(Path(__file__).resolve().parent),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {device}, torch {torch.__version__}",
        "python": platform.python_version(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


def write_run_info(run_dir: Path) -> Path:
    """Written at a run's first start; a resume leaves it as it was."""
    path = Path(run_dir) / "run_info.json"
    if path.is_file():
        return path
    path.write_text(json.dumps(run_info(), indent=2), encoding="utf-8")
    return path


def reset_peak_rss() -> bool:
    """Start a new peak-memory window (Linux: `5` to /proc/self/clear_refs resets VmHWM);
    False where the kernel does not allow it (the peak then runs over the process life)."""
    try:
        Path("/proc/self/clear_refs").write_text("5", encoding="ascii")
    except OSError:
        return False
    return True


def window_peak_rss_mb() -> float:
    """Peak resident memory since the last `reset_peak_rss`, in MB (VmHWM; where /proc is
    missing, the process's peak so far)."""
    try:
        for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return peak_rss_mb()


def peak_rss_mb() -> float:
    """This process's peak resident memory so far, in MB (getrusage; 0 where missing)."""
    try:
        import resource
    except ImportError:  # not on POSIX
        return 0.0
    kilobytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KB on Linux
    return kilobytes / 1024
