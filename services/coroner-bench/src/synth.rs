//! Synthetic jobs in the corpus's formats: a culprit rank that dies of CUDA OOM (error record and
//! traceback), every other rank timing out in the NCCL watchdog a little later (the cascade), and
//! a different clock error on every host, applied to capture times and printed times together.
//!
//! Shapes copied from `tests/data/corpus/nccl2_oom_r1`: Python logging records
//! (`2026-11-30 09:00:01,537 INFO [rank1] train: step 0 loss 1.316076`), NCCL debug lines
//! (`vm:2146:2146 [1] NCCL INFO ...`), c10d glog lines behind a `[rankN]:` prefix, a Python
//! traceback, and `Fatal Python error: Aborted`.

use coroner_model::{LogLine, ProcessEnd, Rank, Stream};

/// 2026-11-30T00:00:00Z, the corpus's day, in ns since the epoch.
pub const DAY_NS: i64 = 1_795_996_800 * 1_000_000_000;
/// The job starts at 08:59:50 on that day.
const START_NS: i64 = DAY_NS + (8 * 3600 + 59 * 60 + 50) * 1_000_000_000;
/// The culprit dies 10 s into the job; the watchdog (20 s timeout) fires on the others after it.
const OOM_AT_NS: i64 = 10_000_000_000;
const WATCHDOG_AT_NS: i64 = OOM_AT_NS + 20_003_000_000;

/// What one synthetic job looks like.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub ranks: u32,
    pub lines_per_rank: usize,
    pub culprit: u32,
}

impl Shape {
    pub fn new(ranks: u32, lines_per_rank: usize) -> Shape {
        // Somewhere in the middle, so neither the first nor the last rank is the answer.
        Shape { ranks, lines_per_rank, culprit: ranks * 3 / 5 + 1 }
    }
}

/// A host's clock error: up to ±2 s, deterministic per host (8 ranks a host).
pub fn skew_ns(rank: u32) -> i64 {
    let host = u64::from(rank / 8);
    let h = host.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17);
    (h % 4_000_000_000) as i64 - 2_000_000_000
}

pub fn host(rank: u32) -> String {
    format!("node{:04}", rank / 8)
}

/// `HH:MM:SS` and the ns within the second, on the job's day.
fn clock(ns: i64) -> (i64, i64, i64, i64) {
    let t = ns - DAY_NS;
    let s = t.div_euclid(1_000_000_000);
    (s / 3600, s / 60 % 60, s % 60, t.rem_euclid(1_000_000_000))
}

/// Python logging's `2026-11-30 09:00:01,537`.
fn py_time(ns: i64) -> String {
    let (h, m, s, f) = clock(ns);
    format!("2026-11-30 {h:02}:{m:02}:{s:02},{:03}", f / 1_000_000)
}

/// glog's `1130 09:00:21.549385015` (after the level letter).
fn glog_time(ns: i64) -> String {
    let (h, m, s, f) = clock(ns);
    format!("1130 {h:02}:{m:02}:{s:02}.{f:09}")
}

struct Writer {
    rank: u32,
    skew: i64,
    lines: Vec<LogLine>,
    seqs: [u64; 2],
}

impl Writer {
    /// A line captured `at` ns into the job (true time); the host's clock adds its skew.
    fn push(&mut self, at: i64, stream: Stream, text: String) {
        let slot = usize::from(stream == Stream::Stderr);
        self.lines.push(LogLine { rank: Some(Rank(self.rank)), stream, seq: self.seqs[slot], capture_ns: START_NS + at + self.skew, bytes: text.into_bytes() });
        self.seqs[slot] += 1;
    }

    fn now(&self, at: i64) -> i64 {
        START_NS + at + self.skew
    }
}

const OOM: &str = "CUDA out of memory. Tried to allocate 200.00 GiB. GPU 1 has a total capacity of 139.80 GiB of which 136.56 GiB is free. Including non-PyTorch memory, this process has 1.61 GiB memory in use. Of the allocated memory 65.02 MiB is allocated by PyTorch, and 1000.00 KiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.";

/// Every line of one rank, in capture order.
pub fn rank_lines(shape: &Shape, rank: u32) -> Vec<LogLine> {
    let n = shape.lines_per_rank.max(40);
    let mut w = Writer { rank, skew: skew_ns(rank), lines: Vec::with_capacity(n + 20), seqs: [0, 0] };
    let (world, local, pid) = (shape.ranks, rank % 8, 2000 + rank % 8);
    let node = host(rank);
    let nccl = |tid: u32, msg: &str| format!("{node}:{pid}:{tid} [{local}] NCCL INFO {msg}");
    let t = |w: &Writer, at: i64| py_time(w.now(at));

    let mut at = 0i64;
    let s = t(&w, at);
    w.push(at, Stream::Stdout, format!("{s} INFO [rank{rank}] train: init_process_group backend=nccl world={world} timeout=0:00:20"));
    for msg in [
        "ENV/Plugin: Could not find: libnccl-env.so".to_string(),
        "cudaDriverVersion 13000".to_string(),
        "Bootstrap: Using eth0:192.0.2.2<0>".to_string(),
        "NCCL version 2.28.9+cuda13.0".to_string(),
        "NET/Socket : Using [0]eth0:192.0.2.2<0>".to_string(),
        format!(
            "ncclCommInitRankConfig comm 0x21c4ba10 rank {rank} nranks {world} cudaDev {local} nvmlDev {local} busId 60 commId 0x440fb82e38689ea - Init START"
        ),
    ] {
        at += 1_000_000;
        w.push(at, Stream::Stdout, nccl(pid, &msg));
    }
    for ch in 0..8 {
        at += 100_000;
        w.push(at, Stream::Stdout, nccl(pid, &format!("Channel {ch:02}/0 : {rank}[{local}] -> {}[{}] via P2P/CUMEM", (rank + 1) % world, (local + 1) % 8)));
    }
    at += 1_000_000;
    w.push(at, Stream::Stdout, nccl(pid, &format!("ncclCommInitRankConfig comm 0x21c4ba10 rank {rank} nranks {world} cudaDev {local} nvmlDev {local} busId 60 commId 0x440fb82e38689ea - Init COMPLETE")));
    let wt = glog_time(w.now(at));
    w.push(at, Stream::Stderr, format!("[W{wt} Utils.hpp:137] Warning: Environment variable TORCH_NCCL_TRACE_BUFFER_SIZE is deprecated; use TORCH_FR_BUFFER_SIZE instead (function operator())"));

    // Training: step records with the odd NCCL line, until the culprit's OOM.
    let is_culprit = rank == shape.culprit;
    let tail = if is_culprit { 14 } else { 12 };
    let body = n.saturating_sub(w.lines.len() + tail);
    let first = 1_000_000_000i64;
    let span = OOM_AT_NS - first - 10_000_000;
    let mut step = 0u64;
    for i in 0..body {
        let at = first + span * i as i64 / body.max(1) as i64;
        if i % 10 == 9 {
            w.push(at, Stream::Stdout, nccl(pid + 7, &format!("[Proxy Service] Device {local} CPU core {}", i % 16)));
        } else {
            let s = t(&w, at);
            let loss = 1.0 + ((step * 7919 + u64::from(rank)) % 1000) as f64 / 1000.0;
            w.push(at, Stream::Stdout, format!("{s} INFO [rank{rank}] train: step {step} loss {loss:.6}"));
            step += 1;
        }
    }

    if is_culprit {
        let at = OOM_AT_NS;
        let s = t(&w, at);
        w.push(at, Stream::Stdout, format!("{s} ERROR [rank{rank}] train: uncaught OutOfMemoryError: {OOM}"));
        for l in [
            "Traceback (most recent call last):",
            "  File \"/opt/job/worker.py\", line 118, in <module>",
            "    main()",
            "  File \"/opt/job/worker.py\", line 90, in main",
            "    torch.empty(int(200 * 2**30), dtype=torch.uint8, device=dev)",
        ] {
            w.push(at, Stream::Stderr, format!("[rank{rank}]: {l}"));
        }
        w.push(at, Stream::Stderr, format!("[rank{rank}]: torch.OutOfMemoryError: {OOM}"));
        let tid = pid + 200;
        w.push(at + 1_000_000, Stream::Stdout, nccl(tid, &format!("comm 0x21c4ba10 rank {rank} nRanks {world} cudaDev {local} busId 70 - Abort START")));
        for _ in 0..3 {
            w.push(at + 1_000_000, Stream::Stdout, nccl(tid, "misc/socket.cc:64 -> 3"));
        }
        w.push(at + 2_000_000, Stream::Stdout, nccl(tid, &format!("comm 0x21c4ba10 rank {rank} nranks {world} cudaDev {local} busId 70 - Abort COMPLETE")));
        w.push(at + 3_000_000, Stream::Stdout, nccl(pid, "ENV/Plugin: Closing env plugin ncclEnvDefault"));
    } else {
        // The cascade: the next all-reduce never completes; the watchdog fires and aborts.
        let at = WATCHDOG_AT_NS + i64::from(rank % 97) * 1_000_000;
        let g = |w: &Writer, at: i64| glog_time(w.now(at));
        let pg = format!("[PG ID 0 PG GUID 0(default_pg) Rank {rank}]");
        let e = [
            format!("[rank{rank}]:[E{} ProcessGroupNCCL.cpp:689] [Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=11, OpType=ALLREDUCE, NumelIn=1153, NumelOut=1153, Timeout(ms)=20000) ran for 20003 milliseconds before timing out.", g(&w, at)),
            format!("[rank{rank}]:[E{} ProcessGroupNCCL.cpp:2303] {pg}  failure detected by watchdog at work sequence id: 11 PG status: last enqueued work: 11, last completed work: 10", g(&w, at)),
            format!("[rank{rank}]:[E{} ProcessGroupNCCL.cpp:2636] {pg} First PG on this rank to signal dumping.", g(&w, at)),
            format!("[rank{rank}]:[E{} ProcessGroupNCCL.cpp:1628] {pg} ProcessGroupNCCL preparing to dump debug info. Include stack trace: 1, only active collectives: 0", g(&w, at + 500_000_000)),
            format!("[rank{rank}]:[F{} ProcessGroupNCCL.cpp:1653] {pg} {pg} Terminating the process after attempting to dump debug info, due to collective timeout or exception.", g(&w, at + 40_000_000_000)),
        ];
        let mut dt = 0;
        for l in e {
            w.push(at + dt, Stream::Stderr, l);
            dt += 1_000;
        }
        let at = at + 40_000_000_000;
        for l in [
            "Fatal Python error: Aborted",
            "",
            "Thread 0x00007f723dc35140 (most recent call first):",
            "  File \"/opt/job/worker.py\", line 109 in main",
            "  File \"/opt/job/worker.py\", line 118 in <module>",
            "",
            "Extension modules: numpy._core._multiarray_umath, torch._C, torch._C._nn (total: 3)",
        ] {
            w.push(at, Stream::Stderr, l.to_string());
        }
    }
    w.lines
}

/// How each rank ended: the culprit exited 1, the others were aborted (SIGABRT).
pub fn ends(shape: &Shape) -> Vec<ProcessEnd> {
    (0..shape.ranks)
        .map(|r| {
            let (exit_code, signal, at) =
                if r == shape.culprit { (Some(1), None, OOM_AT_NS + 50_000_000) } else { (None, Some(6), WATCHDOG_AT_NS + 41_000_000_000) };
            ProcessEnd { rank: Rank(r), exit_code, signal, at_ns: Some(START_NS + at + skew_ns(r)) }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_print_like_the_corpus() {
        let ns = DAY_NS + (9 * 3600 + 21) * 1_000_000_000 + 549_385_015;
        assert_eq!(py_time(ns), "2026-11-30 09:00:21,549");
        assert_eq!(glog_time(ns), "1130 09:00:21.549385015");
    }

    #[test]
    fn a_rank_has_about_the_lines_asked_for() {
        let shape = Shape::new(16, 200);
        for r in [0, shape.culprit] {
            let lines = rank_lines(&shape, r);
            assert!(lines.len().abs_diff(200) <= 2, "{}", lines.len());
        }
    }
}
