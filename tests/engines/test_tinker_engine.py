"""engine=tinker against the SDK's own types, without network: the datum layout, loss
names, sampling parameters and replies, and the learner's calls (a stand-in for the
hosted service answers in the SDK's types). A live test runs when TINKER_API_KEY is set."""

from __future__ import annotations

import functools
import json
import os
import socket
from pathlib import Path
from typing import Any, get_args

import numpy as np
import pytest

tinker = pytest.importorskip("tinker")

from spiral.algo.losses import LOSSES, get_loss  # noqa: E402
from spiral.algo.regularizers import Regularizer  # noqa: E402
from spiral.engines import registry  # noqa: E402
from spiral.engines.base import SamplingParams  # noqa: E402
from spiral.engines.loading import ModelConfig  # noqa: E402
from spiral.engines.tinker import (  # noqa: E402
    API_KEY_ENV,
    POINTER_FILE,
    TINKER_LOSSES,
    TinkerLearner,
    TinkerSampler,
    TinkerUnsupported,
    aligned,
    from_tinker_sequence,
    to_tinker_datum,
    to_tinker_sampling,
)
from spiral.errors import SpiralError  # noqa: E402
from spiral.types import AnswerConstraint, Datum  # noqa: E402

types = tinker.types


def _datum(weight: float = 1.0) -> Datum:
    return Datum(
        input_ids=(1, 2, 3, 4),
        target_ids=(2, 3, 4, 5),
        sampler_logprobs=(0.0, 0.0, -0.5, -0.25),
        advantages=(0.0, 0.0, 2.0, 2.0),
        mask=(0.0, 0.0, 1.0, 0.0),  # the last token forced: not trained
        weight=weight,
    )


def test_without_a_key_the_engine_says_what_to_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    with pytest.raises(SpiralError, match=f"{API_KEY_ENV} set to your Tinker API key"):
        registry.learner("tinker", ModelConfig(model="Qwen/Qwen3-4B-Base", lora_rank=8))
    with pytest.raises(SpiralError, match=API_KEY_ENV):
        registry.sampler("tinker", ModelConfig(model="Qwen/Qwen3-4B-Base"))


def test_a_key_the_sdk_rejects_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK refuses a key without its prefix when the first client is made, before any
    request: that becomes one line, not the SDK's traceback."""
    monkeypatch.setenv(API_KEY_ENV, "not-a-tinker-key")
    for build in (registry.learner, registry.sampler):
        with pytest.raises(SpiralError, match="engine=tinker could not start: .*TINKER_API_KEY"):
            build("tinker", ModelConfig(model="Qwen/Qwen3-4B-Base", lora_rank=8))


def test_datums_take_the_original_ports_layout() -> None:
    got = to_tinker_datum(_datum(weight=3.0), scale=0.5)
    assert isinstance(got, types.Datum)
    assert got.model_input.to_ints() == [1, 2, 3, 4]
    inputs = got.loss_fn_inputs
    assert set(inputs) == {"target_tokens", "logprobs", "advantages"}
    assert inputs["target_tokens"].dtype == "int64" and inputs["target_tokens"].tolist() == [
        2,
        3,
        4,
        5,
    ]
    assert inputs["logprobs"].tolist() == [0.0, 0.0, -0.5, -0.25]
    # advantage x mask x weight x scale: zeros mask the prompt and the forced token
    assert inputs["advantages"].tolist() == [0.0, 0.0, 3.0, 0.0]


def test_our_losses_are_tinker_losses_and_sampling_params_convert() -> None:
    assert set(TINKER_LOSSES) <= set(LOSSES) & set(get_args(types.LossFnType))
    params = to_tinker_sampling(SamplingParams(max_tokens=7, temperature=0.7, stop=("]",), seed=3))
    assert isinstance(params, types.SamplingParams)
    assert (params.max_tokens, params.temperature, params.stop, params.seed) == (7, 0.7, ["]"], 3)


class _Tokenizer:
    eos_token_id = 9

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return " ".join(str(i) for i in ids if not (skip_special_tokens and i == 9))

    def encode(self, text: str) -> list[int]:
        return [3 + i for i in range(min(len(text.split()), 16))]

    def save_pretrained(self, path: str) -> None:
        (Path(path) / "tokenizer.json").write_text("{}")


def _sequence(tokens: list[int], reason: str = "stop") -> Any:
    return types.SampledSequence(
        stop_reason=reason,
        sequence_id="s",
        _tokens_list=tokens,
        _logprobs_list=[-0.1] * len(tokens),
    )


def test_sampled_sequences_become_completions() -> None:
    done = from_tinker_sequence(_sequence([4, 5, 9]), _Tokenizer())
    assert done.tokens == (4, 5, 9) and done.logprobs == (-0.1, -0.1, -0.1)
    assert done.stop_reason == "eos" and done.text == "4 5"
    cut = from_tinker_sequence(_sequence([4, 5], "length"), _Tokenizer())
    assert cut.stop_reason == "length"


class _Future:
    def __init__(self, value: Any) -> None:
        self.value = value

    def result(self) -> Any:
        return self.value


class _TrainingClient:
    """Answers as the service would, in the SDK's types; records the calls."""

    saved: dict[str, int] = {}  # state path -> the optimizer steps it holds (all services)

    def __init__(self, restored: int = 0) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.restored = restored

    def steps(self) -> int:
        return self.restored + sum(1 for call, _ in self.calls if call == "optim_step")

    def get_tokenizer(self) -> _Tokenizer:
        return _Tokenizer()

    def forward_backward(self, data: list[Any], loss_fn: str) -> _Future:
        self.calls.append(("forward_backward", (data, loss_fn)))
        outputs = [
            {"logprobs": types.TensorData.from_numpy(d.loss_fn_inputs["logprobs"].to_numpy())}
            for d in data
        ]
        return _Future(
            types.ForwardBackwardOutput(
                loss_fn_output_type="TensorData",
                loss_fn_outputs=outputs,
                metrics={"loss:sum": -1.5},
            )
        )

    def forward(self, data: list[Any], loss_fn: str) -> _Future:
        """Log-probs that move with the optimizer steps taken: a state is its step count."""
        steps = self.steps()
        outputs = [
            {
                "logprobs": types.TensorData.from_numpy(
                    np.full(
                        len(d.loss_fn_inputs["target_tokens"].tolist()), -1.0 - steps, np.float32
                    )
                )
            }
            for d in data
        ]
        return _Future(
            types.ForwardBackwardOutput(
                loss_fn_output_type="TensorData", loss_fn_outputs=outputs, metrics={}
            )
        )

    def optim_step(self, params: Any) -> _Future:
        self.calls.append(("optim_step", params))
        return _Future(types.OptimStepResponse(metrics={}))

    def save_state(self, name: str) -> _Future:
        self.calls.append(("save_state", name))
        _TrainingClient.saved[f"tinker://run/{name}"] = self.steps()
        return _Future(types.SaveWeightsResponse(path=f"tinker://run/{name}"))

    def load_state_with_optimizer(self, path: str) -> _Future:  # the older way to resume
        self.calls.append(("load_state_with_optimizer", path))
        self.restored = _TrainingClient.saved.get(path, 0)  # a lost file: fresh weights
        return _Future(None)

    def save_weights_for_sampler(self, name: str) -> _Future:
        self.calls.append(("save_weights_for_sampler", name))
        return _Future(types.SaveWeightsForSamplerResponse(path=f"tinker://run/{name}"))


class _Service:
    """Client constructors return futures of clients, as tinker >= 0.38 does."""

    def __init__(self) -> None:
        self.client = _TrainingClient()
        self.resumed: list[str] = []

    def create_lora_training_client(self, base_model: str, rank: int, seed: int) -> _Future:
        self.args = (base_model, rank, seed)
        self.client = _TrainingClient()
        return _Future(self.client)

    def create_training_client_from_state_with_optimizer(self, path: str) -> _Future:
        self.resumed.append(path)
        self.client = _TrainingClient(restored=_TrainingClient.saved[path])
        return _Future(self.client)


def test_the_learner_sends_datums_by_loss_name_and_adam_with_our_betas(tmp_path: Path) -> None:
    service = _Service()
    learner = TinkerLearner(
        ModelConfig(model="Qwen/Qwen3-4B-Base", lora_rank=16, seed=5), service=service
    )
    assert service.args == ("Qwen/Qwen3-4B-Base", 16, 5)
    ppo = functools.partial(get_loss("ppo"), clip=0.2)
    metrics = learner.forward_backward([_datum(), _datum(weight=3.0)], ppo)
    ((data, name),) = [args for call, args in service.client.calls if call == "forward_backward"]
    assert name == "ppo" and all(isinstance(d, types.Datum) for d in data)
    # normalised by the rows the batch stands for (1 + 3), as the torch learner does
    assert data[1].loss_fn_inputs["advantages"].tolist()[2] == pytest.approx(2.0 * 3 / 4)
    assert metrics["loss"] == -1.5 and metrics["num_tokens"] == 4.0
    assert metrics["ratio_mean"] == pytest.approx(1.0)  # on-policy: the same log-probs
    learner.optim_step(3e-4)
    ((_, adam),) = [c for c in service.client.calls if c[0] == "optim_step"]
    assert isinstance(adam, types.AdamParams)
    assert (adam.learning_rate, adam.beta1, adam.beta2, adam.eps) == (3e-4, 0.9, 0.95, 1e-8)
    assert learner.version == 1
    learner.save(tmp_path / "ckpt")
    pointer = json.loads((tmp_path / "ckpt" / POINTER_FILE).read_text())
    assert pointer.pop("probe")["logprobs"] == [-2.0] * 9  # the saved weights' fingerprint
    assert pointer == {
        "path": "tinker://run/state-000001",
        "sampler_path": "tinker://run/sampler-000001",
        "version": 1,
        "base_model": "Qwen/Qwen3-4B-Base",
    }
    learner.version = 0
    learner.load(tmp_path / "ckpt")
    assert learner.version == 1
    assert service.resumed == ["tinker://run/state-000001"]
    assert learner.client is service.client  # the new client trains from here on


def test_what_tinker_does_not_offer_is_refused_with_the_reason() -> None:
    learner = TinkerLearner(ModelConfig(model="m", lora_rank=8), service=_Service())
    loss = functools.partial(get_loss("importance_sampling"), clip=0.2)
    with pytest.raises(TinkerUnsupported, match="regularisers need engine=torch"):
        learner.forward_backward([_datum()], loss, Regularizer(entropy_coef=0.1))
    with pytest.raises(TinkerUnsupported, match="clips PPO at 0.2"):
        learner.forward_backward([_datum()], functools.partial(get_loss("ppo"), clip=0.3))
    assert learner.frozen is None  # no frozen copies: population play is refused
    from spiral.errors import UsageError
    from spiral.train.population import copies

    with pytest.raises(UsageError, match="use engine=torch"):
        copies(learner)
    with pytest.raises(TinkerUnsupported, match="LoRA"):
        TinkerLearner(ModelConfig(model="m", lora_rank=0), service=_Service())
    sampler = TinkerSampler(client=None, tokenizer=_Tokenizer())
    constraint = AnswerConstraint(choices=((1,), (2,)))
    with pytest.raises(TinkerUnsupported, match="constrained answers"):
        sampler.sample([[1, 2]], SamplingParams(), [constraint])


@pytest.mark.skipif(
    not os.environ.get(API_KEY_ENV),
    reason=f"live Tinker test: set {API_KEY_ENV} (and optionally TINKER_TEST_MODEL) to run it",
)
def test_live_service_trains_a_step_and_samples() -> None:  # pragma: no cover - needs a key
    model = os.environ.get("TINKER_TEST_MODEL", "Qwen/Qwen3-4B-Instruct-2507")
    learner = registry.learner("tinker", ModelConfig(model=model, lora_rank=8))
    prompt = learner.tokenizer.encode("Say [4].", add_special_tokens=False)
    sampler = learner.sampler()
    done = sampler.sample([prompt], SamplingParams(max_tokens=4, seed=0))[0]
    assert done.tokens and len(done.logprobs) == len(done.tokens)
    n = len(prompt) - 1
    row = Datum(
        input_ids=tuple(prompt) + done.tokens[:-1],
        target_ids=tuple(prompt[1:]) + done.tokens,
        sampler_logprobs=(0.0,) * n + done.logprobs,
        advantages=(0.0,) * n + (1.0,) * len(done.tokens),
        mask=(0.0,) * n + (1.0,) * len(done.tokens),
    )
    metrics = learner.forward_backward([row], functools.partial(get_loss("ppo"), clip=0.2))
    assert abs(metrics["ratio_mean"] - 1.0) < 0.05
    learner.optim_step(1e-5)
    assert learner.version == 1


class _SamplingService:
    def create_sampling_client(self, model_path: str) -> _Future:
        self.model_path = model_path
        return _Future(type("Client", (), {"get_tokenizer": lambda self: _Tokenizer()})())


def test_a_checkpoint_folder_samples_from_its_sampler_weights(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """eval reads a checkpoint's sampler weights, not the state a resume reads (a
    SamplingClient does not take a state path)."""
    from spiral.engines import tinker as engine

    service = _SamplingService()
    monkeypatch.setattr(engine, "service_client", lambda: service)
    pointer = {"path": "tinker://run/state-000004", "version": 4, "base_model": "m"}
    (tmp_path / POINTER_FILE).write_text(json.dumps(pointer))
    with pytest.raises(SpiralError, match="names no sampler weights.*resume the run"):
        engine.tinker_sampler(ModelConfig(model=str(tmp_path)))
    pointer["sampler_path"] = "tinker://run/sampler-000004"
    (tmp_path / POINTER_FILE).write_text(json.dumps(pointer))
    sampler = engine.tinker_sampler(ModelConfig(model=str(tmp_path)), version=4)
    assert service.model_path == "tinker://run/sampler-000004" and sampler.version == 4


def test_prompt_logprobs_align_whether_or_not_the_first_none_is_sent() -> None:
    assert aligned([-1.0, -2.0], 3) == [None, -1.0, -2.0]  # a server that leaves it out
    assert aligned([None, -1.0, -2.0], 3) == [None, -1.0, -2.0]  # the hosted service
    with pytest.raises(SpiralError, match="scored 1 positions of 3 tokens"):
        aligned([-1.0], 3)


def test_seeds_fold_into_31_bits() -> None:
    assert to_tinker_sampling(SamplingParams(seed=2**40 + 5)).seed == 5
    assert to_tinker_sampling(SamplingParams(seed=None)).seed is None


class _OlderServer(_Service):
    """A server without the current resume call (SkyRL's 0.4.0 answers 422)."""

    def create_training_client_from_state_with_optimizer(self, path: str) -> _Future:
        import httpx
        import tinker

        reply = httpx.Response(422, request=httpx.Request("POST", "http://server/load"))
        raise tinker.UnprocessableEntityError("model_id required", response=reply, body=None)


def test_resume_on_a_server_without_the_current_call_loads_into_a_fresh_client(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    service = _OlderServer()
    learner = TinkerLearner(ModelConfig(model="m", lora_rank=8, seed=3), service=service)
    learner.optim_step(1e-3)
    learner.save(tmp_path / "ckpt")
    first = learner.client
    learner.load(tmp_path / "ckpt")
    assert learner.client is service.client and learner.client is not first  # a fresh one
    assert ("load_state_with_optimizer", "tinker://run/state-000001") in learner.client.calls
    assert "loading it into a fresh client" in capsys.readouterr().err


def test_a_gradient_norm_above_the_clip_is_said_once(capsys: pytest.CaptureFixture[str]) -> None:
    learner = TinkerLearner(ModelConfig(model="m", lora_rank=8), service=_Service())
    learner._notice_unclipped({"server/grad_norm": 0.5})
    assert capsys.readouterr().err == ""
    learner._notice_unclipped({"server/grad_norm": 17.0})
    learner._notice_unclipped({"server/grad_norm": 18.0})
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "gradient norm of 17" in err and "max_grad_norm=1.0" in err


def test_a_resume_that_restores_other_weights_is_refused(tmp_path: Path) -> None:
    """A server that lost a checkpoint's files may answer the load with fresh weights: the
    probe saved beside the pointer catches it."""
    service = _OlderServer()
    learner = TinkerLearner(ModelConfig(model="m", lora_rank=8), service=service)
    learner.optim_step(1e-3)
    learner.save(tmp_path / "ckpt")
    pointer = json.loads((tmp_path / "ckpt" / POINTER_FILE).read_text())
    _TrainingClient.saved[pointer["path"]] = 0  # the server kept nothing of it
    with pytest.raises(SpiralError, match="restored weights that differ.*earlier checkpoint"):
        learner.load(tmp_path / "ckpt")


def test_checks_before_the_service_is_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spiral.engines import tinker_checks as checks

    listed = types.GetServerCapabilitiesResponse(
        supported_models=[types.SupportedModel(model_name="/models/local/tiny")]
    )
    rest = type("Rest", (), {"get_server_capabilities": lambda self: _Future(listed)})()
    checks.offered("/models/local/tiny", rest)
    with pytest.raises(
        SpiralError, match="does not offer /models/local/other; it offers /models/local/tiny"
    ):
        checks.offered("/models/local/other", rest)
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    assert checks.model_id(str(deep)) == str(deep.resolve())
    assert checks.model_id("Qwen/Qwen3-4B") == "Qwen/Qwen3-4B"  # not a folder: a hub id
    with pytest.raises(SpiralError, match="has 1 slashes.*deeper path"):
        checks.model_id(tmp_path.anchor)  # the root folder: one slash
    with socket.socket() as s:  # a port nothing listens on once this closes
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv(checks.BASE_URL_ENV, f"http://127.0.0.1:{port}")
    with pytest.raises(
        SpiralError, match=f"no Tinker-API server answers at http://127.0.0.1:{port}"
    ):
        checks.reachable()
    gap = AssertionError("asample promises always carry sample_sequence_ids")
    assert "tinker_bridge.py" in str(checks.without_sequence_ids(gap))
    assert checks.without_sequence_ids(AssertionError("other")) is None


def test_a_tinker_checkpoint_is_not_loaded_as_local_weights(tmp_path: Path) -> None:
    """export and warm starts read weights here; a Tinker checkpoint holds a pointer."""
    from spiral.engines.torch.checkpoint_io import load_weights

    (tmp_path / POINTER_FILE).write_text("{}")
    with pytest.raises(ValueError, match="held by the Tinker service.*engine=tinker"):
        load_weights(object(), tmp_path)
