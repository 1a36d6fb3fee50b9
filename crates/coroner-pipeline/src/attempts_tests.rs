//! Attempts seen in a launcher's own lines (torchrun restarting its workers) and in sessions.

use super::*;
use coroner_model::{AttemptOutcome, Verdict};

const S: i64 = 1_000_000_000;

fn launcher_line(seq: u64, at_s: i64, text: &str) -> LogLine {
    LogLine { rank: None, stream: Stream::Stderr, seq, capture_ns: 1_790_000_000 * S + at_s * S, bytes: text.as_bytes().to_vec() }
}

/// torchrun's rendezvous result (`torch/distributed/elastic/agent/server/api.py`), one node of two.
fn rendezvous(restart: u32, global: [u32; 2]) -> Vec<String> {
    let head = "I1201 10:00:00.100000 7 torch/distributed/elastic/agent/server/api.py:525]";
    let mut lines = vec![format!("{head} [default] Rendezvous complete for workers. Result:"), format!("{head}   restart_count={restart}")];
    lines.push(format!("{head}   local_ranks=[0, 1]"));
    lines.push(format!("{head}   global_ranks=[{}, {}]", global[0], global[1]));
    lines.push(format!("{head}   global_world_sizes=[4, 4]"));
    lines
}

#[test]
fn a_torchrun_log_with_a_restart_is_two_attempts_and_the_first_failure_is_attempt_0s() {
    let mut p = JobPipeline::new("j");
    let mut seq = 0;
    let mut push = |p: &mut JobPipeline, at: i64, text: &str| {
        p.push_line(launcher_line(seq, at, text));
        seq += 1;
    };
    for l in rendezvous(0, [2, 3]) {
        push(&mut p, 0, &l);
    }
    push(&mut p, 1, "[default0]:2026-12-01 10:00:01,000 INFO [rank2] train: step 0 loss 1.8");
    push(&mut p, 1, "[default1]:2026-12-01 10:00:01,000 INFO [rank3] train: step 0 loss 1.8");
    push(&mut p, 2, "[default1]:Traceback (most recent call last):");
    push(&mut p, 2, "[default1]:  File \"/job/train.py\", line 9, in <module>");
    push(&mut p, 2, "[default1]:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB");
    push(&mut p, 3, "E1201 10:00:03.000000 7 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) local_rank: 1 (pid: 99) of binary: /usr/bin/python3");
    push(&mut p, 3, "I1201 10:00:03.000000 7 torch/distributed/elastic/agent/server/api.py:906] [default] Worker group FAILED. 1/1 attempts left; will restart worker group");
    // The restart: the rendezvous may give this node other ranks.
    for l in rendezvous(1, [0, 1]) {
        push(&mut p, 5, &l);
    }
    push(&mut p, 6, "[default0]:2026-12-01 10:00:06,000 INFO [rank0] train: step 0 loss 1.8");
    push(&mut p, 6, "[default1]:2026-12-01 10:00:06,000 INFO [rank1] train: step 0 loss 1.8");
    p.add_launcher_end(Some(0), None);
    p.set_world_size(2);
    p.set_finished(true);
    let input = p.report_input();
    assert_eq!(input.attempts.iter().map(|(n, _)| *n).collect::<Vec<_>>(), vec![0, 1]);
    let report = input.report(&RuleSet::builtin());
    assert_eq!(report.first_failure.as_ref().and_then(|f| f.rank), Some(Rank(3)), "attempt 0's local rank 1 was global rank 3: {report:#?}");
    assert_eq!(
        report.attempts.iter().map(|a| (a.attempt, a.outcome)).collect::<Vec<_>>(),
        vec![(0, AttemptOutcome::FailedFirst), (1, AttemptOutcome::Recovered)]
    );
    assert_eq!(report.verdict, Verdict::Succeeded, "the restart ran to the end");
    let text = coroner_analysis::text::render(&report);
    assert!(text.starts_with("SUCCEEDED: job j - recovered in attempt 1; attempt 0 failed first: rank 3"), "{text}");
    assert!(text.contains("attempt 1") && text.contains("recovered"), "{text}");
}

#[test]
fn a_requeued_job_whose_first_run_is_not_here_lists_only_the_attempt_it_saw() {
    let mut p = JobPipeline::new("j");
    p.set_world_size(1);
    p.mark_attempt(1, 5 * S);
    p.push_line(LogLine { rank: Some(Rank(0)), stream: Stream::Stdout, seq: 0, capture_ns: 6 * S, bytes: b"step 1 loss 1.0".to_vec() });
    p.add_end(ProcessEnd { rank: Rank(0), exit_code: Some(0), signal: None, at_ns: Some(7 * S) });
    p.set_finished(true);
    let report = p.report(&RuleSet::builtin());
    assert_eq!(report.attempts.iter().map(|a| (a.attempt, a.outcome)).collect::<Vec<_>>(), vec![(1, AttemptOutcome::Succeeded)]);
    assert_eq!(report.verdict, Verdict::Succeeded);
}

#[test]
fn a_job_of_one_attempt_has_no_attempts() {
    let mut p = JobPipeline::new("j");
    for (seq, l) in rendezvous(0, [0, 1]).iter().enumerate() {
        p.push_line(launcher_line(seq as u64, 0, l));
    }
    let input = p.report_input();
    assert!(input.attempts.is_empty());
    assert!(input.report(&RuleSet::builtin()).attempts.is_empty());
}

#[test]
fn a_session_of_a_later_attempt_cuts_the_ends_of_a_rank_in_two() {
    let mut p = JobPipeline::new("j");
    p.set_world_size(1);
    let line = |seq: u64, at: i64, text: &str| LogLine { rank: Some(Rank(0)), stream: Stream::Stderr, seq, capture_ns: at, bytes: text.as_bytes().to_vec() };
    p.push_line(line(0, 10 * S, "RuntimeError: CUDA error: an illegal memory access was encountered"));
    p.add_end(ProcessEnd { rank: Rank(0), exit_code: Some(1), signal: None, at_ns: Some(11 * S) });
    p.mark_attempt(1, 20 * S);
    p.push_line(line(1, 21 * S, "step 1 loss 1.0"));
    p.add_end(ProcessEnd { rank: Rank(0), exit_code: Some(0), signal: None, at_ns: Some(22 * S) });
    p.set_finished(true);
    let report = p.report(&RuleSet::builtin());
    assert_eq!(report.verdict, Verdict::Succeeded);
    assert_eq!(report.attempts.iter().map(|a| a.outcome).collect::<Vec<_>>(), vec![AttemptOutcome::FailedFirst, AttemptOutcome::Recovered]);
    assert_eq!(report.first_failure.as_ref().and_then(|f| f.rank), Some(Rank(0)));
}
