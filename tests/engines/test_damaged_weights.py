"""A model or adapter folder whose safetensors file is cut short or has its header
rewritten is refused in one line naming the file and what to do, for every command
that loads weights (train, eval, play and serve share `load_model_and_tokenizer`),
never safetensors' or transformers' traceback, and never loaded with a tensor missing."""

from __future__ import annotations

import json
import shutil
import struct
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spiral.cli import main as cli_main
from spiral.engines.loading import DamagedModelFolder, ModelConfig
from spiral.engines.torch.loading import load_model_and_tokenizer


def _header(data: bytes) -> tuple[dict, bytes]:
    (length,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8 : 8 + length]), data[8 + length :]


def _with_header(header: dict, body: bytes) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + body


def _first(header: dict) -> str:
    return next(k for k in header if k != "__metadata__")


def _truncated(data: bytes) -> bytes:
    return data[: len(data) // 2]


def _shape_swapped(data: bytes) -> bytes:
    """The same bytes under a shape of the same size: the header still parses."""
    header, body = _header(data)
    name = next(k for k in header if k != "__metadata__" and len(set(header[k]["shape"])) > 1)
    header[name]["shape"] = list(reversed(header[name]["shape"]))
    return _with_header(header, body)


def _renamed(data: bytes) -> bytes:
    """A tensor under another name: transformers would initialise it at random."""
    header, body = _header(data)
    name = _first(header)
    header[f"{name}x"] = header.pop(name)
    return _with_header(header, body)


def _offsets_past_the_data(data: bytes) -> bytes:
    """A header rewritten to describe more bytes than the file holds."""
    header, body = _header(data)
    header[_first(header)]["data_offsets"][1] += 8
    return _with_header(header, body)


DAMAGE: dict[str, Callable[[bytes], bytes]] = {
    "truncated": _truncated,
    "header rewritten, offsets past the data": _offsets_past_the_data,
    "header rewritten, a shape swapped": _shape_swapped,
    "header rewritten, a tensor renamed": _renamed,
}


def _damaged_copy(model: Path, tmp_path: Path, damage: Callable[[bytes], bytes]) -> Path:
    folder = tmp_path / "model"
    shutil.copytree(model, folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(damage(weights.read_bytes()))
    return folder


def _one_line_naming(err: str, file: Path) -> None:
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert str(file) in err and "download the model again" in err


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_a_damaged_model_folder_is_one_line_in_eval(
    tiny_llama: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    folder = _damaged_copy(tiny_llama, tmp_path, DAMAGE[kind])
    capsys.readouterr()
    assert cli_main(["eval", f"checkpoint={folder}", "opponents=random", "games=1"]) == 2
    _one_line_naming(capsys.readouterr().err, folder / "model.safetensors")


def test_play_and_serve_load_through_the_same_refusal(tiny_llama: Path, tmp_path: Path) -> None:
    """`spiral play` builds a checkpoint agent, `spiral serve` a sampler over the
    resolved source: both refuse before any game or port (called directly, so that a
    folder that loaded could not leave a server running)."""
    from spiral import agents
    from spiral.agents.model_agent import load_sampler, resolve_source

    folder = _damaged_copy(tiny_llama, tmp_path, _truncated)
    with pytest.raises(DamagedModelFolder, match="model.safetensors is unreadable"):
        agents.make(f"checkpoint:{folder}", device="cpu")
    with pytest.raises(DamagedModelFolder, match="model.safetensors is unreadable"):
        load_sampler(resolve_source(str(folder)), device="cpu")


def test_a_damaged_base_model_stops_training_in_one_line_not_as_a_damaged_checkpoint(
    tiny_llama: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Resume takes a damaged checkpoint to mean "fall back to an earlier one"; a damaged
    base model is not that, and says so."""
    folder = _damaged_copy(tiny_llama, tmp_path, _truncated)
    argv = ["train", f"model_name={folder}", "max_steps=1", f"log_path={tmp_path / 'run'}"]
    assert cli_main([*argv, "lora_rank=4", "batch_size=2", "env_ids=KuhnPokerSingle-v0"]) == 2
    err = capsys.readouterr().err
    _one_line_naming(err, folder / "model.safetensors")
    assert "skipping damaged checkpoint" not in err


@pytest.fixture(scope="module")
def adapter(tiny_llama: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A LoRA adapter folder over the tiny model, as a learner saves one."""
    from spiral.engines.torch.learner import TorchLearner

    folder = tmp_path_factory.mktemp("adapter") / "adapter"
    TorchLearner(ModelConfig(model=str(tiny_llama), lora_rank=4, device="cpu")).save_weights(folder)
    return folder


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_a_damaged_adapter_is_refused_in_one_line(adapter: Path, tmp_path: Path, kind: str) -> None:
    folder = tmp_path / "adapter"
    shutil.copytree(adapter, folder)
    weights = folder / "adapter_model.safetensors"
    weights.write_bytes(DAMAGE[kind](weights.read_bytes()))
    with pytest.raises(DamagedModelFolder) as refused:
        load_model_and_tokenizer(ModelConfig(model=str(folder), lora_rank=4, device="cpu"), False)
    assert str(weights) in str(refused.value) and "\n" not in str(refused.value)


def _load(folder: Path) -> None:
    load_model_and_tokenizer(ModelConfig(model=str(folder), lora_rank=0, device="cpu"), False)


@pytest.fixture(scope="module")
def scratch(tiny_llama: Path) -> Iterator[tuple[Path, bytes]]:
    """A copy of the tiny model whose weights each example rewrites, and the original."""
    folder = Path(tempfile.mkdtemp(prefix="spiral-damaged-weights-")) / "model"
    shutil.copytree(tiny_llama, folder)
    yield folder, (folder / "model.safetensors").read_bytes()
    shutil.rmtree(folder.parent, ignore_errors=True)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(point=st.floats(0.0, 1.0, exclude_max=True))
def test_any_truncation_is_refused_in_one_line(scratch: tuple[Path, bytes], point: float) -> None:
    folder, original = scratch
    weights = folder / "model.safetensors"
    weights.write_bytes(original[: int(point * len(original))])
    with pytest.raises(DamagedModelFolder) as refused:
        _load(folder)
    assert str(weights) in str(refused.value) and "\n" not in str(refused.value)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_flipped_header_byte_is_refused_in_one_line_or_changes_nothing_loaded(
    scratch: tuple[Path, bytes], data: st.DataObject
) -> None:
    """Header bytes: its length, names, dtypes, shapes and offsets. A flip either breaks
    what the loader reads (refused, naming the file) or lands where nothing loaded
    depends on it (the format metadata, a digit that keeps the layout): never a
    traceback, never a model with a tensor missing or reshaped."""
    folder, original = scratch
    (length,) = struct.unpack("<Q", original[:8])
    position = data.draw(st.integers(0, 8 + length - 1), label="position")
    mask = data.draw(st.integers(1, 255), label="xor")
    damaged = bytearray(original)
    damaged[position] ^= mask
    weights = folder / "model.safetensors"
    weights.write_bytes(bytes(damaged))
    try:
        _load(folder)
    except DamagedModelFolder as refused:
        assert str(weights) in str(refused) and "\n" not in str(refused)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    point=st.floats(0.0, 0.999),
    file=st.sampled_from(["tokenizer.json", "tokenizer_config.json", "config.json"]),
    junk=st.binary(max_size=64),
)
def test_a_damaged_tokenizer_or_config_file_is_refused_in_one_line(
    scratch: tuple[Path, bytes], point: float, file: str, junk: bytes
) -> None:
    """Cut short at any point, with any bytes after the cut: refused naming the folder
    and the files that do not read, never json's, unicode's, transformers' or
    tokenizers' traceback."""
    folder, weights = scratch
    (folder / "model.safetensors").write_bytes(weights)  # whole again after the tests above
    path = folder / file
    original = path.read_bytes()
    path.write_bytes(original[: int(point * len(original))] + junk)
    try:
        _load(folder)
    except DamagedModelFolder as refused:
        said = str(refused)
        assert str(folder) in said and "do not read" in said and "\n" not in said
    else:  # loaded: only a file that is still a whole JSON document may
        json.loads(path.read_bytes())
    finally:
        path.write_bytes(original)


@pytest.mark.parametrize(
    ("file", "content"),
    [("config.json", '{"hidden_size": "big"}'), ("config.json", ""), ("model.safetensors", None)],
)
def test_a_config_of_wrong_types_or_missing_weights_is_one_line(
    scratch: tuple[Path, bytes], file: str, content: str | None
) -> None:
    import json as json_module

    folder, weights = scratch
    (folder / "model.safetensors").write_bytes(weights)
    path = folder / file
    original = path.read_bytes()
    if content is None:
        path.unlink()
    elif content.startswith("{"):
        path.write_text(
            json_module.dumps({**json_module.loads(original), **json_module.loads(content)})
        )
    else:
        path.write_text(content)
    try:
        with pytest.raises(DamagedModelFolder) as refused:
            _load(folder)
        assert str(folder) in str(refused.value) and "\n" not in str(refused.value)
    finally:
        path.write_bytes(original)


@pytest.mark.parametrize("field", [{"r": "four"}, {"target_modules": 5}])
def test_an_adapter_config_of_wrong_types_is_one_line(
    adapter: Path, tmp_path: Path, field: dict
) -> None:
    folder = tmp_path / "adapter"
    shutil.copytree(adapter, folder)
    config = folder / "adapter_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), **field}))
    with pytest.raises(DamagedModelFolder) as refused:
        load_model_and_tokenizer(ModelConfig(model=str(folder), lora_rank=4, device="cpu"), False)
    assert "adapter_config.json" in str(refused.value) and "\n" not in str(refused.value)
