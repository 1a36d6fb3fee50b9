//! A log that does not say whose it is: one `train.log`, a pod log, a pasted traceback, `dmesg`.
//! Offline input often comes like this; the lines are filed by what they show, most certain
//! first:
//!
//! 1. a kernel log (most lines shaped like `dmesg` or `journalctl -k`) belongs to no rank: its
//!    Xid and OOM-killer lines are joined to ranks by the pid or GPU they name (`hardware.rs`);
//! 2. a line with a launcher prefix (`[rank3]:`, `[default1]:`, `3: `, `[1,3]<stderr>:`) is that
//!    rank's, as on every other path;
//! 3. the other lines are the log's own process. Its rank is the one its lines name themselves
//!    (`[Rank 3] Watchdog caught ...`, `... INFO [rank3] ...`, `RANK=3`; `coroner_parse::selfrank`)
//!    when they all name the same one; when they name several, each such line goes to the rank it
//!    names and the rest to one process of unknown rank ([`Rank::unknown`]). The report says
//!    which it was.

use crate::stamp_lines::StampLines;
use crate::unwrap::{Rejoin, Widths};
use crate::JobPipeline;
use coroner_model::{EventKind, LogLine, Rank};
use coroner_parse::launcher::{relayed_output, Relayed};
use coroner_parse::prefix::{split_rank_prefix, RankPrefix};
use coroner_parse::{kernel::looks_like_kernel_line, selfrank::self_described};
use std::collections::BTreeMap;
use std::collections::BTreeSet;

/// How one log without an owner is filed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Filing {
    /// A kernel log: no rank owns it.
    Kernel,
    /// The log's unprefixed lines: `own` unless `per_line` (several ranks named) and the line
    /// names one. `learned` is the one rank every self-describing line named.
    Process { learned: Option<Rank>, per_line: bool, prefixed: usize, unprefixed: usize },
}

/// A log being filed line by line ([`JobPipeline::begin_log`]): how its filing was decided and
/// the processes its actor prefixes named so far.
#[derive(Debug)]
pub(crate) struct OpenLog {
    source: String,
    /// `None` for a kernel log (no rank owns its lines).
    own: Option<Rank>,
    per_line: bool,
    actors: BTreeMap<u32, Rank>,
    /// A log a terminal hard-wrapped: its pieces are joined back into lines (`unwrap.rs`).
    rejoin: Option<Rejoin>,
    /// Stamps printed on lines of their own, put back before their records (`stamp_lines.rs`).
    stamps: StampLines,
    /// The rank whose captured output a launcher is relaying, between its markers
    /// (`coroner_parse::launcher::Relayed`): the unprefixed lines there are that rank's.
    relayed: Option<Rank>,
    /// Spaces every line of the log starts with, taken off before anything reads it.
    dedent: usize,
}

impl JobPipeline {
    /// A whole log whose owner neither a session nor its name tells (offline input: one
    /// `train.log`, a pod log, `dmesg`), named `source` in the report's notes. Its lines are
    /// filed by what they show (`unranked.rs`): a kernel log under no rank, prefixed lines under
    /// their prefix's rank, the rest under the rank they name themselves or one process of
    /// unknown rank. [`JobPipeline::begin_log`] does the same for a log too large to hold.
    pub fn push_log(&mut self, source: &str, lines: Vec<LogLine>) {
        let mut survey = LogSurvey::default();
        for l in &lines {
            survey.see(&l.bytes);
        }
        self.begin_log(source, &survey);
        for l in lines {
            self.push_log_line(l);
        }
        self.end_log();
    }

    /// Starts filing a log as [`JobPipeline::push_log`] does, one line at a time and in bounded
    /// memory: `survey` has seen every line of it first (a first pass over the file), then
    /// each line comes through [`JobPipeline::push_log_line`], then [`JobPipeline::end_log`].
    pub fn begin_log(&mut self, source: &str, survey: &LogSurvey) {
        let filing = if kernel_log_name(source) { Filing::Kernel } else { survey.filing() };
        let own = match filing {
            Filing::Kernel => {
                self.add_note(format!(
                    "{source} is a kernel log: its lines belong to no rank; Xid and OOM-killer lines are joined to a rank by the pid or GPU they name"
                ));
                None
            }
            Filing::Process { learned: Some(r), .. } => {
                self.add_note(format!("{source}: no file name or prefix gives its rank; its own lines say rank {r} (as c10d and logging formats print it), so it is read as rank {r}'s log"));
                Some(r)
            }
            Filing::Process { learned: None, prefixed, unprefixed, .. } => {
                let r = Rank::unknown(self.unknown_logs);
                self.unknown_logs = self.unknown_logs.saturating_add(1);
                if unprefixed > 0 && prefixed == 0 {
                    self.add_note(format!("{source}: no file name, prefix or line of its own gives its rank: read as the log of one process of unknown rank"));
                }
                self.evidence.unknown_sources.insert(r, source.to_string());
                Some(r)
            }
        };
        let per_line = matches!(filing, Filing::Process { per_line: true, .. });
        let rejoin = survey.widths.wrap_width().map(|w| {
            self.add_note(format!("{source}: hard-wrapped at {w} columns (most lines are exactly {w} characters, none longer): a line of that width is read joined with the line after it"));
            Rejoin::new(w)
        });
        let dedent = survey.common_indent();
        if dedent > 0 {
            self.add_note(format!("{source}: every line is indented by {dedent} spaces (a log pasted as a code block): read without them"));
        }
        self.open_log =
            Some(OpenLog { source: source.to_string(), own, per_line, actors: BTreeMap::new(), rejoin, stamps: StampLines::default(), relayed: None, dedent });
    }

    /// One line of the log [`JobPipeline::begin_log`] opened (a line given with no log open is
    /// filed as [`JobPipeline::push_line`] files it).
    pub fn push_log_line(&mut self, mut line: LogLine) {
        let Some(log) = self.open_log.as_mut() else {
            self.push_line(line);
            return;
        };
        if log.dedent > 0 {
            let n = line.bytes.iter().take(log.dedent).take_while(|b| **b == b' ').count();
            line.bytes.drain(..n);
        }
        let whole = match log.rejoin.as_mut() {
            Some(r) => r.push(line),
            None => Some(line),
        };
        if let Some(line) = whole.and_then(|l| log.stamps.push(l)) {
            self.file_log_line(line);
        }
    }

    fn file_log_line(&mut self, mut line: LogLine) -> bool {
        let Some(log) = self.open_log.as_mut() else { return self.push_line(line) };
        let Some(own) = log.own else {
            line.rank = None;
            return self.push_line(line);
        };
        let p = split_rank_prefix(&line.bytes);
        let rest = p.rest(&line.bytes);
        if rest.first() == Some(&b'-') {
            match relayed_output(&String::from_utf8_lossy(rest)) {
                Some(Relayed::Begin(r)) => log.relayed = Some(Rank(r)),
                Some(Relayed::End) => {
                    line.rank = log.relayed.take().or(Some(own));
                    return self.push_line(line);
                }
                None => {}
            }
        }
        line.rank = match owner_kind(&p) {
            Owner::Rank => None,
            Owner::Own => Some(log.relayed.unwrap_or_else(|| owner_of(&line, &p, own, log.per_line))),
            Owner::Process(pid) => Some(match log.actors.get(&pid) {
                Some(r) => *r,
                None => {
                    let r = Rank::unknown(self.unknown_logs);
                    self.unknown_logs = self.unknown_logs.saturating_add(1);
                    log.actors.insert(pid, r);
                    self.evidence.unknown_sources.insert(r, format!("{}, pid {pid}", log.source));
                    r
                }
            }),
        };
        self.push_line(line)
    }

    /// The log [`JobPipeline::begin_log`] opened is over.
    pub fn end_log(&mut self) {
        let mut rest = Vec::new();
        if let Some(log) = self.open_log.as_mut() {
            let last = log.rejoin.as_mut().and_then(Rejoin::flush);
            rest.extend(last.and_then(|l| log.stamps.push(l)));
            rest.extend(log.stamps.flush());
        }
        for line in rest {
            self.file_log_line(line);
        }
        self.open_log = None;
    }
}

/// One log of unknown rank and one rank that a launcher reports ended but that has no line of
/// its own: they are the same process (a single worker's log beside its launcher's report, a
/// DeepSpeed or torchrun console). The log's process is taken to be that rank, and a note says so.
pub(crate) fn identify_by_launcher(evidence: &mut coroner_analysis::JobEvidence) {
    // Only a worker's own failure makes the log a worker's: a launcher's output (its traceback
    // runs through the launcher's code) stays a process of its own.
    let launchers_words = |m: &str| m.contains("ChildFailedError") || m.contains("processes exited with non-zero") || m.contains("CalledProcessError");
    let workers_own = |e: &coroner_model::Event| match &e.kind {
        EventKind::Exception { message, frames, .. } => !launchers_words(message) && !frames.iter().any(|f| coroner_parse::launcher::is_launcher_code(&f.file)),
        // An exception's last line pasted without its traceback: `torch.cuda.OutOfMemoryError: ...`.
        EventKind::ErrorLine { message } => {
            let ty = message.split(':').next().unwrap_or("");
            let is_type = !ty.is_empty()
                && ty.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_')
                && (ty.ends_with("Error") || ty.ends_with("Exception"));
            // Or the process's own signal handler (Open MPI's `[host:pid] Signal: Segmentation
            // fault (11)`, UCX's `Caught signal 11`): a native crash reported by the worker itself.
            let native = message.contains("Signal: ") && message.trim_end().ends_with(')') || message.contains("Caught signal ");
            (is_type || native) && !launchers_words(message)
        }
        EventKind::FatalSignal { .. } => true,
        _ => false,
    };
    let unknown: Vec<Rank> = evidence.ranks.iter().filter(|(r, ev)| r.is_unknown() && ev.events.iter().any(workers_own)).map(|(r, _)| *r).collect();
    let silent_ended: Vec<Rank> =
        evidence.ends.iter().map(|e| e.rank).filter(|r| !r.is_unknown() && evidence.ranks.get(r).is_none_or(|ev| ev.lines == 0)).collect();
    let (&[u], &[r]) = (unknown.as_slice(), silent_ended.as_slice()) else { return };
    let Some(source) = evidence.unknown_sources.get(&u).cloned() else { return };
    if source.contains(", pid ") {
        return; // an actor's own process: its pid already names it apart from the launcher's worker
    }
    let Some(mut ev) = evidence.ranks.remove(&u) else { return };
    for e in &mut std::sync::Arc::make_mut(&mut ev).events {
        e.rank = Some(r);
    }
    evidence.unknown_sources.remove(&u);
    evidence.ranks.insert(r, ev);
    let unknown_note = format!("{source}: no file name, prefix or line of its own gives its rank");
    evidence.notes.retain(|n| !n.starts_with(&unknown_note));
    evidence
        .notes
        .push(format!("{source}: read as rank {r}'s log: its lines name no rank, and the launcher reports that rank {r}, which has no other log, ended"));
}

/// Decides how a log's lines are filed (pure; see the module doc).
/// Whether a file's name says it is a kernel log (`dmesg.txt`, `kern.log`, `journalctl-k.out`).
pub(crate) fn kernel_log_name(source: &str) -> bool {
    let name = source.rsplit('/').next().unwrap_or(source).to_ascii_lowercase();
    ["dmesg", "kern.log", "kernel", "journalctl"].iter().any(|k| name.contains(k))
}

#[cfg(test)]
pub(crate) fn decide(lines: &[LogLine]) -> Filing {
    let mut survey = LogSurvey::default();
    for l in lines {
        survey.see(&l.bytes);
    }
    survey.filing()
}

/// What a first look at every line of a log without an owner found, one line at a time (its
/// memory is the set of ranks its lines name): what [`JobPipeline::begin_log`] files it by.
#[derive(Debug, Clone, Default)]
pub struct LogSurvey {
    kernel: usize,
    nonblank: usize,
    prefixed: usize,
    named: BTreeSet<u32>,
    widths: Widths,
    /// The indentation every non-blank line shares (a log pasted as an indented code block).
    indent: Option<usize>,
}

impl LogSurvey {
    /// One line of the log, in order.
    pub fn see(&mut self, line: &[u8]) {
        let text = String::from_utf8_lossy(line);
        if text.trim().is_empty() {
            return;
        }
        self.nonblank += 1;
        let spaces = line.iter().take_while(|b| **b == b' ').count();
        self.indent = Some(self.indent.map_or(spaces, |i| i.min(spaces)));
        self.widths.see(&text);
        let p = split_rank_prefix(text.as_bytes());
        let rest = String::from_utf8_lossy(p.rest(text.as_bytes()));
        self.kernel += usize::from(looks_like_kernel_line(&rest));
        match owner_kind(&p) {
            Owner::Rank => self.prefixed += 1,
            Owner::Process(_) => {}
            Owner::Own => {
                if let Some(r) = self_described(&rest) {
                    self.named.insert(r);
                }
            }
        }
    }

    /// The indentation to take off every line: what all of two or more non-blank lines share.
    fn common_indent(&self) -> usize {
        self.indent.filter(|_| self.nonblank >= 2).unwrap_or(0)
    }

    /// How the log is filed (pure; see the module doc).
    pub(crate) fn filing(&self) -> Filing {
        if self.nonblank > 0 && self.kernel * 2 > self.nonblank {
            return Filing::Kernel;
        }
        let learned = if self.named.len() == 1 { self.named.first().copied().map(Rank) } else { None };
        Filing::Process { learned, per_line: self.named.len() > 1, prefixed: self.prefixed, unprefixed: self.nonblank - self.prefixed }
    }
}

/// What a line's prefixes say about its owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    /// A launcher prefix names a rank (global, local or task): the pipeline's `RankFiler` files it.
    Rank,
    /// An actor prefix names a process by pid only (`(RayTrainWorker pid=43515)`).
    Process(u32),
    /// Nothing but wrappers (colour codes, container stamps): the log's own process.
    Own,
}

pub(crate) fn owner_kind(p: &RankPrefix) -> Owner {
    match (p.global_rank, p.local_rank, p.task_id, p.pid) {
        (None, None, None, Some(pid)) => Owner::Process(pid),
        (None, None, None, None) => Owner::Own,
        _ => Owner::Rank,
    }
}

/// The owner of one line of the log's own process: the rank it names itself when the log names
/// several, else the log's own process.
pub(crate) fn owner_of(line: &LogLine, p: &RankPrefix, own: Rank, per_line: bool) -> Rank {
    if per_line {
        let text = String::from_utf8_lossy(p.rest(&line.bytes));
        // `what(): [Rank 0] ...` continues the `terminate called ...` line before it: the
        // record stays whole on the log's own process.
        if !text.trim_start().starts_with("what()") {
            if let Some(r) = self_described(&text) {
                return Rank(r);
            }
        }
    }
    own
}

/// Whether an event of a process of unknown rank belongs to no rank: what a launcher, a
/// scheduler or the kernel printed into the same log (its own lines are filed there too).
pub(crate) fn belongs_to_no_rank(kind: &EventKind) -> bool {
    matches!(
        kind,
        EventKind::LauncherWorkerFailed(_)
            | EventKind::LauncherSignal { .. }
            | EventKind::Xid { .. }
            | EventKind::OomKill { .. }
            | EventKind::SchedulerEnd { .. }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use coroner_model::Stream;

    fn lines(texts: &[&str]) -> Vec<LogLine> {
        texts
            .iter()
            .enumerate()
            .map(|(i, t)| LogLine { rank: None, stream: Stream::File, seq: i as u64, capture_ns: 0, bytes: t.as_bytes().to_vec() })
            .collect()
    }

    #[test]
    fn a_dmesg_excerpt_is_a_kernel_log() {
        let l = lines(&[
            "[Fri Jan 29 23:42:34 2021] NVRM: Xid (PCI:0000:db:00): 31, pid=13641",
            "[Fri Jan 29 23:42:35 2021] NVRM: Xid (PCI:0000:db:00): 43, pid=13641",
            "some wrapped tail",
        ]);
        assert_eq!(decide(&l), Filing::Kernel);
    }

    #[test]
    fn a_kernel_log_by_name() {
        assert!(kernel_log_name("logs/dmesg.txt") && kernel_log_name("kern.log") && kernel_log_name("journalctl-k.out"));
        assert!(!kernel_log_name("train.log") && !kernel_log_name("rank3.log"));
    }

    #[test]
    fn a_log_whose_lines_name_one_rank_is_that_ranks() {
        let l = lines(&["Traceback (most recent call last):", "[E ProcessGroupNCCL.cpp:587] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600100 milliseconds before timing out."]);
        assert_eq!(decide(&l), Filing::Process { learned: Some(Rank(3)), per_line: false, prefixed: 0, unprefixed: 2 });
    }

    #[test]
    fn a_log_whose_lines_name_several_ranks_files_each_such_line_under_its_rank() {
        let l = lines(&[
            "[E ProcessGroupNCCL.cpp:587] [Rank 1] Watchdog caught collective operation timeout",
            "[E ProcessGroupNCCL.cpp:587] [Rank 0] Watchdog caught collective operation timeout",
            "terminate called after throwing an instance of 'std::runtime_error'",
        ]);
        let f = decide(&l);
        assert_eq!(f, Filing::Process { learned: None, per_line: true, prefixed: 0, unprefixed: 3 });
        let none = RankPrefix::default();
        assert_eq!(owner_of(&l[0], &none, Rank::unknown(0), true), Rank(1));
        assert_eq!(owner_of(&l[2], &none, Rank::unknown(0), true), Rank::unknown(0));
    }

    #[test]
    fn a_log_that_names_no_rank_is_one_process_of_unknown_rank() {
        let l = lines(&["[rank1]: Traceback (most recent call last):", "RuntimeError: Error(s) in loading state_dict for Net:"]);
        assert_eq!(decide(&l), Filing::Process { learned: None, per_line: false, prefixed: 1, unprefixed: 1 });
    }
}
