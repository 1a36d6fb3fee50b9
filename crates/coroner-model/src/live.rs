//! Live findings: what coroner suspects about a job that is still running, before any rank has
//! reported a failure. They are not part of the post-mortem analysis (the report's verdict stays
//! `running`); the server attaches them while they hold and drops them when they stop holding.

use crate::Rank;
use serde::{Deserialize, Serialize};

/// One rank that has gone silent for much longer than the job's usual step time while the others
/// moved past it or stopped waiting for it: a hang the collective watchdog has not seen yet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SuspectedHang {
    pub rank: Rank,
    pub host: Option<String>,
    /// Which test raised it: `behind` (most ranks printed a later step), `diverged` (every rank is
    /// quiet, and this one stopped somewhere the others did not), `gpu_idle` (every rank is quiet
    /// in the same place, and this one's GPU is idle while theirs are busy).
    pub why: String,
    /// The finding in one sentence, for a person.
    pub summary: String,
    /// The last progress step this rank printed, and the step most of the others printed.
    pub last_step: Option<u64>,
    pub peers_step: Option<u64>,
    /// `peers_step - last_step` when both are known and the rank is behind.
    pub steps_behind: u64,
    /// How long the rank had been silent when the finding was raised, in milliseconds.
    pub silent_ms: u64,
    /// The silence that raises it for this rank: max(multiple x median step time, floor).
    pub threshold_ms: u64,
    pub median_step_ms: Option<u64>,
    /// Capture time of the rank's last line, RFC 3339 on its host's clock.
    pub last_line_time: Option<String>,
    /// The rank's last few lines, oldest first.
    pub last_lines: Vec<String>,
    /// When the server raised it, RFC 3339 on the server's clock.
    pub raised_at: String,
}
