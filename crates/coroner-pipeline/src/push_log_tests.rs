//! `JobPipeline::push_log`: every shape of log that does not say whose it is, through to the
//! report (issue 19 part 1).

use crate::JobPipeline;
use coroner_analysis::RuleSet;
use coroner_model::{FaultClass, LogLine, Rank, Report, Stream, Verdict};

fn lines(text: &str) -> Vec<LogLine> {
    text.lines()
        .enumerate()
        .map(|(i, t)| LogLine {
            rank: None,
            stream: Stream::File,
            seq: i as u64,
            capture_ns: 1_790_000_000_000_000_000 + i as i64,
            bytes: t.as_bytes().to_vec(),
        })
        .collect()
}

fn report(logs: &[(&str, &str)]) -> Report {
    let mut p = JobPipeline::new("j");
    p.set_plain_logs();
    for (name, text) in logs {
        p.push_log(name, lines(text));
    }
    p.set_finished(true);
    p.report(&RuleSet::builtin())
}

fn first(r: &Report) -> (Verdict, Option<u32>, Option<FaultClass>) {
    (r.verdict, r.first_failure.as_ref().and_then(|f| f.rank.map(|r| r.0)), r.first_failure.as_ref().map(|f| f.class))
}

#[test]
fn a_single_log_without_prefixes_is_one_process_of_unknown_rank() {
    let r = report(&[("train.log", "epoch 1 step 10 loss 2.1\nTraceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n    model.load_state_dict(sd)\nRuntimeError: Error(s) in loading state_dict for Net:\n\tsize mismatch for fc.weight: copying a param with shape torch.Size([10, 4]) from checkpoint, the shape in current model is torch.Size([12, 4]).\n")]);
    assert_eq!(first(&r), (Verdict::Failed, None, Some(FaultClass::CheckpointMismatch)));
    assert!(r.ranks.is_empty(), "a process of unknown rank is never shown as a number: {:?}", r.ranks);
    assert!(r.notes.iter().any(|n| n.contains("train.log") && n.contains("unknown rank")), "{:?}", r.notes);
}

#[test]
fn a_log_whose_lines_name_its_rank_is_that_ranks() {
    let r = report(&[("worker.out", "[E ProcessGroupNCCL.cpp:587] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=80078, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800096 milliseconds before timing out.\n")]);
    assert_eq!(first(&r), (Verdict::Failed, None, Some(FaultClass::Hang)));
    let f = r.first_failure.as_ref().expect("first");
    assert!(f.summary.starts_with("the culprit is not in these logs: rank 3 waited on ALLREDUCE seq 80078 of PG 0"), "{}", f.summary);
    assert!(r.notes.iter().any(|n| n.contains("its own lines say rank 3")), "{:?}", r.notes);
}

#[test]
fn a_combined_log_files_prefixed_lines_and_the_launchers_report_by_rank() {
    let log = "[default0]:step 5 loss 1.2\n[default1]:[rank1]: Traceback (most recent call last):\n[default1]:[rank1]:   File \"train.py\", line 3, in <module>\n[default1]:[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\nE1130 09:03:42.336000 3148 torch/distributed/elastic/multiprocessing/api.py:986] failed (exitcode: 1) local_rank: 1 (pid: 3191) of binary: python\n";
    let r = report(&[("combined.log", log)]);
    assert_eq!(first(&r), (Verdict::Failed, Some(1), Some(FaultClass::CudaOom)));
    let rank1 = r.ranks.iter().find(|k| k.rank == Rank(1)).expect("rank 1");
    assert_eq!(rank1.ended.as_deref(), Some("exited 1"));
}

#[test]
fn srun_labels_mpi_tags_and_ray_actors_name_their_processes() {
    let r = report(&[(
        "slurm-1.out",
        "0: step 3\n1: Fatal Python error: Segmentation fault\n1: \n1: Current thread 0x00007f (most recent call first):\n1:   File \"x.py\", line 1 in f\n",
    )]);
    assert_eq!(first(&r), (Verdict::Failed, Some(1), Some(FaultClass::Segfault)));
    let r = report(&[("mpi.log", "[1,0]<stdout>:step 1\n[1,3]<stderr>:RuntimeError: CUDA error: an illegal memory access was encountered\n")]);
    assert_eq!(first(&r).1, Some(3));
    let r = report(&[("ray.log", "(RayTrainWorker pid=43515) step 1\n(RayTrainWorker pid=43516) Traceback (most recent call last):\n(RayTrainWorker pid=43516)   File \"t.py\", line 1, in f\n(RayTrainWorker pid=43516) ValueError: Expected input batch_size (8) to match target batch_size (7).\n")]);
    assert_eq!(first(&r), (Verdict::Failed, None, Some(FaultClass::ShapeMismatch)));
    assert!(r.notes.iter().any(|n| n.contains("pid 43516") && n.contains("failed first")), "{:?}", r.notes);
}

#[test]
fn a_kernel_log_alone_and_beside_the_jobs_log() {
    let dmesg = "[Fri Jan 29 23:42:34 2021] NVRM: Xid (PCI:0000:db:00): 79, pid=13641, GPU has fallen off the bus.\n[Fri Jan 29 23:42:35 2021] NVRM: GPU 0000:db:00.0: GPU has fallen off the bus.\n";
    let r = report(&[("dmesg.txt", dmesg)]);
    assert_eq!(first(&r), (Verdict::Failed, None, Some(FaultClass::GpuHardware)));
    // Beside a rank's log whose NCCL init names pid 13641: joined to that rank.
    // (`rank2.log`: the bundle reader gives its lines rank 2 from the name.)
    let job = "host7:13641:13641 [0] NCCL INFO comm 0x5 rank 2 nranks 4 cudaDev 0 busId db000 - Init COMPLETE\n[E1130 08:59:11.4 ProcessGroupNCCL.cpp:1] [Rank 2] NCCL watchdog thread terminated with exception: CUDA error: unspecified launch failure\n";
    let mut p = JobPipeline::new("j");
    p.set_plain_logs();
    p.push_log("dmesg.txt", lines(dmesg));
    for mut l in lines(job) {
        l.rank = Some(Rank(2));
        p.push_line(l);
    }
    p.set_finished(true);
    let r = p.report(&RuleSet::builtin());
    assert_eq!(first(&r), (Verdict::Failed, Some(2), Some(FaultClass::GpuHardware)));
}

#[test]
fn a_log_with_no_failure_is_a_success_that_says_what_it_does_not_know() {
    let r = report(&[("train.log", "epoch 1 step 10 loss 2.1\nWARNING: destroy_process_group() was not called before program exit\n")]);
    assert_eq!(r.verdict, Verdict::Succeeded);
    assert!(coroner_analysis::text::render(&r).starts_with("SUCCEEDED: job j - no line reports a failure (how the processes ended is not in these logs)"));
}

#[test]
fn a_log_of_unknown_rank_beside_the_launchers_report_of_one_silent_rank_is_that_ranks() {
    let log = "Traceback (most recent call last):\n  File \"infer.py\", line 40, in <module>\n    model = deepspeed.init_inference(model)\ntorch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 978.00 MiB\n[2023-07-04 17:31:27,755] [ERROR] [launch.py:321:sigkill_handler] ['python3', '-u', 'infer.py', '--local_rank=0'] exits with return code = 1\n";
    let r = report(&[("output.txt", log)]);
    assert_eq!(first(&r), (Verdict::Failed, Some(0), Some(FaultClass::CudaOom)));
    assert!(r.notes.iter().any(|n| n.contains("read as rank 0's log")), "{:?}", r.notes);
    assert!(!r.notes.iter().any(|n| n.contains("one process of unknown rank")), "{:?}", r.notes);
}

#[test]
fn a_log_a_terminal_hard_wrapped_is_read_as_its_whole_lines() {
    let records = [
        "[rank2]:[E1203 10:00:00.000000000 ProcessGroupNCCL.cpp:1200] [PG ID 0 PG GUID 0(default_pg) Rank 2] ProcessGroupNCCL's watchdog got stuck for 600 seconds without making progress in monitoring enqueued collectives. This typically indicates a NCCL/CUDA API hang blocking the watchdog.",
        "[rank2]:[E1203 10:00:00.100000000 ProcessGroupNCCL.cpp:1300] [PG ID 0 PG GUID 0(default_pg) Rank 2] ProcessGroupNCCL preparing to dump debug info.",
    ];
    let whole = report(&[("train.log", &records.join("\n"))]);
    let wrapped: Vec<String> =
        records.iter().flat_map(|r| r.as_bytes().chunks(60).map(|c| String::from_utf8(c.to_vec()).unwrap()).collect::<Vec<_>>()).collect();
    let cut = report(&[("train.log", &wrapped.join("\n"))]);
    assert_eq!(first(&whole).2, Some(FaultClass::Hang));
    assert_eq!(first(&cut), first(&whole));
    assert!(cut.notes.iter().any(|n| n.contains("hard-wrapped at 60 columns")), "{:?}", cut.notes);
}

/// Composer's launcher relays each crashed rank's captured stderr between markers: the lines
/// between are that rank's, so two ranks' tracebacks are told apart and the launcher's own lines
/// around them stay the log's.
#[test]
fn a_launchers_relayed_output_is_filed_under_the_rank_it_names() {
    let log = "ERROR:composer.cli.launcher:Rank 1 crashed with exit code 1.\n\
Waiting up to 30 seconds for all training processes to terminate. Press Ctrl-C to exit immediately.\n\
Global rank 1 (PID 4242) exited with code 1\n\
----------Begin global rank 1 STDERR----------\n\
Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n    build(cfg)\n\
KeyError: 'max_seq_len'\n\
\n\
----------End global rank 1 STDERR----------\n\
Global rank 2 (PID 4243) exited with code 1\n\
----------Begin global rank 2 STDERR----------\n\
Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n    build(cfg)\n\
KeyError: 'max_seq_len'\n\
----------End global rank 2 STDERR----------\n";
    let r = report(&[("launcher.log", log)]);
    assert_eq!(first(&r).0, Verdict::Failed);
    assert_eq!(first(&r).2, Some(FaultClass::PythonException));
    let f = r.first_failure.as_ref().expect("first");
    assert_eq!(f.rank, Some(Rank(1)), "{}", f.summary);
    for rank in [1, 2] {
        let k = r.ranks.iter().find(|k| k.rank == Rank(rank)).unwrap_or_else(|| panic!("rank {rank}: {:?}", r.ranks));
        assert!(k.lines >= 5, "rank {rank} holds its relayed lines: {k:?}");
    }
}

/// torchrun's agent interrupted (Ctrl-C echoed as `^C`, `Received 2 death signal`): the workers'
/// KeyboardInterrupt tracebacks after it are the interrupt's echo, and no rank failed first.
#[test]
fn an_interrupted_launcher_is_a_stop_from_outside_not_a_workers_exception() {
    let log = "step 41 loss 2.3\n\
^CWARNING:torch.distributed.elastic.agent.server.api:Received 2 death signal, shutting down workers\n\
WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 423964 closing signal SIGINT\n\
Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n    loss.backward()\n\
KeyboardInterrupt\n";
    let r = report(&[("console.log", log)]);
    assert_eq!(first(&r), (Verdict::Failed, None, Some(FaultClass::Killed)));
    let f = r.first_failure.as_ref().expect("first");
    assert_eq!(f.rule.as_deref(), Some("stopped-from-outside"), "{}", f.summary);
    assert!(f.summary.contains("Ctrl-C"), "{}", f.summary);
}

/// `kubectl describe pod` pasted under a worker's log: OOMKilled is the container outgrowing its
/// memory limit, exit code 137 alone a kill from outside; either way no rank failed first-hand
/// (a vLLM worker's SIGTERM was the kill's echo).
#[test]
fn kubernetes_describe_says_the_container_was_killed() {
    let oom = "ERROR 08-11 16:59:41 multiproc_worker_utils.py:120] Worker VllmWorkerProcess pid 143 died, exit code: -15\n    Last State:     Terminated\n      Reason:       OOMKilled\n      Exit Code:    137\n";
    let r = report(&[("pod.log", oom)]);
    assert_eq!(first(&r), (Verdict::Failed, None, Some(FaultClass::Killed)));
    let f = r.first_failure.as_ref().expect("first");
    assert!(f.summary.contains("exceeding its memory limit"), "{}", f.summary);
    let killed = report(&[("pod.log", &oom.replace("OOMKilled", "Error"))]);
    let f = killed.first_failure.as_ref().expect("first");
    assert_eq!((f.rank, f.class), (None, FaultClass::Killed), "{}", f.summary);
    assert!(f.summary.contains("exit code 137"), "{}", f.summary);
}

/// A log pasted as an indented code block: every line starts with the same spaces, taken off
/// before anything reads it (field round 14a); a log whose lines are not all indented keeps them.
#[test]
fn a_log_pasted_as_an_indented_block_is_read_without_its_indent() {
    let log = "    E0816 01:45:43.466000 140650667333440 torch/distributed/elastic/multiprocessing/api.py:833] failed (exitcode: -9) local_rank: 7 (pid: 340264) of binary: python3\n    Traceback (most recent call last):\n      File \"run.py\", line 3, in <module>\n";
    let r = report(&[("pasted.log", log)]);
    assert_eq!(first(&r).1, Some(7), "{:?}", r.first_failure);
    assert!(r.notes.iter().any(|n| n.contains("indented by 4 spaces")), "{:?}", r.notes);
    let mixed = report(&[("mixed.log", "step 1 loss 2.0\n    continued\n")]);
    assert!(!mixed.notes.iter().any(|n| n.contains("indented by")), "{:?}", mixed.notes);
}
