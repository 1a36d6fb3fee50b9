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
    let ranks = evidence.ranks.iter().map(|(r, ev)| (*r, ev.events.iter().map(|e| one(Some(*r), e)).collect())).collect();
    ClassifiedJob { ranks }
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
