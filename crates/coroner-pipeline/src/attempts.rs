//! A job's attempts in the pipeline: when each began, and the evidence cut at those moments.
//!
//! An attempt begins at the earliest moment any source said so: a launcher's rendezvous result
//! with a higher `restart_count` (torchrun restarting its workers, seen in its own lines), or a
//! session opened for a later attempt (coronerd: the agent's restart count, or a rank starting
//! again after its process ended). Attempts follow each other in time, so every event, step and
//! process end belongs to the attempt whose window holds its time; the cut is made on a copy when
//! a report is asked for, so the order in which evidence arrives does not matter.
//!
//! A line captured by an agent whose launcher said when its own restart began (a per-node agent
//! around torchrun: its lane of sequence numbers, `coroner_model::seq_lane`) is cut at that
//! launcher's moment, not the job's: a node's last words of one attempt can be captured after
//! another node already began the next (torchrun's nodes leave an attempt one by one, and each
//! agent reads its pipes when it gets a CPU).

use coroner_analysis::{JobEvidence, RankEvidence, StepLog, StepMark};
use coroner_model::{seq_lane, Nanos, ProcessEnd, Rank};
use std::collections::BTreeMap;

/// When each attempt after the first began (attempt 0 began with the job), for the job and for
/// each lane whose launcher said so itself.
#[derive(Debug, Clone, Default)]
pub(crate) struct AttemptStarts {
    job: BTreeMap<u32, Nanos>,
    lanes: BTreeMap<u32, BTreeMap<u32, Nanos>>,
}

impl AttemptStarts {
    /// A source says attempt `attempt` was under way at `at`.
    pub fn mark(&mut self, attempt: u32, at: Nanos) {
        if attempt == 0 {
            return;
        }
        let start = self.job.entry(attempt).or_insert(at);
        *start = (*start).min(at);
    }

    /// The launcher whose lines are numbered in `lane` began attempt `attempt` at `at`.
    pub fn mark_lane(&mut self, lane: u32, attempt: u32, at: Nanos) {
        if attempt == 0 {
            return;
        }
        self.mark(attempt, at);
        let start = self.lanes.entry(lane).or_default().entry(attempt).or_insert(at);
        *start = (*start).min(at);
    }

    pub fn is_empty(&self) -> bool {
        self.job.is_empty()
    }

    /// The attempt of a line numbered in `lane` and captured at `t`: by its launcher's own
    /// moments when it said them, else by the job's.
    pub fn attempt_of(&self, lane: u32, t: Nanos) -> u32 {
        match self.lanes.get(&lane) {
            Some(marks) => marks.iter().rev().find(|(_, start)| **start <= t).map_or(0, |(attempt, _)| *attempt),
            None => self.attempt_at(t),
        }
    }

    /// The attempt under way at `t`.
    pub fn attempt_at(&self, t: Nanos) -> u32 {
        self.windows().iter().rev().find(|w| w.from <= t).map_or(0, |w| w.attempt)
    }

    /// Each attempt's window of time, in order; starts are kept increasing with the number (a later
    /// attempt said to start before an earlier one starts with it).
    pub fn windows(&self) -> Vec<Window> {
        let mut out = vec![Window { attempt: 0, from: Nanos::MIN, until: None }];
        for (&attempt, &start) in &self.job {
            let from = start.max(out.last().map_or(Nanos::MIN, |w| w.from));
            if let Some(prev) = out.last_mut() {
                prev.until = Some(from);
            }
            out.push(Window { attempt, from, until: None });
        }
        out
    }
}

/// One attempt's span of time: `from` included, `until` excluded (none for the last).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    pub attempt: u32,
    pub from: Nanos,
    pub until: Option<Nanos>,
}

impl Window {
    pub fn holds(&self, t: Nanos) -> bool {
        t >= self.from && self.until.is_none_or(|u| t < u)
    }

    pub fn is_last(&self) -> bool {
        self.until.is_none()
    }
}

/// What one attempt's evidence is cut from: the whole job's evidence and what the pipeline
/// keeps beside it.
pub(crate) struct Whole<'a> {
    pub evidence: &'a JobEvidence,
    pub starts: &'a AttemptStarts,
    /// Lines per (rank, attempt), as counted when they arrived.
    pub lines: &'a BTreeMap<(Rank, u32), u64>,
}

/// The part of the job's evidence that falls in `w`, without process ends (the pipeline adds
/// them: [`ends_in`] and the launcher's) and without snapshot facts (which carry no time: the
/// analysis gives them to the attempt that failed first).
pub(crate) fn evidence_in(whole: &Whole<'_>, w: &Window) -> JobEvidence {
    let e = whole.evidence;
    let mine = |ev: &coroner_model::Event| whole.starts.attempt_of(seq_lane(ev.line.seq), ev.capture_ns) == w.attempt;
    let ranks = e
        .ranks
        .iter()
        .filter_map(|(rank, r)| Some((*rank, std::sync::Arc::new(rank_in(r, w, &mine, whole.lines.get(&(*rank, w.attempt)).copied().unwrap_or(0))?))))
        .collect();
    JobEvidence {
        job_id: e.job_id.clone(),
        world_size: e.world_size,
        ranks,
        unowned: e.unowned.iter().filter(|ev| mine(ev)).cloned().collect(),
        // A hardware line without a time of its own (0) is read with the last attempt.
        hardware: e.hardware.iter().filter(|ev| if ev.capture_ns == 0 { w.is_last() } else { w.holds(ev.capture_ns) }).cloned().collect(),
        ends: Vec::new(),
        clock_samples: e.clock_samples.clone(),
        snapshots: Vec::new(),
        fr_progress: Vec::new(),
        fr_dumps: BTreeMap::new(),
        // An attempt before the last is over.
        finished: e.finished || !w.is_last(),
        notes: e.notes.clone(),
        plain_logs: e.plain_logs,
        unknown_sources: e.unknown_sources.clone(),
    }
}

/// The first-hand ends in `w`, the latest per rank; an end without a time is the last attempt's.
pub(crate) fn ends_in(ends: &[ProcessEnd], w: &Window) -> BTreeMap<Rank, ProcessEnd> {
    let mut out: BTreeMap<Rank, ProcessEnd> = BTreeMap::new();
    for end in ends.iter().filter(|e| e.at_ns.map_or(w.is_last(), |t| w.holds(t))) {
        let later = out.get(&end.rank).is_none_or(|old| old.at_ns <= end.at_ns);
        if later {
            out.insert(end.rank, end.clone());
        }
    }
    out
}

fn rank_in(r: &RankEvidence, w: &Window, mine: &impl Fn(&coroner_model::Event) -> bool, lines: u64) -> Option<RankEvidence> {
    let events: Vec<_> = r.events.iter().filter(|e| mine(e)).cloned().collect();
    let mut steps = StepLog::default();
    for t in r.steps.times().iter().filter(|t| w.holds(t.first_capture_ns)) {
        steps.push(StepMark { step: t.step, capture_ns: t.first_capture_ns, printed_ns: Some(t.first_printed_ns) });
    }
    if events.is_empty() && steps.is_empty() && lines == 0 {
        return None;
    }
    let times = || events.iter().map(|e| e.capture_ns).chain(steps.times().iter().map(|t| t.first_capture_ns));
    let (first, last) = (times().min(), times().max());
    Some(RankEvidence {
        host: r.host.clone(),
        last_step: r.last_step.clone().filter(|e| mine(e)),
        events,
        steps,
        lines,
        first_capture_ns: first,
        last_capture_ns: last,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_follow_the_earliest_mark_of_each_attempt_and_never_go_back() {
        let mut s = AttemptStarts::default();
        assert_eq!(s.windows(), vec![Window { attempt: 0, from: Nanos::MIN, until: None }]);
        s.mark(0, 5);
        assert!(s.is_empty(), "attempt 0 is the job's start");
        s.mark(1, 100);
        s.mark(1, 90);
        s.mark(2, 80); // said before attempt 1 began: starts with it
        let w = s.windows();
        assert_eq!(w.iter().map(|w| (w.attempt, w.from, w.until)).collect::<Vec<_>>(), vec![(0, Nanos::MIN, Some(90)), (1, 90, Some(90)), (2, 90, None)]);
        assert_eq!((s.attempt_at(89), s.attempt_at(90), s.attempt_at(1_000)), (0, 2, 2));
    }

    #[test]
    fn a_lane_whose_launcher_said_its_own_restart_is_cut_there() {
        let mut s = AttemptStarts::default();
        s.mark_lane(0, 1, 100); // node a restarted first
        s.mark_lane(1, 1, 130); // node b's last words of attempt 0 came until 130
        assert_eq!(s.windows()[1].from, 100, "the job's attempt 1 began with the first node's");
        assert_eq!((s.attempt_of(0, 110), s.attempt_of(1, 110), s.attempt_of(1, 130)), (1, 0, 1));
        assert_eq!(s.attempt_of(7, 110), 1, "a lane that said nothing follows the job");
    }

    #[test]
    fn each_end_goes_to_the_attempt_of_its_time_and_an_untimed_one_to_the_last() {
        let mut s = AttemptStarts::default();
        s.mark(1, 100);
        let end = |rank: u32, at: Option<Nanos>, code: i32| ProcessEnd { rank: Rank(rank), exit_code: Some(code), signal: None, at_ns: at };
        let ends = [end(0, Some(50), 1), end(0, Some(150), 0), end(1, None, 0)];
        let w = s.windows();
        let first = ends_in(&ends, &w[0]);
        let second = ends_in(&ends, &w[1]);
        assert_eq!(first.values().map(|e| (e.rank.0, e.exit_code)).collect::<Vec<_>>(), vec![(0, Some(1))]);
        assert_eq!(second.values().map(|e| (e.rank.0, e.exit_code)).collect::<Vec<_>>(), vec![(0, Some(0)), (1, Some(0))]);
    }
}
