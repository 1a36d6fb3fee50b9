//! A job started more than once: one analysis per attempt, and one report that tells them apart.
//!
//! - Each attempt is analysed on its own evidence (the pipeline cuts the job's evidence at the
//!   moments the attempts began).
//! - The job's first failure is that of the attempt that failed first: the report's
//!   `first_failure`, cascade, collectives and ranks are that attempt's, analysed with the job's
//!   snapshot facts (a snapshot carries no time; the crash it records is the failure's).
//! - The verdict is the last attempt's: a job whose restart ran to the end succeeded.
//! - `attempts` lists every attempt and what it did beside the first failure: failed first,
//!   recovered, failed the same way (class and rank), failed differently, still running.

use crate::{analyze, JobEvidence, RuleSet};
use coroner_model::{format_rfc3339_ns, AttemptOutcome, AttemptSummary, Report, Verdict};

/// The report of a job of several attempts (`attempts` in order, from the pipeline); `whole` is
/// the job's evidence, whose snapshot facts go to the attempt that failed first.
pub fn analyze_attempts(whole: &JobEvidence, attempts: &[(u32, JobEvidence)], rules: &RuleSet) -> Report {
    let Some(last) = attempts.len().checked_sub(1) else {
        return analyze(whole, rules);
    };
    let reports: Vec<Report> = attempts.iter().map(|(_, e)| analyze(e, rules)).collect();
    let first_failed = reports.iter().position(|r| r.verdict == Verdict::Failed);
    let body = first_failed.unwrap_or(last);
    let mut evidence = attempts[body].1.clone();
    evidence.snapshots = whole.snapshots.clone();
    evidence.fr_progress = whole.fr_progress.clone();
    evidence.fr_dumps = whole.fr_dumps.clone();
    let mut report = analyze(&evidence, rules);
    let first = first_failed.map(|_| (report.first_failure.as_ref().and_then(|f| f.rank), report.first_failure.as_ref().map(|f| f.class)));
    report.attempts = attempts
        .iter()
        .zip(&reports)
        .enumerate()
        .map(|(i, ((n, e), r))| {
            let outcome = match (r.verdict, first_failed) {
                (_, Some(f)) if i == f => AttemptOutcome::FailedFirst,
                (Verdict::Failed, _)
                    if first.is_some_and(|(rank, class)| {
                        (r.first_failure.as_ref().and_then(|x| x.rank), r.first_failure.as_ref().map(|x| x.class)) == (rank, class)
                    }) =>
                {
                    AttemptOutcome::FailedSame
                }
                (Verdict::Failed, _) => AttemptOutcome::FailedDifferently,
                (Verdict::Succeeded, Some(f)) if i > f => AttemptOutcome::Recovered,
                (Verdict::Succeeded, _) => AttemptOutcome::Succeeded,
                (Verdict::Running, _) => AttemptOutcome::Running,
                (Verdict::Unknown, _) => AttemptOutcome::Unknown,
            };
            let f = r.first_failure.as_ref().filter(|_| r.verdict == Verdict::Failed);
            AttemptSummary {
                attempt: *n,
                verdict: r.verdict,
                outcome,
                failed_rank: f.and_then(|f| f.rank),
                class: f.map(|f| f.class),
                summary: f.map(|f| f.summary.clone()),
                started: e.ranks.values().filter_map(|r| r.first_capture_ns).min().map(format_rfc3339_ns),
                ranks: u32::try_from(e.ranks.len()).unwrap_or(u32::MAX),
            }
        })
        .collect();
    report.verdict = reports[last].verdict;
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use coroner_model::{Event, EventKind, LineRef, ProcessEnd, Rank, Stream};

    const S: i64 = 1_000_000_000;

    fn attempt(failing: Option<(u32, &str)>, at: i64) -> JobEvidence {
        let mut e = JobEvidence { job_id: "j".into(), world_size: Some(2), finished: true, ..Default::default() };
        for rank in 0..2u32 {
            let r = e.rank_mut(Rank(rank));
            r.lines = 3;
            r.first_capture_ns = Some(at);
            let code = match failing {
                Some((bad, text)) if bad == rank => {
                    r.events.push(Event {
                        rank: Some(Rank(rank)),
                        line: LineRef { stream: Stream::Stderr, seq: 1 },
                        capture_ns: at + S,
                        printed_ns: None,
                        kind: EventKind::ErrorLine { message: text.into() },
                        text: text.into(),
                    });
                    1
                }
                _ => 0,
            };
            e.ends.push(ProcessEnd { rank: Rank(rank), exit_code: Some(code), signal: None, at_ns: Some(at + 2 * S) });
        }
        e
    }

    #[test]
    fn a_restart_that_ran_to_the_end_recovered_and_the_report_keeps_the_first_failure() {
        let oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB";
        let attempts = vec![(0, attempt(Some((1, oom)), 10 * S)), (1, attempt(None, 100 * S))];
        let r = analyze_attempts(&JobEvidence::default(), &attempts, &RuleSet::builtin());
        assert_eq!(r.verdict, Verdict::Succeeded, "the last attempt's verdict");
        assert_eq!(r.first_failure.as_ref().and_then(|f| f.rank), Some(Rank(1)), "attempt 0's culprit");
        let outcomes: Vec<_> = r.attempts.iter().map(|a| (a.attempt, a.outcome, a.failed_rank)).collect();
        assert_eq!(outcomes, vec![(0, AttemptOutcome::FailedFirst, Some(Rank(1))), (1, AttemptOutcome::Recovered, None)]);
    }

    #[test]
    fn later_failures_are_told_apart_from_the_first() {
        let oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB";
        let shape = "RuntimeError: mat1 and mat2 shapes cannot be multiplied (32x20 and 16x64)";
        let attempts = vec![(0, attempt(Some((1, oom)), 10 * S)), (1, attempt(Some((1, oom)), 100 * S)), (2, attempt(Some((0, shape)), 200 * S))];
        let r = analyze_attempts(&JobEvidence::default(), &attempts, &RuleSet::builtin());
        assert_eq!(r.verdict, Verdict::Failed);
        let outcomes: Vec<_> = r.attempts.iter().map(|a| a.outcome).collect();
        assert_eq!(outcomes, vec![AttemptOutcome::FailedFirst, AttemptOutcome::FailedSame, AttemptOutcome::FailedDifferently]);
        assert_eq!(r.first_failure.as_ref().and_then(|f| f.rank), Some(Rank(1)), "the first attempt's failure, not the last's");
    }
}
