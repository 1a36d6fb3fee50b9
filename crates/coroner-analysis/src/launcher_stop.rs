//! A launcher's word that the job failed, when nothing else in the logs shows a failure: torchrun
//! sending its other workers SIGTERM (it does so only when a worker failed, or when it was
//! signalled itself), or Open MPI aborting the job because a process returned a non-zero exit
//! code without saying which. The job failed; where is in logs that are not here. The report says
//! that, with the launcher's lines, instead of "no failure found".

use crate::evidence::JobEvidence;
use crate::partial::{missing, missing_ranks};
use crate::rules::RuleSet;
use coroner_model::{Event, EventKind, FaultClass, ProcessEnd, Rank};

#[derive(Debug, Clone)]
pub struct LauncherStop<'a> {
    pub class: FaultClass,
    pub summary: String,
    pub events: Vec<&'a Event>,
    pub candidates: Vec<Rank>,
}

/// The launcher's report of a failure it does not attribute, if the evidence holds one.
pub fn find<'a>(evidence: &'a JobEvidence, rules: &RuleSet) -> Option<LauncherStop<'a>> {
    let launcher = |e: &&Event| match &e.kind {
        EventKind::LauncherWorkerFailed(f) => f.global_rank.is_none() && f.local_rank.is_none(),
        EventKind::LauncherSignal { .. } => true,
        _ => false,
    };
    let events: Vec<&Event> = evidence.unowned.iter().chain(evidence.ranks.values().flat_map(|r| r.events.iter())).filter(launcher).take(4).collect();
    let first = events.first()?;
    let (class, what) = match &first.kind {
        // A worker a signal ended: the signal says how, as it does for a process end
        // (DeepSpeed's `exits with return code = -7` for a command that names no rank).
        EventKind::LauncherWorkerFailed(f) if f.signal.is_some() => {
            let end = ProcessEnd { rank: Rank::unknown(0), exit_code: None, signal: f.signal, at_ns: None };
            (rules.classify_end(&end).class().unwrap_or(FaultClass::Killed), "the launcher aborted the job because a process was ended by a signal")
        }
        // A worker that returned a non-zero code (not a signal) most often raised.
        EventKind::LauncherWorkerFailed(_) => (FaultClass::PythonException, "the launcher aborted the job because a process exited with a non-zero code"),
        _ => (FaultClass::Killed, "the launcher stopped its workers, as it does after one of them failed"),
    };
    Some(LauncherStop {
        class,
        summary: format!("the culprit is not in these logs: {what}; which worker failed first, and how, is not here ({})", missing_ranks(evidence)),
        candidates: missing(evidence),
        events,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use coroner_model::{LauncherFailure, LineRef, Stream};

    fn event(kind: EventKind) -> Event {
        Event { rank: None, line: LineRef { stream: Stream::File, seq: 0 }, capture_ns: 0, printed_ns: None, text: String::new(), kind }
    }

    #[test]
    fn a_launcher_stopping_its_workers_is_a_failure_without_a_culprit() {
        let mut ev = JobEvidence::default();
        assert!(find(&ev, &RuleSet::builtin()).is_none());
        ev.unowned.push(event(EventKind::LauncherSignal { pid: Some(3190), signal: "SIGTERM".into() }));
        let stop = find(&ev, &RuleSet::builtin()).expect("a stop");
        assert_eq!(stop.class, FaultClass::Killed);
        assert!(stop.summary.contains("not in these logs"), "{}", stop.summary);
    }

    #[test]
    fn an_abort_without_a_rank_reads_as_an_error_exit() {
        let mut ev = JobEvidence::default();
        let unattributed = LauncherFailure { global_rank: None, local_rank: None, exit_code: None, signal: None, pid: None, host: None, root_cause_row: false };
        ev.unowned.push(event(EventKind::LauncherWorkerFailed(unattributed.clone())));
        assert_eq!(find(&ev, &RuleSet::builtin()).map(|s| s.class), Some(FaultClass::PythonException));
        // A report that names its worker is read as that worker's end elsewhere, not here.
        let mut named = JobEvidence::default();
        named.unowned.push(event(EventKind::LauncherWorkerFailed(LauncherFailure { local_rank: Some(1), ..unattributed.clone() })));
        assert!(find(&named, &RuleSet::builtin()).is_none());
        // Ended by a signal, the signal says how, whoever it was.
        let mut bus = JobEvidence::default();
        bus.unowned.push(event(EventKind::LauncherWorkerFailed(LauncherFailure { signal: Some(7), ..unattributed })));
        assert_eq!(find(&bus, &RuleSet::builtin()).map(|s| s.class), Some(FaultClass::BusError));
    }
}
