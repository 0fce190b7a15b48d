"""vLLM as a sampler (the vllm extra, or vLLM's CPU build): `engine.py` runs one engine per
base model and samples a torch learner's live LoRA adapter, hot-swapped each step;
`processor.py` is its logits processor for constrained answers."""
