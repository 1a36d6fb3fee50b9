#!/usr/bin/env bash
# Builds and runs every cargo-fuzz target for a bounded time (docs/FUZZING.md).
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET]      default 60
#
# Environment: TARGETS="lines bundle" runs only those; SANITIZER=address builds with ASan
# (default none: the product crates have no unsafe code, and ASan halves the executions per
# second); JOBS=N runs N fuzzing processes per target (default 1).
# Needs cargo-fuzz (`cargo install cargo-fuzz --locked`). On a stable toolchain the nightly flags
# cargo-fuzz uses are allowed through RUSTC_BOOTSTRAP=1.
#
# Seeds are built from tests/data into fuzz/seeds/<target>; what the fuzzer finds goes to
# fuzz/corpus/<target> (kept between runs) and crashes to fuzz/artifacts/<target>. All three are
# ignored by git. Exits 1 when any target crashed, timed out or ran out of memory.
set -euo pipefail

secs="${1:-60}"
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
export RUSTC_BOOTSTRAP=1
sanitizer="${SANITIZER:-none}"
jobs="${JOBS:-1}"
targets="${TARGETS:-lines bundle snapshot ingest query snapshot_upload}"
# The bundle target writes a folder per input: keep that in memory when we can.
if [[ -d /dev/shm && -w /dev/shm ]]; then export TMPDIR="${TMPDIR:-/dev/shm}"; fi

# The largest input per target: enough for the seeds (a bundle of several files, an nvidia-smi
# XML), small enough to keep executions fast. The lines target pads its last line past the
# parser's 64 KiB cap on its own.
max_len() {
    case "$1" in
        lines) echo 16384 ;;
        ingest) echo 16384 ;;
        *) echo 65536 ;;
    esac
}

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: cargo-fuzz is not installed: cargo install cargo-fuzz --locked" >&2
    exit 2
fi

echo "== build (sanitizer: $sanitizer)"
cargo fuzz build -s "$sanitizer"
echo "== seeds from tests/data"
cargo run -q --manifest-path fuzz/Cargo.toml --example make_seeds -- fuzz/seeds

failed=0
summary=()
# The query target's seeds: ordinary queries and the red team's (issue 26).
mkdir -p fuzz/seeds/query fuzz/seeds/snapshot_upload
printf '%s' 'NCCL WARN' >fuzz/seeds/query/plain
printf '%s' '"collective operation timeout" AND rank' >fuzz/seeds/query/phrase
printf '%s' '(a OR (b AND (c OR -d)))' >fuzz/seeds/query/groups
printf '((((((((((((((((foo))))))))))))))))' >fuzz/seeds/query/nested
for t in $targets; do
    mkdir -p "fuzz/corpus/$t" "fuzz/artifacts/$t" "fuzz/seeds/$t"
    before="$(ls "fuzz/artifacts/$t" | wc -l)"
    log="fuzz/artifacts/$t.log"
    echo "== $t: ${secs}s, inputs up to $(max_len "$t") bytes"
    parallel=()
    if [[ $jobs -gt 1 ]]; then parallel=(-jobs="$jobs" -workers="$jobs"); fi
    status=0
    cargo fuzz run -s "$sanitizer" "$t" "fuzz/corpus/$t" "fuzz/seeds/$t" -- \
        -max_total_time="$secs" -max_len="$(max_len "$t")" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 "${parallel[@]}" >"$log" 2>&1 || status=$?
    # With -jobs each process writes fuzz-<n>.log; their figures add up.
    logs=("$log" $(ls fuzz-*.log fuzz/fuzz-*.log 2>/dev/null || true))
    after="$(ls "fuzz/artifacts/$t" | wc -l)"
    runs="$(awk '/stat::number_of_executed_units/ {s += $2} END {print s + 0}' "${logs[@]}")"
    rate="$(awk '/stat::average_exec_per_sec/ {s += $2} END {print s + 0}' "${logs[@]}")"
    corpus="$(ls "fuzz/corpus/$t" | wc -l)"
    if [[ $after -gt $before ]]; then
        failed=1
        verdict="FOUND A CRASH (exit $status; see $log and fuzz/artifacts/$t)"
    elif [[ $status -ne 0 ]]; then
        failed=1
        verdict="FAILED (exit $status, no crash file; see $log)"
    else
        verdict="no crash"
    fi
    if [[ $verdict != "no crash" ]]; then
        grep -h -m3 -E "panicked at|ERROR: libFuzzer|SUMMARY" "${logs[@]}" | sed 's/^/    /' || true
    fi
    rm -f fuzz-*.log fuzz/fuzz-*.log
    line="$(printf '%-9s %9s runs  %6s exec/s  corpus %5s  %s' "$t" "$runs" "$rate" "$corpus" "$verdict")"
    echo "$line"
    summary+=("$line")
done

echo "== summary (${secs}s per target)"
printf '%s\n' "${summary[@]}"
exit "$failed"
