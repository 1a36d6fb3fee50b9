//! The one pipeline from lines to report. Offline (`coroner analyze`) and online (coronerd) feed it
//! the same way, so every golden test of the offline path also tests the server's analysis.
//!
//! It owns the stateful per-(rank, stream) parsers, files launcher lines under their worker's rank,
//! and accumulates the [`JobEvidence`] the pure analysis reads. No IO.

mod attempts;
#[cfg(test)]
mod attempts_tests;
#[cfg(test)]
mod push_log_tests;
mod report_input;
mod stamp_lines;
mod unranked;
mod unwrap;

pub use report_input::ReportInput;
pub use unranked::LogSurvey;

use attempts::AttemptStarts;
use coroner_analysis::live::{LiveConfig, LiveMonitor};
use coroner_analysis::{JobEvidence, RuleSet};
use coroner_model::{seq_lane, ClockSample, Event, EventKind, LogLine, Nanos, PgId, ProcessEnd, Rank, Report, SeqNo, SnapshotSummary, Stream, SuspectedHang};
use coroner_parse::{RankFiler, RankParser};
use std::collections::BTreeMap;

/// A job's state between lines and report.
pub struct JobPipeline {
    evidence: JobEvidence,
    parsers: BTreeMap<(Option<Rank>, Stream), RankParser>,
    /// Files a launcher's lines under the ranks their prefixes name: one filer per lane of
    /// sequence numbers (`coroner_model::seq_lane`), that is per agent, so per node when each
    /// node's launcher has its agent (offline, everything is lane 0).
    filers: BTreeMap<u32, RankFiler>,
    /// Ends reported first-hand (by an agent or an exits file) win over a launcher's table.
    first_hand_ends: BTreeMap<Rank, ProcessEnd>,
    /// First-hand ends of a rank's earlier attempts (a later end of the rank replaced them above).
    earlier_ends: Vec<ProcessEnd>,
    /// When each attempt after the first began (`attempts.rs`).
    attempts: AttemptStarts,
    /// Lines per (rank, attempt), counted as they arrive.
    attempt_lines: BTreeMap<(Rank, u32), u64>,
    /// A per-node launcher (torchrun) exited 0: it does so only when every worker did.
    launcher_succeeded: bool,
    /// The live hang monitor, for a job watched while it runs (coronerd); off offline.
    live: Option<LiveMonitor>,
    /// What the live monitor's owner last decided to show, attached to running reports.
    live_findings: Vec<SuspectedHang>,
    /// How many processes of unknown rank were made (`push_log`), and from which logs.
    unknown_logs: u32,
    /// The log being filed line by line (`begin_log`), if any.
    open_log: Option<unranked::OpenLog>,
}

impl JobPipeline {
    pub fn new(job_id: &str) -> Self {
        JobPipeline {
            evidence: JobEvidence { job_id: job_id.to_string(), ..Default::default() },
            parsers: BTreeMap::new(),
            filers: BTreeMap::new(),
            first_hand_ends: BTreeMap::new(),
            earlier_ends: Vec::new(),
            attempts: AttemptStarts::default(),
            attempt_lines: BTreeMap::new(),
            launcher_succeeded: false,
            live: None,
            live_findings: Vec::new(),
            unknown_logs: 0,
            open_log: None,
        }
    }

    /// Watches the lines as they arrive for ranks that stop making progress (see
    /// [`coroner_analysis::live`]); lines pushed before this are not seen by the monitor.
    pub fn enable_live(&mut self, config: LiveConfig) {
        self.live = Some(LiveMonitor::new(config));
    }

    pub fn live(&self) -> Option<&LiveMonitor> {
        self.live.as_ref()
    }

    pub fn live_mut(&mut self) -> Option<&mut LiveMonitor> {
        self.live.as_mut()
    }

    /// Whether every agent reported its end (or the input was a finished bundle).
    pub fn is_finished(&self) -> bool {
        self.evidence.finished
    }

    pub fn live_findings(&self) -> &[SuspectedHang] {
        &self.live_findings
    }

    /// The live findings a running job's report carries from now on.
    pub fn set_live_findings(&mut self, findings: Vec<SuspectedHang>) {
        self.live_findings = findings;
    }

    /// The job's world size (the largest one stated). One beyond [`coroner_model::MAX_WORLD_SIZE`]
    /// is not believed: it becomes a note.
    pub fn set_world_size(&mut self, n: u32) {
        if n > coroner_model::MAX_WORLD_SIZE {
            self.add_note(format!("a world size of {n} was ignored: beyond the largest believed ({})", coroner_model::MAX_WORLD_SIZE));
            return;
        }
        self.evidence.world_size = Some(self.evidence.world_size.map_or(n, |w| w.max(n)));
    }

    /// The world size as the evidence has it now.
    pub fn world_size(&self) -> Option<u32> {
        self.evidence.world_size
    }

    /// The world size a launcher's own lines stated (torchrun's rendezvous result, DeepSpeed's
    /// rank mapping: `coroner_parse::topology`). Not taken into the evidence by itself: a
    /// line is a claim, and whoever feeds the pipeline decides how far to believe it (coronerd
    /// as far as its agents warrant, `coroner analyze` wholly: see `coroner_bundle`).
    pub fn said_world_size(&self) -> Option<u32> {
        self.filers.values().filter_map(RankFiler::world_size).max()
    }

    /// For a per-node launcher's lines, numbered in `lane`: the global rank of local rank 0 on
    /// that node.
    pub fn set_node_rank_base(&mut self, lane: u32, base: u32) {
        self.filers.entry(lane).or_default().set_base(base);
    }

    /// Attempt `attempt` of the job was under way at `at_ns` (a session opened for it; see
    /// `attempts.rs`). Attempt 0 is the job's first start and needs no mark.
    pub fn mark_attempt(&mut self, attempt: u32, at_ns: Nanos) {
        self.attempts.mark(attempt, at_ns);
    }

    /// The attempt in which `rank`'s process last ended, when it did (first-hand).
    pub fn ended_in_attempt(&self, rank: Rank) -> Option<u32> {
        let end = self.first_hand_ends.get(&rank)?;
        Some(self.attempts.attempt_at(end.at_ns.unwrap_or(Nanos::MAX)))
    }

    /// The global rank of local rank `local` of the launcher whose lines are numbered in `lane`.
    fn global_of(&self, lane: u32, local: u32) -> Rank {
        self.filers.get(&lane).map_or(Rank(local), |f| f.global_of(local))
    }

    pub fn set_host(&mut self, rank: Rank, host: &str) {
        if !host.is_empty() {
            self.evidence.rank_mut(rank).host = Some(host.to_string());
            if let Some(live) = &mut self.live {
                live.set_host(rank, host);
            }
        }
    }

    /// Feeds one captured line. A line without an owner is filed by its launcher prefix, if any.
    /// Answers whether it was news: a rank's first line, a restart, or an event other than
    /// routine progress ([`EventKind::is_routine`]); a line that was not can wait for the next
    /// report rather than cause one (coronerd's reporter).
    pub fn push_line(&mut self, line: LogLine) -> bool {
        self.push_line_from(line, "")
    }

    /// [`JobPipeline::push_line`] for a line an agent on `host` shipped: a rank its launcher
    /// prefix names takes that host when it has none (a per-node agent's session names no rank,
    /// so the ranks of its node are known only through it). A rank's own session's host wins.
    pub fn push_line_from(&mut self, mut line: LogLine, host: &str) -> bool {
        let mut news = false;
        let lane = seq_lane(line.seq);
        if line.rank.is_none() {
            let filer = self.filers.entry(lane).or_default();
            let before = filer.restart_count();
            line.rank = filer.owner(&line.bytes);
            // torchrun restarted its workers: its rendezvous result counts the restarts.
            if let Some(n) = filer.restart_count().filter(|n| Some(*n) != before) {
                self.attempts.mark_lane(lane, n, line.capture_ns);
                news = true;
            }
            if let Some(rank) = line.rank.filter(|r| !host.is_empty() && self.evidence.ranks.get(r).is_none_or(|e| e.host.is_none())) {
                self.set_host(rank, host);
                news = true;
            }
        }
        if let Some(rank) = line.rank {
            *self.attempt_lines.entry((rank, self.attempts.attempt_of(lane, line.capture_ns))).or_default() += 1;
            let ev = self.evidence.rank_mut(rank);
            ev.lines += 1;
            news |= ev.lines == 1;
            ev.first_capture_ns = Some(ev.first_capture_ns.map_or(line.capture_ns, |t| t.min(line.capture_ns)));
            ev.last_capture_ns = Some(ev.last_capture_ns.map_or(line.capture_ns, |t| t.max(line.capture_ns)));
        }
        if let (Some(live), Some(rank)) = (&mut self.live, line.rank) {
            // The agent's own GPU samples are liveness, not the rank speaking: a hung rank's
            // agent keeps sending them.
            let text = line.text();
            match coroner_model::GpuSample::from_line(&text) {
                Some(s) => live.push_liveness(rank, line.capture_ns, None, None, s.util_pct),
                None => live.push_line(rank, line.capture_ns, &text),
            }
        }
        let parser = self.parsers.entry((line.rank, line.stream)).or_insert_with(|| RankParser::new(line.rank));
        let mut out = Vec::new();
        parser.push(&line, &mut out);
        news |= out.iter().any(|e| !e.kind.is_routine());
        self.file_events(lane, line.rank, out);
        news
    }

    /// A launcher's own end. torchrun exits 0 only when all its workers did, so a clean launcher
    /// exit is a clean end for every worker that has none of its own.
    pub fn add_launcher_end(&mut self, exit_code: Option<i32>, signal: Option<i32>) {
        self.launcher_succeeded = exit_code == Some(0) && signal.is_none();
    }

    /// How many ranks' ends their agents reported (each rank once, its latest end).
    pub fn ranks_ended(&self) -> usize {
        self.first_hand_ends.len()
    }

    pub fn add_end(&mut self, end: ProcessEnd) {
        if let Some(live) = &mut self.live {
            live.push_end(end.rank);
        }
        let at = end.at_ns;
        if let Some(old) = self.first_hand_ends.insert(end.rank, end) {
            // The same rank ended again at another time: an earlier attempt's end.
            if old.at_ns.is_some() && old.at_ns != at && !self.earlier_ends.contains(&old) {
                self.earlier_ends.push(old);
            }
        }
    }

    pub fn add_clock_samples(&mut self, samples: impl IntoIterator<Item = ClockSample>) {
        self.evidence.clock_samples.extend(samples);
    }

    pub fn add_snapshot(&mut self, s: SnapshotSummary) {
        self.evidence.snapshots.push(s);
    }

    /// A snapshot file and what its readers made of it (`coroner_snapshot::facts`): the one way
    /// snapshot facts enter the evidence, offline (a bundle's folders, a dump among logs) and
    /// online (an upload, a recovery). Its flight recorder progress and dump go to its rank (when
    /// it has one), its hardware lines to the correlation, its highlights after those `summary`
    /// has.
    pub fn add_snapshot_facts(&mut self, mut summary: SnapshotSummary, facts: coroner_snapshot::Facts) {
        if let Some(rank) = summary.rank {
            self.add_fr_progress(rank, facts.fr_progress.into_iter().map(|f| (f.pg, f.last_enqueued, f.last_started, f.last_completed)));
            if let Some(dump) = facts.fr_dump {
                self.add_fr_dump(rank, dump);
            }
        }
        self.add_hardware_lines(summary.rank, facts.hardware);
        summary.highlights.extend(facts.highlights);
        self.add_snapshot(summary);
    }

    /// Collective progress one rank's flight recorder dump shows: per process group, the last
    /// enqueued, started and completed collective. A later dump of the same rank adds to it.
    pub fn add_fr_progress(&mut self, rank: Rank, rows: impl IntoIterator<Item = (PgId, Option<SeqNo>, Option<SeqNo>, Option<SeqNo>)>) {
        self.evidence.fr_progress.extend(rows.into_iter().map(|(pg, en, st, co)| (rank, pg, en, st, co)));
    }

    /// One rank's flight recorder dump (`coroner_snapshot::Facts::fr_dump`), for matching
    /// collectives across ranks. Of two dumps of one rank the newer is kept (an on-demand dump and
    /// the watchdog's, or an upload resent).
    pub fn add_fr_dump(&mut self, rank: Rank, dump: coroner_model::FrDump) {
        let newer = self.evidence.fr_dumps.get(&rank).is_none_or(|old| dump.newest_record() >= old.newest_record());
        if newer {
            self.evidence.fr_dumps.insert(rank, dump);
        }
    }

    /// Hardware lines a snapshot showed (`coroner_snapshot::Facts::hardware`): Xid, ECC and
    /// OOM-killer lines of a kernel log, `nvidia-smi`'s memory faults. `rank` is the snapshot's
    /// rank, if it had one; the analysis names the rank of the others from the pid or GPU in them.
    pub fn add_hardware_lines(&mut self, rank: Option<Rank>, lines: impl IntoIterator<Item = (EventKind, String)>) {
        // The year of a syslog stamp is read from the job's own times.
        let reference = rank.and_then(|r| self.evidence.ranks.get(&r)).or_else(|| self.evidence.ranks.values().next()).and_then(|r| r.last_capture_ns);
        for (kind, text) in lines {
            let printed_ns = reference.and_then(|t| coroner_parse::time::printed_time(&text, t));
            let seq = self.evidence.hardware.len() as u64;
            self.evidence.hardware.push(Event {
                rank,
                line: coroner_model::LineRef { stream: Stream::File, seq },
                capture_ns: printed_ns.unwrap_or(0),
                printed_ns,
                kind,
                text,
            });
        }
    }

    /// A note for the report; the same note twice is kept once.
    pub fn add_note(&mut self, note: impl Into<String>) {
        let note = note.into();
        if !self.evidence.notes.contains(&note) {
            self.evidence.notes.push(note);
        }
    }

    /// The input is plain logs (offline files, no capture bundle): no process end is recorded
    /// but what their lines say.
    pub fn set_plain_logs(&mut self) {
        self.evidence.plain_logs = true;
    }

    /// No more evidence will come (an offline bundle, or every agent reported its end).
    pub fn set_finished(&mut self, finished: bool) {
        self.evidence.finished = finished;
    }

    /// The evidence as of now, with every open multi-line block closed (on copies of the parsers,
    /// so more lines can still arrive).
    pub fn evidence(&self) -> JobEvidence {
        let mut evidence = self.evidence.clone();
        for ((rank, _), parser) in &self.parsers {
            let mut out = Vec::new();
            parser.finish_copy(&mut out);
            if out.is_empty() {
                continue;
            }
            let out = split_off_unowned(&mut evidence, *rank, out);
            file_into(&mut evidence, *rank, out);
        }
        // Each rank's events are in capture order already (`RankEvidence::push`): sorting them
        // here would copy every rank the copy shares with the pipeline.
        evidence.ends = self.ends(self.first_hand_ends.clone(), &evidence, true);
        unranked::identify_by_launcher(&mut evidence);
        evidence.snapshots.sort_by(|a, b| (a.rank, &a.kind, &a.name).cmp(&(b.rank, &b.kind, &b.name)));
        if let Some(note) = missing_dumps(&evidence) {
            evidence.notes.push(note);
        }
        if let Some(note) = thinned_steps(&evidence) {
            evidence.notes.push(note);
        }
        evidence
    }

    /// What a report as of now is computed from (the costly part, [`ReportInput::report`], needs
    /// no access to the pipeline).
    pub fn report_input(&self) -> ReportInput {
        let evidence = self.evidence();
        let attempts = self.attempt_evidence(&evidence);
        ReportInput { evidence, live_findings: self.live_findings.clone(), attempts }
    }

    /// The report as of now (what [`ReportInput::report`] computes).
    pub fn report(&self, rules: &RuleSet) -> Report {
        self.report_input().report(rules)
    }

    /// Each attempt's share of `whole` (this pipeline's evidence), with its own process ends;
    /// empty for a job of one attempt. An attempt of which nothing is known (a requeued job whose
    /// first run shipped elsewhere) is left out.
    pub fn attempt_evidence(&self, whole: &JobEvidence) -> Vec<(u32, JobEvidence)> {
        if self.attempts.is_empty() {
            return Vec::new();
        }
        let ends: Vec<ProcessEnd> = self.earlier_ends.iter().chain(self.first_hand_ends.values()).cloned().collect();
        let cut = attempts::Whole { evidence: whole, starts: &self.attempts, lines: &self.attempt_lines };
        let attempts: Vec<(u32, JobEvidence)> = self
            .attempts
            .windows()
            .iter()
            .map(|w| {
                let mut e = attempts::evidence_in(&cut, w);
                e.ends = self.ends(attempts::ends_in(&ends, w), &e, w.is_last());
                (w.attempt, e)
            })
            .filter(|(_, e)| !e.ranks.is_empty() || !e.unowned.is_empty() || !e.ends.is_empty())
            .collect();
        if matches!(attempts.as_slice(), [(0, _)]) {
            return Vec::new();
        }
        attempts
    }

    pub fn lines_seen(&self) -> u64 {
        self.evidence.ranks.values().map(|r| r.lines).sum()
    }

    fn file_events(&mut self, lane: u32, rank: Option<Rank>, mut events: Vec<Event>) {
        for e in &mut events {
            if let EventKind::LauncherWorkerFailed(f) = &mut e.kind {
                match (f.global_rank, f.local_rank) {
                    (Some(g), Some(l)) => self.filers.entry(lane).or_default().learn(l, g.0),
                    // Named by its local rank, after the launcher said where its node sits: the
                    // global rank is that mapping's (a restart's rendezvous may give the node other
                    // ranks later). Without it, the rank is read when the report is made, from
                    // whatever mapping was learned by then (the failure table's rows).
                    (None, Some(l)) if self.filers.get(&lane).is_some_and(|f| f.world_size().is_some()) => f.global_rank = Some(self.global_of(lane, l)),
                    _ => {}
                }
            }
        }
        let events = split_off_unowned(&mut self.evidence, rank, events);
        if rank.is_none() {
            // A per-node agent samples every GPU of its node: GPU i is local rank i's (the
            // launchers' convention), filed where that worker's `[default<i>]:` lines go.
            let (samples, rest): (Vec<Event>, Vec<Event>) = events.into_iter().partition(|e| matches!(&e.kind, EventKind::GpuSample(s) if s.index.is_some()));
            for e in samples {
                let owner = match &e.kind {
                    EventKind::GpuSample(s) => s.index.map(|i| self.global_of(lane, i)),
                    _ => None,
                };
                file_into(&mut self.evidence, owner, vec![e]);
            }
            file_into(&mut self.evidence, None, rest);
            return;
        }
        file_into(&mut self.evidence, rank, events);
    }

    /// First-hand ends, completed from the launcher's failure table for ranks without one (and,
    /// in the last attempt, from a launcher that exited 0).
    fn ends(&self, mut ends: BTreeMap<Rank, ProcessEnd>, evidence: &JobEvidence, last: bool) -> Vec<ProcessEnd> {
        for e in &evidence.unowned {
            if let EventKind::LauncherWorkerFailed(f) = &e.kind {
                let rank = f.global_rank.or_else(|| f.local_rank.map(|l| self.global_of(seq_lane(e.line.seq), l)));
                if let Some(rank) = rank {
                    ends.entry(rank).or_insert(ProcessEnd { rank, exit_code: f.exit_code, signal: f.signal, at_ns: None });
                }
            }
        }
        if self.launcher_succeeded && last {
            let known = evidence.ranks.keys().copied().chain((0..evidence.world_size.unwrap_or(0)).map(Rank));
            for rank in known.collect::<Vec<_>>() {
                ends.entry(rank).or_insert(ProcessEnd { rank, exit_code: Some(0), signal: None, at_ns: None });
            }
        }
        ends.into_values().collect()
    }
}

/// When some ranks left a flight recorder dump and others did not, the silent ones are evidence:
/// a rank that died before its watchdog could dump, or one that never reached a collective.
fn missing_dumps(evidence: &JobEvidence) -> Option<String> {
    let dumped: std::collections::BTreeSet<Rank> =
        evidence.snapshots.iter().filter(|s| s.kind == "flight_recorder").filter_map(|s| s.rank).chain(evidence.fr_progress.iter().map(|r| r.0)).collect();
    if dumped.is_empty() {
        return None;
    }
    let missing: Vec<String> = evidence.all_ranks().into_iter().filter(|r| !dumped.contains(r)).map(|r| r.to_string()).collect();
    match missing.len() {
        0 => None,
        1 => Some(format!("flight recorder: rank {} left no dump (it died before its watchdog could dump, or never got that far)", missing[0])),
        _ => Some(format!("flight recorder: ranks {} left no dump (they died before their watchdogs could dump, or never got that far)", missing.join(", "))),
    }
}

/// When ranks printed more distinct steps than are kept (`coroner_analysis::steps`), the report
/// says how coarse the step times behind its clock offsets and pace are.
fn thinned_steps(evidence: &JobEvidence) -> Option<String> {
    let thinned: Vec<u64> = evidence.ranks.values().map(|r| r.steps.stride()).filter(|s| *s > 1).collect();
    let widest = thinned.iter().copied().max()?;
    Some(format!(
        "step times: {} rank(s) printed more than {} distinct steps; to bound memory their steps are sampled (one every {widest} steps at the coarsest), and the clock offsets and the pace are read from the sample",
        thinned.len(),
        coroner_analysis::MAX_STEPS_PER_RANK
    ))
}

/// A process of unknown rank's log also holds what its launcher, scheduler or kernel printed:
/// those events go where such lines always go (no rank); the rest are returned.
fn split_off_unowned(evidence: &mut JobEvidence, rank: Option<Rank>, events: Vec<Event>) -> Vec<Event> {
    let Some(rank) = rank else { return events };
    // A launcher's report of how a worker ended is never about the line's owner: only a launcher
    // prints it, into whatever log holds its output.
    let moves = |k: &EventKind| matches!(k, EventKind::LauncherWorkerFailed(_)) || (rank.is_unknown() && unranked::belongs_to_no_rank(k));
    if !events.iter().any(|e| moves(&e.kind)) {
        return events;
    }
    let (none, mine): (Vec<Event>, Vec<Event>) = events.into_iter().partition(|e| moves(&e.kind));
    evidence.unowned.extend(none);
    mine
}

fn file_into(evidence: &mut JobEvidence, rank: Option<Rank>, events: Vec<Event>) {
    match rank {
        Some(r) => {
            let ev = evidence.rank_mut(r);
            for e in events {
                ev.push(e);
            }
        }
        None => evidence.unowned.extend(events),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fr_snapshot(rank: u32) -> SnapshotSummary {
        SnapshotSummary {
            rank: Some(Rank(rank)),
            kind: "flight_recorder".into(),
            name: format!("flight_recorder/nccl_trace_rank_{rank}"),
            size: 1,
            sha256: "0".repeat(64),
            highlights: Vec::new(),
        }
    }

    #[test]
    fn flight_recorder_progress_reaches_the_collective_table_and_a_missing_dump_is_a_note() {
        let mut p = JobPipeline::new("j");
        p.set_world_size(2);
        p.add_snapshot(fr_snapshot(0));
        p.add_fr_progress(Rank(0), [(PgId("0".into()), Some(SeqNo(11)), Some(SeqNo(10)), Some(SeqNo(10)))]);
        p.set_finished(true);
        let report = p.report(&RuleSet::builtin());
        let row = report.collectives.iter().find(|c| c.rank == Rank(0)).expect("a row for rank 0");
        assert_eq!((row.last_enqueued, row.last_started, row.last_completed), (Some(11), Some(10), Some(10)));
        assert!(report.notes.iter().any(|n| n.starts_with("flight recorder: rank 1 left no dump")), "{:?}", report.notes);
    }

    #[test]
    fn progress_is_routine_and_a_first_line_or_a_failure_is_news() {
        let mut p = JobPipeline::new("j");
        let mut seq = 0;
        let mut push = |p: &mut JobPipeline, rank: u32, text: &str| {
            seq += 1;
            p.push_line(LogLine { rank: Some(Rank(rank)), stream: Stream::Stderr, seq, capture_ns: seq as i64, bytes: text.as_bytes().to_vec() })
        };
        assert!(push(&mut p, 0, "step 1 loss 2.0"), "a rank's first line");
        assert!(!push(&mut p, 0, "step 2 loss 1.9"));
        assert!(push(&mut p, 1, "step 1 loss 2.0"), "another rank's first line");
        let error = "[rank1]:[E ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600010 milliseconds before timing out.";
        assert!(push(&mut p, 1, error), "a watchdog timeout");
    }

    #[test]
    fn a_per_node_agents_host_is_the_host_of_the_ranks_its_lines_name() {
        let mut p = JobPipeline::new("j");
        let line = |text: &str, seq: u64| LogLine { rank: None, stream: Stream::Stdout, seq, capture_ns: seq as i64, bytes: text.as_bytes().to_vec() };
        p.set_host(Rank(0), "own-session-host");
        p.push_line_from(line("[default0]:step 1 loss 2.0", 1), "node-7");
        p.push_line_from(line("[default1]:step 1 loss 2.0", 2), "node-7");
        p.push_line_from(line("no prefix: the launcher's own line", 3), "node-7");
        let ev = p.evidence();
        assert_eq!(ev.ranks[&Rank(0)].host.as_deref(), Some("own-session-host"), "a rank's own session wins");
        assert_eq!(ev.ranks[&Rank(1)].host.as_deref(), Some("node-7"));
    }

    #[test]
    fn no_dumps_at_all_is_no_note() {
        let mut p = JobPipeline::new("j");
        p.set_world_size(2);
        assert!(!p.evidence().notes.iter().any(|n| n.contains("flight recorder")));
    }
}

#[cfg(test)]
mod launcher_end_tests {
    use super::*;

    fn line(text: &str, seq: u64) -> LogLine {
        LogLine { rank: None, stream: Stream::Stdout, seq, capture_ns: 1_000 + seq as i64, bytes: text.as_bytes().to_vec() }
    }

    #[test]
    fn a_clean_launcher_exit_is_a_clean_end_for_its_workers() {
        let mut p = JobPipeline::new("j");
        p.push_line(line("[default0]:2026-11-30 09:03:40,553 INFO [rank0] train: step 0 loss 1.3", 0));
        p.push_line(line("[default1]:2026-11-30 09:03:40,553 INFO [rank1] train: step 0 loss 1.3", 1));
        p.set_finished(true);
        assert_eq!(p.report(&RuleSet::builtin()).verdict, coroner_model::Verdict::Unknown);
        p.add_launcher_end(Some(0), None);
        assert_eq!(p.report(&RuleSet::builtin()).verdict, coroner_model::Verdict::Succeeded);
        p.add_launcher_end(Some(1), None);
        assert_ne!(p.report(&RuleSet::builtin()).verdict, coroner_model::Verdict::Succeeded);
    }
}

#[cfg(test)]
mod gpu_sample_tests {
    use super::*;
    use coroner_model::GpuSample;

    #[test]
    fn the_agents_gpu_samples_reach_the_rank_summary_and_the_culprits_note() {
        let mut p = JobPipeline::new("j");
        p.set_world_size(2);
        let line = |rank: u32, stream: Stream, seq: u64, at_s: i64, text: String| LogLine {
            rank: Some(Rank(rank)),
            stream,
            seq,
            capture_ns: 1_790_000_000_000_000_000 + at_s * 1_000_000_000,
            bytes: text.into_bytes(),
        };
        for (i, used) in [2_000u64, 40_000, 90_000, 139_000].iter().enumerate() {
            let s = GpuSample { index: Some(1), bus: "00000000:3B:00.0".into(), used_mib: *used, total_mib: 143_771, util_pct: Some(99) };
            p.push_line(line(1, Stream::File, i as u64, 10 * i as i64, s.to_line()));
        }
        p.push_line(line(1, Stream::Stderr, 0, 31, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB".into()));
        p.add_end(ProcessEnd { rank: Rank(1), exit_code: Some(1), signal: None, at_ns: None });
        p.set_finished(true);
        let report = p.report(&RuleSet::builtin());
        assert_eq!(report.first_failure.as_ref().and_then(|f| f.rank), Some(Rank(1)));
        let m = report.ranks.iter().find(|r| r.rank == Rank(1)).and_then(|r| r.gpu_memory.clone()).expect("GPU memory for rank 1");
        assert_eq!((m.samples, m.first_mib, m.last_mib), (4, 2_000, 139_000));
        assert!(report.notes.iter().any(|n| n.starts_with("the culprit's GPU 00000000:3B:00.0 memory 2.0 GiB -> 135.7 GiB")), "{:?}", report.notes);
    }

    #[test]
    fn a_node_agents_samples_go_to_the_local_rank_of_their_gpu_index() {
        let mut p = JobPipeline::new("j");
        p.set_node_rank_base(0, 8);
        for (seq, index) in [0u32, 1].iter().enumerate() {
            let s =
                GpuSample { index: Some(*index), bus: format!("00000000:0{index}:00.0"), used_mib: 100 + u64::from(*index), total_mib: 1000, util_pct: None };
            p.push_line(LogLine { rank: None, stream: Stream::File, seq: seq as u64, capture_ns: 1, bytes: s.to_line().into_bytes() });
        }
        let ev = p.evidence();
        let last = |r: u32| {
            ev.ranks.get(&Rank(r)).and_then(|r| {
                r.events.iter().find_map(|e| match &e.kind {
                    EventKind::GpuSample(s) => Some(s.used_mib),
                    _ => None,
                })
            })
        };
        assert_eq!((last(8), last(9)), (Some(100), Some(101)));
    }
}

#[cfg(test)]
mod live_tests {
    use super::*;
    use coroner_analysis::live::LiveConfig;
    use coroner_model::GpuSample;

    const S: i64 = 1_000_000_000;

    fn line(rank: u32, stream: Stream, seq: u64, at: i64, text: String) -> LogLine {
        LogLine { rank: Some(Rank(rank)), stream, seq, capture_ns: at, bytes: text.into_bytes() }
    }

    #[test]
    fn the_agents_gpu_samples_do_not_break_a_silence_and_tell_the_idle_gpu() {
        let mut p = JobPipeline::new("j");
        p.enable_live(LiveConfig::default());
        for step in 0..10u64 {
            for r in 0..4 {
                p.push_line(line(r, Stream::Stdout, step, (5 + step as i64) * S, format!("[rank{r}] step {step} loss 1.5")));
            }
        }
        // From 14 s every rank is quiet after step 9; their agents keep sampling the GPUs.
        for k in 0..4u64 {
            for r in 0..4 {
                let s = GpuSample {
                    index: Some(0),
                    bus: format!("0000000{r}:3B:00.0"),
                    used_mib: 9000,
                    total_mib: 81920,
                    util_pct: Some(if r == 2 { 0 } else { 100 }),
                };
                p.push_line(line(r, Stream::File, k, (20 + 10 * k as i64) * S, s.to_line()));
            }
        }
        let found = p.live().expect("live on").evaluate(55 * S);
        assert_eq!(found.iter().map(|f| (f.rank, f.why.as_str())).collect::<Vec<_>>(), vec![(Rank(2), "gpu_idle")], "{found:?}");
        assert!(found[0].silent_ms >= 40_000, "silent since its step line, not its agent's last sample: {found:?}");
        let report_before = p.report(&RuleSet::builtin());
        assert!(report_before.live_findings.is_empty(), "attached only when the server says so");
        p.set_live_findings(found);
        assert_eq!(p.report(&RuleSet::builtin()).live_findings.len(), 1, "a running report carries them");
    }
}

#[cfg(test)]
mod step_bound_tests {
    use super::*;
    use coroner_analysis::MAX_STEPS_PER_RANK;

    const S: i64 = 1_000_000_000;

    /// The bug this bounds: coronerd's memory grew with every line a job printed, 250-300 bytes
    /// per line under `coroner-bench load` (every progress line, and every checkpoint line naming a
    /// step, was kept as a step mark, and copied again for every report).
    #[test]
    fn a_long_job_keeps_a_bounded_number_of_step_times_and_still_aligns_its_clocks() {
        let mut p = JobPipeline::new("j");
        p.set_world_size(2);
        let skew = 3 * S; // rank 1's clock runs 3 s ahead
        let steps = 20 * MAX_STEPS_PER_RANK as u64;
        for step in 0..steps {
            for rank in 0..2u32 {
                let at = S * 1_790_000_000 + step as i64 * S / 10 + if rank == 1 { skew } else { 0 };
                for (i, text) in [format!("[rank{rank}] step {step} loss 1.5"), format!("[rank{rank}] checkpoint shard 3 of 64 queued for step {step}")]
                    .into_iter()
                    .enumerate()
                {
                    let seq = 2 * step + i as u64;
                    p.push_line(LogLine { rank: Some(Rank(rank)), stream: Stream::Stdout, seq, capture_ns: at + i as i64, bytes: text.into_bytes() });
                }
            }
        }
        let ev = p.evidence();
        for rank in 0..2 {
            let log = &ev.ranks[&Rank(rank)].steps;
            assert!(log.len() <= MAX_STEPS_PER_RANK, "rank {rank} keeps {} step times", log.len());
            assert!(log.stride() > 1);
            assert_eq!(log.marks(), 2 * steps, "every progress line was seen");
            assert_eq!(log.max_step(), Some(steps - 1));
        }
        assert!(ev.notes.iter().any(|n| n.starts_with("step times: 2 rank(s) printed more than 1024 distinct steps")), "{:?}", ev.notes);
        let report = p.report(&RuleSet::builtin());
        let rank1 = report.ranks.iter().find(|r| r.rank == Rank(1)).expect("rank 1");
        assert_eq!(rank1.last_step, Some(steps - 1), "the highest step is exact");
        assert!((rank1.clock.offset_ns + skew).abs() <= 1_000_000, "{:?}", rank1.clock);
        assert_eq!(rank1.clock.source, "steps");
    }

    #[test]
    fn a_short_job_keeps_every_step_and_gets_no_note() {
        let mut p = JobPipeline::new("j");
        for step in 0..100u64 {
            p.push_line(LogLine {
                rank: Some(Rank(0)),
                stream: Stream::Stdout,
                seq: step,
                capture_ns: S + step as i64,
                bytes: format!("step {step} loss 1.0").into_bytes(),
            });
        }
        let ev = p.evidence();
        assert_eq!((ev.ranks[&Rank(0)].steps.len(), ev.ranks[&Rank(0)].steps.stride()), (100, 1));
        assert!(!ev.notes.iter().any(|n| n.starts_with("step times")));
    }
}
