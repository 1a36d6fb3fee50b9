#!/usr/bin/env bash
# Issue 22's acceptance runs: 16,384 simulated agents (one HTTP/2 connection each) against one
# coronerd, with the start-up burst, steady and failure profiles (docs/LOAD.md), then the
# ingest-vs-raw-tantivy figure (docs/PERFORMANCE.md). Run from the repository root with release
# binaries already built (`cargo build --release -p coronerd -p coroner-bench`), or set BIN.
#
#   services/coroner-bench/load16k.sh            # all three profiles at 16,384 agents
#   AGENTS=4096 services/coroner-bench/load16k.sh
#   OUT=/tmp/load16k services/coroner-bench/load16k.sh   # where the JSON figures go
#
# Needs: an open-file hard limit of at least AGENTS + 256 (both programs raise their soft limit
# to it; check `ulimit -Hn`, raise it as root with `ulimit -Hn 65536` or LimitNOFILE=), and
# enough loopback ephemeral ports (`sysctl net.ipv4.ip_local_port_range`: 28,000 by default).
set -euo pipefail

AGENTS=${AGENTS:-16384}
BIN=${BIN:-target/release}
OUT=${OUT:-$(mktemp -d -t load16k.XXXXXX)}
STEADY_LINES=${STEADY_LINES:-60}
mkdir -p "$OUT"

hard=$(ulimit -Hn)
if [ "$hard" != unlimited ] && [ "$hard" -lt $((AGENTS + 256)) ]; then
    echo "load16k: the open-file hard limit is $hard; $AGENTS agents need $((AGENTS + 256)) (raise ulimit -Hn)" >&2
    exit 2
fi
for b in coroner-bench coronerd; do
    [ -x "$BIN/$b" ] || { echo "load16k: $BIN/$b is not built (cargo build --release -p coronerd -p coroner-bench)" >&2; exit 2; }
done
echo "load16k: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB, load $(cut -d' ' -f1-3 /proc/loadavg); figures in $OUT"

status=0
for profile in burst steady failure; do
    extra=()
    [ "$profile" = steady ] && extra=(--lines "$STEADY_LINES")
    echo "== $profile: $AGENTS agents"
    if ! CORONERD="$BIN/coronerd" "$BIN/coroner-bench" load --agents "$AGENTS" --profile "$profile" "${extra[@]}" \
        --timeout 20m --json >"$OUT/$profile.json" 2>"$OUT/$profile.err"; then
        status=1
        echo "load16k: the $profile run FAILED (see $OUT/$profile.err)"
    fi
    python3 - "$OUT/$profile.json" <<'PY' || cat "$OUT/$profile.json"
import json, sys
f = json.load(open(sys.argv[1]))
print(f"   lost {f['lost']} dup {f['duplicates']} | connected in {f['connect_s']} s, {f['idle_kb_per_agent']} KiB/idle agent, "
      f"streams {f['server_streams_connected']} -> {f['server_streams_after']} | peak RSS {f['server_rss_peak_mb']} MB "
      f"(anon {f['server_anon_peak_mb']}) | ack p50 {f['ack_p50_ms']} p99 {f['ack_p99_ms']} ms | absorbed {f['absorbed_s']} s | "
      f"{f['sustained_lines_per_s']} lines/s | fresh p50 {f['fresh_p50_ms']} p99 {f['fresh_p99_ms']} ms")
for p in f["problems"]:
    print("   PROBLEM", p)
PY
done

echo "== ingest vs raw tantivy (coroner-bench --quick --only ingest)"
"$BIN/coroner-bench" --quick --only ingest | tee "$OUT/ingest.txt"
exit $status
