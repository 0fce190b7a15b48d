#!/usr/bin/env bash
# The GPU checks in one script, for a CUDA machine with torch, transformers, peft and
# accelerate installed (no network or vLLM needed):
#
#   bash benchmarks/gpu-checks.sh [OUTPUT_DIR]    # default: $OUT, else gpu-checks-out
#
# Pure-Python wheels the machine lacks (chz, openskill) are installed from .gpu-wheels/
# when that folder exists: `make gpu-wheels` fills it on a machine with network.
#
# Writes into OUTPUT_DIR: nvidia-smi.txt, pytest-gpu.txt (the `gpu` marker's tests),
# bench-engine-<shape>.json (the engine benchmark on random-initialised Qwen3-0.6B and
# Qwen3-4B shapes, benchmarks/model-shapes/), train-bf16.{console.txt,metrics.jsonl}
# (a short `spiral train` in bf16 on the Qwen3-0.6B shape),
# bench-decode-rows{64,128}-qwen3-0.6b.json, bench-learn-rank{32,0}-qwen3-0.6b.json (LoRA
# and full fine-tuning), pool-decode-qwen3-0.6b.json (a LoRA pool: mixed vs per-member
# calls), pack-ab-qwen3-0.6b.json (packed vs padded learner rows). Record
# the numbers in
# docs/results.md with the machine named.
set -uo pipefail
OUT=${1:-${OUT:-gpu-checks-out}}
mkdir -p "$OUT"
PY=${PY:-python3}
if compgen -G ".gpu-wheels/*.whl" > /dev/null; then
  $PY -m pip install -q --no-index --no-deps .gpu-wheels/*.whl 2>&1 | tail -3
fi
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
SECONDS=0
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
$PY -c "import torch, transformers, peft; print(torch.__version__, transformers.__version__, peft.__version__, torch.cuda.get_device_name(0))" | tee -a "$OUT/nvidia-smi.txt"

$PY -m pytest -q -p no:cacheprovider -m gpu tests/engines/test_gpu.py 2>&1 | tail -40 > "$OUT/pytest-gpu.txt"
tail -3 "$OUT/pytest-gpu.txt"; echo "[${SECONDS}s] pytest done"

for shape in qwen3-0.6b qwen3-4b; do
  $PY -c "from spiral.testing import make_shaped_model as m; m('benchmarks/model-shapes/$shape.json', '/tmp/$shape', device='cuda')" \
    && $PY -m spiral.cli bench what=engine model=/tmp/$shape dtypes=bfloat16 batch=16 \
         prompt_tokens=256 new_tokens=64 out="$OUT/bench-engine-$shape.json" 2>&1 | grep -v "it/s]" | tail -25
  echo "[${SECONDS}s] bench $shape done"
done

$PY -m spiral.cli train model_name=/tmp/qwen3-0.6b env_ids=KuhnPokerSingle-v0 \
  answer_format=constrained template=chat device=cuda dtype=bfloat16 batch_size=64 \
  max_tokens=8 max_steps=5 eval_every=0 lora_rank=32 log_path=/tmp/train-bf16 \
  > "$OUT/train-bf16.console.txt" 2>&1
grep -v "it/s]" "$OUT/train-bf16.console.txt" | tail -8; echo "[${SECONDS}s] train done"
cp /tmp/train-bf16/metrics.jsonl "$OUT/train-bf16.metrics.jsonl" 2>/dev/null || true

# Decode at 64 and 128 rows on the 0.6B shape (the sampler replays CUDA graphs; the
# model's own forward, eager, is the baseline inside the same bench).
for rows in 64 128; do
  timeout 150 $PY -m spiral.cli bench what=engine model=/tmp/qwen3-0.6b dtypes=bfloat16 \
    batch=$rows prompt_tokens=256 new_tokens=64 \
    out="$OUT/bench-decode-rows$rows-qwen3-0.6b.json" 2>&1 | grep -v "it/s]" | tail -12
  echo "[${SECONDS}s] bench rows=$rows done"
done

# Full fine-tuning (fp32 master weights, bf16 autocast) beside LoRA on the 0.6B shape:
# learner tokens/s, share of the bf16 matmul peak, peak GPU memory; decode at 64 rows.
# Each part has its own time limit, so a slow one cannot take the rest of the call.
for rank in 32 0; do
  timeout 150 $PY -m spiral.cli bench what=engine model=/tmp/qwen3-0.6b dtypes=bfloat16 \
    batch=64 prompt_tokens=448 new_tokens=16 lora_rank=$rank \
    out="$OUT/bench-learn-rank$rank-qwen3-0.6b.json" 2>&1 | grep -v "it/s]" | tail -12
  echo "[${SECONDS}s] bench lora_rank=$rank done"
done

# A pool of four LoRA members sampled in one mixed call (PEFT, eager) vs one call per
# member (merged, packed, CUDA graphs): which path population play should take.
timeout 120 $PY benchmarks/pool_decode.py /tmp/qwen3-0.6b "$OUT/pool-decode-qwen3-0.6b.json" 2>&1 | tail -16
echo "[${SECONDS}s] pool_decode done"

# The learner's rows packed into one sequence vs left-padded (0.6B shape, bf16 compute).
timeout 120 $PY benchmarks/pack_ab.py /tmp/qwen3-0.6b "$OUT/pack-ab-qwen3-0.6b.json" 2>&1 | tail -10
echo "[${SECONDS}s] pack_ab done"
