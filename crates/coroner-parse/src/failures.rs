//! Failure lines that are not part of a larger structure: Python logging records at ERROR and
//! above, bare `SomeError: message` lines, and well-known failure phrases (CUDA asserts and OOM,
//! NaN guards, shape and state_dict errors, DataLoader deaths, TensorFlow and Horovod failures).
//! One Aho-Corasick pass decides whether a line is worth a closer look.

use crate::c10d;
use crate::python::exc_header;
use aho_corasick::{AhoCorasick, AhoCorasickKind, MatchKind};
use coroner_model::EventKind;
use std::sync::LazyLock;

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Act {
    Kernel,
    NcclWarn,
    Warn,
    Error,
    C10d,
}

const PHRASES: &[(&str, Act)] = &[
    ("device-side assert triggered", Act::Error),
    ("Assertion `", Act::Error),
    ("CUDA out of memory", Act::Error),
    ("CUDA error: ", Act::Error),
    ("returned nan values", Act::Error),
    ("Tensor had NaN values", Act::Error),
    ("Inf or NaN", Act::Error),
    ("inf or nan", Act::Error),
    ("Barrier timed out", Act::Error),
    ("cluster registration failed", Act::Error),
    ("heartbeat timeout", Act::Error),
    ("Tensor had Inf values", Act::Error),
    ("check_numerics", Act::Error),
    ("mat1 and mat2 shapes cannot be multiplied", Act::Error),
    ("must match the size of tensor", Act::Error),
    ("Error(s) in loading state_dict", Act::Error),
    ("size mismatch for ", Act::Error),
    ("Missing key(s) in state_dict", Act::Error),
    ("Unexpected key(s) in state_dict", Act::Error),
    ("index out of range in self", Act::Error),
    ("indexSelectLargeIndex", Act::Error),
    ("indexSelectSmallIndex", Act::Error),
    ("DataLoader worker (pid", Act::Error),
    ("exited unexpectedly", Act::Error),
    ("Unexpected bus error encountered in worker", Act::Error),
    ("insufficient shared memory", Act::Error),
    ("OOM when allocating tensor", Act::Error),
    ("Aborting RingReduce", Act::Error),
    ("Collective ops is aborted", Act::Error),
    ("One or more tensors were submitted to be reduced", Act::Error),
    ("Stalled ranks:", Act::Error),
    ("Missing ranks:", Act::Error),
    ("Segmentation fault", Act::Error),
    ("core dumped", Act::Error),
    ("Bus error", Act::Error),
    ("Illegal instruction", Act::Error),
    ("Killed", Act::Error),
    // The shell's own words in other locales (bash's translations of "Killed", "Segmentation
    // fault" and "Aborted (core dumped)").
    ("已杀死", Act::Error),
    ("已殺死", Act::Error),
    ("強制終了", Act::Error),
    ("Getötet", Act::Error),
    ("Processus arrêté", Act::Error),
    ("Убито", Act::Error),
    ("段错误", Act::Error),
    ("記憶體區段錯誤", Act::Error),
    ("セグメンテーション違反", Act::Error),
    ("Speicherzugriffsfehler", Act::Error),
    ("Erreur de segmentation", Act::Error),
    ("Ошибка сегментирования", Act::Error),
    ("核心已转储", Act::Error),
    ("已放弃", Act::Error),
    ("Abgebrochen (Speicherabzug geschrieben)", Act::Error),
    ("illegal memory access", Act::Error),
    // glibc's heap checks, then its abort (native memory corruption).
    ("munmap_chunk(): invalid pointer", Act::Error),
    ("double free or corruption", Act::Error),
    ("free(): invalid pointer", Act::Error),
    ("corrupted size vs. prev_size", Act::Error),
    ("malloc(): corrupted", Act::Error),
    ("*** Error in `", Act::Error),
    ("from checkpoint, the shape in current model is", Act::Error),
    ("Shape mismatch in the collective", Act::Error),
    ("vocab size of the tokenizer", Act::Error),
    ("op.preamble.length <= op.nbytes", Act::Error),
    ("due to Overflow", Act::Error),
    ("Not all ranks joining collective", Act::Error),
    ("missing ranks: {", Act::Error),
    ("*** SIGSEGV", Act::Error),
    ("*** SIGBUS", Act::Error),
    ("*** SIGABRT", Act::Error),
    ("the launch timed out and was terminated", Act::Error),
    ("collective mismatch error", Act::Error),
    ("A worker died or was killed while executing", Act::Error),
    ("CUDA-capable device(s) is/are busy or unavailable", Act::Error),
    // A Rust program's panic (TGI's router, candle): `thread 'main' panicked at '...'`.
    ("' panicked at ", Act::Error),
    ("uncorrectable NVLink error", Act::Error),
    ("Nan in summary histogram", Act::Error),
    ("invalid value (nan) encountered", Act::Error),
    ("killed due to memory pressure", Act::Error),
    // Rust's allocator giving up (tokenizers, safetensors inside a Python worker): the process
    // aborts because host memory ran out.
    ("memory allocation of ", Act::Error),
    // TensorFlow's TPU session hooks: a worker stopped answering heartbeats (preempted, crashed).
    ("lame workers found", Act::Error),
    ("exceeds the memory usage threshold", Act::Error),
    ("Ray killed this worker", Act::Error),
    // The advice closing Ray's memory monitor's report of a worker it killed, left when a
    // truncated log lost the report's head.
    ("ray-oom-prevention", Act::Error),
    ("received at time=", Act::Error),
    ("NCCL error", Act::Error),
    // An XLA/absl status code: JAX's `Original error: RESOURCE_EXHAUSTED: Failed to allocate ...`.
    ("RESOURCE_EXHAUSTED: ", Act::Error),
    ("ncclRemoteError", Act::Error),
    ("ncclSystemError", Act::Error),
    ("ncclInternalError", Act::Error),
    ("ncclUnhandledCudaError", Act::Error),
    ("unhandled cuda error", Act::Error),
    ("Unable to determine the device handle", Act::Error),
    ("GPU is lost", Act::Error),
    ("Gradient overflow", Act::Warn),
    ("OVERFLOW!", Act::Warn),
    ("destroy_process_group() was not called", Act::Warn),
    ("is deprecated", Act::Warn),
    ("Watchdog caught", Act::C10d),
    ("last enqueued", Act::C10d),
    ("Received a dump signal", Act::C10d),
    ("watchdog got stuck", Act::C10d),
    ("Desync debug report", Act::C10d),
    ("lagging ranks", Act::C10d),
    ("Detected mismatch between collectives", Act::C10d),
    ("[c10d]", Act::C10d),
    ("TCPStore", Act::C10d),
    ("Terminating the process after attempting", Act::C10d),
    ("we are taking the entire process down", Act::C10d),
    ("Connection closed by peer", Act::C10d),
    ("Timed out waiting", Act::C10d),
    (" NCCL WARN ", Act::NcclWarn),
    ("NVRM:", Act::Kernel),
    ("Killed process", Act::Kernel),
    ("invoked oom-killer", Act::Kernel),
    ("oom-kill:", Act::Kernel),
    ("AER:", Act::Kernel),
    ("segfault at", Act::Kernel),
    ("ECC", Act::Kernel),
    ("fallen off the bus", Act::Kernel),
    ("Machine check", Act::Kernel),
];

static AC: LazyLock<Option<AhoCorasick>> = LazyLock::new(|| {
    AhoCorasick::builder().kind(Some(AhoCorasickKind::DFA)).match_kind(MatchKind::LeftmostLongest).build(PHRASES.iter().map(|(p, _)| *p)).ok()
});

/// Which phrase families occur in the line: (a kernel marker, the strongest other action).
fn scan(t: &str) -> (bool, Option<Act>) {
    let Some(ac) = AC.as_ref() else { return (false, None) };
    let mut kernel = false;
    let mut best = None;
    for m in ac.find_iter(t).take(16) {
        match PHRASES.get(m.pattern().as_usize()).map(|p| p.1) {
            Some(Act::Kernel) => kernel = true,
            Some(a) => best = best.max(Some(a)),
            None => {}
        }
    }
    (kernel, best)
}

fn strongest(t: &str) -> Option<Act> {
    scan(t).1
}

/// Whether a record logged below ERROR reports an error all the same: it says so ("Error
/// reported to Coordinator", "Error recorded from training_loop") and holds a failure phrase, or
/// it reports a process's death (Ray logs `A worker died or was killed while executing a task by
/// an unexpected system error` at WARNING).
pub fn reports_an_error(msg: &str) -> bool {
    (msg.contains("Error reported") || msg.contains("Error recorded") || msg.contains("rror:")) && has_failure_phrase(msg)
        || msg.contains("A worker died or was killed while executing")
        || msg.contains("lame workers found")
}

/// bash's report of a child it lost to a signal, where `$?` would only say 134 or 139:
/// `bash: line 1: 3523705 Aborted    HOROVOD_RANK=0 ... python train.py`,
/// `./run.sh: line 12:  4242 Segmentation fault      (core dumped) python train.py`.
fn job_report(t: &str) -> bool {
    const DEATHS: [&str; 6] = ["Aborted", "Killed", "Segmentation fault", "Bus error", "Illegal instruction", "Floating point exception"];
    // `<shell or script>: line N: PID Status  command`.
    let Some(at) = t.find(": line ") else { return false };
    let r = &t[at + 7..];
    let n = r.bytes().take_while(u8::is_ascii_digit).count();
    if n == 0 || !r[n..].starts_with(": ") {
        return false;
    }
    let r = r[n + 2..].trim_start();
    let pid = r.bytes().take_while(u8::is_ascii_digit).count();
    pid > 0 && r[pid..].starts_with(' ') && DEATHS.iter().any(|d| r[pid..].trim_start().starts_with(d))
}

/// Whether a string is an exception's line (`RendezvousConnectionError: The connection to the
/// C10d store has failed.`): an error's type, then its message.
pub fn is_exception_line(t: &str) -> bool {
    exc_header(t).is_some_and(|(ty, msg)| errorish_type(ty) && !msg.is_empty())
}

/// Whether a message holds a failure phrase (used to upgrade glog warnings such as Horovod's stall).
pub fn has_failure_phrase(t: &str) -> bool {
    strongest(t) == Some(Act::Error)
}

/// TensorFlow's collective executor aborting a step for an error (logged at W level):
/// `BaseCollectiveExecutor::StartAbort Invalid argument: var and grad do not have the same shape`.
/// `Out of range` (the end of a dataset) and `Cancelled` are how a normal epoch or shutdown ends.
pub fn collective_abort(body: &str) -> bool {
    // TensorFlow's status codes in its older words and in absl's (`DEADLINE_EXCEEDED`).
    const FAILING: [&str; 18] = [
        "Invalid argument",
        "Resource exhausted",
        "Internal",
        "Unavailable",
        "Failed precondition",
        "Unknown",
        "Not found",
        "Data loss",
        "Deadline exceeded",
        "INVALID_ARGUMENT",
        "RESOURCE_EXHAUSTED",
        "INTERNAL",
        "UNAVAILABLE",
        "FAILED_PRECONDITION",
        "UNKNOWN",
        "NOT_FOUND",
        "DATA_LOSS",
        "DEADLINE_EXCEEDED",
    ];
    body.find("StartAbort ").is_some_and(|at| {
        let status = &body[at + "StartAbort ".len()..];
        FAILING.iter().any(|c| status.starts_with(c) && status[c.len()..].starts_with(':'))
    })
}

/// One of TensorFlow's root errors under `InvalidArgumentError: 2 root error(s) found.`:
/// `  (0) Invalid argument: Incompatible shapes: [25088] vs. [32,28,28]`. The status code's words
/// (`Invalid argument`, `Resource exhausted`, `Not found`, ...) then the message.
fn tf_root_error(t: &str) -> Option<&str> {
    let r = t.trim_start().strip_prefix('(')?;
    let (n, rest) = r.split_once(") ")?;
    if n.is_empty() || !n.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    const CODES: [&str; 12] = [
        "Invalid argument",
        "Resource exhausted",
        "Not found",
        "Failed precondition",
        "Internal",
        "Unavailable",
        "Aborted",
        "Cancelled",
        "Unknown",
        "Out of range",
        "Deadline exceeded",
        "Unimplemented",
    ];
    CODES.iter().any(|c| rest.starts_with(c) && rest[c.len()..].starts_with(':')).then(|| rest.trim_end())
}

/// The op a TensorFlow error names on the line after it, `\t [[{{node Adam/NcclAllReduce_8}}]]`
/// or `[[node Adam/NcclAllReduce_8 (defined at train.py:41) ]]`, when that op is one of
/// TensorFlow's NCCL kernels (`NcclAllReduce`, `NcclBroadcast`, `NcclReduce`): the error above it
/// (often a bare `Internal: internal error`) is NCCL's.
fn tf_nccl_node(t: &str) -> Option<EventKind> {
    let r = t.trim().strip_prefix("[[")?;
    let r = r.strip_prefix("{{").unwrap_or(r).strip_prefix("node ")?;
    let name = r.split(['}', ' ', ']']).next()?;
    let op = name.rsplit('/').next()?;
    op.starts_with("Nccl").then(|| EventKind::NcclError { code: None, message: format!("NCCL error in TensorFlow's {op} op ({name})") })
}

/// An exception type's last dotted component, without Ray's `(CauseError)` suffix.
fn short_type(ty: &str) -> &str {
    let base = ty.split('(').next().unwrap_or(ty);
    base.rsplit('.').next().unwrap_or(base)
}

/// Whether a type's name says it is an error (`...Error`, `...Exception`, `...Failure`, ...);
/// Ray's `RayTaskError(OutOfMemoryError)` by either name.
fn errorish_type(ty: &str) -> bool {
    let named = |short: &str| ["Error", "Exception", "Interrupt", "Failure", "Exit", "Abort", "Aborted"].iter().any(|s| short.ends_with(s));
    named(short_type(ty)) || ty.split_once('(').is_some_and(|(_, cause)| named(cause.trim_end_matches(')')))
}

/// A bare line (no glog or logging header): a kernel line, a `SomeError: message` line, or a
/// failure phrase.
pub fn bare(t: &str, out: &mut Vec<EventKind>) -> bool {
    let before = out.len();
    if let Some(msg) = tf_root_error(t) {
        out.push(EventKind::ErrorLine { message: msg.to_string() });
        return true;
    }
    if let Some(k) = tf_nccl_node(t) {
        out.push(k);
        return true;
    }
    if job_report(t) {
        out.push(EventKind::ErrorLine { message: clip_chars(t.trim(), 512) });
        return true;
    }
    let (kernel_marker, act) = scan(t);
    if kernel_marker && crate::kernel::classify(t, out) {
        return true;
    }
    if let Some((ty, msg)) = exc_header(t) {
        let errorish = errorish_type(ty);
        // A wrapper that re-raises another exception with that exception's line as its message
        // (JAX's `jax._src.traceback_util.UnfilteredStackTrace: jaxlib...XlaRuntimeError: ...`).
        let wraps_one = !errorish && exc_header(msg).is_some_and(|(inner, m)| errorish_type(inner) && !m.is_empty());
        if errorish && !msg.is_empty() || (errorish && short_type(ty).len() > 5 && t.trim() == ty) || wraps_one {
            out.push(EventKind::ErrorLine { message: t.trim_end().to_string() });
            // The type can be the telling part (`ncclSystemError: System call ... failed`).
            c10d::specific(t, out);
            return true;
        }
        if short_type(ty).ends_with("Warning") && !msg.is_empty() {
            out.push(EventKind::Warning { message: t.trim_end().to_string() });
            return true;
        }
    }
    match act {
        Some(Act::C10d) => {
            if !c10d::classify_body(t, out) && has_failure_phrase(t) {
                out.push(EventKind::ErrorLine { message: t.trim().to_string() });
            }
        }
        Some(Act::Error) => {
            out.push(EventKind::ErrorLine { message: t.trim().to_string() });
            c10d::specific(t, out);
            out.extend(crate::coordination::lost_task(t));
        }
        Some(Act::Warn) => out.push(EventKind::Warning { message: t.trim().to_string() }),
        // `init.cc:1247 NCCL WARN ...` without NCCL's `host:pid:tid [dev]` header (pasted, cut).
        Some(Act::NcclWarn) => {
            let at = t.find(" NCCL WARN ").map_or(0, |i| i + " NCCL WARN ".len());
            out.push(EventKind::NcclWarn { message: t[at..].trim().to_string() });
        }
        Some(Act::Kernel) | None => {}
    }
    out.len() > before
}

/// At most `n` characters of `s` (a job report can carry a whole environment on its line).
fn clip_chars(s: &str, n: usize) -> String {
    s.char_indices().nth(n).map_or_else(|| s.to_string(), |(i, _)| s[..i].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tensorflow_error_in_an_nccl_op_is_an_nccl_error() {
        for t in ["\t [[{{node replica_1/NcclAllReduce_3}}]]", "  [[node tower0/NcclBroadcast (defined at /opt/m.py:7) ]]"] {
            assert!(matches!(kinds(t).as_slice(), [EventKind::NcclError { message, .. }] if message.starts_with("NCCL error in TensorFlow's Nccl")), "{t}");
        }
        assert!(tf_nccl_node("\t [[{{node replica_1/CollectiveReduceV2}}]]").is_none());
        assert!(tf_nccl_node("[[Adam/Adam/group_deps/_919]]").is_none());
    }

    #[test]
    fn a_collective_abort_for_an_error_is_one_and_the_end_of_a_dataset_is_not() {
        assert!(collective_abort("BaseCollectiveExecutor::StartAbort Invalid argument: var and grad do not have the same shape[2,1536] [512,1536]"));
        assert!(collective_abort("BaseCollectiveExecutor::StartAbort Resource exhausted: OOM when allocating tensor"));
        assert!(!collective_abort("BaseCollectiveExecutor::StartAbort Out of range: End of sequence"));
        assert!(collective_abort("BaseCollectiveExecutor::StartAbort DEADLINE_EXCEEDED: Deadline Exceeded"));
        assert!(!collective_abort("BaseCollectiveExecutor::StartAbort OUT_OF_RANGE: End of sequence"));
        assert!(!collective_abort("BaseCollectiveExecutor::StartAbort Cancelled: [_Derived_]Cancelled"));
        assert!(!collective_abort("Invalid argument: no abort here"));
    }

    #[test]
    fn a_warning_that_reports_a_death_or_an_error_is_an_error() {
        assert!(reports_an_error("A worker died or was killed while executing a task by an unexpected system error. To troubleshoot the problem, check the logs for the dead worker."));
        assert!(reports_an_error("Error reported to Coordinator: <class 'InvalidArgumentError'>, Tensor had NaN values"));
        assert!(!reports_an_error("Error reported to Coordinator: nothing telling"));
        assert!(!reports_an_error("worker 3 is slow"));
    }

    #[test]
    fn tensorflow_root_errors_are_error_lines() {
        assert_eq!(
            tf_root_error("  (0) Invalid argument: Incompatible shapes: [25088] vs. [32,28,28]"),
            Some("Invalid argument: Incompatible shapes: [25088] vs. [32,28,28]")
        );
        assert_eq!(tf_root_error("  (1) Resource exhausted: OOM when allocating tensor"), Some("Resource exhausted: OOM when allocating tensor"));
        assert_eq!(tf_root_error("(3) something else"), None);
        assert_eq!(tf_root_error("(a) Invalid argument: x"), None);
    }

    fn kinds(t: &str) -> Vec<EventKind> {
        let mut out = Vec::new();
        bare(t, &mut out);
        out
    }

    #[test]
    fn a_shells_report_of_a_child_lost_to_a_signal_is_an_error() {
        assert!(job_report("bash: line 1: 3523705 Aborted                 HOROVOD_RANK=0 python train.py"));
        assert!(job_report("./train.sh: line 27:  4242 Segmentation fault      (core dumped) python -u main.py"));
        assert!(!job_report("bash: line 1: 17 Terminated              python serve.py"));
        assert!(!job_report("see line 12: 3 Killed processes in the summary"));
        assert!(matches!(kinds("bash: line 3: 991 Killed  python x.py").first(), Some(EventKind::ErrorLine { .. })));
        assert!(reports_an_error("ShutdownHook: lame workers found: HeartbeatManager(/job:worker/replica:0/task:1/device:CPU:0)"));
    }

    #[test]
    fn bare_failures() {
        for t in [
            "RuntimeError: CUDA error: device-side assert triggered",
            "/pytorch/aten/src/ATen/native/cuda/IndexKernelUtils.cu:16: vectorized_gather_kernel: block: [146,0,0], thread: [0,0,0] Assertion `ind >=0 && ind < ind_dim_size && \"vectorized gather kernel index out of bounds\"` failed.",
            "/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1289: indexSelectLargeIndex: block: [0,0,0], thread: [0,0,0] Assertion `srcIndex < srcSelectDimSize` failed.",
            "IndexError: index out of range in self",
            "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).",
            "RuntimeError: DataLoader worker (pid 1234) is killed by signal: Killed.",
            "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with shape[8192,8192] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc",
            "InvalidArgumentError: Incompatible shapes: [32,10] vs. [32,20]",
            "RuntimeError: The size of tensor a (3) must match the size of tensor b (4) at non-singleton dimension 1",
            "Segmentation fault (core dumped)",
            // A wrapper re-raising another exception, Ray's task error naming its cause, an XLA status.
            "jax._src.traceback_util.UnfilteredStackTrace: jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 250000256 bytes.",
            "ray.exceptions.RayTaskError(OutOfMemoryError): ray::Runner.run() (pid=104449, ip=10.130.71.7, actor_id=36b6798a692f88dfb0e149e301000000)",
            "Original error: RESOURCE_EXHAUSTED: Failed to allocate request for 176.00MiB (184549376B) on device ordinal 0",
        ] {
            let k = kinds(t);
            assert!(matches!(k.first(), Some(EventKind::ErrorLine { .. })), "{t}: {k:?}");
        }
        assert!(matches!(kinds("Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 32768.0").first(), Some(EventKind::Warning { .. })));
        assert!(kinds("Search for `cudaErrorAssert' in https://docs.nvidia.com for more information.").is_empty());
        assert!(kinds("Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.").is_empty());
        assert!(kinds("    main()").is_empty());
        // A dotted name whose message is not an exception line is not a wrapper.
        assert!(kinds("jax._src.xla_bridge: Unable to initialize backend 'tpu'").is_empty());
        let k = kinds("RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:547] Connection closed by peer [127.0.0.1]:49353");
        assert!(matches!(k.as_slice(), [EventKind::ErrorLine { .. }, EventKind::ConnectionClosed { .. }]), "{k:?}");
    }
}
