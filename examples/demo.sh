#!/usr/bin/env bash
# The main job on the embedded default: build coroner, start coronerd on a fresh data dir (SQLite
# inside it), run a 4-rank CPU training job under one coroner-agent per rank in which rank 2 fails,
# and print the report coronerd wrote. Needs only cargo and python3.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --release --bins --quiet
bin=${CARGO_TARGET_DIR:-target}/release
data=$(mktemp -d -t coroner-demo.XXXXXX)
grpc=127.0.0.1:${CORONER_DEMO_GRPC_PORT:-17070}
http=127.0.0.1:${CORONER_DEMO_HTTP_PORT:-17071}
job=demo-$(date +%s)
export CORONER_SERVER=http://$grpc

"$bin/coronerd" --data-dir "$data" --grpc-addr "$grpc" --http-addr "$http" 2>"$data/coronerd.log" &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 100); do "$bin/coroner" jobs >/dev/null 2>&1 && break; sleep 0.1; done
if ! kill -0 "$server" 2>/dev/null; then
  echo "coronerd did not start:" >&2; cat "$data/coronerd.log" >&2
  echo "(another coronerd on $grpc? set CORONER_DEMO_GRPC_PORT and CORONER_DEMO_HTTP_PORT)" >&2
  exit 1
fi

echo "== running a 4-rank job ($job); rank 2 will produce a NaN loss at step 3" >&2
pids=()
for rank in 0 1 2 3; do
  RANK=$rank WORLD_SIZE=4 MASTER_PORT=${CORONER_DEMO_JOB_PORT:-29800} STEPS=6 STEP_SECONDS=0.2 \
  COLLECTIVE_TIMEOUT=5 FAULT=${FAULT:-nan} FAULT_RANK=${FAULT_RANK:-2} FAULT_STEP=3 \
    "$bin/coroner-agent" run --job "$job" --quiet --spool-dir "$data/spool" -- python3 examples/ring_job.py \
    >"$data/rank$rank.out" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || true; done

echo "== coroner report $job   (web page: http://$http/jobs/$job)" >&2
# report exits 1 for a failed job (see `coroner --help`); the demo's job is meant to fail.
"$bin/coroner" report "$job" || [ $? -le 1 ]
