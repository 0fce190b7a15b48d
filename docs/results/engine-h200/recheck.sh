#!/usr/bin/env bash
# The rerun after the first H200 run's fixes, writing to /tmp/gc: the LoRA learner on the
# Qwen3-4B shape at 256 x 512 tokens, the gpu tests, the packing A/B.
set -uo pipefail
G=/tmp/gc; mkdir -p $G
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps .gpu-wheels/*.whl 2>&1 | tail -2
SECONDS=0
python3 -c "from spiral.testing import make_shaped_model as m; m('benchmarks/model-shapes/qwen3-4b.json', '/tmp/qwen3-4b', device='cuda')" > /dev/null 2>&1
echo "[${SECONDS}s] shape"
timeout 105 python3 -m spiral.cli bench what=engine dtypes=bfloat16 model=/tmp/qwen3-4b batch=256 \
  prompt_tokens=496 new_tokens=16 lora_rank=64 out=$G/bench-learn-qwen3-4b-rank64.json 2>&1 \
  | grep -v "it/s]" | tee $G/bench-learn-rank64.console.txt | tail -14
echo "[${SECONDS}s] learn rank64 done"
timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu tests/engines/test_gpu.py 2>&1 | tail -80 > $G/pytest-gpu.txt
tail -4 $G/pytest-gpu.txt; echo "[${SECONDS}s] pytest done"
python3 -c "from spiral.testing import make_shaped_model as m; m('benchmarks/model-shapes/qwen3-0.6b.json', '/tmp/qwen3-0.6b', device='cuda')" > /dev/null 2>&1
timeout 30 python3 benchmarks/pack_ab.py /tmp/qwen3-0.6b $G/pack-ab-qwen3-0.6b.json 2>&1 | tail -14
echo "[${SECONDS}s] pack_ab done"
