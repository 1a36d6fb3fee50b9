//! The decision's shape: the verdict, and which rank failed first and how. `diagnose.rs` decides
//! it from the job's findings; the flight recorder (`flight/job.rs`) may decide it from the dumps.

use crate::findings::Finding;
use coroner_model::{Event, FaultClass, Nanos, Rank, Verdict};

#[derive(Debug, Clone)]
pub struct Diagnosis<'a> {
    pub verdict: Verdict,
    pub first: Option<FirstFinding<'a>>,
    /// Other ranks' own root findings (a second, independent failure).
    pub other_roots: Vec<Finding<'a>>,
}

#[derive(Debug, Clone)]
pub struct FirstFinding<'a> {
    pub rank: Option<Rank>,
    pub candidates: Vec<Rank>,
    pub class: FaultClass,
    pub confidence: f64,
    pub aligned_ns: Option<Nanos>,
    pub summary: String,
    pub rule_id: Option<String>,
    pub advice: Option<String>,
    pub events: Vec<&'a Event>,
    /// What the report should say about how the order was decided.
    pub ordering_note: Option<String>,
}
