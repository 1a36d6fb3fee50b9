//! Partial verdicts: the lines show that the job failed, but not where it started. A rank that
//! timed out in a collective, or saw a peer hang up, is a victim; when no line of these logs
//! shows a first-hand failure and no silent or lagging rank can be named, the culprit is in
//! logs that are not here. The report says so, with what the victims waited on and which
//! ranks' logs are missing, instead of "no failure found".

use crate::classified::{Classified, ClassifiedJob};
use crate::evidence::JobEvidence;
use crate::hang::join;
use crate::progress::Progress;
use coroner_model::{Event, EventKind, FaultClass, PeerRef, Rank, Role, COORDINATION_TRANSPORT};

#[derive(Debug, Clone)]
pub struct PartialFinding<'a> {
    pub class: FaultClass,
    pub summary: String,
    pub events: Vec<&'a Event>,
    pub confidence: f64,
    /// The ranks whose logs are missing: the culprit is among them.
    pub candidates: Vec<Rank>,
    /// The one rank the victims name as the peer that went away (a coordination service's task
    /// set to ERROR, a connection closed by rank N), when that rank shows nothing of its own.
    pub named: Option<Rank>,
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
        // The coordination service lost a task's process (its heartbeats stopped, or it came
        // back as a new process): the process went away; a heartbeat timeout is a hang above.
        EventKind::ConnectionClosed { transport, .. } if transport == COORDINATION_TRANSPORT => FaultClass::Killed,
        // A symptom's rule can say how the failure it reports happened elsewhere.
        _ => c.class().unwrap_or(FaultClass::NcclError),
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
    if let Some((named, said)) = named_peer(evidence, &symptoms) {
        if !std::ptr::eq(said.event, first.event) {
            events.insert(1, said.event);
        }
        let summary =
            format!("the culprit is not in these logs: {what}; the one that went away, as the others name it: rank {named} ({})", missing_ranks(evidence));
        return Some(PartialFinding { class, summary, events, confidence: 0.5, candidates: vec![named], named: Some(named) });
    }
    Some(PartialFinding {
        class,
        summary: format!("the culprit is not in these logs: {what}{never}"),
        events,
        confidence: 0.5,
        candidates: missing(evidence),
        named: None,
    })
}

/// The single rank the symptoms name as the peer that went away, if it has no lines of its own
/// (a rank that logged would show its own failure or progress; then the naming is not enough).
fn named_peer<'a, 'b>(evidence: &JobEvidence, symptoms: &'b [(Rank, &'b Classified<'a>)]) -> Option<(Rank, &'b Classified<'a>)> {
    let mut named = symptoms.iter().filter_map(|(r, c)| match &c.event.kind {
        EventKind::ConnectionClosed { peer: Some(PeerRef::Rank(x)), .. } if x != r => Some((*x, *c)),
        _ => None,
    });
    let (first, said) = named.next()?;
    if named.any(|(x, _)| x != first) {
        return None;
    }
    let silent = evidence.ranks.get(&first).is_none_or(|ev| ev.lines == 0);
    silent.then_some((first, said))
}

/// A launcher's report that a worker failed (or that it stopped the others): it says a worker
/// ended, which the process ends already tell, not that a peer hung up or a wait ran out.
fn from_a_launcher(c: &Classified<'_>) -> bool {
    matches!(c.event.kind, EventKind::LauncherWorkerFailed(_) | EventKind::LauncherSignal { .. })
        || c.rule.is_some_and(|r| r.id == "launcher-child-failed" || r.id == "launcher-own-traceback")
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
    // `present` is in rank order (a map's keys): a binary search, for 16,384-rank jobs.
    (0..n).map(Rank).filter(|r| present.binary_search(r).is_err() && evidence.end_of(*r).is_none()).collect()
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

#[cfg(test)]
mod tests {
    use crate::{analyze, JobEvidence, RuleSet};
    use coroner_model::{Event, EventKind, FaultClass, LineRef, PeerRef, Rank, Stream};

    fn event(rank: u32, seq: u64, kind: EventKind, text: &str) -> Event {
        Event {
            rank: Some(Rank(rank)),
            line: LineRef { stream: Stream::Stderr, seq },
            capture_ns: 1_000 + seq as i64,
            printed_ns: None,
            kind,
            text: text.into(),
        }
    }

    fn lost(rank: u32, task: u32) -> JobEvidence {
        let line = format!("/job:jax_worker/replica:0/task:{task} has been set to ERROR in coordination service: UNAVAILABLE: Task heartbeat timeout.");
        let mut ev = JobEvidence { job_id: "j".into(), world_size: None, finished: true, ..Default::default() };
        let r = ev.rank_mut(Rank(rank));
        r.push(event(rank, 0, EventKind::ErrorLine { message: line.clone() }, &line));
        r.push(event(rank, 0, EventKind::ConnectionClosed { peer: Some(PeerRef::Rank(Rank(task))), transport: "coordination".into() }, &line));
        r.lines = 1;
        ev
    }

    /// The coordination service on rank 0 gave up on task 37, which logged nothing here: the
    /// victims name the rank that went away.
    #[test]
    fn the_peer_the_victims_name_is_the_culprit_when_it_shows_nothing_of_its_own() {
        let f = analyze(&lost(0, 37), &RuleSet::builtin()).first_failure.expect("a failure");
        assert_eq!((f.rank, f.class), (Some(Rank(37)), FaultClass::Hang));
    }

    /// A task that came back as a new process died: the others' coordination service stops them
    /// ("another task died"), and the verdict names the task, killed, not this process's error.
    #[test]
    fn a_task_that_restarted_is_named_as_killed_over_the_fatal_line_it_caused() {
        let fatal = "Terminating process because the JAX distributed service detected fatal errors. This most likely indicates that another task died; absl::Status: ABORTED: /job:jax_worker/replica:0/task:1 unexpectedly tried to connect with a different incarnation. It has likely restarted.";
        let mut ev = JobEvidence { job_id: "j".into(), world_size: None, finished: true, ..Default::default() };
        let r = ev.rank_mut(Rank(0));
        r.push(event(0, 0, EventKind::ErrorLine { message: fatal.into() }, fatal));
        r.push(event(0, 0, EventKind::ConnectionClosed { peer: Some(PeerRef::Rank(Rank(1))), transport: "coordination".into() }, fatal));
        r.lines = 1;
        let f = analyze(&ev, &RuleSet::builtin()).first_failure.expect("a failure");
        assert_eq!((f.rank, f.class), (Some(Rank(1)), FaultClass::Killed));
    }

    /// A named rank that logged lines of its own is not taken on the others' word, and two
    /// different names name no one.
    #[test]
    fn only_one_silent_named_peer_is_named() {
        let closed =
            |rank: u32, peer: u32| event(rank, 0, EventKind::ConnectionClosed { peer: Some(PeerRef::Rank(Rank(peer))), transport: "coordination".into() }, "x");
        let (a, b) = (closed(0, 5), closed(2, 6));
        let sym = |e| crate::classified::Classified { event: e, rule: None, role: coroner_model::Role::Symptom, aligned_ns: 0 };
        let mut ev = JobEvidence::default();
        assert_eq!(super::named_peer(&ev, &[(Rank(0), &sym(&a))]).map(|(r, _)| r), Some(Rank(5)));
        assert!(super::named_peer(&ev, &[(Rank(0), &sym(&a)), (Rank(2), &sym(&b))]).is_none());
        ev.rank_mut(Rank(5)).lines = 3;
        assert!(super::named_peer(&ev, &[(Rank(0), &sym(&a))]).is_none());
    }
}
