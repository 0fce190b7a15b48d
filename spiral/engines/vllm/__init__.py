"""vLLM as a sampler (the vllm extra, or vLLM's CPU build): `engine.py` runs one engine per
base model, `sampler.py` samples and scores through it, `learner.py` wraps a torch
learner whose live LoRA adapter it samples (hot-swapped each step); `processor.py` is the
logits processor for constrained answers and `settings.py` the engine's share of a GPU.
vLLM's CPU build pins an older transformers than the rest of Spiral, hence its own
virtual environment (`make setup-vllm`, `make test-vllm`). docs/gpus.md is the guide.
"""
