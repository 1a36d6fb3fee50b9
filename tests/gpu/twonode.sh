#!/usr/bin/env bash
# Real torchrun, 2 nodes on one host (docs/LAUNCHERS.md): two `torchrun --nnodes 2
# --nproc-per-node 2 --rdzv-backend c10d` launchers, no --node-rank (the rendezvous assigns it in
# arrival order), gloo on CPU, each launcher under its own per-node coroner-agent. Global rank 3
# raises at step 2. Run 1: --max-restarts 0. Run 2: --max-restarts 1, rank 3 fails in attempt 0
# only. Nothing listens for the agents here: each keeps its lines in its spool, which this script
# copies to $OUT; `coroner-agent ship` then delivers them to a coronerd elsewhere.
# Usage (on the GPU host): tests/gpu/twonode.sh BIN_DIR SCRIPTS_DIR
set -uo pipefail
BIN=$(realpath "$1"); S=$(realpath "$2")
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
work=$(mktemp -d)
cat > "$work/train.py" <<'PY'
import datetime, os, time, torch, torch.distributed as dist
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=20))
r, attempt = dist.get_rank(), int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
for step in range(6):
    t = torch.ones(4) * (r + 1)
    dist.all_reduce(t)
    print(f"[rank{r}] train: step {step} loss {float(t[0]) / 10:.3f}", flush=True)
    if r == 3 and step == 2 and str(attempt) in os.environ.get("FAULT_ATTEMPTS", "0"):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (32x20 and 16x64)")
    time.sleep(0.2)
dist.destroy_process_group()
PY
run() {  # job, max_restarts, fault attempts, port
  local job=$1 restarts=$2 faults=$3 port=$4
  for host in node-a node-b; do
    FAULT_ATTEMPTS=$faults LOGLEVEL=INFO timeout 150 "$BIN/coroner-agent" run --job "$job" --host $host --server http://127.0.0.1:9 \
      --spool-dir "$work/spool" --linger 0s -- \
      torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$port --rdzv-id "$job" \
      --max-restarts $restarts --tee 3 "$work/train.py" >"$OUT/$job.$host.out" 2>"$OUT/$job.$host.err" &
    sleep 1
  done
  wait
  echo "$job: agents done"
}
python3 -c 'import torch; print("torch", torch.__version__)'
run twonode-real 0 0 29411
run twonode-restart 1 0 29412
tar -C "$work" -czf "$OUT/spools.tgz" spool
ls -la "$OUT"; tail -n 5 "$OUT"/*.err
