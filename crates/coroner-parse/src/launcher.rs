//! Launchers' reports of their workers: torchrun / torch.distributed.elastic (`failed (exitcode:
//! N)`, `Sending process N closing signal SIGTERM`, its agent signalled), DeepSpeed's, Open MPI's
//! and Horovod's, `mp.spawn`'s, Paddle's, TGI's and composer's reports of a worker's end, and
//! composer's relay of a crashed rank's output. The `ChildFailedError` table is read in
//! `failure_table.rs`, Slurm's and Kubernetes' lines in `scheduler.rs`.

use crate::util::{inum_after, leading_i64, leading_u64, num_after};
use aho_corasick::AhoCorasick;
use coroner_model::{EventKind, LauncherFailure, Rank};
use std::sync::LazyLock;

/// The words at least one of which every report [`worker_end`] reads holds.
static REPORT_WORDS: LazyLock<Option<AhoCorasick>> = LazyLock::new(|| {
    AhoCorasick::new([
        "exits with return code =",
        "CalledProcessError",
        "noticed that process rank ",
        " died, exit code: ",
        "Worker proc ",
        " crashed with exit code ",
        "Global rank ",
        "exitcode",
        "Primary job",
        "Container rank ",
        "-- Process ",
        "Exception: process ",
        "signaled to shutdown with signal ",
        "Shard ",
    ])
    .ok()
});

/// Where launchers' own code lives, their entry scripts included: a traceback through it is the
/// launcher's.
const LAUNCHER_CODE: [&str; 11] = [
    "torch/distributed/elastic",
    "torch/distributed/run.py",
    "torch/distributed/launch",
    "distributed/launcher/",
    "deepspeed/launcher",
    "horovod/runner",
    "accelerate/commands/",
    "text_generation_launcher",
    "bin/torchrun",
    "bin/deepspeed",
    "bin/accelerate",
];

/// Whether a traceback frame's file is a launcher's own code (torchrun, `torch.distributed.launch`,
/// DeepSpeed's, Horovod's runner).
pub fn is_launcher_code(file: &str) -> bool {
    LAUNCHER_CODE.iter().any(|l| file.contains(l))
}

/// torchrun's own one-line reports (after a glog or `LEVEL:logger:` header).
pub fn classify_body(body: &str, out: &mut Vec<EventKind>) -> bool {
    if let Some(at) = body.find("failed (exitcode: ") {
        let r = &body[at..];
        let code = inum_after(r, "failed (exitcode:").and_then(|v| i32::try_from(v).ok());
        let (exit_code, signal) = split_code(code);
        out.push(EventKind::LauncherWorkerFailed(LauncherFailure {
            global_rank: None,
            local_rank: num_after(r, "local_rank:").and_then(|v| u32::try_from(v).ok()),
            exit_code,
            signal,
            pid: num_after(r, "(pid:").and_then(|v| u32::try_from(v).ok()),
            host: None,
            root_cause_row: false,
        }));
        return true;
    }
    // The elastic agent itself was signalled (`Received 2 death signal, shutting down workers`:
    // Ctrl-C for 2, a scheduler's or kubelet's SIGTERM for 15): the job was stopped from outside.
    if body.contains(" death signal, shutting down workers") {
        out.push(EventKind::SchedulerEnd { message: body.trim().to_string() });
        return true;
    }
    if let Some(at) = body.find("Sending process ") {
        let r = &body[at + "Sending process ".len()..];
        if let Some(sig_at) = r.find("closing signal ") {
            let signal = r[sig_at + "closing signal ".len()..].split_whitespace().next().unwrap_or("").to_string();
            let pid = leading_u64(r).and_then(|v| u32::try_from(v).ok());
            out.push(EventKind::LauncherSignal { pid, signal });
            return true;
        }
    }
    false
}

/// Other launchers' one-line reports of a worker's end, wherever they sit in a line:
/// - DeepSpeed: `[launch.py:434:sigkill_handler] ['python', '-u', 'main.py', '--local_rank=0', ...] exits with return code = -9`;
/// - `torch.distributed.launch`: `subprocess.CalledProcessError: Command '[... '--local_rank=7' ...]' died with <Signals.SIGSEGV: 11>.`
///   (or `returned non-zero exit status 1.`), only when the command was a training worker (it
///   names a `--local_rank`);
/// - Open MPI: `mpirun noticed that process rank 1 with PID 4242 on node n1 exited on signal 9 (Killed).`,
///   and `Primary job  terminated normally, but 1 process returned` (the job aborted for a
///   process it does not name: no rank);
/// - TGI: `Shard process was signaled to shutdown with signal 4 rank=0`, `Shard 0 failed to start`;
/// - PaddlePaddle's `paddle.distributed.launch`: `Container rank 0 status failed cmd ['python',
///   '-u', 'train.py'] code 1 log log/workerlog.0` (a container is one worker of the pod: its
///   rank is the worker's index on the node);
/// - `torch.multiprocessing.spawn` (`mp.spawn`), whose process index is the worker's local rank:
///   `ProcessExitedException: process 1 terminated with signal SIGKILL` (older torch: a bare
///   `Exception: process 1 ...`), `process 0 terminated with exit code 1`, and the header of a
///   worker's relayed traceback, `-- Process 2 terminated with the following error:`.
pub fn worker_end(t: &str) -> Option<EventKind> {
    // Every line of every rank comes here: one scan for all the reports' words first.
    if !REPORT_WORDS.as_ref().is_none_or(|ac| ac.is_match(t)) {
        return None;
    }
    let failure = |global: Option<u64>, local: Option<u64>, code: Option<i64>, signal: Option<i64>, pid: Option<u64>| {
        let (exit_code, sig) = split_code(code.and_then(|c| i32::try_from(c).ok()));
        EventKind::LauncherWorkerFailed(LauncherFailure {
            global_rank: global.and_then(|v| u32::try_from(v).ok()).map(Rank),
            local_rank: local.and_then(|v| u32::try_from(v).ok()),
            exit_code,
            signal: signal.and_then(|s| i32::try_from(s).ok()).or(sig),
            pid: pid.and_then(|v| u32::try_from(v).ok()),
            host: None,
            root_cause_row: false,
        })
    };
    let local_rank = || num_after(t, "--local_rank=").or_else(|| num_after(t, "--local-rank="));
    if let Some(at) = t.find("exits with return code =") {
        return Some(failure(None, local_rank(), inum_after(&t[at..], "exits with return code ="), None, None));
    }
    if t.contains("CalledProcessError") && local_rank().is_some() {
        if let Some(at) = t.find("died with <Signals.") {
            return Some(failure(None, local_rank(), None, num_after(&t[at..], ":").map(|v| v as i64), None));
        }
        if let Some(at) = t.find("returned non-zero exit status") {
            return Some(failure(None, local_rank(), inum_after(&t[at..], "exit status"), None, None));
        }
    }
    if let Some(at) = t.find("noticed that process rank ") {
        let r = &t[at..];
        let rank = num_after(r, "process rank ");
        let pid = num_after(r, "with PID ");
        let signal = num_after(r, "exited on signal ").map(|v| v as i64);
        let code = inum_after(r, "exited with status");
        return Some(failure(rank, None, code, signal, pid));
    }
    // A failure table row collapsed onto one line (pasted, re-typed):
    // `rank2 (local rank: 2)exitcode: -9 (pid: 36071)error file: <N/A>`.
    if let Some(at) = t.find("exitcode") {
        let head = &t[..at];
        let rank = head.find("rank").and_then(|r| leading_u64(head[r + 4..].trim_start_matches([' ', ':'])));
        let local = num_after(head, "local rank:").or_else(|| num_after(head, "local_rank:"));
        if rank.is_some() {
            let code = inum_after(&t[at..], "exitcode").or_else(|| t[at + 8..].trim_start_matches([' ', ':']).parse::<i64>().ok());
            let code = code.or_else(|| leading_i64(t[at + 8..].trim_start_matches([' ', ':'])));
            return Some(failure(rank, local, code, None, num_after(&t[at..], "(pid:")));
        }
    }
    // Open MPI aborting the job for a process it does not name here (`Primary job  terminated
    // normally, but 1 process returned` / `a non-zero exit code. Per user-direction, the job has
    // been aborted.`); the "first process to do so" block, when it follows, names it.
    if t.trim_start().starts_with("Primary job") && t.contains("terminated normally, but") && t.contains("returned") {
        return Some(failure(None, None, None, None, None));
    }
    // vLLM's multiprocessing executor on a worker it lost: `Worker VllmWorkerProcess pid 143 died,
    // exit code: -15` (a negative code is the signal).
    if let Some(at) = t.find(" died, exit code: ").filter(|_| t.contains("Worker")) {
        let pid = t[..at].rsplit_once(" pid ").and_then(|(_, p)| leading_u64(p));
        return Some(failure(None, None, leading_i64(&t[at + " died, exit code: ".len()..]), None, pid));
    }
    // vLLM's V1 executor on a worker that vanished: `Worker proc VllmWorker-1 died unexpectedly,
    // shutting down executor.` (the index is its tensor-parallel rank; how it ended is not said).
    if let Some(at) = t.find("Worker proc ").filter(|_| t.contains(" died unexpectedly")) {
        let name = t[at + "Worker proc ".len()..].split_whitespace().next().unwrap_or("");
        let index = name.rsplit_once('-').and_then(|(_, n)| n.parse::<u64>().ok());
        return Some(failure(index, None, None, None, None));
    }
    if let Some((rank, pid, code)) = composer_rank_end(t) {
        return Some(failure(Some(rank), None, Some(code), None, pid));
    }
    if let Some(at) = t.find("Container rank ").filter(|_| t.contains(" status failed")) {
        let r = &t[at..];
        let code = r.rfind(" code ").and_then(|c| leading_i64(&r[c + " code ".len()..]));
        return Some(failure(None, num_after(r, "Container rank "), code, None, None));
    }
    if let Some((index, code, signal)) = spawn_process_end(t) {
        return Some(failure(None, Some(index), code, signal, None));
    }
    if let Some(at) = t.find("signaled to shutdown with signal ") {
        let r = &t[at..];
        return Some(failure(num_after(r, "rank="), None, None, num_after(r, "with signal ").map(|v| v as i64), None));
    }
    if let Some(at) = t.find("Shard ").filter(|_| t.contains(" failed to start")) {
        // How it ended is not said, only that shard N (rank N) did not come up.
        let r = &t[at + 6..];
        if r.split_once(' ').is_some_and(|(n, rest)| n.bytes().all(|c| c.is_ascii_digit()) && rest.starts_with("failed to start")) {
            return Some(failure(leading_u64(r), None, None, None, None));
        }
    }
    None
}

/// Composer's launcher (the `composer` command) on a global rank's end: `Rank 2 crashed with
/// exit code -7.` when it sees the first crash, `Global rank 2 (PID 4242) exited with code -7` in
/// its summary; a negative code is the signal that ended the process. (rank, pid, code).
fn composer_rank_end(t: &str) -> Option<(u64, Option<u64>, i64)> {
    if let Some(at) = t.find(" crashed with exit code ") {
        let rank = t[..at].rsplit_once("Rank ")?.1;
        if rank.is_empty() || !rank.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        return Some((rank.parse().ok()?, None, leading_i64(&t[at + " crashed with exit code ".len()..])?));
    }
    let r = &t[t.find("Global rank ")?..];
    let code = inum_after(r, ") exited with code ")?;
    Some((num_after(r, "Global rank ")?, num_after(r, "(PID "), code))
}

/// A launcher relaying a worker's captured output between markers: composer's launcher prints a
/// crashed rank's stdout and stderr between `----------Begin global rank 1 STDERR----------` and
/// `----------End global rank 1 STDERR----------`. The lines between are that rank's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relayed {
    Begin(u32),
    End,
}

/// The marker a line is, if it is one (see [`Relayed`]).
pub fn relayed_output(text: &str) -> Option<Relayed> {
    let inner = text.trim().strip_prefix("----------")?.strip_suffix("----------")?;
    let (what, rest) = inner.split_once(" global rank ")?;
    let rank = u32::try_from(leading_u64(rest)?).ok()?;
    match what {
        "Begin" => Some(Relayed::Begin(rank)),
        "End" => Some(Relayed::End),
        _ => None,
    }
}

/// `mp.spawn`'s report of one of its processes' end: (process index, exit code, signal). A
/// process that raised is relayed with its traceback and exits 1 (`_wrap` in
/// torch/multiprocessing/spawn.py).
fn spawn_process_end(t: &str) -> Option<(u64, Option<i64>, Option<i64>)> {
    if let Some(at) = t.find("-- Process ") {
        let r = &t[at + "-- Process ".len()..];
        let (index, rest) = r.split_once(' ')?;
        if !rest.starts_with("terminated with the following error") {
            return None;
        }
        return Some((index.parse().ok()?, Some(1), None));
    }
    let at = t.find("process ")?;
    let head = &t[..at];
    if !(head.ends_with("Exception: ") || head.ends_with("ProcessExitedException: ")) {
        return None;
    }
    let r = &t[at + "process ".len()..];
    let (index, rest) = r.split_once(' ')?;
    let index = index.parse().ok()?;
    if let Some(name) = rest.strip_prefix("terminated with signal ") {
        let signal = coroner_model::signal_number(name.split_whitespace().next()?.trim_end_matches(['.', '`']))?;
        return Some((index, None, Some(i64::from(signal))));
    }
    let code = rest.strip_prefix("terminated with exit code ")?;
    Some((index, leading_i64(code), None))
}

/// The first line of a DeepSpeed launcher report the terminal wrapped: the worker's command
/// starts, its end (`exits with return code = N`) comes on a later line ([`WrappedReport`]).
pub fn wrapped_report_head(t: &str) -> bool {
    t.contains("sigkill_handler] [") && !t.contains("exits with return code")
}

/// DeepSpeed's launcher report of a worker's end wrapped over several lines (the worker's whole
/// argv, long enough for a terminal or a paste to break it): `[launch.py:320:sigkill_handler]
/// ['/opt/conda/bin/python', '-u', 'train.py', '--local_rank=1', ...` on one line and `...] exits
/// with return code = -9` some lines later. Joined, it reads as [`worker_end`] reads one line.
#[derive(Debug, Clone, Default)]
pub struct WrappedReport {
    text: String,
    lines: u8,
}

impl WrappedReport {
    /// The most lines and bytes a wrapped report is looked for over.
    const MAX_LINES: u8 = 24;
    const MAX_BYTES: usize = 16 << 10;

    /// Reads one line; pushes the worker's end when a wrapped report completes on it.
    pub fn observe(&mut self, t: &str, out: &mut Vec<EventKind>) {
        if self.lines == 0 {
            if wrapped_report_head(t) {
                self.text = t.to_string();
                self.lines = 1;
            }
            return;
        }
        self.lines += 1;
        if self.text.len() + t.len() <= Self::MAX_BYTES {
            self.text.push(' ');
            self.text.push_str(t.trim());
        }
        if t.contains("exits with return code") {
            out.extend(worker_end(&self.text));
            *self = WrappedReport::default();
        } else if self.lines >= Self::MAX_LINES {
            *self = WrappedReport::default();
        }
    }
}

/// The "first process to exit" report of Open MPI and Horovod's own runner: `... exited with
/// non-zero status, thus causing the job to be terminated. The first process to do so was:`,
/// then `Process name: [[5353,1],1]` (or `Process name: 1`) and `Exit code: 1` on lines of their own.
#[derive(Debug, Clone, Default)]
pub struct FirstToExit {
    /// Lines left to look for the two fields after the marker (0: not armed).
    armed: u8,
    rank: Option<u32>,
    code: Option<i32>,
}

impl FirstToExit {
    /// Reads one line; pushes the worker's end when both fields were seen.
    pub fn observe(&mut self, t: &str, out: &mut Vec<EventKind>) {
        if t.contains("The first process to do so was") {
            *self = FirstToExit { armed: 8, ..Default::default() };
            return;
        }
        if self.armed == 0 {
            return;
        }
        self.armed -= 1;
        let t = t.trim();
        if let Some(v) = t.strip_prefix("Process name:") {
            // `[[5353,1],1]`: the last number is the rank.
            let digits: String = v.trim().trim_end_matches(']').rsplit([',', '[']).next().unwrap_or("").trim().to_string();
            self.rank = digits.parse().ok();
        } else if let Some(v) = t.strip_prefix("Exit code:") {
            self.code = v.trim().parse().ok();
        }
        if let (Some(rank), Some(code)) = (self.rank, self.code) {
            self.armed = 0;
            let (exit_code, signal) = split_code(Some(code));
            out.push(EventKind::LauncherWorkerFailed(LauncherFailure {
                global_rank: Some(Rank(rank)),
                local_rank: None,
                exit_code,
                signal,
                pid: None,
                host: None,
                root_cause_row: true,
            }));
        }
    }
}

/// A negative exit code from torchrun is `-signal`.
pub(crate) fn split_code(code: Option<i32>) -> (Option<i32>, Option<i32>) {
    match code {
        Some(c) if c < 0 => (None, Some(-c)),
        // A shell's or MPI's 128+N for a death by signal N.
        Some(c) if (129..=159).contains(&c) => (None, Some(c - 128)),
        other => (other, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torchrun_lines() {
        let mut out = Vec::new();
        assert!(classify_body("failed (exitcode: 1) local_rank: 1 (pid: 3191) of binary: /opt/torch/.venv/bin/python", &mut out));
        assert!(classify_body("Sending process 3190 closing signal SIGTERM", &mut out));
        // Older torchrun: `ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 0 (pid: 12) of binary: x`
        assert!(classify_body("ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 0 (pid: 12) of binary: x", &mut out));
        assert_eq!(
            out[0],
            EventKind::LauncherWorkerFailed(LauncherFailure {
                global_rank: None,
                local_rank: Some(1),
                exit_code: Some(1),
                signal: None,
                pid: Some(3191),
                host: None,
                root_cause_row: false
            })
        );
        assert_eq!(out[1], EventKind::LauncherSignal { pid: Some(3190), signal: "SIGTERM".into() });
        assert!(matches!(&out[2], EventKind::LauncherWorkerFailed(f) if f.signal == Some(9) && f.exit_code.is_none()));
        assert!(!classify_body("Setting OMP_NUM_THREADS environment variable", &mut out));
        out.clear();
        assert!(classify_body("Received 2 death signal, shutting down workers", &mut out));
        assert!(matches!(&out[..], [EventKind::SchedulerEnd { message }] if message.contains("death signal")));
    }

    #[test]
    fn other_launchers_report_their_workers_ends() {
        let one = |t: &str| match worker_end(t) {
            Some(EventKind::LauncherWorkerFailed(f)) => (f.global_rank.map(|r| r.0), f.local_rank, f.exit_code, f.signal),
            other => panic!("{t}: {other:?}"),
        };
        assert_eq!(one("[2023-04-14 13:11:27,885] [ERROR] [launch.py:434:sigkill_handler] ['/usr/bin/python3', '-u', 'main.py', '--local_rank=0', '--data_path', 'x'] exits with return code = -9"), (None, Some(0), None, Some(9)));
        assert_eq!(
            one("[ERROR] [launch.py:324:sigkill_handler] ['python', '-u', 'clm.py', '--local_rank=1'] exits with return code = 1"),
            (None, Some(1), Some(1), None)
        );
        assert_eq!(one("subprocess.CalledProcessError: Command '['/usr/bin/python', '-u', 'train.py', '--local_rank=7', '--epochs', '180']' died with <Signals.SIGSEGV: 11>."), (None, Some(7), None, Some(11)));
        assert_eq!(one("mpirun noticed that process rank 1 with PID 4242 on node n1 exited on signal 9 (Killed)."), (Some(1), None, None, Some(9)));
        assert_eq!(
            one("ERROR shard-manager: text_generation_launcher: Shard process was signaled to shutdown with signal 4 rank=0"),
            (Some(0), None, None, Some(4))
        );
        assert_eq!(one("2023-12-16T09:36:24.632149Z ERROR text_generation_launcher: Shard 1 failed to start"), (Some(1), None, None, None));
        assert_eq!(one("rank2 (local rank: 2)exitcode: -9 (pid: 36071)error file: <N/A>"), (Some(2), Some(2), None, Some(9)));
        assert_eq!(one("torch.multiprocessing.spawn.ProcessExitedException: process 0 terminated with signal SIGKILL"), (None, Some(0), None, Some(9)));
        assert_eq!(one("Exception: process 3 terminated with signal SIGSEGV"), (None, Some(3), None, Some(11)));
        assert_eq!(one("Exception: process 1 terminated with exit code 1"), (None, Some(1), Some(1), None));
        assert_eq!(one("-- Process 2 terminated with the following error:"), (None, Some(2), Some(1), None));
        assert_eq!(
            one("Container rank 3 status failed cmd ['/usr/bin/python', '-u', 'train.py', '--lr', '0.1'] code 139 log log/workerlog.3"),
            (None, Some(3), None, Some(11))
        );
        assert!(worker_end("Container rank 1 status running cmd ['python', 'x.py'] code 0 log log/workerlog.1").is_none());
        assert!(worker_end("RuntimeError: process 3 terminated with signal SIGKILL").is_none(), "only spawn's own exceptions");
        assert_eq!(one("ERROR:composer.cli.launcher:Rank 2 crashed with exit code -7."), (Some(2), None, None, Some(7)));
        assert_eq!(one("Worker VllmWorkerProcess pid 143 died, exit code: -15"), (None, None, None, Some(15)));
        assert_eq!(one("Worker proc VllmWorker-1 died unexpectedly, shutting down executor."), (Some(1), None, None, None));
        assert_eq!(one("ERROR:composer.cli.launcher:Global rank 0 (PID 208865) exited with code 1"), (Some(0), None, Some(1), None));
        assert!(worker_end("Socket server crashed with exit code 1. Respawning..").is_none(), "no rank named");
        assert!(worker_end("Global rank 3 (PID 12) has still not exited; return exit code 1.").is_none());
        assert_eq!(one("Primary job  terminated normally, but 1 process returned"), (None, None, None, None));
        assert_eq!(relayed_output("----------Begin global rank 3 STDERR----------"), Some(Relayed::Begin(3)));
        assert_eq!(relayed_output("----------End global rank 3 STDOUT----------"), Some(Relayed::End));
        assert_eq!(relayed_output("----------Begin global rank x STDERR----------"), None);
        assert_eq!(relayed_output("---------- global rank 3 ----------"), None);
        assert!(worker_end("  exitcode  : -9 (pid: 3309)").is_none(), "a table row's field alone is read by the table");
        // A build step that failed is not a training worker's end.
        assert!(worker_end("subprocess.CalledProcessError: Command '['ninja', '-v']' returned non-zero exit status 1.").is_none());
    }

    #[test]
    fn a_deepspeed_report_wrapped_over_lines_names_its_worker() {
        let mut w = WrappedReport::default();
        let mut out = Vec::new();
        for line in [
            "[2023-11-13 16:59:55,650] [ERROR] [launch.py:320:sigkill_handler] ['/opt/conda/bin/python', '-u', 'train.py', '--local_rank=1', '--model', 'x',",
            "'--stage', '1', '--save_path',",
            "'./ckpt/'",
            "] exits with return code = -9",
        ] {
            w.observe(line, &mut out);
        }
        assert!(matches!(out.as_slice(), [EventKind::LauncherWorkerFailed(f)] if f.local_rank == Some(1) && f.signal == Some(9)), "{out:?}");
    }

    #[test]
    fn the_first_process_to_exit() {
        for (lines, want) in [
            (&["RuntimeError: Horovod detected that one or more processes exited with non-zero status, thus causing the job to be terminated. The first process to do so was:", "Process name: 1", "Exit code: 1"][..], (1, Some(1), None)),
            (&["mpirun detected that one or more processes exited with non-zero status, thus causing the job to", "be terminated. The first process to do so was:", "", "  Process name: [[5353,1],3]", "  Exit code:    139"][..], (3, None, Some(11))),
        ] {
            let mut f = FirstToExit::default();
            let mut out = Vec::new();
            for l in lines {
                f.observe(l, &mut out);
            }
            match out.as_slice() {
                [EventKind::LauncherWorkerFailed(x)] => assert_eq!((x.global_rank, x.exit_code, x.signal), (Some(Rank(want.0)), want.1, want.2)),
                other => panic!("{other:?}"),
            }
        }
    }
}
