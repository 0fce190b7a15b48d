"""How a hub id loads: from the hub, from the Hugging Face cache alone, or not at all.

transformers asks the hub for every file of a hub id, and with no network the hub
library retries each request with a backoff: a model that is not in the cache took about
a minute to be refused, and one that is cached as long to load. So before loading, one
request for the model's config.json is made with a short timeout and no retries
(`PROBE_TIMEOUT_S`, or `HF_HUB_ETAG_TIMEOUT` where set; the hub library's own client:
its endpoint, proxies and token):

- the hub answers: load as usual (downloads and update checks as transformers does them);
- the hub cannot be reached (or `HF_HUB_OFFLINE` is set) and the model is in the cache:
  load from the cache without asking the hub again (`local_files_only`);
- the hub cannot be reached and the model is not cached, or the hub says it has no such
  model: one line saying what to do (download it first, or pass a local folder);
- the cache itself (`HF_HOME`, `HF_HUB_CACHE`) a file, or a folder that takes no new
  files when a download is to start: one line naming it, before any request.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from spiral.engines.loading import ModelNotFoundError
from spiral.errors import SpiralError


class CacheUnusable(SpiralError, OSError):
    """A model cache that cannot hold what is to be loaded: a file in its place, a folder
    that takes no new files, a disk without room."""

    def __str__(self) -> str:  # OSError would format (errno, strerror)
        return str(self.args[0]) if self.args else ""


PROBE_TIMEOUT_S = 5.0
WHAT_TO_DO = (
    "download it first where the hub is reachable (hf download {id}, into the same "
    "Hugging Face cache: HF_HOME / HF_HUB_CACHE), or pass a local model folder, or "
    "`embedded` for the built-in SmolLM2-135M-Instruct"
)


# transformers' AutoModel looks for an adapter of the id without its local_files_only
# (5.25): adapter_kwargs passes it there too. Tokenizers take the first key alone.
CACHE_ONLY: dict[str, Any] = {
    "local_files_only": True,
    "adapter_kwargs": {"local_files_only": True},
}


def _first_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[0][:160]}" if lines else type(err).__name__


def _probe_timeout() -> float:
    """`PROBE_TIMEOUT_S`, or the hub library's own `HF_HUB_ETAG_TIMEOUT` where it is set
    (a slow link to the hub: raise it)."""
    try:
        return float(os.environ.get("HF_HUB_ETAG_TIMEOUT") or PROBE_TIMEOUT_S)
    except ValueError:
        return PROBE_TIMEOUT_S


def _cached(repo_id: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except (OSError, ValueError):  # an unreadable cache holds nothing usable
        return False


def _unreachable(repo_id: str) -> str | None:
    """Why the hub cannot be asked for `repo_id` (None: it answered); refuses in one line
    a model the hub says it does not have, or will not give without a login."""
    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

    try:
        get_hf_file_metadata(
            hf_hub_url(repo_id, "config.json"), timeout=_probe_timeout(), retry_on_errors=False
        )
    except GatedRepoError as err:
        raise ModelNotFoundError(
            f"{repo_id} is gated on the hub ({constants.ENDPOINT}): accept its terms there and "
            "log in (hf auth login), or pass a local model folder"
        ) from err
    except RepositoryNotFoundError as err:
        raise ModelNotFoundError(
            f"the hub ({constants.ENDPOINT}) has no model {repo_id} (or it is private: log in "
            "with hf auth login); check the id, or pass a local model folder"
        ) from err
    except HfHubHTTPError as err:
        status = getattr(getattr(err, "response", None), "status_code", None)
        if status is not None and status < 500:
            return None  # the hub answered; transformers says what it lacks
        return _first_line(err)
    except Exception as err:  # no connection, a timeout, a proxy refusing: unreachable
        return _first_line(err)
    return None


def hub_options(repo_id: str) -> dict[str, Any]:
    """Keyword arguments for `from_pretrained(repo_id, ...)`: {} to load as usual,
    `local_files_only=True` to load from the cache; or a one-line ModelNotFoundError."""
    from huggingface_hub import constants

    _refuse_cache_in_the_way()
    cached = _cached(repo_id)
    if constants.HF_HUB_OFFLINE:
        if cached:
            return CACHE_ONLY
        raise ModelNotFoundError(
            f"{repo_id} is not in the Hugging Face cache ({constants.HF_HUB_CACHE}) and "
            f"HF_HUB_OFFLINE is set; {WHAT_TO_DO.format(id=repo_id)}"
        )
    problem = _unreachable(repo_id) if not cached else _reachable_or_cached(repo_id)
    if problem is None:
        if not cached:  # a download follows: the cache must take it
            _refuse_unwritable_cache(repo_id)
        return {}
    if cached:
        return CACHE_ONLY
    raise ModelNotFoundError(
        f"{repo_id} is not in the Hugging Face cache ({constants.HF_HUB_CACHE}) and the hub "
        f"({constants.ENDPOINT}) cannot be reached from here ({problem}); "
        f"{WHAT_TO_DO.format(id=repo_id)}"
    )


def _reachable_or_cached(repo_id: str) -> str | None:
    """As `_unreachable`, for a cached model: the hub's "no such model" leaves the cache."""
    try:
        return _unreachable(repo_id)
    except SpiralError as err:
        return str(err)


def _refuse_cache_in_the_way() -> None:
    """The Hugging Face cache (HF_HOME, HF_HUB_CACHE) must be a folder, or be one to make:
    a file in its place is refused in one line (the hub library would fail on it with a
    traceback, reading its token or writing a download)."""
    from huggingface_hub import constants

    for key, value in (("HF_HOME", constants.HF_HOME), ("HF_HUB_CACHE", constants.HF_HUB_CACHE)):
        node = Path(value)
        while not node.exists() and node != node.parent:
            node = node.parent
        if not node.is_dir():
            raise CacheUnusable(
                f"{key}={value} cannot be the Hugging Face cache: {node} is a file, not a "
                f"folder; point {key} at a folder (or unset it), or pass a local model folder"
            )


def _refuse_unwritable_cache(repo_id: str) -> None:
    """Before a download: the cache folder takes new files, or one line saying where."""
    from huggingface_hub import constants

    from spiral.report.writable import UnwritablePath, check_writable_folder

    try:
        check_writable_folder(constants.HF_HUB_CACHE)
    except UnwritablePath as err:
        raise CacheUnusable(
            f"cannot download {repo_id} into the Hugging Face cache: {err}; point HF_HUB_CACHE "
            "(or HF_HOME) at a folder you can write, or pass a local model folder"
        ) from None
