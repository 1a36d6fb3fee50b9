//! Per-rank root findings: for each rank, the first thing that went wrong there first-hand.

use crate::classified::{Classified, ClassifiedJob};
use crate::clock::ClockModel;
use crate::evidence::JobEvidence;
use crate::rules::{Rule, RuleSet};
use coroner_model::{Event, EventKind, FaultClass, Nanos, ProcessEnd, Rank, Role};

/// Root events closer than this to a rank's first root are read as one failure; the most specific
/// (highest confidence) of them names the class. A CUDA kernel assert and the `device-side assert`
/// exception that reports it a moment later are one failure.
const SAME_FAILURE_WINDOW_NS: i64 = 10_000_000_000;

/// One rank's first-hand failure.
#[derive(Debug, Clone)]
pub struct Finding<'a> {
    pub rank: Rank,
    pub class: FaultClass,
    pub rule: Option<&'a Rule>,
    pub confidence: f64,
    /// When it happened, aligned.
    pub aligned_ns: Nanos,
    /// The events that show it, most telling first; empty when only the process end tells.
    pub events: Vec<&'a Event>,
    /// Set when only the process's end shows the failure.
    pub from_end: Option<String>,
    /// Nothing dates it: a process end reported by a launcher for a rank with no lines of its
    /// own. It is ordered after every dated finding and shown without a time.
    pub undated: bool,
}

/// The root findings of every rank, and the SIGKILLed ranks that were alive-but-silent (hangs).
pub fn root_findings<'a>(evidence: &'a JobEvidence, job: &ClassifiedJob<'a>, rules: &'a RuleSet, clock: &ClockModel) -> Vec<Finding<'a>> {
    let mut out = Vec::new();
    for rank in evidence.all_ranks() {
        match (from_events(rank, job), from_end(rank, evidence, job, rules, clock)) {
            // A death by a signal says more than a generic error line of the same rank (an
            // `error-line` root below the strong bar): the signal names the class, the line is
            // kept as evidence.
            (Some(f), Some(mut g)) if f.confidence < 0.5 && g.confidence > f.confidence => {
                g.events = f.events;
                g.aligned_ns = f.aligned_ns;
                g.undated = false;
                out.push(g);
            }
            (Some(f), _) => out.push(f),
            (None, Some(g)) => out.push(g),
            (None, None) => {}
        }
    }
    out
}

fn from_events<'a>(rank: Rank, job: &ClassifiedJob<'a>) -> Option<Finding<'a>> {
    let roots: Vec<&Classified<'a>> = job.with_role(rank, Role::Root).collect();
    let first = roots.iter().min_by_key(|c| c.aligned_ns)?;
    let best = roots
        .iter()
        .filter(|c| c.aligned_ns.saturating_sub(first.aligned_ns) <= SAME_FAILURE_WINDOW_NS)
        .max_by(|a, b| a.confidence().partial_cmp(&b.confidence()).unwrap_or(std::cmp::Ordering::Equal).then(b.aligned_ns.cmp(&a.aligned_ns)))?;
    let mut events = vec![best.event];
    if !std::ptr::eq(best.event, first.event) {
        events.push(first.event);
    }
    Some(Finding {
        rank,
        class: best.class()?,
        rule: best.rule,
        confidence: best.confidence(),
        aligned_ns: first.aligned_ns,
        events,
        from_end: None,
        undated: false,
    })
}

fn from_end<'a>(rank: Rank, evidence: &'a JobEvidence, job: &ClassifiedJob<'a>, rules: &'a RuleSet, clock: &ClockModel) -> Option<Finding<'a>> {
    let end = evidence.end_of(rank)?;
    let mut verdict = rules.classify_end(end);
    // SIGABRT is read as PyTorch's watchdog taking a process down after a timeout; with no
    // timeout or watchdog line anywhere in the job, and none of its own, it is the process's own
    // abort (an uncaught C++ exception, a failed check): a native crash first-hand.
    if verdict.role == Role::Symptom && end.signal == Some(6) && !job.events(rank).iter().any(|c| c.role == Role::Symptom) && !any_watchdog(job) {
        if let Some(rule) = rules.get(OWN_ABORT_RULE) {
            verdict = crate::rules::Verdict { rule: Some(rule), role: rule.role };
        }
    }
    if verdict.role != Role::Root {
        return None;
    }
    let class = verdict.class()?;
    let had_symptoms = job.with_role(rank, Role::Symptom).next().is_some();
    // An error exit after a timeout is the timeout's consequence, not a cause.
    if class == FaultClass::PythonException && had_symptoms {
        return None;
    }
    if class == FaultClass::Killed && (alive_when_peers_gave_up(rank, evidence, job, clock) || stopped_after_another_failed(rank, end, evidence)) {
        return None;
    }
    let rank_ev = evidence.ranks.get(&rank);
    let host_ns = end.at_ns.or_else(|| reported_at(evidence, rank)).or(rank_ev.and_then(|r| r.last_capture_ns));
    Some(Finding {
        rank,
        class,
        rule: verdict.rule,
        confidence: verdict.confidence(),
        aligned_ns: clock.aligned(Some(rank), host_ns.unwrap_or(0)),
        events: launcher_reports(evidence, rank),
        from_end: Some(end.cause().describe()),
        undated: host_ns.is_none(),
    })
}

/// The launcher's lines that report how `rank`'s worker ended (torchrun's `failed (exitcode: -9)
/// local_rank: 3`, a failure table's row, mp.spawn's `process 3 terminated with signal SIGKILL`):
/// the evidence of an end the rank's own lines do not show. A report that names only a local
/// rank is taken for that rank when no global rank is said (one node, where they agree).
fn launcher_reports(evidence: &JobEvidence, rank: Rank) -> Vec<&Event> {
    evidence
        .unowned
        .iter()
        .filter(|e| match &e.kind {
            EventKind::LauncherWorkerFailed(f) => f.global_rank == Some(rank) || (f.global_rank.is_none() && f.local_rank == Some(rank.0)),
            _ => false,
        })
        .take(2)
        .collect()
}

/// When the launcher's failure table says the worker of global rank `rank` failed (its row's
/// `time` field), for an end with no time of its own: with several agents' tables in one output,
/// the rows' times order the failures across nodes.
fn reported_at(evidence: &JobEvidence, rank: Rank) -> Option<Nanos> {
    evidence
        .unowned
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::LauncherWorkerFailed(f) if f.global_rank == Some(rank) => e.printed_ns,
            _ => None,
        })
        .min()
}

/// A launcher stops the other workers once one failed (torchrun: SIGTERM, then SIGKILL when its
/// grace period is over, 30 s later by default), and its failure table dates each row: a kill the
/// table dates after another worker's failure is that stop, not a cause. Only for an end the
/// table alone reports (a first-hand end's time is on another clock) and only when the other
/// row is dated strictly before (the rows' times are whole seconds).
fn stopped_after_another_failed(rank: Rank, end: &ProcessEnd, evidence: &JobEvidence) -> bool {
    if end.at_ns.is_some() {
        return false;
    }
    let Some(at) = reported_at(evidence, rank) else { return false };
    evidence.unowned.iter().any(|e| match &e.kind {
        EventKind::LauncherWorkerFailed(f) => {
            let failed = f.signal.is_some() || f.exit_code.is_some_and(|c| c != 0);
            failed && f.global_rank.is_some_and(|r| r != rank) && e.printed_ns.is_some_and(|t| t < at)
        }
        _ => false,
    })
}

/// The rule read for a SIGABRT that no watchdog explains (never matched in order: the watchdog's
/// reading of `signal 6` comes first).
const OWN_ABORT_RULE: &str = "own-abort-signal";

/// Whether any rank shows a collective or transport timeout, or a watchdog taking it down.
fn any_watchdog(job: &ClassifiedJob<'_>) -> bool {
    job.ranks.values().flatten().any(|c| {
        c.is_wait_timeout()
            || matches!(
                c.event.kind,
                EventKind::WatchdogAbort { .. } | EventKind::HeartbeatStuck { .. } | EventKind::DumpSignal { .. } | EventKind::PgStatus { .. }
            )
    })
}

/// A rank killed from outside after its peers had already timed out waiting for it was hung, not
/// killed: it was alive (it printed, or dumped its stack) when they gave up, and the kill was the
/// clean-up. Without any sign of life after the peers' timeouts, the kill stands.
pub fn alive_when_peers_gave_up(rank: Rank, evidence: &JobEvidence, job: &ClassifiedJob<'_>, clock: &ClockModel) -> bool {
    if job.events(rank).iter().any(|c| matches!(c.event.kind, EventKind::StackDump { .. })) {
        return true;
    }
    let first_peer_timeout = job
        .ranks
        .iter()
        .filter(|(r, _)| **r != rank)
        .flat_map(|(r, evs)| evs.iter().map(move |c| (*r, c)))
        .filter(|(_, c)| c.is_wait_timeout())
        .min_by_key(|(_, c)| c.aligned_ns);
    let Some((peer, timeout)) = first_peer_timeout else { return false };
    let last_sign_of_life = evidence.ranks.get(&rank).and_then(|r| r.last_capture_ns);
    match (evidence.end_of(rank).and_then(|e| e.at_ns), last_sign_of_life) {
        (Some(death), _) => !clock.surely_before(Some(rank), death, Some(peer), timeout.event.capture_ns),
        (None, Some(last)) => clock.surely_before(Some(peer), timeout.event.capture_ns, Some(rank), last),
        (None, None) => false,
    }
}

#[cfg(test)]
mod tests {
    use crate::{analyze, JobEvidence, RuleSet};
    use coroner_model::{Event, EventKind, LineRef, ProcessEnd, Rank, Stream};

    fn ended(ev: &mut JobEvidence, rank: u32, signal: i32) {
        ev.ends.push(ProcessEnd { rank: Rank(rank), exit_code: None, signal: Some(signal), at_ns: Some(1_000) });
    }

    /// The launcher stopped three workers with SIGTERM after the fourth aborted: with no timeout
    /// anywhere the abort is that worker's own crash, not a watchdog's.
    #[test]
    fn an_abort_no_watchdog_explains_is_a_native_crash_of_that_rank() {
        let mut ev = JobEvidence { job_id: "j".into(), world_size: Some(4), finished: true, ..Default::default() };
        for r in 0..3 {
            ended(&mut ev, r, 15);
        }
        ended(&mut ev, 3, 6);
        let f = analyze(&ev, &RuleSet::builtin()).first_failure.expect("a failure");
        assert_eq!((f.rank, f.class), (Some(Rank(3)), coroner_model::FaultClass::Segfault));
    }

    /// The same abort after a peer's watchdog timed out is the watchdog's clean-up.
    #[test]
    fn an_abort_after_a_watchdog_timeout_is_not_a_crash() {
        let mut ev = JobEvidence { job_id: "j".into(), world_size: Some(2), finished: true, ..Default::default() };
        ev.rank_mut(Rank(0)).push(Event {
            rank: Some(Rank(0)),
            line: LineRef { stream: Stream::Stderr, seq: 0 },
            capture_ns: 500,
            printed_ns: None,
            kind: EventKind::WatchdogAbort { pg: None },
            text: "[Rank 0] To avoid data inconsistency, we are taking the entire process down.".into(),
        });
        ended(&mut ev, 0, 6);
        ended(&mut ev, 1, 6);
        let f = analyze(&ev, &RuleSet::builtin()).first_failure;
        assert!(f.as_ref().is_none_or(|f| f.class != coroner_model::FaultClass::Segfault), "{f:?}");
    }

    /// Ray reports a worker's death, then the driver re-raises the failed task as a bare
    /// `RayTaskError(RuntimeError)`: the death is the failure, the re-raise its consequence.
    #[test]
    fn a_ray_worker_death_outranks_the_drivers_re_raise_that_follows() {
        let line = |at: i64, seq: u64, message: &str| Event {
            rank: Some(Rank(0)),
            line: LineRef { stream: Stream::Stderr, seq },
            capture_ns: at,
            printed_ns: None,
            kind: EventKind::ErrorLine { message: message.into() },
            text: message.into(),
        };
        let mut ev = JobEvidence { job_id: "j".into(), world_size: None, finished: true, ..Default::default() };
        ev.rank_mut(Rank(0)).push(line(1_000, 0, "worker.py:1829 -- A worker died or was killed while executing a task by an unexpected system error."));
        ev.rank_mut(Rank(0)).push(line(38_000_000, 1, "ray.exceptions.RayTaskError(RuntimeError): ray::TrainTrainable.train() (pid=1876)"));
        let f = analyze(&ev, &RuleSet::builtin()).first_failure.expect("a failure");
        assert_eq!(f.class, coroner_model::FaultClass::Killed);
    }

    /// Two agents' failure tables in one output: each row's `time` dates its worker's end, so
    /// the rank whose agent recorded the failure first failed first, whatever the rank numbers.
    /// A failure table's row for global `rank`, dated `printed`, of a worker that ended so.
    fn table_row(rank: u32, printed: i64, exit_code: Option<i32>, signal: Option<i32>) -> Event {
        Event {
            rank: None,
            line: LineRef { stream: Stream::Stderr, seq: u64::from(rank) },
            capture_ns: 9_000_000_000_000,
            printed_ns: Some(printed),
            kind: EventKind::LauncherWorkerFailed(coroner_model::LauncherFailure::of_rank(Rank(rank), exit_code, signal)),
            text: "exitcode  : ...".into(),
        }
    }

    #[test]
    fn failure_table_times_order_the_ends_of_ranks_without_lines() {
        let mut ev = JobEvidence { job_id: "j".into(), world_size: Some(8), finished: true, ..Default::default() };
        ev.unowned.push(table_row(0, 1_685_832_352_000_000_000, Some(1), None));
        ev.unowned.push(table_row(4, 1_685_832_301_000_000_000, Some(1), None));
        for r in [0, 4] {
            ev.ends.push(ProcessEnd { rank: Rank(r), exit_code: Some(1), signal: None, at_ns: None });
        }
        let f = analyze(&ev, &RuleSet::builtin()).first_failure.expect("a failure");
        assert_eq!(f.rank, Some(Rank(4)));
    }

    /// torchrun's table: rank 3 exited 1, and 31 s later rank 0 was SIGKILLed and rank 2
    /// SIGTERMed (the launcher stopping the survivors, escalating when its grace period ran
    /// out): the kill is the stop, rank 3 failed first.
    #[test]
    fn a_kill_the_launchers_table_dates_after_another_workers_failure_is_its_stop() {
        let (first, later) = (1_788_786_178_000_000_000, 1_788_786_209_000_000_000);
        let mut ev = JobEvidence { job_id: "j".into(), world_size: Some(4), finished: true, ..Default::default() };
        for (rank, at, code, sig) in [(3, first, Some(1), None), (0, later, None, Some(9)), (2, later, None, Some(15))] {
            ev.unowned.push(table_row(rank, at, code, sig));
            ev.ends.push(ProcessEnd { rank: Rank(rank), exit_code: code, signal: sig, at_ns: None });
        }
        let f = analyze(&ev, &RuleSet::builtin()).first_failure.expect("a failure");
        assert_eq!(f.rank, Some(Rank(3)), "{f:?}");

        // The same kill dated first is the cause.
        let mut ev = JobEvidence { job_id: "j".into(), world_size: Some(4), finished: true, ..Default::default() };
        for (rank, at, code, sig) in [(3, later, Some(1), None), (0, first, None, Some(9))] {
            ev.unowned.push(table_row(rank, at, code, sig));
            ev.ends.push(ProcessEnd { rank: Rank(rank), exit_code: code, signal: sig, at_ns: None });
        }
        let f = analyze(&ev, &RuleSet::builtin()).first_failure.expect("a failure");
        assert_eq!((f.rank, f.class), (Some(Rank(0)), coroner_model::FaultClass::Killed));
    }

    /// Slurm's output file (a log of no rank) reports the step's OOM kill; srun pins it on task 0,
    /// which has no log: the kill is task 0's.
    #[test]
    fn a_kill_a_log_of_no_rank_reports_is_the_one_rank_the_launcher_names_killed() {
        let unknown = Rank::unknown(0);
        let line = "slurmstepd-gpu20-15: error: Detected 1 oom-kill event(s) in StepId=9411285.0.";
        let mut ev = JobEvidence { job_id: "j".into(), world_size: None, finished: true, ..Default::default() };
        let r = ev.rank_mut(unknown);
        r.push(Event {
            rank: Some(unknown),
            line: LineRef { stream: Stream::Stdout, seq: 0 },
            capture_ns: 1_000,
            printed_ns: None,
            kind: EventKind::OomKill { pid: None, process: None },
            text: line.into(),
        });
        r.lines = 1;
        ended(&mut ev, 0, 9);
        ev.ends.last_mut().expect("an end").at_ns = None;
        let f = analyze(&ev, &RuleSet::builtin()).first_failure.expect("a failure");
        assert_eq!((f.rank, f.class), (Some(Rank(0)), coroner_model::FaultClass::Killed));
    }

    /// Found by fuzzing the ingest messages: two root events of one rank at opposite ends of the
    /// time range (capture times come from the wire) overflowed the same-failure window.
    #[test]
    fn roots_at_the_ends_of_the_time_range_do_not_overflow() {
        let error = |at: i64, seq: u64| Event {
            rank: Some(Rank(0)),
            line: LineRef { stream: Stream::Stderr, seq },
            capture_ns: at,
            printed_ns: None,
            kind: EventKind::Exception { exc_type: "RuntimeError".into(), message: "boom".into(), frames: Vec::new() },
            text: "RuntimeError: boom".into(),
        };
        let mut ev = JobEvidence { job_id: "j".into(), world_size: Some(1), finished: true, ..Default::default() };
        ev.rank_mut(Rank(0)).push(error(i64::MIN, 0));
        ev.rank_mut(Rank(0)).push(error(i64::MAX, 1));
        ev.ends.push(ProcessEnd { rank: Rank(0), exit_code: Some(1), signal: None, at_ns: None });
        let report = analyze(&ev, &RuleSet::builtin());
        assert_eq!(report.first_failure.map(|f| f.rank), Some(Some(Rank(0))));
    }
}
