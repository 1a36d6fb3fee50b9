//! coroner's line parsers: bytes in, typed [`Event`](coroner_model::Event)s out.
//!
//! Total by construction: parsing never fails and never drops a line. A line no parser
//! understands produces no event and stays a plain, searchable line in the index.
//!
//! [`RankParser`] is the entry point; one per (owner rank, stream). The format families live in
//! their own modules: [`glog`] headers, [`c10d`] messages, [`nccl`] debug lines, `python`
//! tracebacks and faulthandler dumps, [`launcher`] (torchrun, Slurm), [`kernel`], [`failures`]
//! (logging records and bare failure lines), [`steps`], printed [`time`]s, and a Drain-style
//! [`template`] miner.
//!
//! Two rules every caller shares live here too: [`RankFiler`] files a launcher's line under the
//! rank its prefix names (the agent and the pipeline), and [`severity()`] says whether a line is an
//! error or a warning (the agent's queue keeps those first; the index stores it).

pub mod barrier;
mod block;
pub mod c10d;
pub mod coordination;
pub mod desync;
mod failure_table;
pub mod failures;
mod filer;
pub mod glog;
mod glued;
pub mod horovod;
pub mod kernel;
pub mod launcher;
pub mod nccl;
mod notebook;
pub mod numerics;
mod parser;
pub mod prefix;
pub mod pylog;
mod python;
pub mod scheduler;
pub mod selfrank;
pub mod severity;
pub mod steps;
pub mod template;
pub mod time;
pub mod topology;
mod util;

pub use filer::RankFiler;
pub use parser::{ParseDiagnostic, RankParser, MAX_LINE};
pub use severity::{is_important, severity, Severity};
pub use template::{TemplateId, TemplateMiner};
