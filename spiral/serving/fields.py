"""Which OpenAI chat-completions fields `spiral serve` does not offer, and the 400 for
each: a field that would change the reply (log-probs, a JSON response format, tools,
penalties, images) is refused with a message naming it and saying what to send instead,
never dropped; a field that changes nothing here (`user`, `metadata`, `store`, ...) is
accepted. A field this server does not know is refused too, as OpenAI refuses one, so a
misspelt `temperture` is not silently ignored."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# Fields that change nothing here: accepted whatever their value (the request model
# still checks the ones it types).
HARMLESS = frozenset({
    "user", "metadata", "store", "service_tier", "parallel_tool_calls", "prompt_cache_key",
    "safety_identifier",
})  # fmt: skip

_DROP = "drop it"


def _off(*defaults: Any) -> Callable[[Any], bool]:
    """A value that asks for nothing: None, or one of `defaults` (0 and 0.0 alike)."""
    return lambda value: (
        value is None or any(value == d and type(value) is not bool or value is d for d in defaults)
    )


def _empty(value: Any) -> bool:
    return value is None or value == [] or value == {}


# field -> (whether the value asks for nothing, what to do instead)
REFUSED: dict[str, tuple[Callable[[Any], bool], str]] = {
    "logprobs": (_off(False), "log-probabilities are not returned here; drop logprobs"),
    "top_logprobs": (_off(0), "log-probabilities are not returned here; drop top_logprobs"),
    "response_format": (
        lambda v: v is None or v == {"type": "text"},
        "only {'type': 'text'} is served; for a fixed set of answers send guided_choice "
        "(extra_body), else drop response_format",
    ),
    "tools": (_empty, "tool calls are not offered here; drop tools"),
    "tool_choice": (_off("none"), "tool calls are not offered here; drop tool_choice"),
    "functions": (_empty, "function calls are not offered here; drop functions"),
    "function_call": (_off("none"), "function calls are not offered here; drop function_call"),
    "presence_penalty": (_off(0), "penalties are not applied here; drop presence_penalty"),
    "frequency_penalty": (_off(0), "penalties are not applied here; drop frequency_penalty"),
    "logit_bias": (_empty, "logit biases are not applied here; drop logit_bias"),
    "modalities": (
        lambda v: v is None or v == ["text"],
        "replies are text only; drop modalities",
    ),
    "audio": (_off(), "replies are text only; drop audio"),
    "prediction": (_off(), "predicted outputs are not used here; drop prediction"),
    "reasoning_effort": (_off(), "the served model takes no reasoning effort; drop it"),
    "verbosity": (_off(), "the served model takes no verbosity; drop it"),
    "web_search_options": (_off(), "there is no web search here; drop web_search_options"),
    # vLLM's sampling and structured-output extensions that this server does not offer
    "top_k": (_off(-1, 0), "top_k is not offered; use top_p, or drop top_k"),
    "min_p": (_off(0), "min_p is not offered; use top_p, or drop min_p"),
    "repetition_penalty": (_off(1), "penalties are not applied here; drop repetition_penalty"),
    "min_tokens": (_off(0), "min_tokens is not offered; drop it"),
    "best_of": (_off(1), "one reply is drawn per request; drop best_of"),
    "use_beam_search": (_off(False), "beam search is not offered; drop use_beam_search"),
    "ignore_eos": (_off(False), "replies end at the end token; drop ignore_eos"),
    "echo": (_off(False), "the prompt is not echoed; drop echo"),
    "include_stop_str_in_output": (
        _off(False),
        "replies end before their stop string; drop include_stop_str_in_output",
    ),
    "guided_json": (
        _off(),
        "JSON-constrained replies are not offered; drop it and list the answers with guided_choice",
    ),
    "guided_grammar": (
        _off(),
        "grammar-constrained replies are not offered; drop it and list the answers with guided_choice",
    ),
}

STREAM_OPTIONS = frozenset({"include_usage", "include_obfuscation"})
MESSAGE_HARMLESS = frozenset({"name", "tool_call_id"})


def field_problem(extra: dict[str, Any], stream: bool) -> tuple[str, str] | None:
    """(field, message) for the first top-level field that asks for what this server
    does not offer (`extra`: the fields the request model does not hold), or None."""
    for name, value in extra.items():
        if name in HARMLESS:
            continue
        if name == "stream_options":
            problem = _stream_options_problem(value, stream)
            if problem is not None:
                return name, problem
            continue
        if name in REFUSED:
            asks_nothing, fix = REFUSED[name]
            if not asks_nothing(value):
                return name, f"{name}={_short(value)} is not supported by spiral serve: {fix}"
            continue
        return name, (
            f"unrecognized request field {name!r}: spiral serve takes OpenAI's "
            "chat-completions fields and guided_choice; drop it"
        )
    return None


def _stream_options_problem(value: Any, stream: bool) -> str | None:
    if value is None:
        return None
    if not stream:
        return "stream_options is only taken with stream=true; send stream=true or drop it"
    if not isinstance(value, dict) or set(value) - STREAM_OPTIONS:
        return "stream_options takes only {'include_usage': true|false}; drop the rest"
    if not all(isinstance(v, bool) for v in value.values()):
        return "stream_options.include_usage must be true or false"
    return None


def message_problem(index: int, message: dict[str, Any]) -> tuple[str, str] | None:
    """(param, message) for what a chat message holds that this server cannot read (a
    tool call, an image or audio part), or None."""
    where = f"messages[{index}]"
    for key, value in message.items():
        if key in ("role", "content") or key in MESSAGE_HARMLESS or value is None:
            continue
        return f"{where}.{key}", (
            f"{where}.{key} is not read by spiral serve (tool and function calls, audio and "
            "refusals are not offered); send the conversation as text messages"
        )
    content = message.get("content")
    if content is None:
        return f"{where}.content", f"{where}.content is empty; send the message's text"
    if isinstance(content, str):
        return None
    for k, part in enumerate(content):
        kind = part.get("type")
        if kind == "text" and isinstance(part.get("text"), str):
            continue
        param = f"{where}.content[{k}]"
        if kind == "text":
            return param, f"{param} is a text part without a string 'text'; send its text"
        return param, (
            f"{param} is a {_short(kind)} part; spiral serve reads text only: send the "
            "message's content as text (a string or parts of type 'text')"
        )
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
