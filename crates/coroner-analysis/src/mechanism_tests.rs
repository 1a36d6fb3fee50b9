//! One test per mechanism of issue 19, on evidence built by hand (capture bundles' shapes):
//! cancels, clean-up kills, left-early ranks, majority mismatches, fatal errors without process
//! ends, partial verdicts.

use crate::{analyze, JobEvidence, RuleSet};
use coroner_model::{Event, EventKind, FaultClass, Frame, LineRef, PgId, ProcessEnd, Rank, Report, SeqNo, Stream, Verdict};

const T0: i64 = 1_790_000_000_000_000_000;
const S: i64 = 1_000_000_000;

fn event(rank: u32, at_s: i64, kind: EventKind, text: &str) -> Event {
    Event {
        rank: Some(Rank(rank)),
        line: LineRef { stream: Stream::Stderr, seq: at_s as u64 },
        capture_ns: T0 + at_s * S,
        printed_ns: None,
        kind,
        text: text.to_string(),
    }
}

fn exception(rank: u32, at_s: i64, ty: &str, msg: &str) -> Event {
    let frames = vec![Frame { file: "train.py".into(), line: Some(10), function: "main".into() }];
    event(rank, at_s, EventKind::Exception { exc_type: ty.into(), message: msg.into(), frames }, &format!("{ty}: {msg}"))
}

fn timeout(rank: u32, at_s: i64, seq: u64, op: &str, numel: u64) -> Event {
    let kind = EventKind::WatchdogTimeout {
        pg: Some(PgId("0".into())),
        seq: Some(SeqNo(seq)),
        op: op.into(),
        numel_in: Some(numel),
        numel_out: Some(numel),
        timeout_ms: Some(600_000),
        elapsed_ms: Some(600_100),
    };
    event(rank, at_s, kind, &format!("[Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={numel})"))
}

fn job(world: u32) -> JobEvidence {
    let mut ev = JobEvidence { job_id: "j".into(), world_size: Some(world), finished: true, ..Default::default() };
    for r in 0..world {
        let rank = ev.rank_mut(Rank(r));
        rank.lines = 10;
        rank.first_capture_ns = Some(T0);
        rank.last_capture_ns = Some(T0 + 100 * S);
    }
    ev
}

fn push(ev: &mut JobEvidence, e: Event) {
    let r = e.rank.expect("a rank");
    let rank = ev.rank_mut(r);
    rank.last_capture_ns = Some(rank.last_capture_ns.unwrap_or(0).max(e.capture_ns));
    rank.push(e);
}

fn end(rank: u32, exit_code: Option<i32>, signal: Option<i32>, at_s: Option<i64>) -> ProcessEnd {
    ProcessEnd { rank: Rank(rank), exit_code, signal, at_ns: at_s.map(|s| T0 + s * S) }
}

fn run(ev: JobEvidence) -> Report {
    analyze(&ev, &RuleSet::builtin())
}

fn first(r: &Report) -> (Verdict, Option<u32>, FaultClass) {
    let f = r.first_failure.as_ref().expect("a first failure");
    (r.verdict, f.rank.map(|r| r.0), f.class)
}

#[test]
fn every_rank_signalled_at_one_moment_is_a_cancel_with_no_culprit() {
    let mut ev = job(4);
    for r in 0..4u32 {
        // What the signal handlers print while the processes stop.
        push(&mut ev, exception(r, 200, "torch.distributed.elastic.multiprocessing.api.SignalException", "Process 1234 got signal: 15"));
        ev.ends.push(end(r, None, Some(15), Some(200 + i64::from(r) % 2)));
    }
    let report = run(ev);
    assert_eq!(first(&report), (Verdict::Failed, None, FaultClass::Killed));
    let f = report.first_failure.as_ref().expect("first");
    assert!(f.summary.contains("stopped from outside") && f.summary.contains("all 4 ranks were signalled"), "{}", f.summary);
}

#[test]
fn a_scheduler_line_says_who_stopped_the_job() {
    let mut ev = job(2);
    ev.unowned.push(Event {
        rank: None,
        ..event(
            0,
            300,
            EventKind::SchedulerEnd { message: "slurmstepd: error: *** JOB 7 ON n1 CANCELLED AT 2026-01-01T00:00:00 DUE TO TIME LIMIT ***".into() },
            "slurmstepd: error: *** JOB 7 ON n1 CANCELLED AT 2026-01-01T00:00:00 DUE TO TIME LIMIT ***",
        )
    });
    let report = run(ev);
    assert_eq!(first(&report), (Verdict::Failed, None, FaultClass::Killed));
    assert!(report.first_failure.as_ref().expect("first").summary.contains("time limit"));
}

#[test]
fn a_stop_after_a_rank_already_failed_is_the_clean_up() {
    let mut ev = job(2);
    push(&mut ev, exception(1, 50, "torch.OutOfMemoryError", "CUDA out of memory. Tried to allocate 2.00 GiB"));
    for r in 0..2 {
        ev.ends.push(end(r, None, Some(15), Some(120)));
    }
    assert_eq!(first(&run(ev)), (Verdict::Failed, Some(1), FaultClass::CudaOom));
}

#[test]
fn an_undated_sigkill_on_every_rank_after_a_ranks_own_error_is_clean_up() {
    let mut ev = job(3);
    push(&mut ev, exception(2, 50, "RuntimeError", "Error(s) in loading state_dict for Net: size mismatch for fc.weight"));
    ev.ends = (0..3).map(|r| end(r, None, Some(9), None)).collect();
    for r in 0..3 {
        ev.rank_mut(Rank(r)).last_capture_ns = None;
    }
    assert_eq!(first(&run(ev)), (Verdict::Failed, Some(2), FaultClass::CheckpointMismatch));
}

#[test]
fn a_rank_that_exited_0_while_its_peers_waited_left_early() {
    let mut ev = job(3);
    for r in [0, 2] {
        push(&mut ev, timeout(r, 700, 81, "ALLREDUCE", 1024));
        push(
            &mut ev,
            event(
                r,
                701,
                EventKind::PgStatus {
                    pg: Some(PgId("0".into())),
                    failing_seq: Some(SeqNo(81)),
                    last_enqueued: Some(SeqNo(81)),
                    last_started: None,
                    last_completed: Some(SeqNo(80)),
                },
                "last enqueued work: 81",
            ),
        );
        ev.ends.push(end(r, None, Some(6), Some(702)));
    }
    ev.ends.push(end(1, Some(0), None, Some(90)));
    let report = run(ev);
    assert_eq!(first(&report), (Verdict::Failed, Some(1), FaultClass::Hang));
    let f = report.first_failure.as_ref().expect("first");
    assert!(f.summary.contains("left early") && f.summary.contains("ALLREDUCE seq 81"), "{}", f.summary);
}

#[test]
fn when_every_rank_timed_out_the_one_whose_collective_differs_is_the_culprit() {
    let mut ev = job(4);
    for r in 0..4u32 {
        let (op, n) = if r == 2 { ("BROADCAST", 25) } else { ("ALLREDUCE", 1_048_576) };
        push(&mut ev, timeout(r, 700, 40, op, n));
        ev.ends.push(end(r, None, Some(6), Some(705)));
    }
    let report = run(ev);
    assert_eq!(first(&report), (Verdict::Failed, Some(2), FaultClass::CollectiveMismatch));
}

#[test]
fn fatal_tracebacks_without_process_ends_are_a_failure() {
    let mut ev = job(2);
    push(&mut ev, exception(0, 30, "ValueError", "Expected input batch_size (103) to match target batch_size (95)."));
    push(&mut ev, exception(1, 30, "ValueError", "Expected input batch_size (103) to match target batch_size (95)."));
    let report = run(ev);
    assert_eq!(report.verdict, Verdict::Failed);
    assert_eq!(report.first_failure.as_ref().map(|f| f.class), Some(FaultClass::ShapeMismatch));
}

#[test]
fn one_ranks_watchdog_alone_is_a_hang_whose_culprit_is_not_in_these_logs() {
    let mut ev = JobEvidence { job_id: "j".into(), world_size: Some(8), finished: true, ..Default::default() };
    push(&mut ev, timeout(3, 1800, 80078, "ALLREDUCE", 1));
    ev.rank_mut(Rank(3)).lines = 40;
    let report = run(ev);
    assert_eq!(first(&report), (Verdict::Failed, None, FaultClass::Hang));
    let s = &report.first_failure.as_ref().expect("first").summary;
    assert!(s.starts_with("the culprit is not in these logs: rank 3 waited on ALLREDUCE seq 80078 of PG 0"), "{s}");
    assert!(s.contains("logs of ranks 0, 1, 2, 4, 5, 6, 7 are missing"), "{s}");
}

/// srun's output (a log of no rank): task 2 exits with an error code of its own, srun stops the
/// step, the step's CANCELLED banner and srun's kills of the other tasks follow (which the parser
/// reads as signals srun sent). The stop is srun's clean-up, not a cancel from outside: task 2,
/// undated, is the culprit.
#[test]
fn a_tasks_own_exit_before_the_step_is_cancelled_is_the_first_failure() {
    let mut ev = job(4);
    let unowned = |seq: u64, kind: EventKind, text: &str, printed: Option<i64>| Event {
        rank: None,
        line: LineRef { stream: Stream::File, seq },
        capture_ns: T0 + 500 * S,
        printed_ns: printed.map(|s| T0 + s * S),
        kind,
        text: text.into(),
    };
    let failed = |rank: u32, exit_code: Option<i32>, signal: Option<i32>| {
        EventKind::LauncherWorkerFailed(coroner_model::LauncherFailure::of_rank(Rank(rank), exit_code, signal))
    };
    ev.unowned.push(unowned(1, failed(2, Some(1), None), "srun: error: n1: task 2: Exited with exit code 1", None));
    let banner = "slurmstepd: error: *** STEP 5.0 ON n1 CANCELLED AT 2026-01-01T00:00:00 ***";
    ev.unowned.push(unowned(3, EventKind::SchedulerEnd { message: banner.into() }, banner, Some(300)));
    for seq in 4..7 {
        ev.unowned.push(unowned(seq, EventKind::LauncherSignal { pid: None, signal: "SIGKILL".into() }, "srun: error: n1: task 0: Killed", Some(300)));
    }
    for r in 0..4 {
        ev.rank_mut(Rank(r)).lines = 0;
    }
    ev.ends.push(end(2, Some(1), None, None));
    let (verdict, rank, _) = first(&run(ev));
    assert_eq!((verdict, rank), (Verdict::Failed, Some(2)));
}

/// A single process that ended badly, whose only line is its launcher's report of that end
/// (`ProcessExitedException: process 6 terminated with exit code 1`), is still the one that failed.
#[test]
fn a_lone_failed_rank_without_a_reason_is_named() {
    let mut ev = job(8);
    push(&mut ev, exception(6, 10, "torch.multiprocessing.spawn.ProcessExitedException", "process 6 terminated with exit code 1"));
    ev.ends.push(end(6, Some(1), None, None));
    let report = run(ev);
    let f = report.first_failure.as_ref().expect("a first failure");
    assert_eq!((report.verdict, f.rank.map(|r| r.0)), (Verdict::Failed, Some(6)));
}

#[test]
fn a_worker_killed_by_sigbus_is_a_bus_error_on_that_rank_with_the_shared_memory_advice() {
    let mut ev = job(4);
    // Rank 2 dies of SIGBUS (torchrun's exitcode -7); the launcher then stops the others.
    ev.ends.push(end(2, Some(-7), None, Some(50)));
    for r in [0, 1, 3] {
        ev.ends.push(end(r, None, Some(15), Some(52)));
    }
    let report = run(ev);
    assert_eq!(first(&report), (Verdict::Failed, Some(2), FaultClass::BusError));
    assert!(report.advice.iter().any(|a| a.contains("/dev/shm") && a.contains("num_workers")), "{:?}", report.advice);
}

/// A watchdog line of a rank in a subgroup names no group (`[Rank 1] Watchdog caught ...` on
/// global rank 13); its status line names the group failing at the same work. Rank 0's default
/// group counter is not compared with it: no rank is blamed for a group it was not shown in, and
/// a process of unknown rank (unprefixed lines of a combined log) is not a silent rank.
#[test]
fn a_subgroups_timeout_is_compared_within_its_group_only() {
    let mut ev = JobEvidence { job_id: "j".into(), world_size: None, finished: true, ..Default::default() };
    let mut pgless = timeout(13, 10, 1438, "ALLTOALL_BASE", 64);
    if let EventKind::WatchdogTimeout { pg, .. } = &mut pgless.kind {
        *pg = None;
    }
    let status = EventKind::PgStatus {
        pg: Some(PgId("3".into())),
        failing_seq: Some(SeqNo(1438)),
        last_enqueued: Some(SeqNo(1441)),
        last_started: None,
        last_completed: Some(SeqNo(1437)),
    };
    let dump =
        EventKind::DumpSignal { pg: Some(PgId("0".into())), detector: Some(Rank(13)), last_enqueued: Some(SeqNo(1261)), last_completed: Some(SeqNo(1259)) };
    for e in [pgless, event(13, 10, status, "failure detected by watchdog at work sequence id: 1438"), event(0, 11, dump, "Received a dump signal")] {
        push(&mut ev, e);
    }
    for r in [0, 13] {
        ev.rank_mut(Rank(r)).lines = 3;
    }
    let unknown = Rank::unknown(0);
    ev.rank_mut(unknown).lines = 5;
    let progress = crate::progress::collect(&ev);
    assert!(progress.groups.get(&PgId("3".into())).is_some_and(|g| g.get(&Rank(13)).is_some_and(|p| p.timed_out.is_some())));
    assert!(progress.laggards().is_empty(), "{:?}", progress.laggards());
    let r = analyze(&ev, &RuleSet::builtin());
    let f = r.first_failure.expect("a failure");
    assert_eq!((f.rank, f.class), (None, FaultClass::Hang), "{}", f.summary);
    assert!(f.summary.starts_with("the culprit is not in these logs"), "{}", f.summary);
}
