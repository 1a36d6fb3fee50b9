//! A job stopped from outside: a scheduler's cancel, its time limit, a preemption, a pod
//! eviction, or every rank signalled at the same moment. Nobody in the job failed first-hand, so
//! there is no culprit rank: the report says who stopped the job, when a line tells.
//!
//! What counts, whatever the format:
//! - a line of the scheduler or orchestrator saying so: Slurm's `*** JOB 7 ON n1 CANCELLED AT
//!   ... [DUE TO TIME LIMIT | PREEMPTION] ***` and `srun: Force Terminated`, Kubernetes'
//!   `Reason: Evicted` / `The node was low on resource` (`coroner_parse::launcher`), torchrun's
//!   `Received 2 death signal, shutting down workers` (its agent was signalled);
//! - every rank (two or more) ended by SIGTERM or SIGKILL within [`SAME_MOMENT_NS`] of each other
//!   on the aligned clock, none otherwise.
//!
//! It is the verdict only when nothing in the job went wrong before the stop: a first-hand error
//! or a rank that timed out waiting before it means the job had already failed, and the stop
//! was the clean-up (the report then notes who stopped it). Errors printed while the processes
//! were being stopped (within [`SAME_MOMENT_NS`] before the stop) are its consequences.

use crate::classified::ClassifiedJob;
use crate::clock::ClockModel;
use crate::evidence::JobEvidence;
use crate::rules::RuleSet;
use coroner_model::{Event, EventKind, Nanos, ProcessEndCause, Rank, Role};

/// The rule of a stop from outside.
pub const STOPPED_FROM_OUTSIDE: &str = "stopped-from-outside";

/// How close together every rank's death by signal must be to read as one stop from outside.
pub const SAME_MOMENT_NS: i64 = 5_000_000_000;

#[derive(Debug, Clone)]
pub struct Cancel<'a> {
    /// Who stopped the job, in words (`Slurm: time limit`), or how it looks (`every rank ...`).
    pub who: String,
    /// The rule whose advice fits: `stopped-from-outside`, or `container-memory-kill` when the
    /// orchestrator says the container ran out of its memory.
    pub rule: &'static str,
    /// When, on the aligned clock, if known.
    pub at: Option<Nanos>,
    pub events: Vec<&'a Event>,
}

/// Kubernetes' OOMKilled: the job did not fail first-hand either, it outgrew its container.
const MEMORY_LIMIT: &str = "Kubernetes, which killed the container for exceeding its memory limit (OOMKilled)";

/// Who a scheduler line says stopped the job, if it says so.
fn stopped_by(message: &str) -> Option<&'static str> {
    let m = message.to_ascii_uppercase();
    if m.contains("TIME LIMIT") || m.contains("DEADLINEEXCEEDED") {
        Some("the scheduler's time limit (Slurm)")
    } else if m.contains("PREEMPT") {
        Some("a preemption")
    } else if m.contains("NODE FAIL") || m.contains("NODE_FAIL") {
        Some("the scheduler, after a node failure")
    } else if m.contains("EVICTED") || m.contains("LOW ON RESOURCE") {
        Some("Kubernetes, which evicted the pod")
    } else if m.contains("CANCELLED") || m.contains("FORCE TERMINATED") {
        Some("the scheduler (Slurm cancelled the job or step)")
    } else if m.contains("OOMKILLED") {
        Some(MEMORY_LIMIT)
    } else if m.starts_with("KUBERNETES: EXIT CODE:") && (m.ends_with(" 137") || m.ends_with(" 143")) {
        Some("Kubernetes, which killed the container (exit code 137: SIGKILL, 143: SIGTERM)")
    } else if m.contains("RECEIVED 2 DEATH SIGNAL") {
        Some("an interrupt to the launcher (SIGINT: Ctrl-C)")
    } else if m.contains("DEATH SIGNAL") {
        Some("a signal to the launcher (a scheduler's, kubelet's or operator's SIGTERM)")
    } else {
        None
    }
}

/// The stop from outside the evidence shows, if any.
pub fn find<'a>(evidence: &'a JobEvidence, job: &ClassifiedJob<'a>, clock: &ClockModel) -> Option<Cancel<'a>> {
    let lines: Vec<(&'a Event, &'static str)> = evidence
        .unowned
        .iter()
        .chain(evidence.ranks.values().flat_map(|r| r.events.iter()))
        .filter_map(|e| match &e.kind {
            EventKind::SchedulerEnd { message } => stopped_by(message).map(|w| (e, w)),
            _ => None,
        })
        .collect();
    if let Some(&(first, who)) = lines.iter().min_by_key(|(e, _)| (e.host_time_ns(), e.line.seq)) {
        // The most specific reason any line gives (a time limit says more than "cancelled").
        let who = lines
            .iter()
            .map(|(_, w)| *w)
            .find(|w| *w == MEMORY_LIMIT)
            .or_else(|| lines.iter().map(|(_, w)| *w).find(|w| !w.contains("cancelled")))
            .unwrap_or(who);
        return Some(Cancel {
            who: who.to_string(),
            rule: if who == MEMORY_LIMIT { "container-memory-kill" } else { STOPPED_FROM_OUTSIDE },
            at: Some(clock.aligned(first.rank, first.host_time_ns())),
            events: lines.iter().map(|(e, _)| *e).take(3).collect(),
        });
    }
    every_rank_signalled(evidence, job, clock)
}

/// Every rank ended by SIGTERM/SIGKILL at one moment (two or more ranks, all with times).
fn every_rank_signalled<'a>(evidence: &'a JobEvidence, _job: &ClassifiedJob<'a>, clock: &ClockModel) -> Option<Cancel<'a>> {
    let ranks: Vec<Rank> = evidence.all_ranks().into_iter().filter(|r| !r.is_unknown()).collect();
    if ranks.len() < 2 {
        return None;
    }
    let mut times = Vec::new();
    for r in &ranks {
        let end = evidence.end_of(*r)?;
        if !matches!(end.cause(), ProcessEndCause::Signal(9 | 15)) {
            return None;
        }
        times.push(clock.aligned(Some(*r), end.at_ns?));
    }
    let (lo, hi) = (*times.iter().min()?, *times.iter().max()?);
    let slack = ranks.iter().map(|r| clock.uncertainty(Some(*r))).max().unwrap_or(0).min(SAME_MOMENT_NS);
    if hi.saturating_sub(lo) > SAME_MOMENT_NS.saturating_add(slack) {
        return None;
    }
    Some(Cancel {
        rule: STOPPED_FROM_OUTSIDE,
        who: format!(
            "a signal from outside: all {} ranks were signalled within {} ms of each other (a scheduler's cancel, a preemption or an operator)",
            ranks.len(),
            hi.saturating_sub(lo) / 1_000_000
        ),
        at: Some(lo),
        events: Vec::new(),
    })
}

/// Whether the job had already failed before the stop: a first-hand error or a wait that timed
/// out, surely before `at` less [`SAME_MOMENT_NS`] (what was printed while stopping is its echo).
pub fn failed_before(evidence: &JobEvidence, rules: &RuleSet, job: &ClassifiedJob<'_>, clock: &ClockModel, cancel: &Cancel<'_>) -> bool {
    // Line order where times cannot tell: an OOM kill or another failure that a log printed
    // before its scheduler's cancel line (`Detected 1 oom-kill event`, then `STEP ... CANCELLED`;
    // slurmstepd prints no time on the first) came first.
    if let Some(stop) = cancel.events.first() {
        // A task that exited with an error code of its own before the stop (`srun: error: n1:
        // task 5: Exited with exit code 1`, then srun's `Terminating StepId` and the step's
        // CANCELLED banner) failed first-hand: the stop was srun cleaning up after it.
        let own_exit = |e: &Event| matches!(&e.kind, EventKind::LauncherWorkerFailed(f) if f.signal.is_none() && f.exit_code.is_some_and(|c| c > 0));
        let earlier_in_same_log = evidence.unowned.iter().any(|e| {
            e.rank == stop.rank && e.line.stream == stop.line.stream && e.line.seq < stop.line.seq && (rules.classify(e).role == Role::Root || own_exit(e))
        });
        if earlier_in_same_log {
            return true;
        }
    }
    let Some(at) = cancel.at else { return false };
    job.ranks.iter().any(|(rank, evs)| {
        evs.iter().any(|c| {
            let counts = c.role == Role::Root || (c.role == Role::Symptom && c.is_wait_timeout());
            // Plain logs carry no clock samples: their printed times are the best there is, so
            // an unknown uncertainty is taken as none rather than as "order unknown".
            let margin = clock.uncertainty(Some(*rank)).min(SAME_MOMENT_NS);
            counts && c.aligned_ns.saturating_add(margin) < at.saturating_sub(SAME_MOMENT_NS)
        })
    })
}
