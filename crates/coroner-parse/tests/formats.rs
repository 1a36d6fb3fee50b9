//! RankParser over hand-written line sequences shaped like several PyTorch / NCCL / Python
//! versions, totality on arbitrary bytes, and an (ignored) throughput check.

use coroner_model::{Event, EventKind, LogLine, PeerRef, Rank, SeqNo, Stream};
use coroner_parse::RankParser;
use proptest::prelude::*;

const T0: i64 = 1_796_029_127_092_747_587; // 2026-11-30T08:58:47Z

fn run(rank: Option<u32>, lines: &[&str]) -> Vec<Event> {
    let mut p = RankParser::new(rank.map(Rank));
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let line = LogLine { rank: rank.map(Rank), stream: Stream::Stderr, seq: i as u64, capture_ns: T0 + i as i64 * 1000, bytes: l.as_bytes().to_vec() };
        p.push(&line, &mut out);
    }
    p.finish(&mut out);
    out
}

fn names(evs: &[Event]) -> Vec<&'static str> {
    evs.iter().map(|e| e.kind.name()).collect()
}

#[test]
fn unprefixed_chained_traceback_keeps_the_last_exception() {
    let evs = run(
        Some(3),
        &[
            "Traceback (most recent call last):",
            "  File \"/opt/job/train.py\", line 10, in load",
            "    return torch.load(p)",
            "FileNotFoundError: [Errno 2] No such file or directory: 'ckpt.pt'",
            "",
            "During handling of the above exception, another exception occurred:",
            "",
            "Traceback (most recent call last):",
            "  File \"/opt/job/train.py\", line 20, in <module>",
            "    main()",
            "  File \"/opt/job/train.py\", line 15, in main",
            "    raise RuntimeError(\"no checkpoint\")",
            "RuntimeError: no checkpoint",
            "2026-11-30 08:58:51,398 INFO [rank3] train: step 7 loss 1.0",
        ],
    );
    assert_eq!(names(&evs), ["exception", "step"]);
    let EventKind::Exception { exc_type, message, frames } = &evs[0].kind else { unreachable!() };
    assert_eq!((exc_type.as_str(), message.as_str(), frames.len()), ("RuntimeError", "no checkpoint", 2));
    assert_eq!(evs[0].line.seq, 0);
    assert_eq!(evs[0].text, "RuntimeError: no checkpoint");
    assert_eq!(evs[0].rank, Some(Rank(3)));
}

#[test]
fn traceback_is_not_emitted_before_its_final_line() {
    let mut p = RankParser::new(Some(Rank(1)));
    let mut out = Vec::new();
    for (i, l) in ["[rank1]: Traceback (most recent call last):", "[rank1]:   File \"x.py\", line 1, in <module>"].iter().enumerate() {
        p.push(&LogLine { rank: None, stream: Stream::Stderr, seq: i as u64, capture_ns: T0, bytes: l.as_bytes().to_vec() }, &mut out);
    }
    assert!(out.is_empty());
    p.push(&LogLine { rank: None, stream: Stream::Stderr, seq: 2, capture_ns: T0, bytes: b"[rank1]: ValueError: bad".to_vec() }, &mut out);
    assert!(out.is_empty(), "the message may continue");
    p.finish(&mut out);
    assert_eq!(names(&out), ["exception"]);
}

#[test]
fn interleaved_launcher_channels_keep_tracebacks_whole() {
    let evs = run(
        None,
        &[
            "[default1]:[rank1]: Traceback (most recent call last):",
            "[default0]:2026-11-30 09:03:40,553 INFO [rank0] train: step 0 loss 1.3",
            "[default1]:[rank1]:   File \"/opt/job/worker.py\", line 90, in main",
            "[default0]:2026-11-30 09:03:40,557 INFO [rank0] train: step 1 loss 1.1",
            "[default1]:[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 200.00 GiB.",
            "W1130 09:03:42.041000 3148 torch/distributed/elastic/multiprocessing/api.py:1012] Sending process 3190 closing signal SIGTERM",
        ],
    );
    let ex: Vec<_> = evs.iter().filter(|e| e.kind.name() == "exception").collect();
    assert_eq!(ex.len(), 1);
    assert_eq!(ex[0].rank, Some(Rank(1)));
    assert!(matches!(&ex[0].kind, EventKind::Exception { frames, .. } if frames.len() == 1));
    assert_eq!(evs.iter().filter(|e| e.kind.name() == "step").count(), 2);
    assert!(evs.iter().any(|e| e.kind.name() == "launcher_signal" && e.rank.is_none()));
}

#[test]
fn older_pytorch_nccl_lines() {
    let evs = run(Some(15), &[
        "[E ProcessGroupNCCL.cpp:475] [Rank 15] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=57, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800593 milliseconds before timing out.",
        "[E ProcessGroupNCCL.cpp:489] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
        "[E ProcessGroupNCCL.cpp:495] To avoid data inconsistency, we are taking the entire process down.",
        "[rank15]:[E1130 08:59:11.424 ProcessGroupNCCL.cpp:1316] [PG 1 Rank 15] Timeout at NCCL work: 57, last enqueued NCCL work: 57, last completed NCCL work: 56.",
        "[rank15]:[E1130 08:59:11.5 ProcessGroupNCCL.cpp:1537] [PG 0 Rank 15] ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in monitoring enqueued collectives.",
        "[rank15]:[E1130 08:59:12.0 ProcessGroupNCCL.cpp:1200] [PG 0 Rank 15] Process group watchdog thread terminated with exception: NCCL error: remote process exited or there was a network error, NCCL version 2.19.3",
        "ncclRemoteError: A call to NCCL failed to receive data from a remote peer.",
        "Last error:",
        "socketProgressOpt: Call to recv from 10.0.0.7<43920> failed : Connection reset by peer",
    ]);
    let n = names(&evs);
    assert_eq!(&n[..6], ["watchdog_timeout", "error_line", "watchdog_abort", "pg_status", "heartbeat_stuck", "nccl_error"], "{n:?}");
    assert!(matches!(&evs[0].kind, EventKind::WatchdogTimeout { seq: Some(SeqNo(57)), numel_in: None, timeout_ms: Some(1_800_000), .. }));
    assert!(evs[0].printed_ns.is_none());
    assert!(matches!(&evs[5].kind, EventKind::NcclError { code: Some(c), .. } if c == "ncclRemoteError"));
    assert!(evs.len() <= 8, "{n:?}");
}

#[test]
fn nccl_warns_with_and_without_timestamps() {
    let evs = run(Some(2), &[
        "node7:2231:2301 [3] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.0.0.7<53249> with error 12, opcode 0, len 0, vendor err 129 (Recv) localGid ::ffff:10.0.0.8 remoteGids::ffff:10.0.0.7",
        "node7:2231:2301 [3] NCCL INFO transport/net.cc:1134 -> 6",
        "[2026-11-30 08:58:51] node7:2231:2302 [3] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote peer node3<43210>",
        "node7:2231:2231 [3] NCCL INFO comm 0x5 rank 2 nranks 16 cudaDev 3 busId 1000 - Abort COMPLETE",
    ]);
    assert_eq!(names(&evs), ["nccl_warn", "nccl_warn", "connection_closed", "warning"]);
    assert!(evs[0].printed_ns.is_none());
    assert!(evs[1].printed_ns.is_some());
    assert_eq!(evs[2].kind, EventKind::ConnectionClosed { peer: Some(PeerRef::Address("node3:43210".into())), transport: "nccl".into() });
}

#[test]
fn faulthandler_current_thread_and_periodic_dumps() {
    let evs = run(
        Some(0),
        &[
            "Timeout (0:00:25)!",
            "Thread 0x00007f245f1776c0 (most recent call first):",
            "  File \"/opt/job/data.py\", line 12 in __next__",
            "  File \"/opt/job/worker.py\", line 88 in main",
            "Timeout (0:00:50)!",
            "Thread 0x00007f245f1776c0 (most recent call first):",
            "  File \"/opt/job/worker.py\", line 88 in main",
            "Fatal Python error: Bus error",
            "",
            "Thread 0x00007f73de9fe6c0 (most recent call first):",
            "  File \"/usr/lib/python3.12/threading.py\", line 355 in wait",
            "",
            "Current thread 0x00007f77833ff140 (most recent call first):",
            "  File \"/opt/job/data.py\", line 40 in load",
            "  File \"/opt/job/worker.py\", line 92 in main",
            "",
            "Extension modules: numpy._core._multiarray_umath, torch._C (total: 2)",
            "Segmentation fault (core dumped)",
        ],
    );
    assert_eq!(names(&evs), ["stack_dump", "stack_dump", "fatal_signal", "error_line"]);
    let EventKind::FatalSignal { what, frames } = &evs[2].kind else { unreachable!() };
    assert_eq!(what, "Bus error");
    assert_eq!(frames.iter().map(|f| f.function.as_str()).collect::<Vec<_>>(), ["main", "load"]);
    let EventKind::StackDump { frames } = &evs[0].kind else { unreachable!() };
    assert_eq!(frames.last().map(|f| f.function.as_str()), Some("__next__"));
}

#[test]
fn cpp_exception_blocks_emit_nothing_of_their_own() {
    let evs = run(Some(1), &[
        "[rank1]:[W1130 09:21:25.111225011 TCPStore.cpp:125] [c10d] recvValue failed on SocketImpl(fd=52, addr=[localhost]:34408, remote=[localhost]:30111): Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown or crash?",
        "Exception raised from recvBytes at /pytorch/torch/csrc/distributed/c10d/Utils.hpp:682 (most recent call first):",
        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x9d (0x7f9fc1f7305d in libc10.so)",
        "frame #1: <unknown function> + 0x6a914bd (0x7f9f2ae914bd in libtorch_cpu.so)",
        "",
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        "  what():  [PG ID 0 PG GUID 0(default_pg) Rank 1] Process group watchdog thread terminated with exception: NCCL error: unhandled cuda error",
    ]);
    assert_eq!(names(&evs), ["store_error", "error_line", "nccl_error"]);
    assert!(evs[1].kind.message().starts_with("c10::DistBackendError: [PG ID 0"));
}

#[test]
fn kernel_slurm_and_dataloader_lines() {
    let evs = run(
        None,
        &[
            "Nov 30 08:58:51 gpu7 kernel: NVRM: Xid (PCI:0000:0a:00): 79, pid=12345, name=python, GPU has fallen off the bus.",
            "[ 4521.112] Out of memory: Killed process 12345 (python) total-vm:123456kB, anon-rss:1000kB",
            "srun: error: node12: task 3: Killed",
            "slurmstepd: error: *** JOB 1234 ON node12 CANCELLED AT 2026-11-30T08:59:11 DUE TO TIME LIMIT ***",
            "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).",
            "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).",
        ],
    );
    // srun's line is both the scheduler's word and task 3's end (under srun, rank 3). The
    // repeated error line passes again (up to three times: a recurring error is evidence).
    assert_eq!(names(&evs), ["xid", "oom_kill", "launcher_worker_failed", "scheduler_end", "scheduler_end", "error_line", "error_line"]);
    assert!(evs[0].printed_ns.is_some());
    assert!(evs[4].printed_ns.is_some());
}

#[test]
fn tensorflow_and_horovod() {
    let evs = run(Some(0), &[
        "2026-11-30 08:58:51.123456: W tensorflow/core/common_runtime/bfc_allocator.cc:479] Allocator (GPU_0_bfc) ran out of memory trying to allocate 256.00MiB",
        "2026-11-30 08:58:51.123456: E tensorflow/core/common_runtime/ring_reducer.cc:100] Aborting RingReduce with Unavailable: Collective ops is aborted by: Socket closed",
        "[2026-11-30 08:58:51.123456: W /tmp/pip-req-build/horovod/common/stall_inspector.cc:107] One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and are waiting for remainder of ranks for more than 60 seconds. This may indicate that different ranks are trying to submit different tensors or that only subset of ranks is submitting tensors, which will cause deadlock.",
        "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with shape[8192,8192] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc",
    ]);
    assert_eq!(names(&evs), ["warning", "error_line", "error_line", "error_line"]);
    assert!(evs.iter().all(|e| e.printed_ns.is_some() || e.kind.name() == "error_line"));
}

#[test]
fn invalid_utf8_and_huge_lines_are_diagnosed() {
    let mut p = RankParser::new(Some(Rank(0)));
    let mut out = Vec::new();
    let mut bad = b"RuntimeError: bad \xff\xfe bytes".to_vec();
    p.push(&LogLine { rank: None, stream: Stream::Stderr, seq: 0, capture_ns: T0, bytes: bad.clone() }, &mut out);
    bad = vec![b'a'; 5 << 20];
    p.push(&LogLine { rank: None, stream: Stream::Stderr, seq: 1, capture_ns: T0, bytes: bad }, &mut out);
    p.finish(&mut out);
    assert_eq!(names(&out), ["error_line"]);
    assert_eq!(p.diagnostics().len(), 2);
    assert_eq!(p.diagnostics()[0].seq, 0);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]
    #[test]
    fn arbitrary_bytes_never_panic(lines in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 0..40)) {
        let mut p = RankParser::new(None);
        let mut out = Vec::new();
        for (i, b) in lines.iter().enumerate() {
            p.push(&LogLine { rank: None, stream: Stream::Stdout, seq: i as u64, capture_ns: i as i64, bytes: b.clone() }, &mut out);
        }
        p.finish(&mut out);
        prop_assert!(out.len() <= 4 * lines.len() + 4);
    }

    #[test]
    fn structured_fragments_never_panic(parts in proptest::collection::vec(prop_oneof![
        Just("[rank1]: ".to_string()), Just("Traceback (most recent call last):".to_string()),
        Just("  File \"x.py\", line ".to_string()), Just("Fatal Python error: ".to_string()),
        Just("[E1130 08:59:11.4 ProcessGroupNCCL.cpp:1] ".to_string()), Just("WorkNCCL(SeqNum=".to_string()),
        Just("CollectiveFingerPrint(".to_string()), Just("Rank 1 is running collective: ".to_string()),
        Just("vm:1:1 [0] NCCL WARN ".to_string()), Just("[1]:".to_string()), Just("Failures:".to_string()),
        Just("NVRM: Xid (PCI:".to_string()), Just("step ".to_string()), "[ -~]{0,12}".prop_map(|s| s),
        Just("\n".to_string()), Just("\u{e9}".to_string()),
    ], 0..60)) {
        let joined: String = parts.concat();
        let mut p = RankParser::new(Some(Rank(1)));
        let mut out = Vec::new();
        let lines: Vec<&str> = joined.split('\n').collect();
        for (i, l) in lines.iter().enumerate() {
            p.push(&LogLine { rank: None, stream: Stream::Stderr, seq: i as u64, capture_ns: T0, bytes: l.as_bytes().to_vec() }, &mut out);
        }
        p.finish(&mut out);
        prop_assert!(out.len() <= 4 * lines.len() + 4);
    }
}

/// `cargo test --release -p coroner-parse --test formats throughput -- --ignored --nocapture`
#[test]
#[ignore = "throughput report"]
fn throughput() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/corpus");
    let mut files = Vec::new();
    for b in std::fs::read_dir(&root).expect("corpus").flatten() {
        for f in std::fs::read_dir(b.path()).expect("bundle").flatten() {
            let n = f.file_name().to_string_lossy().to_string();
            if n.ends_with(".log") && (n.starts_with("rank") || n.starts_with("launcher")) {
                files.push(std::fs::read(f.path()).expect("read"));
            }
        }
    }
    let lines: Vec<Vec<LogLine>> = files
        .iter()
        .map(|f| {
            f.split(|b| *b == b'\n')
                .enumerate()
                .map(|(i, l)| LogLine { rank: None, stream: Stream::Stderr, seq: i as u64, capture_ns: T0, bytes: l.to_vec() })
                .collect()
        })
        .collect();
    let bytes: usize = files.iter().map(Vec::len).sum();
    let reps = 30;
    let start = std::time::Instant::now();
    let mut events = 0;
    for _ in 0..reps {
        for f in &lines {
            let mut p = RankParser::new(Some(Rank(0)));
            let mut out = Vec::new();
            for l in f {
                p.push(l, &mut out);
            }
            p.finish(&mut out);
            events += out.len();
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!("{:.1} MB/s ({} bytes x {reps}, {events} events)", (bytes * reps) as f64 / secs / 1e6, bytes);
}

#[test]
fn a_launcher_record_after_a_wrapped_traceback_is_the_launchers_not_the_message() {
    // `accelerate test` prints its child's output under `stderr: `: the traceback's message ends
    // where the elastic agent's record begins.
    let evs = run(
        None,
        &[
            "stderr: Traceback (most recent call last):",
            "stderr:   File \"/opt/x/distributed_c10d.py\", line 2060, in all_gather",
            "stderr:     work = default_pg.allgather([tensor_list], [tensor])",
            "stderr: RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:47, unhandled cuda error, NCCL version 21.0.3",
            "stderr: ncclUnhandledCudaError: Call to CUDA function failed.",
            "stderr: ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0 (pid: 227) of binary: /opt/anaconda3/bin/python",
        ],
    );
    let EventKind::Exception { message, .. } = &evs[0].kind else { panic!("{:?}", names(&evs)) };
    assert!(message.ends_with("ncclUnhandledCudaError: Call to CUDA function failed."), "{message}");
    assert!(
        evs.iter().any(|e| matches!(&e.kind, EventKind::LauncherWorkerFailed(f) if f.local_rank == Some(0) && f.exit_code == Some(1))),
        "{:?}",
        names(&evs)
    );
}

#[test]
fn an_error_line_logged_again_and_again_passes_three_times_then_is_folded() {
    let line =
        "2025-02-10 16:43:46.372262: E external/xla/xla/stream_executor/cuda/cuda_timer.cc:86] Delay kernel timed out: measured time has sub-optimal accuracy.";
    let evs = run(None, &[line; 6]);
    assert_eq!(evs.iter().filter(|e| matches!(e.kind, EventKind::ErrorLine { .. })).count(), 3, "{:?}", names(&evs));
    // A warning is still told once.
    let w = "2025-02-10 16:43:46.372262: W external/x.cc:1] slow";
    let evs = run(None, &[w; 4]);
    assert_eq!(evs.iter().filter(|e| matches!(e.kind, EventKind::Warning { .. })).count(), 1);
}

#[test]
fn an_exception_raised_inside_load_state_dict_says_so_whatever_its_words() {
    let evs = run(
        None,
        &[
            "Traceback (most recent call last):",
            "  File \"training.py\", line 48, in init",
            "    model = tools.pick_model(args, dicts)",
            "  File \"C:\\ProgramData\\Anaconda3\\lib\\site-packages\\torch\\nn\\modules\\module.py\", line 487, in load_state_dict",
            "    own_state[name].copy_(param)",
            "RuntimeError: inconsistent tensor size, expected tensor [51919 x 100] and src [51920 x 100] to have the same number of elements",
        ],
    );
    assert_eq!(names(&evs), ["exception", "error_line"]);
    assert!(evs[1].kind.message().starts_with("raised while loading a state_dict into the model (load_state_dict): RuntimeError: inconsistent tensor size"));
    // The same error raised elsewhere is only the exception.
    let evs =
        run(None, &["Traceback (most recent call last):", "  File \"t.py\", line 3, in step", "    x.copy_(y)", "RuntimeError: inconsistent tensor size"]);
    assert_eq!(names(&evs), ["exception"]);
}
