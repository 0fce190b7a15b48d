"""Pool members on disk: the folder each member's weights live in (`POOL_DIR`), the
check a member passes before a resumed run loads it."""

from __future__ import annotations

from pathlib import Path

from spiral.checkpoints.manifest import DamagedCheckpointError, verify_manifest

POOL_DIR = "pool"  # run_dir/pool/<member>/: each member's adapter, for resume


def check_member(name: str, folder: Path) -> None:
    """Refuse, naming the member, a pool member whose folder is missing, does not match
    its manifest (a member written before members were hashed has none: used as is), or
    holds weights that are NaN or infinite."""
    if not folder.is_dir():
        problems = ["its folder is missing"]
    else:
        problems = verify_manifest(folder, required=False) or nonfinite_weights(folder)
    if problems:
        raise DamagedCheckpointError(
            f"pool member {name} ({folder}) is damaged: {'; '.join(problems)}; resume from a "
            "checkpoint saved before it joined the pool (load_checkpoint_path=...)"
        )


def nonfinite_weights(folder: Path) -> list[str]:
    """The weight files under `folder` that hold NaN or inf (or cannot be read)."""
    import torch
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    found = []
    for path in sorted(folder.rglob("*.safetensors")):
        try:
            tensors = load_file(str(path))
        except (SafetensorError, OSError) as err:
            found.append(f"{path.name} is unreadable ({err})")
            continue
        if any(
            t.is_floating_point() and not bool(torch.isfinite(t).all()) for t in tensors.values()
        ):
            found.append(f"{path.name} holds NaN or inf")
    return found
