#!/bin/bash
# usage: run_until.sh REPO LOGDIR STEP : the embedded-kuhn preset until metrics hold STEP, stopped by SIGTERM
cd "$1"; rm -rf "$2"
.venv/bin/spiral train preset=embedded-kuhn log_path="$2" > "$2.log" 2>&1 &
pid=$!
while sleep 5; do
  if [ -f "$2/metrics.jsonl" ] && grep -q "\"step\": $3," "$2/metrics.jsonl"; then kill -TERM $pid; break; fi
  if ! kill -0 $pid 2>/dev/null; then break; fi
done
wait $pid
echo "done $2"
