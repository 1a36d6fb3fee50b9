//! Pieces of logs as people paste them into bug reports (field round 8): a launcher's failure
//! table cut inside its first row, a GUI runner's stamp before every line, NCCL's proxy service
//! thread complaining while communicators are torn down. Lines are made up in those shapes.

mod support;

use coroner_model::{EventKind, Rank};
use support::run;

#[test]
fn a_failure_table_pasted_from_inside_its_first_row_still_names_the_worker() {
    let evs = run(&[
        "  time      : 2025-02-03_04:05:06",
        "  host      : a1b2c3d4e5f6",
        "  rank      : 5 (local_rank: 1)",
        "  exitcode  : -7 (pid: 4242)",
        "  error_file: <N/A>",
        "  traceback : Signal 7 (SIGBUS) received by PID 4242",
        "============================================================",
    ]);
    let failed: Vec<_> = evs
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::LauncherWorkerFailed(f) => Some((f.global_rank, f.local_rank, f.signal, f.pid)),
            _ => None,
        })
        .collect();
    assert_eq!(failed, vec![(Some(Rank(5)), Some(1), Some(7), Some(4242))]);
    // A time field of another shape opens nothing.
    assert!(run(&["  time      : 12.5s", "  rank      : 5"]).iter().all(|e| !matches!(e.kind, EventKind::LauncherWorkerFailed(_))));
}

#[test]
fn an_exception_under_a_gui_runners_cut_stamp_is_read() {
    let evs = run(&["12] [INFO] File \"C:\\app\\env\\lib\\site-packages\\torch\\x.py\", line 3", "12] [INFO] ValueError: the store could not start"]);
    assert!(
        evs.iter().any(|e| e.kind.message().contains("ValueError: the store could not start")),
        "{:?}",
        evs.iter().map(|e| e.kind.name()).collect::<Vec<_>>()
    );
}

#[test]
fn the_proxy_service_threads_teardown_chain_is_no_failure_of_its_own() {
    let evs = run(&[
        "box:10:20 [0] proxy.cc:1458 NCCL WARN [Service thread] Accept failed Resource temporarily unavailable",
        "box:10:20 [0] NCCL INFO misc/socket.cc:826 -> 3",
        "box:10:20 [0] proxy.cc:1521 NCCL WARN [Proxy Service 0] Failed to execute operation Close from rank 0, retcode 3",
        "box:11:30 [1] NCCL INFO misc/socket.cc:47 -> 3",
        "box:11:30 [1] NCCL INFO misc/socket.cc:550 -> 3",
    ]);
    assert!(!evs.iter().any(|e| matches!(e.kind, EventKind::NcclError { .. })), "{evs:?}");
    // The same chain after a WARN of the process's own call is its failure.
    let evs = run(&[
        "box:10:21 [0] misc/shmutils.cc:112 NCCL WARN Error while creating shared memory segment /dev/shm/nccl-x (size 9637888)",
        "box:10:21 [0] NCCL INFO transport/shm.cc:114 -> 2",
    ]);
    assert!(evs.iter().any(|e| matches!(e.kind, EventKind::NcclError { .. })), "{evs:?}");
}

/// A traceback cut inside a launcher's own code is the launcher re-raising a worker's failure
/// (field round 10: `torch.distributed.launch` under `runpy`, cut after `main()`); one cut in
/// the worker's code is the worker's. The launcher's report names the worker.
#[test]
fn a_traceback_cut_inside_the_launchers_code_is_the_launchers_own() {
    let evs = run(&[
        "[2024-05-28 14:04:28,584] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: 1) local_rank: 2 (pid: 60554) of binary: /usr/bin/python",
        "Traceback (most recent call last):",
        "  File \"/usr/lib/python3.8/runpy.py\", line 194, in _run_module_as_main",
        "    return _run_code(code, main_globals, None,",
        "  File \"/usr/lib/python3.8/site-packages/torch/distributed/launch.py\", line 196, in <module>",
        "    main()",
    ]);
    let cut: Vec<String> = evs.iter().filter(|e| e.kind.message().contains("cut before its exception line")).map(|e| e.kind.message()).collect();
    assert_eq!(cut.len(), 1, "{evs:?}");
    assert!(cut[0].starts_with("the launcher's own traceback"), "{cut:?}");
    assert!(evs.iter().any(|e| matches!(&e.kind, EventKind::LauncherWorkerFailed(f) if f.local_rank == Some(2) && f.exit_code == Some(1))));
    // Cut in torchrun's entry script itself.
    let entry = run(&["Traceback (most recent call last):", "  File \"/opt/conda/bin/torchrun\", line 8, in <module>", "    sys.exit(main())"]);
    assert!(entry.iter().any(|e| e.kind.message().starts_with("the launcher's own traceback")), "{entry:?}");
    let worker = run(&["Traceback (most recent call last):", "  File \"/srv/job/train.py\", line 40, in <module>", "    main()"]);
    assert!(worker.iter().any(|e| e.kind.message().starts_with("a traceback cut before its exception line")), "{worker:?}");
}

/// Python reports an exception it swallowed (in a destructor, an exit callback) under `Exception
/// ignored in: ...` and goes on: a warning, not a failure (field round 11: a Megatron async
/// caller's `__del__` and a tracker's atexit hook after training had finished). A traceback that
/// is not under that header is still a failure, also its cut form.
#[test]
fn an_exception_python_ignored_is_a_warning_not_a_failure() {
    let failure = |evs: &[coroner_model::Event]| evs.iter().any(|e| matches!(e.kind, EventKind::Exception { .. } | EventKind::ErrorLine { .. }));
    for header in [
        "Exception ignored in: <function PersistentAsyncCaller.__del__ at 0x746f0cbc8d60>",
        "Exception ignored in atexit callback: <bound method Cb._clean of <x.Cb object at 0x7f>>",
    ] {
        let evs = run(&[
            header,
            "Traceback (most recent call last):",
            "  File \"x.py\", line 4, in __del__",
            "    self.close()",
            "ValueError: Default process group has not been initialized",
        ]);
        assert!(!failure(&evs), "{evs:?}");
        assert!(evs.iter().any(|e| matches!(&e.kind, EventKind::Warning { message } if message.contains("ValueError: Default process group"))), "{evs:?}");
        let cut = run(&[header, "Traceback (most recent call last):", "  File \"x.py\", line 4, in __del__"]);
        assert!(!failure(&cut), "{cut:?}");
    }
    let later = run(&[
        "Exception ignored in: <function A.__del__ at 0x7f>",
        "step 3",
        "Traceback (most recent call last):",
        "  File \"x.py\", line 4, in main",
        "ValueError: bad",
    ]);
    assert!(failure(&later), "{later:?}");
}

/// multiprocessing's resource tracker, a helper process, reporting shared memory unregistered
/// twice at shutdown (field round 12b, vLLM): a warning; the same error raised in the program is
/// a failure.
#[test]
fn the_resource_trackers_own_traceback_is_a_warning() {
    let tracker = run(&[
        "Traceback (most recent call last):",
        "  File \"/usr/lib/python3.10/multiprocessing/resource_tracker.py\", line 209, in main",
        "    cache[rtype].remove(name)",
        "KeyError: '/psm_10b3d52e'",
    ]);
    assert!(!tracker.iter().any(|e| matches!(e.kind, EventKind::Exception { .. } | EventKind::ErrorLine { .. })), "{tracker:?}");
    assert!(tracker.iter().any(|e| matches!(&e.kind, EventKind::Warning { message } if message.contains("resource tracker"))), "{tracker:?}");
    let program =
        run(&["Traceback (most recent call last):", "  File \"/srv/serve.py\", line 9, in main", "    cache.remove(name)", "KeyError: '/psm_10b3d52e'"]);
    assert!(program.iter().any(|e| matches!(e.kind, EventKind::Exception { .. })), "{program:?}");
}

/// The watchdog's own C++ stack, its `what():` line cut away (field round 12a, Megatron): a
/// frame in `WorkNCCL::checkTimeout` says a collective ran past its timeout; other frames say
/// nothing.
#[test]
fn a_stack_through_the_watchdogs_timeout_check_is_a_collective_timeout() {
    let evs = run(&[
        "frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, std::ratio<1l, 1000l> > >) + 0x1e1 (0x7fe705ea04e1 in libtorch_cuda.so)",
        "frame #2: c10d::ProcessGroupNCCL::watchdogHandler() + 0x222 (0x7fe705ea81a2 in libtorch_cuda.so)",
    ]);
    assert!(matches!(&evs[..], [coroner_model::Event { kind: EventKind::WatchdogTimeout { seq: None, .. }, .. }]), "{evs:?}");
    assert!(run(&["frame #2: c10d::ProcessGroupNCCL::watchdogHandler() + 0x222 (0x7fe705ea81a2 in libtorch_cuda.so)"]).is_empty());
}

/// torchelastic's `error_handler` logs the error file's JSON: the exception is the value of a
/// `"message"` key (field round 12a); a message that is no exception's line is not an error.
#[test]
fn an_exception_inside_an_error_files_json_is_an_error() {
    let evs = run(&[
        "[ERROR] 2021-09-13 22:18:26,678 error_handler: {",
        "  \"message\": {",
        "    \"message\": \"RendezvousConnectionError: The connection to the C10d store has failed. See inner exception for details.\",",
    ]);
    assert!(
        evs.iter().any(|e| matches!(&e.kind, EventKind::ErrorLine { message } if message.starts_with("RendezvousConnectionError: The connection"))),
        "{evs:?}"
    );
    assert!(run(&["  \"message\": \"training finished: 3 epochs\","]).is_empty());
}

/// NCCL's own WARN, then its error code climbing the call chain (`init.cc:840 -> 5`), the
/// exception PyTorch raises on top cut from the paste (field round 13a, AzureML): an NCCL error
/// naming the misuse (invalid usage: two ranks on one GPU), once per chain.
#[test]
fn an_nccl_misuse_chain_is_an_nccl_error_with_its_warning() {
    let evs = run(&[
        "8dbe3a:176:194 [0] init.cc:573 NCCL WARN Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 1cb00000",
        "8dbe3a:176:194 [0] NCCL INFO init.cc:840 -> 5",
        "8dbe3a:176:194 [0] NCCL INFO group.cc:73 -> 5 [Async thread]",
    ]);
    let errors: Vec<&String> = evs
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::NcclError { message, .. } => Some(message),
            _ => None,
        })
        .collect();
    assert_eq!(errors.len(), 1, "{evs:?}");
    assert!(errors[0].starts_with("ncclInvalidUsage") && errors[0].contains("Duplicate GPU detected"), "{errors:?}");
}

/// The watchdog announces the abort, then the C++ runtime's `terminate` line, its `what():` cut
/// (field round 14b, TGI): the terminate is the watchdog's; far from such a line it is not.
#[test]
fn a_terminate_right_after_the_watchdogs_announcement_is_the_watchdogs() {
    let message = |evs: &[coroner_model::Event]| {
        evs.iter()
            .find_map(|e| match &e.kind {
                EventKind::ErrorLine { message } if message.starts_with("terminate called") => Some(message.clone()),
                _ => None,
            })
            .unwrap_or_default()
    };
    let evs = run(&[
        "[E ProcessGroupNCCL.cpp:460] To avoid data inconsistency, we are taking the entire process down.",
        "terminate called after throwing an instance of 'std::runtime_error'",
    ]);
    assert!(message(&evs).ends_with("(the watchdog taking the process down)"), "{evs:?}");
    let alone = run(&["terminate called after throwing an instance of 'std::runtime_error'"]);
    assert_eq!(message(&alone), "terminate called after throwing an instance of 'std::runtime_error'");
}

/// Field round 15a: a queue's feeder thread losing its pipe is a warning; NCCL's proxy thread
/// closing the line's own local rank at teardown names no peer (another local rank still does);
/// torchrun's report with its logger's header cut off still names its worker.
#[test]
fn teardown_noise_and_a_headless_launcher_report() {
    let feeder = run(&[
        "Traceback (most recent call last):",
        "  File \"/usr/lib/python3.8/multiprocessing/queues.py\", line 245, in _feed",
        "    send_bytes(obj)",
        "  File \"/usr/lib/python3.8/multiprocessing/connection.py\", line 200, in send_bytes",
        "BrokenPipeError: [Errno 32] Broken pipe",
    ]);
    assert!(!feeder.iter().any(|e| matches!(e.kind, EventKind::Exception { .. } | EventKind::ErrorLine { .. })), "{feeder:?}");
    let closed = |line: &str| run(&[line]).iter().any(|e| matches!(e.kind, EventKind::ConnectionClosed { .. }));
    assert!(!closed("gcn66:1772561:1773212 [2] NCCL INFO [Service thread] Connection closed by localRank 2"));
    assert!(closed("gcn66:1772561:1773212 [2] NCCL INFO [Service thread] Connection closed by localRank 5"));
    let headless = run(&["torch/distributed/elastic/multiprocessing/api.py:826] failed (exitcode: -9) local_rank: 0 (pid: 1322) of binary: /usr/bin/python"]);
    assert!(headless.iter().any(|e| matches!(&e.kind, EventKind::LauncherWorkerFailed(f) if f.local_rank == Some(0) && f.signal == Some(9))), "{headless:?}");
}
