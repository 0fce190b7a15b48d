"""The local torch engine: transformers + PEFT models on CPU or CUDA.

`sampler.py` samples (batched KV-cache decode with answer constraints, identical prompts
prefilled once, a prefix cache across calls) and `learner.py` learns (forward/backward
on weighted rows with shared prompt prefixes, AdamW, checkpoints as HF folders). The
rest serves them: `decode.py` (our own packed decode step), `attention.py`,
`kv_cache.py`, `prefill.py`, `merged.py` (sampling with the LoRA adapter merged in),
`precision.py` (LoRA in bf16), `constrained.py` (answer masks), and the weight storage
the learner keeps: `snapshots.py` (frozen adapters: pool members, the KL magnet),
`full_members.py` (full-weight pool members on disk), `averaging.py` (the moving average),
`checkpoint_io.py` (optimizer state in safetensors).
"""
