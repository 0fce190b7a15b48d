"""Model folders that would need pickle or their own code to load are refused in one
line naming what was refused, before anything is loaded (through `spiral eval`'s
command as a user meets it); clean folders load."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from spiral.cli import main as cli_main
from spiral.engines.loading import UnsafeModelFolder, refuse_unsafe_folder


def _copy(model: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    shutil.copytree(model, folder)
    return folder


def _pickled(folder: Path) -> None:
    for weights in folder.glob("*.safetensors"):
        weights.unlink()
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04not really a pickle")


def _auto_map(name: str):  # type: ignore[no-untyped-def]
    def add(folder: Path) -> None:
        path = folder / name
        data = json.loads(path.read_text()) if path.is_file() else {}
        data["auto_map"] = {"AutoModelForCausalLM": "evil.Model"}
        path.write_text(json.dumps(data))

    return add


HOSTILE = {
    "pickle weights": (_pickled, "pickle weights (pytorch_model.bin)"),
    "auto_map in config.json": (_auto_map("config.json"), "auto_map in config.json"),
    "auto_map in tokenizer_config.json": (
        _auto_map("tokenizer_config.json"),
        "auto_map in tokenizer_config.json",
    ),
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_a_hostile_folder_is_refused_in_one_line(
    tiny_llama: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    damage, said = HOSTILE[kind]
    folder = _copy(tiny_llama, tmp_path)
    damage(folder)
    with pytest.raises(UnsafeModelFolder, match=re.escape(said)):
        refuse_unsafe_folder(str(folder))
    code = cli_main(["eval", f"checkpoint={folder}", "opponents=random", "games=1"])
    err = capsys.readouterr().err
    assert code == 2 and said in err and "Traceback" not in err


def test_a_clean_folder_and_a_hub_id_pass(tiny_llama: Path) -> None:
    refuse_unsafe_folder(str(tiny_llama))
    refuse_unsafe_folder("Qwen/Qwen3-4B-Base")  # not a folder: the hub's own rules apply


ESCAPES = {
    "class walk": "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "globals": "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
    "mutation": "{% set _ = messages.append({'role': 'user', 'content': 'x'}) %}",
}


@pytest.mark.parametrize("kind", sorted(ESCAPES))
def test_a_chat_template_that_tries_to_leave_the_sandbox_is_refused_in_one_line(
    tiny_llama: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    folder = _copy(tiny_llama, tmp_path)
    jinja = folder / "chat_template.jinja"  # where transformers saves it (else in the config)
    if jinja.is_file():
        jinja.write_text(ESCAPES[kind] + jinja.read_text())
    else:
        path = folder / "tokenizer_config.json"
        data = json.loads(path.read_text())
        data["chat_template"] = ESCAPES[kind] + data["chat_template"]
        path.write_text(json.dumps(data))
    code = cli_main(["eval", f"checkpoint={folder}", "opponents=random", "games=1"])
    err = capsys.readouterr().err
    assert code == 2 and "outside Jinja's sandbox" in err and "Traceback" not in err


def test_a_chat_template_that_fails_at_render_time_is_one_line(tiny_llama: Path) -> None:
    from spiral.engines.loading import ModelConfig
    from spiral.engines.torch.loading import _load_tokenizer
    from spiral.prompts.templates import ChatTemplateError, render_chat

    tokenizer = _load_tokenizer(str(tiny_llama), ModelConfig(model=str(tiny_llama)))
    # Accepted at load (the probe chat has no assistant turn), refused when one comes.
    tokenizer.chat_template = (
        "{% for m in messages %}{% if m['role'] == 'assistant' %}"
        "{{ raise_exception('no assistant turns here') }}{% endif %}"
        "{{ m['content'] }}{% endfor %}"
    )
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "[1]"}]
    with pytest.raises(ChatTemplateError, match="no assistant turns here.*named template"):
        render_chat(chat, "chat", tokenizer)  # type: ignore[arg-type]


def test_an_adapter_whose_weights_are_a_pickle_is_refused_beside_other_safetensors(
    tiny_llama: Path, tmp_path: Path
) -> None:
    """A checkpoint's learner folder also holds optimizer.safetensors: that must not make
    a pickled adapter (which PEFT would load in place of the missing safetensors) pass."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_llama)
    adapter = tmp_path / "adapter"
    get_peft_model(model, LoraConfig(r=2, target_modules="all-linear")).save_pretrained(adapter)
    (adapter / "adapter_model.safetensors").unlink()
    (adapter / "adapter_model.bin").write_bytes(b"\x80\x04not really a pickle")
    (adapter / "optimizer.safetensors").write_bytes(b"{}")
    with pytest.raises(UnsafeModelFolder, match=r"pickle weights \(adapter_model.bin\)"):
        refuse_unsafe_folder(str(adapter))
    # Beside its safetensors twin a stray pickle is never loaded: the folder passes.
    (adapter / "adapter_model.safetensors").write_bytes(b"")
    refuse_unsafe_folder(str(adapter))
