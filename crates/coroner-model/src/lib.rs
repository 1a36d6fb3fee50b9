//! The bottom of coroner's dependency graph: the vocabulary every other crate speaks.
//!
//! Typed ids ([`JobId`], [`Rank`], [`HostId`], [`SeqNo`]), captured [`LogLine`]s, the typed
//! [`Event`]s the parsers produce, how a process ended ([`ProcessEnd`]), NTP-style
//! [`ClockSample`]s, and the [`Report`] the analysis writes. Nothing here does IO.

mod attempt;
mod class;
mod clock;
mod event;
mod flight;
mod flight_report;
mod gpu;
mod ids;
mod incident;
mod line;
mod live;
mod process;
mod report;
mod size;
mod time;

pub use attempt::{AttemptOutcome, AttemptSummary};
pub use class::{FaultClass, Role, Verdict};
pub use clock::ClockSample;
pub use event::{CollectiveFingerprint, Event, EventKind, Frame, LauncherFailure, LineRef, PeerRef, COORDINATION_TRANSPORT, DESYNC_REPORT_OP};
pub use flight::{FrDump, FrFrame, FrGroup, FrOp, FrSeq, FrState, MAX_FRAMES, MAX_OPS_PER_GROUP};
pub use flight_report::{FlightRecorderReport, FrDivergence, FrEntryView, FrGroupReport, FrRule, FrStop, FrStraggler, FrVerdict};
pub use gpu::{GpuSample, GPU_QUERY_FIELDS, GPU_SAMPLE_PREFIX};
pub use ids::{HostId, JobId, PgId, Rank, SeqNo, MAX_WORLD_SIZE};
pub use incident::{FailureSignature, HostCount, JobHosts, PastIncident, RecordedFailure, SimilarIncidents, Suspect};
pub use line::{cap_line, seq_lane, truncation_marker, LogLine, Stream, MARKER_SLACK, MAX_LINE_BYTES, SEQ_LANE_BITS};
pub use live::SuspectedHang;
pub use process::{signal_label, signal_name, signal_number, ProcessEnd, ProcessEndCause};
pub use report::{
    CascadeLink, ClockEstimate, CollectiveRow, EvidenceLine, FirstFailure, GpuMemory, RankSummary, Report, SnapshotSummary, REPORT_FORMAT_VERSION,
};
pub use size::parse_size;
pub use time::{format_rfc3339_ns, now_ns, parse_duration, Nanos};
