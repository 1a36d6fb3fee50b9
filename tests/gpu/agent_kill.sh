#!/usr/bin/env bash
# The agent's death is not the job's, on a real GPU: a CUDA training job of 60 steps runs under
# coroner-agent with a live coronerd; at step 12 the agent (the process the launcher started) or
# its shipper is SIGKILLed. Checks that the job finishes, that every step line reached the job's
# own output, and how many reached coronerd. Three runs: the agent around one rank, its shipper
# around one rank, the agent around torchrun (the launcher and its worker live on).
# Usage (on the GPU host, from the repository root): tests/gpu/agent_kill.sh [BIN_DIR]
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=$(realpath "${1:-target/release}")
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
data=$(mktemp -d)
grpc=127.0.0.1:17170
"$BIN/coronerd" --data-dir "$data" --grpc-addr $grpc --http-addr 127.0.0.1:17171 2>"$OUT/kill-coronerd.log" &
server=$!
trap 'kill $server 2>/dev/null' EXIT
export CORONER_SERVER=http://$grpc
for _ in $(seq 100); do "$BIN/coroner" jobs >/dev/null 2>&1 && break; sleep 0.1; done

cat > "$OUT/steps.py" <<'EOF'
import os, sys, time, torch
dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
for step in range(60):
    x = torch.randn(256, 1024, device=dev)
    loss = model(x).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    print(f"step {step} loss {loss.item():.6f}", flush=True)
    time.sleep(0.1)
open(sys.argv[1], "w").write("done\n")
print("training finished", flush=True)
EOF

run() {  # name, what to kill (agent|shipper), command...
  local name=$1 victim=$2; shift 2
  local marker="$OUT/$name.done"; rm -f "$marker"
  "$BIN/coroner-agent" run --job "$name" --quiet -- "$@" "$marker" >"$OUT/$name.out" 2>"$OUT/$name.err" &
  local agent=$!
  for _ in $(seq 600); do grep -q "^step 12 \|\]:step 12 \|: step 12 " "$OUT/$name.out" 2>/dev/null && break; sleep 0.05; done
  local target=$agent
  [ "$victim" = shipper ] && target=$(pgrep -P $agent -x coroner-shipper)
  kill -9 $target
  wait $agent; local rc=$?
  for _ in $(seq 600); do [ -f "$marker" ] && break; sleep 0.1; done
  sleep 3
  local printed indexed
  printed=$(grep -c "step [0-9]* loss" "$OUT/$name.out")
  indexed=$("$BIN/coroner" count "$name" '"loss"' --json 2>/dev/null | python3 -c 'import json,sys; print(sum(r["count"] for r in json.load(sys.stdin)))' 2>/dev/null)
  echo "| $name | killed $victim at step 12 | $( [ -f "$marker" ] && echo finished || echo "DID NOT FINISH") | agent exit $rc | $printed of 60 step lines printed | ${indexed:-?} of 60 in coronerd |"
}

echo "| run | fault | job | launcher saw | output | shipped |"
echo "| --- | --- | --- | --- | --- | --- |"
run gpu-kill-agent agent python3 "$OUT/steps.py"
run gpu-kill-shipper shipper python3 "$OUT/steps.py"
run gpu-kill-torchrun agent torchrun --nproc-per-node 1 --master-port 29650 --tee 3 "$OUT/steps.py"
for j in gpu-kill-agent gpu-kill-torchrun; do
  "$BIN/coroner" report "$j" --json 2>/dev/null | python3 -c 'import json,sys; r=json.load(sys.stdin); print(sys.argv[1], r["verdict"], [n for n in r.get("notes", []) if "supervisor" in n or "end" in n][:2])' "$j"
done
