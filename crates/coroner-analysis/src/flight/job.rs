//! The flight recorder analysis inside a job's analysis: its input from the evidence (the dumps,
//! what the logs say of each rank, the clock offsets), the verdict for ranks without a dump, and
//! the diagnosis a confident answer becomes.

use super::decide::{group_op, seq_word, who};
use super::lanes::{precedent, Group, Precedent, Unit};
use super::{analyze, Clocks, Fate, FlightInput, CONFIDENT};
use crate::classified::ClassifiedJob;
use crate::clock::ClockModel;
use crate::diagnosis::{Diagnosis, FirstFinding};
use crate::evidence::JobEvidence;
use crate::rules::RuleSet;
use coroner_model::{FaultClass, FlightRecorderReport, FrRule, FrVerdict, PgId, Rank, Role, Verdict};
use std::collections::BTreeMap;

/// The analysis of the job's dumps, if it has any.
pub fn from_evidence(evidence: &JobEvidence, job: &ClassifiedJob<'_>, clock: &ClockModel) -> Option<FlightRecorderReport> {
    if evidence.fr_dumps.is_empty() {
        return None;
    }
    let offsets = evidence.fr_dumps.keys().map(|r| (*r, clock.estimate(*r))).map(|(r, e)| (r, (e.offset_ns, e.uncertainty_ns))).collect();
    let input = FlightInput {
        dumps: evidence.fr_dumps.iter().map(|(r, d)| (*r, d)).collect(),
        world: evidence.world_size,
        fates: fates(evidence, job),
        clocks: Clocks::with_offsets(offsets),
    };
    Some(analyze(&input))
}

/// What the logs say of each rank: who failed first (the earliest root on the aligned clock),
/// who failed after, who was killed from outside, who exited cleanly.
fn fates(evidence: &JobEvidence, job: &ClassifiedJob<'_>) -> BTreeMap<Rank, Fate> {
    let mut roots: Vec<(i64, Rank)> = job.ranks.keys().filter_map(|r| job.with_role(*r, Role::Root).map(|c| c.aligned_ns).min().map(|t| (t, *r))).collect();
    roots.sort();
    let mut out: BTreeMap<Rank, Fate> = roots.iter().enumerate().map(|(i, (_, r))| (*r, if i == 0 { Fate::FailedFirst } else { Fate::Failed })).collect();
    for end in &evidence.ends {
        let fate = if end.succeeded() {
            Fate::ExitedCleanly
        } else if matches!(end.signal, Some(9) | Some(15)) {
            Fate::Killed
        } else {
            Fate::EndedBadly
        };
        out.entry(end.rank).or_insert(fate);
    }
    out
}

/// Every rank that dumped agrees and waits in the same collective: the members without a dump are
/// weighed with what their logs say. `broke`: ranks whose point-to-point operations left the
/// pattern they repeated; then the dumps do not clear the ranks that dumped.
pub(super) fn missing_dump_verdict(groups: &BTreeMap<PgId, Group<'_>>, missing: &[Rank], broke: &[Rank], input: &FlightInput<'_>) -> Option<FrVerdict> {
    if missing.is_empty() {
        return None;
    }
    let mut unknown = None;
    for (pg, group) in groups {
        let gone = group.missing();
        let Some((seq, stop)) = super::timing::stop(pg, group) else { continue };
        if gone.is_empty() || !stop.never_issued.is_empty() || stop.waiting.is_empty() {
            continue;
        }
        // The ranks that dumped are cleared only if each issued what it always issues there: a
        // lone dump of the culprit agrees with itself.
        let usual = stop
            .waiting
            .iter()
            .all(|r| group.lanes.get(r).is_some_and(|l| precedent(l, seq, |u: &Unit<'_>| Some(format!("{}@{:?}", u.what, u.site))) == Precedent::Familiar));
        if !usual {
            continue;
        }
        let first: Vec<Rank> = gone.iter().copied().filter(|r| input.fates.get(r) == Some(&Fate::FailedFirst)).collect();
        let op = group_op(group, seq);
        let waiting = who(&stop.waiting);
        let wait = if stop.waiting.len() == 1 { "waits" } else { "wait" };
        let at = format!("{} of process group {pg}", seq_word(seq));
        let verdict = |culprits: Vec<Rank>, candidates: Vec<Rank>, rule: Option<FrRule>, confidence: f64, summary: String| FrVerdict {
            culprits,
            candidates,
            rule,
            confidence,
            summary,
            pg: Some(pg.0.clone()),
            seq: Some(seq_word(seq)),
        };
        if let [m] = first.as_slice() {
            return Some(verdict(
                vec![*m],
                Vec::new(),
                Some(FrRule::DiedBeforeItDumped),
                0.85,
                format!("{at}: {waiting} issued {op} and {wait} in it; rank {m} left no dump, and its log says it failed first (died before it dumped)"),
            ));
        }
        match gone.as_slice() {
            [m] => match input.fates.get(m) {
                Some(Fate::Killed) | Some(Fate::ExitedCleanly) | Some(Fate::Failed) | Some(Fate::EndedBadly) => {
                    let how = match input.fates.get(m) {
                        Some(Fate::Killed) => "was killed from outside",
                        Some(Fate::ExitedCleanly) => "exited 0",
                        Some(Fate::EndedBadly) => "ended with a failure status its log does not explain",
                        _ => "failed after another rank",
                    };
                    unknown.get_or_insert_with(|| {
                        verdict(
                            Vec::new(),
                            vec![*m],
                            None,
                            0.0,
                            format!("{at}: {waiting} issued {op} and {wait} in it; rank {m} left no dump and {how}, so whether it held them up is unknown"),
                        )
                    });
                }
                // One dump agrees with itself, and may be older than the rank's last step (a rank
                // that died before its last dump reached the disk): it clears nobody.
                _ if stop.waiting.len() < 2 => {
                    unknown.get_or_insert_with(|| {
                        verdict(
                            Vec::new(),
                            vec![*m],
                            None,
                            0.0,
                            format!("{at}: {waiting} issued {op} and waits in it; rank {m} left no dump, and one dump alone cannot clear its own rank"),
                        )
                    });
                }
                _ if !broke.is_empty() => {
                    unknown.get_or_insert_with(|| {
                        let mut candidates = vec![*m];
                        candidates.extend(broke.iter().filter(|r| *r != m));
                        verdict(Vec::new(), candidates, None, 0.0, format!(
                            "{at}: {waiting} issued {op} and {wait} in it; rank {m} left no dump, but {} left the pattern of {} own point-to-point operations, so the dumps clear nobody",
                            who(broke),
                            if broke.len() == 1 { "its" } else { "their" }
                        ))
                    });
                }
                _ => {
                    return Some(verdict(vec![*m], Vec::new(), Some(FrRule::OnlyRankWithoutADump), 0.6, format!(
                        "{at}: every rank that dumped ({waiting}) issued {op} and waits in it; rank {m} is the only member without a dump (only rank without a dump)"
                    )));
                }
            },
            many => {
                unknown.get_or_insert_with(|| {
                    verdict(
                        Vec::new(),
                        many.to_vec(),
                        None,
                        0.0,
                        format!("{at}: {waiting} issued {op} and {wait} in it; {} left no dump, and nothing tells which held them up", who(many)),
                    )
                });
            }
        }
    }
    unknown
}

/// A confident flight recorder answer as the job's diagnosis. Answers from progress alone (who
/// never issued, who came late) count only once the job is over or a rank failed: a running
/// job's dumps are taken at different moments.
pub fn diagnosis<'a>(
    flight: Option<&FlightRecorderReport>,
    evidence: &'a JobEvidence,
    job: &ClassifiedJob<'a>,
    rules: &'a RuleSet,
    clock: &ClockModel,
) -> Option<Diagnosis<'a>> {
    let v = &flight?.verdict;
    let rule = v.rule?;
    if v.culprits.is_empty() || v.confidence < CONFIDENT {
        return None;
    }
    let ranks = evidence.all_ranks();
    if !ranks.is_empty() && ranks.iter().all(|r| evidence.end_of(*r).is_some_and(|e| e.succeeded())) {
        return None;
    }
    let by_progress = matches!(rule, FrRule::NeverIssued | FrRule::EnteredLast | FrRule::OnlyRankWithoutADump | FrRule::OnlyRankIssuedIt);
    let over = evidence.finished || evidence.ends.iter().any(|e| !e.succeeded());
    if by_progress && !over {
        return None;
    }
    let (class, rule_id) = match rule {
        FrRule::MajorityAtSeq | FrRule::OwnHistory | FrRule::CallSite | FrRule::OnlyRankIssuedIt => (FaultClass::CollectiveMismatch, "collective-mismatch"),
        FrRule::NeverIssued | FrRule::EnteredLast | FrRule::OnlyRankWithoutADump => (FaultClass::Hang, "hang"),
        FrRule::DiedBeforeItDumped => {
            let root = job.with_role(v.culprits[0], Role::Root).min_by_key(|c| c.aligned_ns).and_then(|c| c.class());
            (root.unwrap_or(FaultClass::Killed), "hang")
        }
    };
    let rank = match v.culprits.as_slice() {
        [one] => Some(*one),
        _ => None,
    };
    // The culprits' own last words: their last event and their last progress line.
    let events =
        v.culprits.iter().filter_map(|r| evidence.ranks.get(r)).flat_map(|ev| ev.events.last().into_iter().chain(ev.last_step.as_ref())).take(4).collect();
    Some(Diagnosis {
        verdict: Verdict::Failed,
        first: Some(FirstFinding {
            rank,
            candidates: v.culprits.clone(),
            class,
            confidence: v.confidence,
            // The dumps carry no moment of failure: the culprit's last progress, as for a hang.
            aligned_ns: rank.and_then(|r| {
                let ev = evidence.ranks.get(&r)?;
                ev.last_step.as_ref().map(|e| e.capture_ns).or(ev.last_capture_ns).map(|t| clock.aligned(Some(r), t))
            }),
            summary: format!("flight recorder, {}", v.summary),
            rule_id: Some(rule_id.to_string()),
            advice: rules.get(rule_id).and_then(|r| r.advice.clone()),
            events,
            ordering_note: None,
        }),
        other_roots: Vec::new(),
    })
}
