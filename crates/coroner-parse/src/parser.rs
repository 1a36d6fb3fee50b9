//! [`RankParser`]: the state machine for one (owner rank, stream) sequence of lines.
//!
//! Per line: cap at 64 KiB, decode (lossily, with a diagnostic, if not UTF-8), strip rank
//! prefixes, then either feed the multi-line block open on that prefix "channel" or classify the
//! line. Blocks are kept per channel (the tuple of prefixes), so a launcher's combined stream with
//! `[default0]:` and `[default1]:` lines interleaved still reads each worker's traceback whole.
//!
//! Classification order: NCCL debug line (byte-level fast path; ordinary INFO lines end here),
//! block starters (traceback, faulthandler, C++ frames, `terminate called`, torchrun table,
//! Python warning), glog header (c10d / torchrun / TF / Horovod), Python logging record, Slurm,
//! kernel, bare failure line, progress (step) line.
//!
//! An event's `rank` is the parser's rank, else the line's, else the `[rankN]:` prefix's.
//! Repeats are collapsed: a `Warning`, `ErrorLine`, `StoreError` or `NcclWarn` whose text has the
//! same digit-masked template as one emitted within the last 10,000 lines is dropped (thousands
//! of CUDA kernel assert lines make one event).

use crate::block::{Ctx, Step};
use crate::failure_table::FailureTable;
use crate::launcher;
use crate::python::{CppFrames, FaultDump, PyWarning, Terminate, Traceback};
use crate::scheduler;
use crate::util::{clip, template_hash};
use crate::{c10d, failures, glog, nccl, prefix, pylog, steps};
use coroner_model::{Event, EventKind, LineRef, LogLine, Rank};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::HashMap;

/// Bytes of a line that are examined; the rest is ignored (with a diagnostic).
pub const MAX_LINE: usize = 64 * 1024;
const MAX_TEXT: usize = 16 * 1024;
const MAX_DIAGNOSTICS: usize = 1000;
const DEDUP_WINDOW: u64 = 10_000;
/// How often an identical error line within the window becomes an event (see `fresh`).
const ERROR_REPEATS: u32 = 3;

/// Something worth knowing about the input that is not an event (never an error).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParseDiagnostic {
    pub seq: u64,
    pub message: String,
}

#[derive(Debug, Clone)]
enum Block {
    Traceback(Traceback),
    Fault(FaultDump),
    Cpp(CppFrames),
    Warning(PyWarning),
    Terminate(Terminate),
    Table(FailureTable),
}

type Channel = (Option<u32>, Option<u32>, Option<u32>, Option<u32>);

/// Stateful parser for ONE (owner rank, stream) sequence of lines, in capture order.
#[derive(Debug, Clone)]
pub struct RankParser {
    rank: Option<Rank>,
    blocks: Vec<(Channel, Block)>,
    diagnostics: Vec<ParseDiagnostic>,
    seen_comms: Vec<String>,
    /// Per message template: the line it was last seen on, and how often since it recurred.
    recent: HashMap<u64, (u64, u32)>,
    lines: u64,
    scratch: Vec<EventKind>,
    /// The last bare line that made an `ErrorLine`, and when: the next lines of a run of the
    /// same template (thousands of CUDA kernel asserts) are skipped with one comparison.
    last_bare: String,
    last_bare_at: u64,
    numerics: crate::numerics::Numerics,
    first_to_exit: crate::launcher::FirstToExit,
    wrapped_report: crate::launcher::WrappedReport,
    srun_cleanup: crate::scheduler::SrunCleanup,
    horovod_ranks: crate::horovod::RankList,
    unhealthy_tasks: crate::coordination::UnhealthyTasks,
    /// An NCCL error code was reported since the last WARN (one event per failing call chain).
    nccl_chain: bool,
    /// What NCCL's last WARN said: the reason of the error code its call chain returns next.
    last_nccl_warn: String,
    /// Each process's last NCCL collective traces (`NCCL_DEBUG_SUBSYS=COLL`), emitted at the end:
    /// a job issues millions, and only the last say what a process was doing when it stopped.
    last_collectives: Vec<(u32, std::collections::VecDeque<Event>)>,
    /// The exception type of a notebook's JSON-rendered error, until its message line comes.
    json_error: Option<String>,
    /// A rank's first `Waiting in store based barrier` line, reported at the end unless the
    /// barrier completes: a start-up that never got all its ranks.
    store_barrier: Option<Event>,
    /// The divergence the numerics tracker holds (`Numerics::held`), as the event of the line
    /// that made it: reported at the end unless it is confirmed or cleared first.
    held_divergence: Option<Event>,
    /// The line count at the watchdog's last `taking the entire process down`.
    watchdog_abort_at: Option<u64>,
    /// The line count at Python's last `Exception ignored in: ...`: the traceback right after it
    /// is one the interpreter swallowed.
    ignored_exception_at: Option<u64>,
}

impl RankParser {
    pub fn new(rank: Option<Rank>) -> Self {
        RankParser {
            rank,
            blocks: Vec::new(),
            diagnostics: Vec::new(),
            seen_comms: Vec::new(),
            recent: HashMap::new(),
            lines: 0,
            scratch: Vec::new(),
            last_bare: String::new(),
            last_bare_at: 0,
            numerics: crate::numerics::Numerics::default(),
            first_to_exit: crate::launcher::FirstToExit::default(),
            wrapped_report: crate::launcher::WrappedReport::default(),
            srun_cleanup: crate::scheduler::SrunCleanup::default(),
            horovod_ranks: crate::horovod::RankList::default(),
            unhealthy_tasks: crate::coordination::UnhealthyTasks::default(),
            nccl_chain: false,
            last_nccl_warn: String::new(),
            last_collectives: Vec::new(),
            json_error: None,
            store_barrier: None,
            ignored_exception_at: None,
            watchdog_abort_at: None,
            held_divergence: None,
        }
    }

    /// Diagnostics (invalid UTF-8 seen, line truncated, traceback cut short), never errors.
    pub fn diagnostics(&self) -> &[ParseDiagnostic] {
        &self.diagnostics
    }

    fn diag(&mut self, seq: u64, message: impl Into<String>) {
        if self.diagnostics.len() < MAX_DIAGNOSTICS {
            self.diagnostics.push(ParseDiagnostic { seq, message: message.into() });
        } else if self.diagnostics.len() == MAX_DIAGNOSTICS {
            self.diagnostics.push(ParseDiagnostic { seq, message: "further diagnostics suppressed".into() });
        }
    }

    /// Feed one captured line. Events are pushed to `out`.
    pub fn push(&mut self, line: &LogLine, out: &mut Vec<Event>) {
        self.lines += 1;
        let raw: &[u8] = &line.bytes;
        let capped = if raw.len() > MAX_LINE {
            self.diag(line.seq, format!("line of {} bytes: only the first {MAX_LINE} are parsed", raw.len()));
            &raw[..MAX_LINE]
        } else {
            raw
        };
        let text: Cow<'_, str> = match std::str::from_utf8(capped) {
            Ok(s) => Cow::Borrowed(s),
            // The cap cut a character in two: parse up to it.
            Err(e) if e.error_len().is_none() && capped.len() < raw.len() => Cow::Borrowed(std::str::from_utf8(&capped[..e.valid_up_to()]).unwrap_or("")),
            Err(_) => {
                self.diag(line.seq, "invalid UTF-8: read with replacement characters");
                String::from_utf8_lossy(capped)
            }
        };
        let p = prefix::split_rank_prefix(text.as_bytes());
        let mut rest = text.get(p.len..).unwrap_or("");
        let prefixed = p.len > 0;
        if prefixed && text.as_bytes().get(p.len - 1) == Some(&b':') {
            rest = rest.strip_prefix(' ').unwrap_or(rest);
        }
        let rest = rest.strip_suffix('\r').unwrap_or(rest);
        let channel: Channel = (p.global_rank, p.local_rank, p.task_id, p.pid);
        let expanded = crate::glued::expand(rest);
        for piece in expanded.as_deref().map_or_else(|| vec![rest], |x| x.split('\n').collect()) {
            for text in crate::glued::segments(piece) {
                let ctx = Ctx {
                    rank: self.rank.or(line.rank).or(p.global_rank.map(Rank)),
                    line: LineRef { stream: line.stream, seq: line.seq },
                    capture_ns: line.capture_ns,
                    text,
                    prefixed,
                };
                self.push_text(&ctx, channel, out);
            }
        }
    }

    /// One line's text (or one segment of a line that held several, see `glued.rs`).
    fn push_text(&mut self, ctx: &Ctx<'_>, channel: Channel, out: &mut Vec<Event>) {
        // Launchers' one-line and few-line reports of a worker's end, and a coordination
        // service's list of the processes it lost, inside a traceback too.
        let mut ends = Vec::new();
        self.unhealthy_tasks.observe(ctx.text, &mut ends);
        self.first_to_exit.observe(ctx.text, &mut ends);
        self.wrapped_report.observe(ctx.text, &mut ends);
        if let Some(k) = launcher::worker_end(ctx.text) {
            ends.push(k);
        }
        let srun = scheduler::srun_task_ends(ctx.text);
        ends.extend(self.srun_cleanup.observe(ctx.text, srun));
        if !ends.is_empty() {
            let origin = ctx.origin();
            out.extend(ends.into_iter().map(|k| origin.event(k, clip(ctx.text, MAX_TEXT).to_string())));
        }
        if let Some(i) = self.blocks.iter().position(|(c, _)| *c == channel) {
            let step = match &mut self.blocks[i].1 {
                Block::Traceback(b) => b.feed(ctx),
                Block::Fault(b) => b.feed(ctx),
                Block::Cpp(b) => b.feed(ctx),
                Block::Warning(b) => b.feed(ctx),
                Block::Terminate(b) => b.feed(ctx, out),
                Block::Table(b) => b.feed(ctx, out),
            };
            match step {
                Step::Consumed => return,
                Step::EndConsumed => {
                    let (_, b) = self.blocks.swap_remove(i);
                    self.close(b, false, out);
                    return;
                }
                Step::EndNotConsumed => {
                    let (_, b) = self.blocks.swap_remove(i);
                    self.close(b, false, out);
                }
            }
        }
        self.classify(ctx, channel, out);
    }

    /// What [`RankParser::finish`] would add now, leaving the parser as it is (more lines may
    /// come): a report of a running job closes open blocks on copies. Only what `finish` reports
    /// (the open blocks, the last collectives, a store barrier still waited in, a held divergence)
    /// is copied, nothing when there are none: a 16,384-rank job has
    /// 32k parsers, nearly all with nothing open.
    pub fn finish_copy(&self, out: &mut Vec<Event>) {
        if self.blocks.is_empty() && self.last_collectives.is_empty() && self.store_barrier.is_none() && self.held_divergence.is_none() {
            return;
        }
        let mut copy = RankParser {
            blocks: self.blocks.clone(),
            last_collectives: self.last_collectives.clone(),
            store_barrier: self.store_barrier.clone(),
            held_divergence: self.held_divergence.clone(),
            ..RankParser::new(self.rank)
        };
        copy.finish(out);
    }

    /// End of input: flush any open multi-line block.
    pub fn finish(&mut self, out: &mut Vec<Event>) {
        out.extend(self.store_barrier.take());
        out.extend(self.held_divergence.take());
        for (_, last) in std::mem::take(&mut self.last_collectives) {
            out.extend(last);
        }
        let mut blocks = std::mem::take(&mut self.blocks);
        blocks.sort_by_key(|(c, _)| *c);
        for (_, b) in blocks {
            self.close(b, true, out);
        }
    }

    fn close(&mut self, b: Block, eof: bool, out: &mut Vec<Event>) {
        match b {
            Block::Traceback(t) => t.finish(out, &mut self.diagnostics),
            Block::Fault(f) => f.finish(out),
            Block::Table(t) => t.finish(out),
            Block::Terminate(t) if eof => t.flush(out),
            Block::Terminate(_) | Block::Cpp(_) | Block::Warning(_) => {}
        }
    }

    fn classify(&mut self, ctx: &Ctx<'_>, channel: Channel, out: &mut Vec<Event>) {
        let t = ctx.text;
        if t.trim().is_empty() {
            return;
        }
        let mut ks = std::mem::take(&mut self.scratch);
        ks.clear();
        let nccl_line = nccl::split(t);
        // A barrier line says who arrived and who did not; it is not an error of this rank's own.
        let mut barrier = false;
        if nccl_line.is_none() {
            match crate::barrier::read(t) {
                Some(crate::barrier::Barrier::Stall(k)) => {
                    ks.push(k);
                    barrier = true;
                }
                Some(crate::barrier::Barrier::Waiting(k)) => {
                    if self.store_barrier.is_none() {
                        self.store_barrier = Some(ctx.origin().event(k, clip(t, MAX_TEXT).to_string()));
                    }
                    barrier = true;
                }
                Some(crate::barrier::Barrier::Completed) => self.store_barrier = None,
                None => {
                    if let Some(k) = crate::desync::read(t) {
                        ks.push(k);
                        barrier = true;
                    }
                }
            }
            let held_before = self.numerics.held().is_some();
            self.numerics.observe(t, &mut ks);
            match self.numerics.held() {
                Some(k) if !held_before => self.held_divergence = Some(ctx.origin().event(k.clone(), clip(t, MAX_TEXT).to_string())),
                Some(_) => {}
                None => self.held_divergence = None,
            }
            crate::horovod::stalls(t, &mut ks);
            self.horovod_ranks.observe(t, &mut ks);
        }
        if let Some(l) = nccl_line {
            if let Some(k) = nccl::collective(&l) {
                self.keep_collective(l.pid, ctx.origin().event(k, clip(t, MAX_TEXT).to_string()));
                self.scratch = ks;
                return;
            }
            nccl::classify(&l, &mut self.seen_comms, &mut ks);
            if l.level == "WARN" {
                self.nccl_chain = nccl::is_proxy_service_warn(l.msg);
                self.last_nccl_warn.clear();
                self.last_nccl_warn.push_str(clip(l.msg.trim(), 240));
            } else if let Some(code) = nccl::return_code(&l).filter(|c| (1..=5).contains(c) && !self.nccl_chain) {
                // A CUDA, system, internal error or a misuse (invalid argument or usage: two
                // ranks on one GPU) NCCL met itself, its WARN just before saying what (a remote
                // error's own WARN and connection lines already say what the peer did).
                self.nccl_chain = true;
                let name = nccl::result_name(code);
                let after = if self.last_nccl_warn.is_empty() { String::new() } else { format!(" after: {}", self.last_nccl_warn) };
                ks.push(EventKind::NcclError {
                    code: Some(name.to_string()),
                    message: format!("{name}: an NCCL call failed with result {code} ({}){after}", l.msg.trim()),
                });
            }
        } else if t.starts_with("frame #") && t.contains("WorkNCCL::checkTimeout") {
            // A C++ stack through the watchdog's timeout check (the `what():` that names the
            // collective cut away): the watchdog caught a collective past its timeout.
            ks.push(EventKind::WatchdogTimeout {
                pg: None,
                seq: None,
                op: "a collective".into(),
                numel_in: None,
                numel_out: None,
                timeout_ms: None,
                elapsed_ms: None,
            });
        } else if t.starts_with(IGNORED_EXCEPTION) {
            // Python's own header for an exception it swallowed (`Exception ignored in: <function
            // X.__del__ ...>`, `Exception ignored in atexit callback: ...`): its traceback follows.
            self.ignored_exception_at = Some(self.lines);
        } else if let Some(mut b) = self.start_block(ctx, &mut ks) {
            if let Block::Traceback(tb) = &mut b {
                tb.ignored = self.ignored_exception_at.is_some_and(|at| at + 1 == self.lines);
            }
            self.blocks.push((channel, b));
        } else if let Some(g) = glog::parse(t) {
            if !barrier {
                glog_line(&g, &mut ks);
            }
        } else if let Some((level, msg)) = pylog::pylog(t) {
            if !launcher::classify_body(msg, &mut ks) {
                match level {
                    // A launcher's report of a worker's end (`ERROR:composer.cli.launcher:Rank 2
                    // crashed with exit code -7.`) is read as that worker's end above.
                    pylog::Level::Error if launcher::worker_end(msg).is_some() || launcher::wrapped_report_head(msg) => {}
                    pylog::Level::Error => {
                        ks.push(EventKind::ErrorLine { message: msg.trim_end().to_string() });
                        c10d::specific(msg, &mut ks);
                    }
                    // A record below ERROR that reports an error all the same (TensorFlow's
                    // `INFO:tensorflow:Error reported to Coordinator: ... Tensor had NaN values`).
                    _ if failures::reports_an_error(msg) => {
                        ks.push(EventKind::ErrorLine { message: msg.trim_end().to_string() });
                        c10d::specific(msg, &mut ks);
                    }
                    pylog::Level::Warning => {}
                    pylog::Level::Info | pylog::Level::Debug => {
                        if let Some(step) = steps::step(msg) {
                            ks.push(EventKind::Step { step });
                        }
                    }
                }
            }
        } else if let Some(f) = crate::notebook::field(t) {
            match f {
                crate::notebook::Field::Name(ty) => self.json_error = Some(ty.to_string()),
                crate::notebook::Field::Message(msg) => {
                    if let Some(ty) = self.json_error.take() {
                        let line = format!("{ty}: {msg}");
                        c10d::specific(&line, &mut ks);
                        ks.insert(0, EventKind::ErrorLine { message: line });
                    } else if failures::is_exception_line(msg) {
                        // An error file's JSON as torchelastic's `error_handler` logs it:
                        // `"message": "RendezvousConnectionError: The connection to ..."`.
                        c10d::specific(msg, &mut ks);
                        ks.insert(0, EventKind::ErrorLine { message: msg.to_string() });
                    }
                }
            }
        } else if let Some(sample) = coroner_model::GpuSample::from_line(t) {
            ks.push(EventKind::GpuSample(sample));
        } else if let Some(k) = scheduler::slurm(t).or_else(|| scheduler::kubernetes(t)) {
            ks.push(k);
        } else if self.lines.saturating_sub(self.last_bare_at) < DEDUP_WINDOW && same_template(t, &self.last_bare) {
            self.last_bare_at = self.lines;
        } else if launcher::classify_body(t, &mut ks) {
            // torchrun's report with its logger's header cut off (a paste from mid-line:
            // `torch/distributed/elastic/multiprocessing/api.py:826] failed (exitcode: -9) ...`).
        } else if failures::bare(t, &mut ks) {
            if matches!(ks.first(), Some(EventKind::ErrorLine { .. })) {
                self.last_bare.clear();
                self.last_bare.push_str(clip(t, 4096));
                self.last_bare_at = self.lines;
            }
        } else if let Some(step) = steps::step(t) {
            ks.push(EventKind::Step { step });
        }
        if ks.iter().any(|k| matches!(k, EventKind::WatchdogAbort { .. })) {
            self.watchdog_abort_at = Some(self.lines);
        }
        ks.retain(|k| self.fresh(k));
        if !ks.is_empty() {
            let origin = ctx.origin();
            for k in ks.drain(..) {
                out.push(origin.event(k, clip(t, MAX_TEXT).to_string()));
            }
        }
        self.scratch = ks;
    }

    fn start_block(&mut self, ctx: &Ctx<'_>, ks: &mut Vec<EventKind>) -> Option<Block> {
        let t = ctx.text;
        match t.as_bytes().first()? {
            b' ' => {
                // A launcher's failure table pasted from inside its first row.
                if let Some(b) = FailureTable::start_headless(ctx) {
                    return Some(Block::Table(b));
                }
                // A pasted traceback whose head was cut: its frames come first.
                if let Some(b) = Traceback::start_headless(ctx) {
                    return Some(Block::Traceback(b));
                }
                let (b, msg) = PyWarning::start(ctx)?;
                ks.push(EventKind::Warning { message: msg });
                Some(Block::Warning(b))
            }
            b'T' => {
                if let Some(b) = Traceback::start(ctx) {
                    return Some(Block::Traceback(b));
                }
                if let Some(b) = FaultDump::start(ctx) {
                    return Some(Block::Fault(b));
                }
                None
            }
            b'F' => {
                if let Some(b) = FaultDump::start(ctx) {
                    return Some(Block::Fault(b));
                }
                FailureTable::start(ctx).map(Block::Table)
            }
            b'E' => CppFrames::start(ctx).map(Block::Cpp),
            b't' => Terminate::start(ctx).map(|mut t| {
                // Right after ProcessGroupNCCL's watchdog said it is taking the process down: the
                // abort is the watchdog's, whatever type it threw (`std::runtime_error` in older
                // releases).
                t.watchdogs = self.watchdog_abort_at.is_some_and(|at| self.lines.saturating_sub(at) <= 4);
                Block::Terminate(t)
            }),
            b'R' => FailureTable::start(ctx).map(Block::Table),
            _ => {
                let (b, msg) = PyWarning::start(ctx)?;
                ks.push(EventKind::Warning { message: msg });
                Some(Block::Warning(b))
            }
        }
    }

    /// Keeps a process's last [`KEPT_COLLECTIVES`] collective traces (at most 1,024 processes).
    fn keep_collective(&mut self, pid: u32, e: Event) {
        const KEPT_COLLECTIVES: usize = 2;
        let i = match self.last_collectives.iter().position(|(p, _)| *p == pid) {
            Some(i) => i,
            None if self.last_collectives.len() < 1024 => {
                self.last_collectives.push((pid, std::collections::VecDeque::new()));
                self.last_collectives.len() - 1
            }
            None => return,
        };
        let q = &mut self.last_collectives[i].1;
        if q.len() == KEPT_COLLECTIVES {
            q.pop_front();
        }
        q.push_back(e);
    }

    /// False for a repeat (same kind and template within the window) of a noisy kind.
    fn fresh(&mut self, k: &EventKind) -> bool {
        let (tag, msg) = match k {
            EventKind::Warning { message } => (1u64, message),
            EventKind::ErrorLine { message } => (2, message),
            EventKind::StoreError { message } => (3, message),
            EventKind::NcclWarn { message } => (4, message),
            _ => return true,
        };
        let h = template_hash(clip(msg, 4096)) ^ tag.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let now = self.lines;
        if self.recent.len() > 4096 {
            self.recent.retain(|_, (seen, _)| now.saturating_sub(*seen) < DEDUP_WINDOW);
        }
        let (seen, times) = self.recent.entry(h).or_insert((now, 0));
        if *times > 0 && now.saturating_sub(*seen) >= DEDUP_WINDOW {
            *times = 0;
        }
        *seen = now;
        *times += 1;
        // An error line passes up to `ERROR_REPEATS` times: that a process logs the same error
        // again and again is itself evidence (it lived through it), which the analysis reads.
        *times == 1 || tag == 2 && *times <= ERROR_REPEATS
    }
}

/// Equal after every run of digits is taken as one digit (`thread: [3,0,0]` ~ `thread: [17,0,0]`).
fn same_template(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if b.is_empty() || a.len().abs_diff(b.len()) > 16 || a.len() > 4096 {
        return false;
    }
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        // Skip equal stretches 16 bytes at a time.
        while i + 16 <= a.len() && j + 16 <= b.len() && a[i..i + 16] == b[j..j + 16] {
            i += 16;
            j += 16;
        }
        if i >= a.len() || j >= b.len() {
            break;
        }
        let (x, y) = (a[i], b[j]);
        let in_run = i > 0 && j > 0 && a[i - 1].is_ascii_digit() && b[j - 1].is_ascii_digit();
        if x != y && (x.is_ascii_digit() || y.is_ascii_digit()) && (in_run || (x.is_ascii_digit() && y.is_ascii_digit())) {
            while i < a.len() && a[i].is_ascii_digit() {
                i += 1;
            }
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
        } else if x == y {
            i += 1;
            j += 1;
        } else {
            return false;
        }
    }
    i == a.len() && j == b.len()
}

/// How Python begins the report of an exception it ignored (`Exception ignored in: ...`,
/// `Exception ignored in atexit callback: ...`, `Exception ignored while ...`).
const IGNORED_EXCEPTION: &str = "Exception ignored ";

/// E-level c10d lines that narrate the dump procedure rather than report a failure.
const GLOG_NOISE: [&str; 5] =
    ["signal dumping", "preparing to dump debug info", "Stack trace of the failed collective", "Observed flight recorder dump signal", "Flight Recorder"];

fn glog_line(g: &glog::Glog<'_>, ks: &mut Vec<EventKind>) {
    let body = g.body.trim_end();
    if launcher::classify_body(body, ks) || c10d::classify_body(body, ks) {
        return;
    }
    if !body.bytes().any(|c| c.is_ascii_alphabetic()) {
        return;
    }
    match g.level {
        b'E' | b'F' if !GLOG_NOISE.iter().any(|n| body.contains(n)) => {
            ks.push(EventKind::ErrorLine { message: body.to_string() });
            ks.extend(crate::coordination::lost_task(body));
        }
        b'W' => {
            if failures::has_failure_phrase(body) || failures::collective_abort(body) {
                ks.push(EventKind::ErrorLine { message: body.to_string() });
            } else {
                ks.push(EventKind::Warning { message: body.to_string() });
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::same_template;

    #[test]
    fn templates_compare_modulo_digits() {
        let a = "/pytorch/aten/src/ATen/native/cuda/IndexKernelUtils.cu:16: vectorized_gather_kernel: block: [146,0,0], thread: [3,0,0] Assertion `ind >=0` failed.";
        let b = "/pytorch/aten/src/ATen/native/cuda/IndexKernelUtils.cu:16: vectorized_gather_kernel: block: [146,0,0], thread: [17,0,0] Assertion `ind >=0` failed.";
        assert!(same_template(a, b) && same_template(b, a));
        assert!(same_template("x 12 y", "x 123 y") && same_template("x 123 y", "x 12 y"));
        assert!(!same_template("a1", "ab"));
        assert!(!same_template(a, "something else entirely"));
        assert!(!same_template("x", ""));
        assert!(!same_template(&a.replace("thread", "threat"), b));
    }

    #[test]
    fn finish_copy_gives_what_finish_gives_and_leaves_the_parser_open() {
        use super::RankParser;
        use coroner_model::{LogLine, Rank, Stream};
        let traceback = [
            "Traceback (most recent call last):",
            "  File \"train.py\", line 10, in <module>",
            "    main()",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        ];
        // A store barrier still waited in is reported by `finish` too (a start-up short of ranks).
        let barrier = ["I0101 10:00:00.000000 1 distributed_c10d.py:300] Waiting in store based barrier to initialize process group for rank: 3, key: store_based_barrier_key:1 (world_size=4, worker_count=3, timeout=0:30:00)"];
        for lines in [&traceback[..], &barrier[..]] {
            let mut p = RankParser::new(Some(Rank(3)));
            let mut out = Vec::new();
            for (seq, text) in lines.iter().enumerate() {
                p.push(
                    &LogLine { rank: Some(Rank(3)), stream: Stream::Stderr, seq: seq as u64, capture_ns: seq as i64, bytes: text.as_bytes().to_vec() },
                    &mut out,
                );
            }
            let (mut copied, mut finished) = (Vec::new(), Vec::new());
            p.finish_copy(&mut copied);
            p.clone().finish(&mut finished);
            assert!(!finished.is_empty(), "something is still open after {lines:?}: {out:?}");
            assert_eq!(copied, finished);
            let mut again = Vec::new();
            p.finish_copy(&mut again);
            assert_eq!(again, finished, "the parser itself was left open");
        }
        let mut none = Vec::new();
        RankParser::new(None).finish_copy(&mut none);
        assert!(none.is_empty());
    }
}
