#!/usr/bin/env bash
# coroner on real GPUs: starts coronerd, runs 2-rank NCCL jobs under coroner-agent (one agent per
# rank, and one agent around torchrun), one injected fault each, and checks every report.
# Usage (on the GPU host, from the repository root): tests/gpu/run.sh [BIN_DIR]
# BIN_DIR holds coronerd, coroner-agent and coroner (default target/release). Results go to
# $OUT/results.md (OUT defaults to ./gpu-out) and are printed.
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=$(realpath "${1:-target/release}")
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
MODES=${MODES:-"agents torchrun"}
FAULTS=${FAULTS:-"ok hang oom kill segv mismatch nan"}
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
export NCCL_NVLS_ENABLE=0
export TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC=${TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC:-5000}

for b in coronerd coroner-agent coroner; do
  "$BIN/$b" --version >/dev/null || { echo "cannot run $BIN/$b" >&2; exit 2; }
done
data=$(mktemp -d)
grpc=127.0.0.1:17070
"$BIN/coronerd" --data-dir "$data" --grpc-addr $grpc --http-addr 127.0.0.1:17071 2>"$OUT/coronerd.log" &
server=$!
trap 'kill $server 2>/dev/null' EXIT
export CORONER_SERVER=http://$grpc
for _ in $(seq 100); do "$BIN/coroner" jobs >/dev/null 2>&1 && break; sleep 0.1; done

port=29500
results="$OUT/results.jsonl"
: > "$results"
for mode in $MODES; do
  for fault in $FAULTS; do
    port=$((port + 7))
    job="gpu-$mode-$fault"
    extra=()
    [ "$fault" = mismatch ] && extra=(TORCH_DISTRIBUTED_DEBUG=DETAIL)
    start=$(date +%s.%N)
    # Watch the report while the job runs: when did the culprit first appear?
    python3 tests/gpu/watch.py "$BIN/coroner" "$job" > "$OUT/$job.watch" 2>/dev/null &
    watcher=$!
    if [ "$mode" = agents ]; then
      pids=()
      for r in 0 1; do
        env "${extra[@]}" FAULT=$fault FAULT_RANK=1 RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 \
          MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
          timeout -s TERM ${JOB_TIMEOUT:-150} "$BIN/coroner-agent" run --job "$job" --quiet -- python3 tests/gpu/train.py \
          >"$OUT/$job.rank$r.log" 2>&1 &
        pids+=($!)
      done
      for p in "${pids[@]}"; do wait "$p"; done
    else
      env "${extra[@]}" FAULT=$fault FAULT_RANK=1 \
        timeout -s TERM ${JOB_TIMEOUT:-150} "$BIN/coroner-agent" run --job "$job" --quiet -- \
        torchrun --nproc-per-node 2 --master-port $port --tee 3 tests/gpu/train.py >"$OUT/$job.log" 2>&1
    fi
    end=$(date +%s.%N)
    sleep 1
    kill $watcher 2>/dev/null; wait $watcher 2>/dev/null
    "$BIN/coroner" report "$job" --json > "$OUT/$job.report.json" 2>>"$OUT/errors.log"
    python3 tests/gpu/check.py "$mode" "$fault" "$OUT/$job.report.json" "$OUT/$job.watch" "$start" "$end" >> "$results"
    tail -n1 "$results"
  done
done
python3 tests/gpu/check.py --table "$results" > "$OUT/results.md"
cat "$OUT/results.md"
