"""`key=value` arguments for the commands that do not have a typed config yet (`play`,
`export`): unknown keys and words without `=` are refused with the closest valid key,
instead of being dropped silently. (`train` and `eval` parse their own typed configs.)"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence

from spiral.errors import SpiralError


class UsageError(SpiralError, ValueError):
    """A command line that does not parse; the message names the fix."""


def parse_key_values(argv: Sequence[str], valid: Iterable[str]) -> dict[str, str]:
    """{key: value} from `key=value` words; every key must be in `valid`."""
    keys = sorted(valid)
    out: dict[str, str] = {}
    for word in argv:
        key, eq, value = word.partition("=")
        if not eq:
            raise UsageError(f"{word!r} is not key=value; valid keys: {', '.join(keys)}")
        if key not in keys:
            close = difflib.get_close_matches(key, keys, n=1)
            hint = f"did you mean {close[0]}=?" if close else f"valid keys: {', '.join(keys)}"
            raise UsageError(f"unknown key {key!r}; {hint}")
        out[key] = value
    return out
