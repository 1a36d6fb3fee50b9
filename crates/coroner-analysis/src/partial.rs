//! Partial verdicts: the lines show that the job failed, but not where it started. A rank that
//! timed out in a collective, or saw a peer hang up, is a victim; when no line of these logs
//! shows a first-hand failure and no silent or lagging rank can be named, the culprit is in
//! logs that are not here. The report says so, with what the victims waited on and which
//! ranks' logs are missing, instead of "no failure found".

use crate::classified::{Classified, ClassifiedJob};
use crate::evidence::JobEvidence;
use crate::hang::join;
use crate::progress::Progress;
use coroner_model::{Event, EventKind, FaultClass, Rank, Role};

#[derive(Debug, Clone)]
pub struct PartialFinding<'a> {
    pub class: FaultClass,
    pub summary: String,
    pub events: Vec<&'a Event>,
    pub confidence: f64,
    /// The ranks whose logs are missing: the culprit is among them.
    pub candidates: Vec<Rank>,
}

/// What a symptom says about where the failure is.
fn mechanism(c: &Classified<'_>) -> FaultClass {
    if c.is_wait_timeout() {
        return FaultClass::Hang;
    }
    match &c.event.kind {
        EventKind::WatchdogTimeout { .. }
        | EventKind::PgStatus { .. }
        | EventKind::DumpSignal { .. }
        | EventKind::WatchdogAbort { .. }
        | EventKind::HeartbeatStuck { .. } => FaultClass::Hang,
        EventKind::SchedulerEnd { .. } | EventKind::LauncherSignal { .. } => FaultClass::Killed,
        _ => FaultClass::NcclError,
    }
}

/// A failure seen only through its symptoms, if the job shows one.
pub fn find<'a>(evidence: &'a JobEvidence, job: &ClassifiedJob<'a>, progress: &Progress) -> Option<PartialFinding<'a>> {
    let symptoms: Vec<(Rank, &Classified<'a>)> =
        job.ranks.iter().flat_map(|(r, evs)| evs.iter().filter(|c| c.role == Role::Symptom && !from_a_launcher(c)).map(move |c| (*r, c))).collect();
    // The most telling symptom: a wait in a collective before a hang-up, before anything else.
    let rank_of = |c: &Classified<'_>| match mechanism(c) {
        FaultClass::Hang => 0,
        FaultClass::NcclError => 1,
        _ => 2,
    };
    let (rank, first) = symptoms.iter().min_by_key(|(r, c)| (rank_of(c), c.aligned_ns, *r))?;
    let class = mechanism(first);
    let waiting: Vec<Rank> = {
        let mut v: Vec<Rank> = symptoms.iter().filter(|(_, c)| mechanism(c) == class).map(|(r, _)| *r).collect();
        v.dedup();
        v
    };
    let who = match waiting.as_slice() {
        [one] => format!("rank {one}"),
        many => format!("ranks {}", join(many)),
    };
    let what = match class {
        FaultClass::Hang => match waited_on(progress, *rank) {
            Some(w) => format!("{who} waited on {w}"),
            None => format!("{who} timed out waiting for a collective"),
        },
        _ => format!("{who} saw a peer fail ({})", first.rule.and_then(|r| r.summary.as_deref()).unwrap_or("a peer hung up")),
    };
    let missing_text = missing_ranks(evidence);
    let never = match class {
        FaultClass::Hang => format!("; ranks that never issued it: unknown ({missing_text})"),
        _ => format!("; the peer that failed first: unknown ({missing_text})"),
    };
    let mut events = vec![first.event];
    events.extend(symptoms.iter().filter(|(r, _)| r != rank).map(|(_, c)| c.event).take(3));
    Some(PartialFinding { class, summary: format!("the culprit is not in these logs: {what}{never}"), events, confidence: 0.5, candidates: missing(evidence) })
}

/// A launcher's report that a worker failed (or that it stopped the others): it says a worker
/// ended, which the process ends already tell, not that a peer hung up or a wait ran out.
fn from_a_launcher(c: &Classified<'_>) -> bool {
    matches!(c.event.kind, EventKind::LauncherWorkerFailed(_) | EventKind::LauncherSignal { .. }) || c.rule.is_some_and(|r| r.id == "launcher-child-failed")
}

/// `ALLREDUCE seq 80078 of PG 0`, from the rank's watchdog report.
fn waited_on(progress: &Progress, rank: Rank) -> Option<String> {
    progress.groups.iter().find_map(|(pg, ranks)| {
        let (seq, op, _) = ranks.get(&rank)?.timed_out.as_ref()?;
        Some(format!("{op} seq {seq} of PG {pg}"))
    })
}

fn present(evidence: &JobEvidence) -> Vec<Rank> {
    evidence.ranks.iter().filter(|(r, ev)| !r.is_unknown() && ev.lines > 0).map(|(r, _)| *r).collect()
}

/// The ranks below the world size with no line and no recorded end.
pub fn missing(evidence: &JobEvidence) -> Vec<Rank> {
    let present = present(evidence);
    let n = evidence.world_size.unwrap_or(0);
    (0..n).map(Rank).filter(|r| !present.contains(r) && evidence.end_of(*r).is_none()).collect()
}

/// Which ranks' logs are missing, in words: what limits a partial answer.
pub fn missing_ranks(evidence: &JobEvidence) -> String {
    let present = present(evidence);
    match evidence.world_size {
        Some(_) => {
            let missing = missing(evidence);
            if missing.is_empty() {
                "every rank's log is here".to_string()
            } else {
                format!("logs of ranks {} are missing", join(&missing))
            }
        }
        None if present.is_empty() => "no line names its rank, and the other ranks' logs are missing".to_string(),
        None => format!("only rank{} {} logged here; the other ranks' logs are missing", if present.len() == 1 { "" } else { "s" }, join(&present)),
    }
}
