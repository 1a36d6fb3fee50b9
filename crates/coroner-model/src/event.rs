//! Typed events: the few lines that mean something, in the form the analysis reasons about.
//!
//! The parsers turn lines into events; the rules file classifies them into roles and fault classes.
//! An event always points back at the line (or the first line of the block) it came from.

use crate::{Nanos, PgId, Rank, SeqNo, Stream};
use serde::{Deserialize, Serialize};

/// Where an event's evidence lives: the owning rank's stream and line position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct LineRef {
    pub stream: Stream,
    pub seq: u64,
}

/// One typed event on one rank.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// The rank the event is about: the line's owner, never a rank merely named in the text.
    pub rank: Option<Rank>,
    pub line: LineRef,
    /// When the line was captured, on the capturing host's clock.
    pub capture_ns: Nanos,
    /// The time printed inside the line, read as UTC on the emitting host's clock, if it had one.
    pub printed_ns: Option<Nanos>,
    pub kind: EventKind,
    /// The line's text (the last line, for a multi-line block such as a traceback).
    pub text: String,
}

impl Event {
    /// The best time the event itself carries: the printed time when there is one, else capture.
    pub fn host_time_ns(&self) -> Nanos {
        self.printed_ns.unwrap_or(self.capture_ns)
    }
}

/// A frame of a Python or native stack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Frame {
    pub file: String,
    pub line: Option<u32>,
    pub function: String,
}

/// A peer named by an error line: by address (gloo, NCCL sockets, TCPStore) or by rank.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PeerRef {
    Address(String),
    Rank(Rank),
    LocalRank(u32),
}

/// What c10d prints for a collective in a `Detected mismatch between collectives` error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectiveFingerprint {
    pub rank: Rank,
    pub seq: Option<SeqNo>,
    pub op: String,
    pub shapes: Vec<String>,
    pub dtypes: Vec<String>,
}

/// One line of torchrun's failure table or its `failed (exitcode: N)` line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LauncherFailure {
    pub global_rank: Option<Rank>,
    pub local_rank: Option<u32>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub pid: Option<u32>,
    pub host: Option<String>,
    /// True for the row under `Root Cause (first observed failure)`.
    pub root_cause_row: bool,
}

impl LauncherFailure {
    /// A launcher's report that global rank `rank` ended with an exit code or a signal, and no
    /// more (srun's `task 3: Killed`, a failure table's row read by rank).
    pub fn of_rank(rank: Rank, exit_code: Option<i32>, signal: Option<i32>) -> LauncherFailure {
        LauncherFailure { global_rank: Some(rank), local_rank: None, exit_code, signal, pid: None, host: None, root_cause_row: false }
    }
}

/// How a [`EventKind::Stall`] read from ProcessGroupNCCL's desync report names its op (the parser
/// writes it, the analysis says where the stall was read).
pub const DESYNC_REPORT_OP: &str = "desync report";

/// The transport of a [`EventKind::ConnectionClosed`] that a coordination service (XLA/TSL's, used by
/// JAX and TensorFlow) reported: the task's process went away, not a network link.
pub const COORDINATION_TRANSPORT: &str = "coordination";

/// The meaning of an event. Field names follow PyTorch's and NCCL's own words.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EventKind {
    /// A training-loop progress line (`step 4`, `iteration 120/1000`, `epoch 2`).
    Step { step: u64 },
    /// ProcessGroupNCCL's watchdog caught a collective that ran past its timeout. PyTorch before
    /// 1.13 did not print the sequence number (`WorkNCCL(OpType=BROADCAST, Timeout(ms)=...)`).
    WatchdogTimeout {
        pg: Option<PgId>,
        seq: Option<SeqNo>,
        op: String,
        numel_in: Option<u64>,
        numel_out: Option<u64>,
        timeout_ms: Option<u64>,
        elapsed_ms: Option<u64>,
    },
    /// A process group's progress as the watchdog reported it.
    PgStatus { pg: Option<PgId>, failing_seq: Option<SeqNo>, last_enqueued: Option<SeqNo>, last_started: Option<SeqNo>, last_completed: Option<SeqNo> },
    /// A rank was told to dump its flight recorder because `detector` timed out (None: this rank).
    DumpSignal { pg: Option<PgId>, detector: Option<Rank>, last_enqueued: Option<SeqNo>, last_completed: Option<SeqNo> },
    /// The watchdog is terminating the process after a timeout or an error (a symptom).
    WatchdogAbort { pg: Option<PgId> },
    /// The heartbeat monitor found the watchdog thread itself stuck.
    HeartbeatStuck { seconds: Option<u64> },
    /// `Detected mismatch between collectives on ranks`.
    CollectiveMismatch { this: CollectiveFingerprint, other: CollectiveFingerprint },
    /// NCCL's or c10d's report that a collective failed with an NCCL error.
    NcclError { code: Option<String>, message: String },
    /// An NCCL WARN line (the first-hand report of an NCCL-level problem).
    NcclWarn { message: String },
    /// NCCL init: which pid on which host is which rank on which device.
    NcclInit { host: String, pid: u32, rank: Rank, nranks: u32, cuda_dev: Option<u32>, bus_id: Option<String> },
    /// A transport saw a peer hang up: a happens-after edge from that peer's death. The
    /// transport [`COORDINATION_TRANSPORT`] is a distributed runtime's coordination service that
    /// lost a task's process.
    ConnectionClosed { peer: Option<PeerRef>, transport: String },
    /// A transport-level wait that ran out (gloo send/recv, TCPStore wait).
    TransportTimeout { transport: String, operation: String, timeout_ms: Option<u64> },
    /// The TCPStore client lost its server (usually rank 0's process).
    StoreError { message: String },
    /// An uncaught exception, the whole traceback as one event.
    Exception { exc_type: String, message: String, frames: Vec<Frame> },
    /// A non-Python error line that states a failure first-hand (CUDA asserts, NaN guards, C++ errors).
    ErrorLine { message: String },
    /// faulthandler's `Fatal Python error: <what>` with every thread's stack.
    FatalSignal { what: String, frames: Vec<Frame> },
    /// faulthandler's periodic `Timeout (h:mm:ss)!` stack dump: a rank that is alive but stuck.
    StackDump { frames: Vec<Frame> },
    /// torchrun reports a worker failure (its `failed (exitcode: N)` line or a table row).
    LauncherWorkerFailed(LauncherFailure),
    /// A launcher sent a signal to a worker (torchrun's SIGTERM to the survivors): never a cause.
    LauncherSignal { pid: Option<u32>, signal: String },
    /// A kernel NVRM Xid line.
    Xid { pci: String, code: u32, pid: Option<u32>, message: String },
    /// The kernel's OOM killer took a process.
    OomKill { pid: Option<u32>, process: Option<String> },
    /// A job scheduler says the step or task ended (Slurm's `task N: Killed`, a time limit).
    SchedulerEnd { message: String },
    /// NCCL's trace of one collective a process issued (`NCCL_DEBUG=INFO`, subsystem COLL):
    /// `Broadcast: opCount 0 sendbuff .. count 25503912 datatype 6 op 0 root 0 comm 0x.. [nranks=8]`.
    /// Only each process's last few are kept (they say what it was doing when it stopped).
    NcclCollective { host: String, pid: u32, op: String, op_count: u64, count: u64, datatype: u32, nranks: Option<u32> },
    /// Horovod's stall inspector: an op some ranks submitted (`ready`) and others did not
    /// (`missing`); either list may be all that was printed. c10d's barriers and
    /// ProcessGroupNCCL's desync report (ops named [`DESYNC_REPORT_OP`]`: collective #N`) say
    /// the same.
    Stall { op: String, ready: Vec<Rank>, missing: Vec<Rank> },
    /// The run's numbers stopped being finite (a collapsed fp16 loss scale, NaN loss or grad norm
    /// on consecutive progress lines): nothing crashed, but training has diverged.
    Divergence { message: String },
    /// A warning that matters to a person but not to the verdict.
    Warning { message: String },
    /// The agent's periodic sample of a GPU's memory and utilisation.
    GpuSample(crate::GpuSample),
}

impl EventKind {
    /// A short, stable name for the kind: what the rules file matches on.
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::Step { .. } => "step",
            EventKind::WatchdogTimeout { .. } => "watchdog_timeout",
            EventKind::PgStatus { .. } => "pg_status",
            EventKind::DumpSignal { .. } => "dump_signal",
            EventKind::WatchdogAbort { .. } => "watchdog_abort",
            EventKind::HeartbeatStuck { .. } => "heartbeat_stuck",
            EventKind::CollectiveMismatch { .. } => "collective_mismatch",
            EventKind::NcclError { .. } => "nccl_error",
            EventKind::NcclWarn { .. } => "nccl_warn",
            EventKind::NcclInit { .. } => "nccl_init",
            EventKind::ConnectionClosed { .. } => "connection_closed",
            EventKind::TransportTimeout { .. } => "transport_timeout",
            EventKind::StoreError { .. } => "store_error",
            EventKind::Exception { .. } => "exception",
            EventKind::ErrorLine { .. } => "error_line",
            EventKind::FatalSignal { .. } => "fatal_signal",
            EventKind::StackDump { .. } => "stack_dump",
            EventKind::LauncherWorkerFailed(_) => "launcher_worker_failed",
            EventKind::LauncherSignal { .. } => "launcher_signal",
            EventKind::Xid { .. } => "xid",
            EventKind::OomKill { .. } => "oom_kill",
            EventKind::SchedulerEnd { .. } => "scheduler_end",
            EventKind::Divergence { .. } => "divergence",
            EventKind::Stall { .. } => "stall",
            EventKind::NcclCollective { .. } => "nccl_collective",
            EventKind::Warning { .. } => "warning",
            EventKind::GpuSample(_) => "gpu_sample",
        }
    }

    /// What a healthy run prints all the time: progress, GPU samples, NCCL's set-up and collective
    /// trace. It changes what a report shows (how far each rank got, what it ran last); it does
    /// not say that anything failed, so a report need not follow it at once.
    pub fn is_routine(&self) -> bool {
        matches!(self, EventKind::Step { .. } | EventKind::GpuSample(_) | EventKind::NcclCollective { .. } | EventKind::NcclInit { .. })
    }

    /// Whether the kind carries a message, without building it: kinds that do not are classified
    /// by kind alone, once per kind rather than once per event.
    pub fn has_message(&self) -> bool {
        matches!(
            self,
            EventKind::Exception { .. }
                | EventKind::ErrorLine { .. }
                | EventKind::NcclError { .. }
                | EventKind::NcclWarn { .. }
                | EventKind::StoreError { .. }
                | EventKind::SchedulerEnd { .. }
                | EventKind::Warning { .. }
                | EventKind::Divergence { .. }
                | EventKind::Xid { .. }
                | EventKind::FatalSignal { .. }
        )
    }

    /// The text the rules' `message` patterns are matched against.
    pub fn message(&self) -> String {
        match self {
            EventKind::Exception { exc_type, message, .. } => format!("{exc_type}: {message}"),
            // The code first, so that rules can match NCCL's result name whatever the wording.
            EventKind::NcclError { code: Some(code), message } if !message.contains(code.as_str()) => format!("{code}: {message}"),
            EventKind::ErrorLine { message }
            | EventKind::NcclError { message, .. }
            | EventKind::NcclWarn { message }
            | EventKind::StoreError { message }
            | EventKind::SchedulerEnd { message }
            | EventKind::Warning { message }
            | EventKind::Divergence { message }
            | EventKind::Xid { message, .. } => message.clone(),
            EventKind::FatalSignal { what, .. } => what.clone(),
            _ => String::new(),
        }
    }
}
