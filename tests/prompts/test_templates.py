"""Named templates render the exact bytes expected; `chat` uses a real tokenizer."""

from __future__ import annotations

from typing import Any

import pytest

from spiral.prompts.templates import (
    BOXED_INSTRUCTION,
    TEMPLATES,
    get_template,
    instruction_for,
    render,
    render_chat,
)

OBS = "[GAME] You are Player 0.\nAvailable Moves: '[0]', '[4]'\n\nNext Action:"
PREAMBLE = "You are playing a two-player zero-sum game. Make valid actions to win."


def original_qwen3(observation: str) -> str:
    """The original SPIRAL `qwen3` game template, written out literally (docs/original.md)."""
    return (
        "<|im_start|>user\nYou are playing a two-player zero-sum game. Make valid actions "
        "to win.\nObservation: " + observation + "\nPlease reason step by step, and put "
        "your final answer within \\boxed{}.<|im_end|>\n<|im_start|>assistant\n"
    )


@pytest.mark.parametrize("observation", [OBS, "", "braces {0} {} \\boxed{} {{x}}"])
def test_qwen3_boxed_is_the_original_byte_for_byte(observation: str) -> None:
    text = render("qwen3", observation, BOXED_INSTRUCTION)
    assert text == original_qwen3(observation)
    assert text.encode("utf-8") == original_qwen3(observation).encode("utf-8")


def test_boxed_instruction_wording() -> None:
    assert instruction_for("boxed") == (
        "Please reason step by step, and put your final answer within \\boxed{}."
    )


def test_qwen3_general_is_the_math_template() -> None:
    text = render("qwen3_general", "What is 2+2?", BOXED_INSTRUCTION)
    assert text == (
        "<|im_start|>user\nQuestion: What is 2+2?\nPlease reason step by step, and put your "
        "final answer within \\boxed{}.<|im_end|>\n<|im_start|>assistant\n"
    )


def test_chatml_with_system() -> None:
    text = render("chatml", "obs", "Do it.", system="Rules here.")
    assert text == (
        "<|im_start|>system\nRules here.<|im_end|>\n"
        f"<|im_start|>user\n{PREAMBLE}\nObservation: obs\nDo it.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert render("chatml", "obs", "Do it.") == render("qwen3", "obs", "Do it.")


def test_llama3() -> None:
    text = render("llama3", "obs", "Do it.", system="Rules.")
    assert text == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nRules.<|eot_id|>"
        f"<|start_header_id|>user<|end_header_id|>\n\n{PREAMBLE}\nObservation: obs\nDo it."
        "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    )


def test_plain_has_no_special_tokens() -> None:
    assert render("plain", "obs", "Do it.") == f"{PREAMBLE}\nObservation: obs\nDo it.\n"
    with_system = render("plain", "obs", "Do it.", system="Rules.")
    assert with_system == f"Rules.\n\n{PREAMBLE}\nObservation: obs\nDo it.\n"
    assert "<|" not in with_system


def test_chat_uses_the_tokenizers_template(tokenizer: Any) -> None:
    text = render("chat", "obs", "Do it.", system="Rules.", tokenizer=tokenizer)
    assert text == (
        "<s><|im_start|>system\nRules.<|im_end|>\n"
        f"<|im_start|>user\n{PREAMBLE}\nObservation: obs\nDo it.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_chat_errors_name_the_alternatives(bare_tokenizer: Any) -> None:
    with pytest.raises(ValueError, match="no tokenizer was given.*qwen3, qwen3_general"):
        render("chat", "obs", "Do it.")
    with pytest.raises(ValueError, match="has no chat_template.*pick a named template"):
        render("chat", "obs", "Do it.", tokenizer=bare_tokenizer)


def test_unknown_template_lists_names() -> None:
    with pytest.raises(KeyError, match="valid: chat, qwen3, qwen3_general, chatml, llama3, plain"):
        get_template("qwen9")
    assert set(TEMPLATES) == {"chat", "qwen3", "qwen3_general", "chatml", "llama3", "plain"}


def test_instructions_per_format() -> None:
    assert instruction_for("bracket", "[check]") == (
        "Answer with exactly one of the available moves, written in square brackets, e.g. [check]."
    )
    assert "e.g. [4]" in instruction_for("constrained")
    thinking = instruction_for("constrained", "[bet]", think_budget=32)
    assert "'Move:'" in thinking and thinking.endswith("e.g. Move: [bet].")
    with pytest.raises(KeyError, match="valid: boxed, bracket, constrained"):
        instruction_for("json")  # type: ignore[arg-type]


def test_render_chat_applies_markup_only(tokenizer: Any) -> None:
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "[4]"}]
    assert render_chat(messages, "chatml") == (
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n[4]<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert render_chat(messages[:1], "plain") == "hi\n"
    assert render_chat(messages[:1], "chat", tokenizer) == (
        "<s><|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )
