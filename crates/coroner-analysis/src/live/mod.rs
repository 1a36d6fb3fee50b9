//! Live hang suspicion: watches every rank's lines as they arrive and, long before PyTorch's
//! collective watchdog fires, names the rank the others are waiting for.
//!
//! Pure: the caller feeds lines (rank, capture time, text), liveness samples and process ends, and
//! asks [`LiveMonitor::evaluate`] with the time it considers "now"; nothing here reads a clock, so
//! a replay at any speed gives the same findings as the live job did.
//!
//! How it works:
//! - **Progress template, learned.** Every line is reduced to its shape (numbers masked,
//!   [`shape`]); a shape one of whose numbers grows by the same stride on every occurrence is a
//!   rank's progress line. The job's progress template is the one most ranks share. Nothing about
//!   the job's log format is assumed.
//! - **Step time.** Per rank, the median interval between progress lines, the first
//!   `skip_first_steps` intervals left out (compilation, data loader warm-up). A rank's silence
//!   threshold is `max(step_multiple x median, floor)`, longer after a line whose shape the job
//!   has already shown to precede a long pause (checkpoint, evaluation), and longer again while
//!   the rank's process is busy on the CPU; a silent process that keeps moving data to or from
//!   disk (writing a checkpoint) is working, not hanging.
//! - **Suspects.** A rank silent past its threshold is suspected when most other ranks printed a
//!   later step, longer than the threshold ago (`behind`); or when most ranks have also stopped progressing and this one stopped
//!   somewhere else: at an earlier step, or after lines the others did not print (`diverged`);
//!   or, all stopped at the same place, its GPU is idle while theirs are busy, as peers spinning in
//!   an NCCL collective are (`gpu_idle`). A rank silent while every rank is silent in the same
//!   place (a checkpoint all ranks write, an evaluation, a slow first step) is not a suspect.

mod monitor;
mod replay;
pub mod shape;
#[cfg(test)]
mod tests;

pub use monitor::{LiveConfig, LiveMonitor};
pub use replay::{replay, Feed, Liveness, Raised};
