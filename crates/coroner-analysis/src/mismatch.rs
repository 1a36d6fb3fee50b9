//! Collective mismatches: ranks issued different collectives at one sequence number. Which rank
//! deviates? PyTorch blames whichever differs from the first rank it lists, which can be the
//! healthy one. Here, in order of strength:
//! 1. a majority: the fingerprint most ranks hold is the group's; the others deviate;
//! 2. history: a fingerprint that matches what the group had been doing (sizes seen in earlier
//!    collectives of the job) is the regular one;
//! 3. call site: collectives issued by the framework during backward (DDP/FSDP gradient hooks)
//!    are the job's steady rhythm; one issued directly from user code is the extra.

use crate::classified::ClassifiedJob;
use coroner_model::{CollectiveFingerprint, Event, EventKind, Rank};
use std::collections::BTreeMap;

#[derive(Debug, Clone)]
pub struct MismatchFinding<'a> {
    pub rank: Option<Rank>,
    pub candidates: Vec<Rank>,
    pub confidence: f64,
    pub reason: String,
    pub events: Vec<&'a Event>,
}

type Signature = (String, Vec<String>, Vec<String>);

fn signature(fp: &CollectiveFingerprint) -> Signature {
    (fp.op.clone(), fp.shapes.clone(), fp.dtypes.clone())
}

pub fn find<'a>(job: &ClassifiedJob<'a>) -> Option<MismatchFinding<'a>> {
    let mut fingerprints: BTreeMap<Rank, CollectiveFingerprint> = BTreeMap::new();
    let mut events: BTreeMap<Rank, &'a Event> = BTreeMap::new();
    for (rank, evs) in &job.ranks {
        for c in evs {
            if let EventKind::CollectiveMismatch { this, other } = &c.event.kind {
                events.entry(*rank).or_insert(c.event);
                fingerprints.entry(this.rank).or_insert_with(|| this.clone());
                fingerprints.entry(other.rank).or_insert_with(|| other.clone());
            }
        }
    }
    if fingerprints.len() < 2 {
        return None;
    }
    let all: Vec<Rank> = fingerprints.keys().copied().collect();
    let evidence_for = |ranks: &[Rank]| -> Vec<&'a Event> {
        let mut v: Vec<&'a Event> = ranks.iter().filter_map(|r| events.get(r).copied()).collect();
        v.extend(events.iter().filter(|(r, _)| !ranks.contains(r)).map(|(_, e)| *e).take(2));
        v
    };
    let deviants = |regular: &Signature| -> Vec<Rank> { fingerprints.iter().filter(|(_, fp)| &signature(fp) != regular).map(|(r, _)| *r).collect() };

    // 1. Majority.
    let mut counts: BTreeMap<Signature, usize> = BTreeMap::new();
    for fp in fingerprints.values() {
        *counts.entry(signature(fp)).or_default() += 1;
    }
    let mut ranked: Vec<(&Signature, &usize)> = counts.iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(a.1));
    if ranked.len() >= 2 && ranked[0].1 > ranked[1].1 {
        let dev = deviants(ranked[0].0);
        return Some(decide(dev, &all, 0.85, "its collective differs from the one most ranks issued", evidence_for));
    }

    // 2. History: sizes of earlier collectives the job reported (watchdog lines carry numel).
    let usual_sizes: Vec<String> = job
        .ranks
        .values()
        .flatten()
        .filter_map(|c| match &c.event.kind {
            EventKind::WatchdogTimeout { numel_in: Some(n), .. } => Some(format!("[{n}]")),
            _ => None,
        })
        .collect();
    if let Some(regular) = fingerprints.values().find(|fp| fp.shapes.iter().any(|s| usual_sizes.contains(s))) {
        let dev = deviants(&signature(regular));
        return Some(decide(dev, &all, 0.75, "its collective's size differs from the job's earlier collectives", evidence_for));
    }

    // 3. Call site.
    let mut framework = Vec::new();
    let mut user = Vec::new();
    for (rank, evs) in &job.ranks {
        for c in evs {
            if let EventKind::Exception { message, frames, .. } = &c.event.kind {
                if !message.contains("mismatch between collectives") {
                    continue;
                }
                let in_backward = frames.iter().any(|f| f.file.contains("torch/autograd") || f.file.contains("torch/nn/parallel") || f.file.contains("fsdp"));
                let direct_call = frames.iter().any(|f| f.file.contains("distributed_c10d.py"));
                if in_backward {
                    framework.push(*rank);
                } else if direct_call {
                    user.push(*rank);
                }
            }
        }
    }
    if !framework.is_empty() && !user.is_empty() {
        user.sort();
        user.dedup();
        return Some(decide(
            user,
            &all,
            0.65,
            "it issued an extra collective directly from its own code while the others were in the framework's gradient synchronisation",
            evidence_for,
        ));
    }
    Some(decide(Vec::new(), &all, 0.3, "the fingerprints alone do not tell which rank deviates", evidence_for))
}

fn decide<'a>(deviants: Vec<Rank>, all: &[Rank], confidence: f64, reason: &str, evidence_for: impl Fn(&[Rank]) -> Vec<&'a Event>) -> MismatchFinding<'a> {
    match deviants.as_slice() {
        [one] => MismatchFinding { rank: Some(*one), candidates: vec![*one], confidence, reason: reason.to_string(), events: evidence_for(&deviants) },
        [] => MismatchFinding { rank: None, candidates: all.to_vec(), confidence, reason: reason.to_string(), events: evidence_for(all) },
        many => MismatchFinding { rank: None, candidates: many.to_vec(), confidence: confidence * 0.6, reason: reason.to_string(), events: evidence_for(many) },
    }
}
