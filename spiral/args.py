"""The one front door of every `spiral` command: `key=value` words -> a typed chz config.

`parse_command(Config, argv, "eval")` refuses words without `=`, unknown keys (with the
closest valid name), and values that do not fit the field's type (with the type, or the
choices of a `Literal` field), each as one `UsageError` line; then the config's own
validators and its `validate()` method (if any) check ranges and cross-field rules.
`help_text(Config, "eval")` is generated from the fields' types, defaults and docs, so a
key cannot exist without its help line. The small validators below (`choice`,
`positive`, ...) are shared by every command's config.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import textwrap
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, TypeVar, get_args, get_origin

import chz

from spiral.errors import SpiralError, UsageError, did_you_mean

T = TypeVar("T")
HELP_WORDS = ("-h", "--help", "help")
_TRUE_FALSE = ("true", "false", "True", "False", "1", "0")
_INTEGER = re.compile(r"[+-]?[0-9]+")


def is_integer(text: str) -> bool:
    """Whether `text` is an integer key's value: ASCII digits (int() also takes "1_000" and
    other scripts' digits), below 2**63 (larger would overflow every tensor and counter)."""
    return _INTEGER.fullmatch(text) is not None and abs(int(text)) < 2**63


def wants_help(argv: Sequence[str]) -> bool:
    return any(word in HELP_WORDS for word in argv)


# ---- validators (chz `validator=`): one line naming the key and the valid range ---------
def _name(attr: str) -> str:
    return attr.removeprefix("X_")  # chz stores fields as X_<name>


def positive(obj: Any, attr: str) -> None:
    if getattr(obj, attr) <= 0:
        raise UsageError(f"{_name(attr)} must be > 0, got {getattr(obj, attr)!r}")


def positive_or_unset(obj: Any, attr: str) -> None:
    """`positive` for a key whose None means "inherit it" (e.g. from a run's config)."""
    if getattr(obj, attr) is not None:
        positive(obj, attr)


def non_negative(obj: Any, attr: str) -> None:
    if getattr(obj, attr) < 0:
        raise UsageError(f"{_name(attr)} must be >= 0, got {getattr(obj, attr)!r}")


def non_negative_or_unset(obj: Any, attr: str) -> None:
    """`non_negative` for a key whose None means "inherit it"."""
    if getattr(obj, attr) is not None:
        non_negative(obj, attr)


def unit_interval(obj: Any, attr: str) -> None:
    if not 0.0 < getattr(obj, attr) <= 1.0:
        raise UsageError(f"{_name(attr)} must be in (0, 1], got {getattr(obj, attr)!r}")


def zero_or_unit_interval(obj: Any, attr: str) -> None:
    if not 0.0 <= getattr(obj, attr) <= 1.0:
        raise UsageError(
            f"{_name(attr)} must be 0 (automatic) or in (0, 1], got {getattr(obj, attr)!r}"
        )


def choice(valid: Iterable[str], what: str = "") -> Callable[[Any, str], None]:
    """A validator for an open-ended registry (games, opponents) read when it runs."""

    def check(obj: Any, attr: str) -> None:
        names = list(valid)
        value = getattr(obj, attr)
        for item in value if isinstance(value, tuple) else (value,):
            if item not in names:
                raise UsageError(
                    f"{_name(attr)}={item!r} is not {what or 'valid'}; {did_you_mean(item, names)}"
                )

    return check


def seat_number(obj: Any, attr: str) -> None:
    if getattr(obj, attr) not in (0, 1):
        raise UsageError(f"{_name(attr)} must be 0 or 1, got {getattr(obj, attr)!r}")


def port_number(obj: Any, attr: str) -> None:
    if not 0 < getattr(obj, attr) < 65536:
        raise UsageError(f"{_name(attr)} must be in 1..65535, got {getattr(obj, attr)!r}")


def device_name(obj: Any, attr: str) -> None:
    value = str(getattr(obj, attr))
    head, _, index = value.partition(":")
    if not (value in ("auto", "cpu", "cuda") or (head == "cuda" and _INTEGER.fullmatch(index))):
        raise UsageError(f"{_name(attr)}={value!r} is not valid; choose auto, cpu, cuda or cuda:N")


# ---- parsing -------------------------------------------------------------------------
def describe_type(tp: Any) -> str:
    """A field type as a user reads it: `one of a, b`, `an integer`, `comma-separated ...`."""
    origin, args = get_origin(tp), get_args(tp)
    if isinstance(getattr(tp, "SYNTAX", None), str):  # a value written as one word
        return str(tp.SYNTAX)
    if origin is Literal:
        return "one of " + ", ".join(str(a) for a in args)
    if origin in (types.UnionType, typing.Union):
        parts = [describe_type(a) for a in args if a is not type(None)]
        return " or ".join(parts) + (" (or None)" if type(None) in args else "")
    if origin is tuple:
        item = describe_type(args[0])
        plural = {
            "a string": "strings",
            "an integer": "integers",
            "a finite number": "finite numbers",
        }
        return f"a comma-separated list of {plural.get(item, item)}"
    return {
        int: "an integer",
        float: "a finite number",
        bool: "true or false",
        str: "a string",
    }.get(tp, getattr(tp, "__name__", str(tp)))


def _fits(tp: Any, text: str) -> bool:
    """Whether `text` converts to `tp` (the types our configs use)."""
    origin, args = get_origin(tp), get_args(tp)
    if origin is Literal:
        return text in {str(a) for a in args}
    if origin in (types.UnionType, typing.Union):
        return (type(None) in args and text == "None") or any(
            _fits(a, text) for a in args if a is not type(None)
        )
    if origin is tuple:
        return all(_fits(args[0], part.strip()) for part in text.split(",") if part.strip())
    if tp is bool:
        return text in _TRUE_FALSE
    if tp is int:
        return is_integer(text)
    if tp is float:
        try:
            return math.isfinite(float(text))  # nan and inf would only fail later, or never
        except ValueError:
            return False
    return True


def _too_large(text: str) -> bool:
    """Whether `text` is an integer too large for any key (what `_fits` refuses)."""
    try:
        return abs(int(text)) >= 2**63
    except ValueError:
        return False


def _is_group(field: Any) -> bool:
    """A field whose type is itself a chz config: a group of keys (`TrainConfig.learning`),
    or an optional one (`population: PopulationConfig | None`, a mode that exists when on)."""
    return _group_type(field) is not None


def _group_type(field: Any) -> Any:
    """The chz config a group field holds (through `| None`), or None."""
    tp = field.final_type
    if get_origin(tp) in (types.UnionType, typing.Union):
        inner = [a for a in get_args(tp) if a is not type(None)]
        tp = inner[0] if len(inner) == 1 and type(None) in get_args(tp) else None
    return tp if isinstance(tp, type) and chz.is_chz(tp) else None


def _optional(field: Any) -> bool:
    return _is_group(field) and _group_type(field) is not field.final_type


@dataclasses.dataclass(frozen=True)
class _Switch:
    """The key that turns an optional group on (`fsp_enabled=true` creates `population`):
    shown and parsed like a bool field, stored as the group's presence."""

    group: str  # the group's field name
    group_type: Any  # its chz config class
    _doc: str
    final_type: type = bool
    _default: bool = False
    _default_factory: Any = None
    _blueprint_cast: Any = None


def _paths(cls: Any, prefix: str = "") -> dict[str, tuple[str, Any]]:
    """Every key of a config by its flat name -> (its dotted path, its field), groups
    flattened; an optional group's switch (its class's `SWITCH`) by its own name, with the
    group's path. A name two groups share is refused here, so flat names stay unambiguous."""
    out: dict[str, tuple[str, Any]] = {}
    for name, field in chz.chz_fields(cls).items():
        inner = (
            _paths(_group_type(field), f"{prefix}{name}.")
            if _is_group(field)
            else {name: (f"{prefix}{name}", field)}
        )
        if _optional(field):
            group = _group_type(field)
            doc = " ".join((group.__doc__ or name).split())
            switch = _Switch(name, group, f"on: {doc}")
            inner = {group.SWITCH: (f"{prefix}{name}", switch), **inner}
        for key, found in inner.items():
            if key in out:
                raise TypeError(f"{cls.__name__}: key {key!r} appears in two groups")
            out[key] = found
    return out


def _fields(cls: type) -> dict[str, Any]:
    """Every key's field by its flat name (groups flattened)."""
    return {key: field for key, (_, field) in _paths(cls).items()}


def groups(cls: type) -> list[tuple[str, str, list[str]]]:
    """(group name, its doc, its flat keys) for each group of a config, in order; the
    config's own keys first, under the name ""; an optional group's switch first in it."""
    top = chz.chz_fields(cls)
    out = [("", "", [n for n, f in top.items() if not _is_group(f)])]
    for name, field in top.items():
        if _is_group(field):
            keys = list(_paths(_group_type(field)))
            if _optional(field):
                keys = [_group_type(field).SWITCH, *keys]
            out.append((name, field._doc or "", keys))
    return out


def flat_json(obj: Any) -> dict[str, Any]:
    """A config's values by flat key (tuples as lists): what a run folder stores. An
    optional group that is off is its switch alone (`"fsp_enabled": false`)."""
    out: dict[str, Any] = {}
    for key, (path, field) in _paths(type(obj)).items():
        *groups_on_path, name = path.split(".")
        holder: Any = obj
        for part in groups_on_path:
            holder = getattr(holder, part)
        if isinstance(field, _Switch):
            out[key] = getattr(holder, name) is not None
        elif holder is not None:  # a key of an optional group that is off says nothing
            out[key] = _json_value(getattr(holder, name))
    return out


def _json_value(value: Any) -> Any:
    """A config value as a run folder stores it: tuples as lists, a value written as one
    word (a schedule) by its own `to_json`."""
    if isinstance(value, tuple):
        return list(value)
    to_json = getattr(value, "to_json", None)
    return to_json() if callable(to_json) else value


def comma_list(text: str | tuple[str, ...]) -> tuple[str, ...]:
    """A comma-separated list whose items may hold commas inside parentheses, as game ids
    with parameters do (`openspiel:liars_dice(numdice=1,players=2),KuhnPokerSingle-v0`);
    empty items are dropped. A tuple (a value given in Python) is kept as it is."""
    if isinstance(text, tuple):
        return text
    items, depth, current = [], 0, ""
    for char in text:
        depth += (char == "(") - (char == ")")
        if char == "," and depth <= 0:
            items.append(current)
            current = ""
        else:
            current += char
    items.append(current)
    return tuple(item.strip() for item in items if item.strip())


def checked_value(field: Any, key: str, value: str) -> str:
    """`value` for the chz field `field` as its parser takes it (a true/false word in any
    case as `true`/`false`), or one line naming what `key` expects."""
    tp = field.final_type
    if tp is bool and value.lower() in ("true", "false", "1", "0"):
        return "true" if value.lower() in ("true", "1") else "false"
    cast = getattr(field, "_blueprint_cast", None)
    if get_origin(tp) is tuple and cast is not comma_list:  # "a,,b," is a, b: an empty
        value = ",".join(part for part in value.split(",") if part.strip())  # item is none
    if cast is not None:  # a value written as one word (a schedule): its own parser
        try:
            cast(value)
        except UsageError as err:
            raise UsageError(f"{key}={err}") from None
    elif not _fits(tp, value):
        expected = describe_type(tp)
        if _too_large(value):
            expected += f" (of at most {len(str(2**63 - 1))} digits)"
        raise UsageError(f"{key}={value!r} is not valid: expected {expected}")
    return value


def parse_command(
    cls: type[T],
    argv: Sequence[str],
    command: str,
) -> T:
    """A validated `cls` from `key=value` words."""
    fields = _fields(cls)
    names = sorted(fields)
    given: list[tuple[str, str]] = []
    for word in argv:
        key, eq, value = word.partition("=")
        if not eq:
            raise UsageError(
                f"{word!r} is not key=value; see `spiral {command} --help` for the keys"
            )
        if key not in fields:
            raise UsageError(f"unknown key {key!r}; {did_you_mean(key, names, '=')}")
        given.append((key, checked_value(fields[key], key, value)))
    missing = [n for n, f in fields.items() if _shown_default(f) == "required"]
    missing = [n for n in missing if n not in {k for k, _ in given}]
    if missing:
        doc = fields[missing[0]]._doc
        raise UsageError(
            f"{missing[0]}= is required ({doc}); see `spiral {command} --help`"
            if doc
            else f"{missing[0]}= is required; see `spiral {command} --help`"
        )
    paths = _paths(cls)
    switches = {k: f for k, (_, f) in paths.items() if isinstance(f, _Switch)}
    made: dict[str, Any] = {}
    for switch, field in switches.items():
        path = field.group
        mine = [(k, v) for k, v in given if paths[k][0].startswith(f"{path}.")]
        on = [v == "true" for k, v in given if k == switch]
        if mine and not on:
            raise UsageError(
                f"{mine[0][0]}={mine[0][1]} needs {switch}=true (the mode is off); add it, "
                "or drop the key"
            )
        if on and on[-1]:
            made[path] = _make(field.group_type, [(paths[k][0], v) for k, v in mine], command, path)
        given = [(k, v) for k, v in given if k != switch and (k, v) not in mine]
    obj = _make(cls, [(paths[k][0], v) for k, v in given], command)
    if made:
        obj = chz.replace(obj, **made)
    validate = getattr(obj, "validate", None)
    return validate() if callable(validate) else obj


def _make(cls: Any, pairs: list[tuple[str, str]], command: str, within: str = "") -> Any:
    """`cls` from dotted `path=value` pairs (`within.` taken off), chz's errors in one line."""
    cut = len(within) + 1 if within else 0
    try:
        return chz.Blueprint(cls).make_from_argv([f"{p[cut:]}={v}" for p, v in pairs])
    except SpiralError:
        raise
    except Exception as err:  # chz's own errors (e.g. a missing required key): one line
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UsageError(f"{first}; see `spiral {command} --help`") from err


# ---- help ------------------------------------------------------------------------------
def help_text(
    cls: type,
    command: str,
    epilog: str = "",
    given: Mapping[str, str] | None = None,
    core_only: bool = False,
) -> str:
    """`spiral <command> --help`: the config's docstring, then every key with its type,
    default and doc. `given` (key -> value, e.g. a recipe's and the command line's) is
    shown in place of the default, marked as set. `core_only`: the config's own keys, and
    each group by name only (`--help all` shows them)."""
    given = given or {}
    fields = _fields(cls)
    lines = [(cls.__doc__ or f"usage: spiral {command} key=value ...").strip(), ""]
    lines.append(
        "keys (default, or `set: VALUE` where given; type) description (given twice: the last):"
    )
    found = groups(cls)
    for group, doc, keys in found:
        if group and core_only:
            if group == found[1][0]:
                lines += ["", f"more keys, by group (spiral {command} --help all):"]
            set_here = sum(k in given for k in keys)
            note = f"; {set_here} set here" if set_here else ""
            lines.append(_wrapped(f"  {group} ({len(keys)} keys{note}): {doc}", "      "))
            continue
        if group:
            lines += ["", f"{group}: {doc}" if doc else f"{group}:"]
        for name in keys:
            field = fields[name]
            default = f"set: {given[name]}" if name in given else _shown_default(field)
            head = f"  {name} ({default}; {describe_type(field.final_type)})"
            lines.append(_wrapped(f"{head}: {field._doc}" if field._doc else head, "      "))
    if epilog:
        lines += ["", epilog]
    return "\n".join(lines)


def _wrapped(text: str, indent: str, width: int = 100) -> str:
    """`text` wrapped at `width` columns, later lines indented by `indent`."""
    return textwrap.fill(text, width, subsequent_indent=indent, break_on_hyphens=False)


def _shown_default(field: Any) -> str:
    if not _missing(field._default):
        default = field._default
    elif not _missing(field._default_factory):
        default = field._default_factory()
    else:
        return "required"
    if isinstance(default, tuple):
        return json.dumps(",".join(str(x) for x in default))
    if callable(getattr(default, "to_json", None)):
        return str(default)
    return repr(default)


def _missing(value: Any) -> bool:
    """chz's and dataclasses' "no default" markers."""
    return value is dataclasses.MISSING or type(value).__name__ == "MISSING_TYPE"


def field_docs(cls: type) -> list[tuple[str, str, str]]:
    """(name, default, doc) for every field of a command config."""
    return [(n, _shown_default(f), f._doc or "") for n, f in _fields(cls).items()]
