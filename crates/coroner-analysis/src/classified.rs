//! Every event with what the rules say about it, and the aligned time it happened.

use crate::clock::ClockModel;
use crate::evidence::JobEvidence;
use crate::rules::{Rule, RuleSet, Verdict};
use coroner_model::{Event, EventKind, FaultClass, Nanos, Rank, Role};
use std::collections::{BTreeMap, HashMap};

/// One event, classified and placed on the aligned clock.
#[derive(Debug, Clone, Copy)]
pub struct Classified<'a> {
    pub event: &'a Event,
    pub rule: Option<&'a Rule>,
    pub role: Role,
    pub aligned_ns: Nanos,
}

impl Classified<'_> {
    pub fn class(&self) -> Option<FaultClass> {
        self.rule.and_then(|r| r.class)
    }
    pub fn confidence(&self) -> f64 {
        self.rule.map(|r| r.confidence).unwrap_or(0.0)
    }
    /// A symptom that means "I waited for a peer and gave up" (the peer was alive but silent, or slow).
    pub fn is_wait_timeout(&self) -> bool {
        match &self.event.kind {
            EventKind::WatchdogTimeout { .. } | EventKind::TransportTimeout { .. } | EventKind::Stall { .. } => true,
            EventKind::Exception { .. } | EventKind::ErrorLine { .. } => self.rule.is_some_and(|r| r.id.contains("timeout")),
            _ => false,
        }
    }
}

/// All events of a job, per rank, classified.
pub struct ClassifiedJob<'a> {
    pub ranks: BTreeMap<Rank, Vec<Classified<'a>>>,
}

pub fn classify<'a>(evidence: &'a JobEvidence, rules: &'a RuleSet, clock: &ClockModel) -> ClassifiedJob<'a> {
    // An event without a message (a step, an NCCL init, ...) is classified by its kind alone, so
    // the rules run once per such kind rather than once per event (most events are steps).
    let mut by_kind: HashMap<&'static str, Verdict<'a>> = HashMap::new();
    let mut one = |rank: Option<Rank>, e: &'a Event| {
        let v = if !e.kind.has_message() { *by_kind.entry(e.kind.name()).or_insert_with(|| rules.classify(e)) } else { rules.classify(e) };
        Classified { event: e, rule: v.rule, role: v.role, aligned_ns: clock.aligned(rank, e.capture_ns) }
    };
    let ranks = evidence
        .ranks
        .iter()
        .map(|(r, ev)| {
            let mut evs: Vec<Classified<'a>> = ev.events.iter().map(|e| one(Some(*r), e)).collect();
            quiet_recurring_errors(&mut evs);
            (*r, evs)
        })
        .collect();
    ClassifiedJob { ranks }
}

/// A generic error line (no rule knows its words) that one process logs again and again is one
/// it lives through - XLA's autotuner, a metrics exporter, a retried request - not what stopped
/// it: from the third time on, every occurrence is noise. Lines a rule recognises keep their role.
const RECURRING: usize = 3;

fn quiet_recurring_errors(evs: &mut [Classified<'_>]) {
    let generic = |c: &Classified<'_>| c.role == Role::Root && c.rule.is_some_and(|r| r.id == "error-line");
    let mut counts: HashMap<String, usize> = HashMap::new();
    for c in evs.iter().filter(|c| generic(c)) {
        *counts.entry(shape(&c.event.kind.message())).or_default() += 1;
    }
    if counts.values().all(|n| *n < RECURRING) {
        return;
    }
    for c in evs.iter_mut().filter(|c| generic(c)) {
        if counts.get(&shape(&c.event.kind.message())).is_some_and(|n| *n >= RECURRING) {
            c.role = Role::Noise;
        }
    }
}

/// A message with its numbers masked: occurrences that differ only in times, ids or counts match.
fn shape(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut in_digits = false;
    for ch in message.chars() {
        if ch.is_ascii_digit() {
            if !in_digits {
                out.push('#');
            }
            in_digits = true;
        } else {
            in_digits = false;
            out.push(ch);
        }
    }
    out
}

impl<'a> ClassifiedJob<'a> {
    pub fn events(&self, rank: Rank) -> &[Classified<'a>] {
        self.ranks.get(&rank).map(Vec::as_slice).unwrap_or(&[])
    }

    pub fn with_role(&self, rank: Rank, role: Role) -> impl Iterator<Item = &Classified<'a>> {
        self.events(rank).iter().filter(move |c| c.role == role)
    }

    pub fn first_symptom(&self, rank: Rank) -> Option<&Classified<'a>> {
        self.with_role(rank, Role::Symptom).min_by_key(|c| c.aligned_ns)
    }
}

#[cfg(test)]
mod tests {
    use crate::{analyze, JobEvidence, RuleSet};
    use coroner_model::{Event, EventKind, FaultClass, LineRef, Rank, Stream, Verdict};

    fn job(message: &str, times: u64) -> JobEvidence {
        let mut ev = JobEvidence { job_id: "j".into(), world_size: None, finished: true, ..Default::default() };
        let r = ev.rank_mut(Rank(0));
        for seq in 0..times {
            let at = 1_000_000_000 * seq as i64;
            r.push(Event {
                rank: Some(Rank(0)),
                line: LineRef { stream: Stream::Stderr, seq },
                capture_ns: at,
                printed_ns: None,
                kind: EventKind::ErrorLine { message: message.into() },
                text: message.into(),
            });
        }
        r.lines = times;
        ev
    }

    /// A generic error line logged again and again is one the process lived through; twice is
    /// not yet a pattern, and a line a rule recognises keeps its meaning however often it recurs.
    #[test]
    fn a_generic_error_line_that_recurs_is_noise_and_a_known_failure_is_not() {
        let spam = "Delay kernel timed out: measured time has sub-optimal accuracy.";
        let spammed = analyze(&job(spam, 3), &RuleSet::builtin());
        assert!(spammed.first_failure.is_none() && spammed.verdict != Verdict::Failed, "{spammed:?}");
        assert_eq!(analyze(&job(spam, 2), &RuleSet::builtin()).verdict, Verdict::Failed);
        let oom = analyze(&job("RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB", 3), &RuleSet::builtin());
        assert_eq!(oom.first_failure.map(|f| f.class), Some(FaultClass::CudaOom));
    }
}
