#!/usr/bin/env bash
# The GPU checks in one script, for a CUDA machine with torch, transformers, peft and
# accelerate installed (no network or vLLM needed):
#
#   bash benchmarks/gpu-checks.sh [OUTPUT_DIR] [PART ...]
#
# OUTPUT_DIR is where the results go, gpu-checks-out when it is left out (a first
# argument that names a part is a part).
#
# Pure-Python wheels the machine lacks (chz, openskill) are installed from .gpu-wheels/
# when that folder exists: `make gpu-wheels` fills it on a machine with network.
#
# The parts run in the order of what they decide (all of them unless PARTs are named),
# each under its own time limit, so a run stopped early has already written the numbers
# that matter most:
#
#   decode   bench-decode-<shape>-rows<N>.json: `spiral bench what=engine` on random-
#            initialised Qwen3-0.6B (16 and 128 rows) and Qwen3-4B (16 and 64 rows) shapes
#            (benchmarks/model-shapes/): decode tokens/s and share of the bandwidth bound,
#            the eager forward, the tree decode and per-request `generate` beside it;
#   learn    bench-learn-qwen3-4b-rank{64,0}.json: the learner at a realistic step (256
#            rows of 512 tokens) for LoRA and full fine-tuning: tokens/s, share of the
#            bf16 matmul peak, the micro-batch size it chose, peak GPU memory;
#   tests    pytest-gpu.txt: the `gpu` marker's tests (graphs vs eager, run-ahead vs the
#            tree, full fine-tuning's updates, micro-batch sizing, padded rows' gradients);
#   profile  graph-step-profile-qwen3-{0.6b,4b}.json: the replayed decode step against its
#            kernels by kind and the bandwidth bound (benchmarks/graph_step_profile.py);
#   train    train-bf16.{console.txt,metrics.jsonl}: a short `spiral train` in bf16 on the
#            Qwen3-0.6B shape;
#   pool     pool-decode-qwen3-0.6b.json: a LoRA pool, one mixed call vs a call per member;
#   pack     pack-ab-qwen3-0.6b.json: packed vs padded learner rows (time, gradients).
#
# Record the numbers in docs/results.md with the machine named.
set -uo pipefail
KNOWN="decode learn tests profile train pool pack"
DIR=gpu-checks-out
if [ $# -gt 0 ] && [[ " $KNOWN " != *" $1 "* ]]; then
  DIR=$1
  shift
fi
PARTS=${*:-$KNOWN}
for part in $PARTS; do
  if [[ " $KNOWN " != *" $part "* ]]; then
    echo "unknown part '$part': use one of $KNOWN"
    exit 2
  fi
done
mkdir -p "$DIR"
PY=${PY:-python3}
if compgen -G ".gpu-wheels/*.whl" > /dev/null; then
  $PY -m pip install -q --no-index --no-deps .gpu-wheels/*.whl 2>&1 | tail -3
fi
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
SECONDS=0
nvidia-smi > "$DIR/nvidia-smi.txt" 2>&1
$PY -c "import torch, transformers, peft; print(torch.__version__, transformers.__version__, peft.__version__, torch.cuda.get_device_name(0))" | tee -a "$DIR/nvidia-smi.txt"

shape() {  # a random-initialised model of a real shape in /tmp/<shape>
  [ -d "/tmp/$1" ] || $PY -c "from spiral.testing import make_shaped_model as m; m('benchmarks/model-shapes/$1.json', '/tmp/$1', device='cuda')" 2>&1 | grep -v "it/s]" | tail -3
}

bench() {  # bench NAME LIMIT_S key=value ...: one engine benchmark, time-limited
  local name=$1 limit=$2
  shift 2
  timeout "$limit" $PY -m spiral.cli bench what=engine dtypes=bfloat16 "$@" \
    out="$DIR/$name.json" 2>&1 | grep -v "it/s]" | tail -12
  echo "[${SECONDS}s] $name done"
}

part_decode() {
  shape qwen3-0.6b
  bench bench-decode-qwen3-0.6b-rows16 75 model=/tmp/qwen3-0.6b batch=16 prompt_tokens=256 new_tokens=64
  bench bench-decode-qwen3-0.6b-rows128 80 model=/tmp/qwen3-0.6b batch=128 prompt_tokens=256 new_tokens=64
  shape qwen3-4b
  bench bench-decode-qwen3-4b-rows16 80 model=/tmp/qwen3-4b batch=16 prompt_tokens=256 new_tokens=64
  bench bench-decode-qwen3-4b-rows64 80 model=/tmp/qwen3-4b batch=64 prompt_tokens=256 new_tokens=64
}

part_learn() {
  shape qwen3-4b
  bench bench-learn-qwen3-4b-rank64 100 model=/tmp/qwen3-4b batch=256 prompt_tokens=496 new_tokens=16 lora_rank=64
  bench bench-learn-qwen3-4b-rank0 110 model=/tmp/qwen3-4b batch=256 prompt_tokens=496 new_tokens=16 lora_rank=0
}

part_tests() {
  timeout 90 $PY -m pytest -q -p no:cacheprovider -m gpu tests/engines/test_gpu.py 2>&1 | tail -60 > "$DIR/pytest-gpu.txt"
  tail -3 "$DIR/pytest-gpu.txt"; echo "[${SECONDS}s] pytest done"
}

part_profile() {
  local s
  for s in "qwen3-0.6b 16 128" "qwen3-4b 16 64"; do
    set -- $s
    shape "$1"
    timeout 60 $PY benchmarks/graph_step_profile.py "/tmp/$1" "$2" "$3" \
      --out "$DIR/graph-step-profile-$1.json" 2>&1 | grep -v "it/s]" | tail -4
    echo "[${SECONDS}s] profile $1 done (status ${PIPESTATUS[0]})"
  done
}

part_train() {
  shape qwen3-0.6b
  timeout 60 $PY -m spiral.cli train model_name=/tmp/qwen3-0.6b env_ids=KuhnPokerSingle-v0 \
    answer_format=constrained template=chat device=cuda dtype=bfloat16 batch_size=64 \
    max_tokens=8 max_steps=5 eval_every=0 lora_rank=32 log_path=/tmp/train-bf16 \
    > "$DIR/train-bf16.console.txt" 2>&1
  grep -v "it/s]" "$DIR/train-bf16.console.txt" | tail -8; echo "[${SECONDS}s] train done"
  cp /tmp/train-bf16/metrics.jsonl "$DIR/train-bf16.metrics.jsonl" 2>/dev/null || true
}

part_pool() {
  shape qwen3-0.6b
  timeout 45 $PY benchmarks/pool_decode.py /tmp/qwen3-0.6b "$DIR/pool-decode-qwen3-0.6b.json" 2>&1 | tail -16
  echo "[${SECONDS}s] pool_decode done"
}

part_pack() {
  shape qwen3-0.6b
  timeout 45 $PY benchmarks/pack_ab.py /tmp/qwen3-0.6b "$DIR/pack-ab-qwen3-0.6b.json" 2>&1 | tail -14
  echo "[${SECONDS}s] pack_ab done"
}

for part in $PARTS; do
  "part_$part"
done
