#!/bin/bash
# usage: run_until.sh REPO LOGDIR STEP : `make train`'s recipe with a checkpoint every 10 steps,
# run from REPO's sources until metrics hold STEP, then stopped by SIGTERM (a clean stop).
cd "$1"; rm -rf "$2"
PYTHONPATH="$1" .venv/bin/python -m spiral.cli train preset=embedded-kuhn save_every=10 log_path="$2" > "$2.log" 2>&1 &
pid=$!
while sleep 5; do
  if [ -f "$2/metrics.jsonl" ] && grep -q "\"step\": $3," "$2/metrics.jsonl"; then kill -TERM $pid; break; fi
  if ! kill -0 $pid 2>/dev/null; then break; fi
done
wait $pid
echo "done $2"
