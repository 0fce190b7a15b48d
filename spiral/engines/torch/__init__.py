"""The local torch engine: transformers + PEFT models on CPU or CUDA.

`sampler.py` samples (batched KV-cache decode with answer constraints, identical prompts
prefilled once and decoded as a tree; its rows and chunks in `sampler_rows.py`, its draws
in `draws.py`) and `learner.py` learns (forward/backward on weighted rows with shared
prompt prefixes, AdamW, checkpoints as HF folders; its forwards in `log_probs.py`).
`loading.py` loads a model (`fit.py` checks that config, weights and tokenizer agree).

What serves them, each exact or checked against the plain path (numbers in
docs/results.md, "Engine speed on CPU" and "Precision and memory"):
- sampling: `prefill.py` (shared prefixes), `kv_cache.py` (a prefix cache across calls),
  `decode.py` (our own packed decode step), `graphs.py` (that step replayed as CUDA
  graphs), `runahead.py` (free text decoded without reading each token back),
  `running.py` (a batch that rows join and leave, for servers), `merged.py` (the LoRA
  adapter merged in), `constrained.py` (answer masks), `kept_answers.py` (frozen members'
  answers without a forward), `scoring.py`;
- learning: `batching.py` (micro-batches), `memory.py` (their size on a GPU), `head.py`
  (the output head by chunks), `magnet_memo.py` (the KL magnet's kept distributions);
- both: `precision.py` (what is trained stays fp32), `attention.py`, `cpu.py` (what this
  CPU does with half precision);
- the weight storage the learner keeps: `frozen.py` over `snapshots.py` (frozen
  adapters: pool members, the KL magnet) and `full_members.py` (full-weight members on
  disk), and `checkpoint_io.py` (optimizer state in safetensors);
- `parallel/`: the learner over torchrun ranks; `measure.py`: `spiral bench what=engine`.

Every step's metrics carry the engine's counters (`perf/prefill_saved_fraction`,
`perf/prefix_cache_hit_rate`, ...) and the step's peak memory (`perf/peak_rss_mb`).
"""
