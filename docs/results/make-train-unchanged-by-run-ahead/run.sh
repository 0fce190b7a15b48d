#!/bin/bash
# make train's first 12 steps before (99abab7, through a worktree at /tmp/before) and
# after the run-ahead decode, span attention and micro-batch sizing, side by side, one
# core and one thread each, on a quiet machine:
#   git worktree add /tmp/before 99abab7 && bash run.sh OUT [BEFORE_CORE AFTER_CORE]
# (run.sh OUT 1 0 swaps the cores)
OUT=${1:-/tmp/sbs}
BEFORE_CORE=${2:-0}
AFTER_CORE=${3:-1}
taskset -c "$BEFORE_CORE" env OMP_NUM_THREADS=1 .venv/bin/python docs/results/kuhn-precision/run_commit.py \
  train preset=embedded-kuhn max_steps=12 eval_every=0 log_path=$OUT/before > $OUT/before.log 2>&1 &
taskset -c "$AFTER_CORE" env OMP_NUM_THREADS=1 .venv/bin/spiral \
  train preset=embedded-kuhn max_steps=12 eval_every=0 log_path=$OUT/after > $OUT/after.log 2>&1 &
wait
python docs/results/refactor-bit-identity/compare.py $OUT/before/metrics.jsonl $OUT/after/metrics.jsonl
