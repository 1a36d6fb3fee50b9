//! The vocabulary of a diagnosis: fault classes, event roles and job verdicts.

use serde::{Deserialize, Serialize};
use std::fmt;

/// What went wrong at the root of a failed job. The names are the wire and JSON names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultClass {
    Hang,
    CudaOom,
    Segfault,
    Killed,
    CollectiveMismatch,
    NanInf,
    ShapeMismatch,
    CheckpointMismatch,
    TokenizerMismatch,
    Dataloader,
    PythonException,
    NcclError,
    GpuHardware,
    /// Killed by SIGBUS: memory that was mapped could not be backed, usually a full /dev/shm
    /// (DataLoader workers, NCCL's shared-memory transport), sometimes a truncated mmap'ed file.
    BusError,
    None,
}

impl FaultClass {
    pub const ALL: [FaultClass; 15] = [
        FaultClass::Hang,
        FaultClass::CudaOom,
        FaultClass::Segfault,
        FaultClass::Killed,
        FaultClass::CollectiveMismatch,
        FaultClass::NanInf,
        FaultClass::ShapeMismatch,
        FaultClass::CheckpointMismatch,
        FaultClass::TokenizerMismatch,
        FaultClass::Dataloader,
        FaultClass::PythonException,
        FaultClass::NcclError,
        FaultClass::GpuHardware,
        FaultClass::BusError,
        FaultClass::None,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FaultClass::Hang => "hang",
            FaultClass::CudaOom => "cuda_oom",
            FaultClass::Segfault => "segfault",
            FaultClass::Killed => "killed",
            FaultClass::CollectiveMismatch => "collective_mismatch",
            FaultClass::NanInf => "nan_inf",
            FaultClass::ShapeMismatch => "shape_mismatch",
            FaultClass::CheckpointMismatch => "checkpoint_mismatch",
            FaultClass::TokenizerMismatch => "tokenizer_mismatch",
            FaultClass::Dataloader => "dataloader",
            FaultClass::PythonException => "python_exception",
            FaultClass::NcclError => "nccl_error",
            FaultClass::GpuHardware => "gpu_hardware",
            FaultClass::BusError => "bus_error",
            FaultClass::None => "none",
        }
    }

    pub fn parse(s: &str) -> Option<FaultClass> {
        FaultClass::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// Hardware faults outrank software ones that co-occur: a GPU that fell off the bus explains the
    /// CUDA errors after it.
    pub fn is_hardware(self) -> bool {
        matches!(self, FaultClass::GpuHardware)
    }
}

impl fmt::Display for FaultClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The part an event plays in a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Something went wrong here first-hand (an OOM, a segfault, an Xid).
    Root,
    /// A consequence of a failure elsewhere (a timeout, a closed connection, a launcher's SIGTERM).
    Symptom,
    /// Evidence about progress, neither a cause nor a consequence.
    Progress,
    /// Worth keeping, not worth weighing (deprecation warnings, a clean job's shutdown warnings).
    Noise,
}

/// The state of a job as the report sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Succeeded,
    Failed,
    Running,
    Unknown,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Succeeded => "succeeded",
            Verdict::Failed => "failed",
            Verdict::Running => "running",
            Verdict::Unknown => "unknown",
        }
    }

    /// The verdict named as `as_str` writes it; `None` for anything else.
    pub fn parse(s: &str) -> Option<Verdict> {
        [Verdict::Succeeded, Verdict::Failed, Verdict::Running, Verdict::Unknown].into_iter().find(|v| v.as_str() == s)
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod verdict_tests {
    use super::Verdict;

    #[test]
    fn a_verdict_reads_back_what_it_writes() {
        for v in [Verdict::Succeeded, Verdict::Failed, Verdict::Running, Verdict::Unknown] {
            assert_eq!(Verdict::parse(v.as_str()), Some(v));
        }
        assert_eq!(Verdict::parse("Failed"), None);
        assert_eq!(Verdict::parse(""), None);
    }
}
