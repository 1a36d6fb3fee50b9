//! Incident memory on the server: records each finished job's failure signature and hosts as its
//! report is written, attaches the earlier similar incidents to a report when it is served, and
//! lists the suspect hosts and GPUs. The computations are the analysis's (`signature`,
//! `history`); this module reads and writes the history in the store.

use coroner_analysis::{history, signature};
use coroner_model::{now_ns, HostCount, JobId, Report, Suspect, Verdict};
use coroner_pipeline::ReportInput;
use coroner_store::{Metastore, SignatureFilter, StoreError};
use std::collections::BTreeMap;
use std::sync::Arc;

/// How many earlier signatures of the class a report is compared with.
const HISTORY_LIMIT: u32 = 5_000;

/// Per job, what was last written to the history, so that a report that did not change the
/// failure does not rewrite it (the reporter runs after every batch of evidence).
#[derive(Default)]
pub struct Recorder {
    last: Option<String>,
}

impl Recorder {
    /// Records the signature (failed jobs) and the hosts (failed and succeeded jobs) of `report`;
    /// answers whether the history changed. `input` is what the report was computed from (the
    /// root event's frames are in its evidence). Errors are logged: the history must never stop a
    /// report from being published.
    pub async fn record(&mut self, store: &Arc<dyn Metastore>, job: &JobId, input: &Arc<ReportInput>, report: &Report) -> bool {
        if !matches!(report.verdict, Verdict::Failed | Verdict::Succeeded) {
            return false;
        }
        let key = change_key(report);
        if self.last.as_ref() == Some(&key) {
            return false;
        }
        match write(store, job, input, report).await {
            Ok(()) => {
                self.last = Some(key);
                true
            }
            Err(e) => {
                tracing::warn!(job = %job, error = %e, "could not record the failure history");
                false
            }
        }
    }
}

/// What the history records of a report: its verdict, first failure and hosts.
fn change_key(r: &Report) -> String {
    let f = r.first_failure.as_ref().map(|f| (f.rank, f.class, f.host.clone(), f.evidence.first().map(|e| e.line.clone())));
    let pending: Vec<&Option<String>> = r.collectives.iter().map(|c| &c.pending).collect();
    format!("{:?}", (r.verdict, f, hosts_of(r), pending))
}

/// How many of the report's ranks ran on each host.
fn hosts_of(r: &Report) -> Vec<HostCount> {
    let mut by: BTreeMap<&str, u32> = BTreeMap::new();
    for rank in &r.ranks {
        if let Some(h) = rank.host.as_deref() {
            *by.entry(h).or_default() += 1;
        }
    }
    by.into_iter().map(|(host, count)| HostCount { host: host.to_string(), count }).collect()
}

async fn write(store: &Arc<dyn Metastore>, job: &JobId, input: &Arc<ReportInput>, report: &Report) -> Result<(), StoreError> {
    let now = now_ns();
    if report.verdict == Verdict::Failed {
        // The root event's frames live in the evidence, not the report.
        let input = input.clone();
        let r = report.clone();
        let sig = tokio::task::spawn_blocking(move || signature::signature(&r, Some(&input.evidence))).await.ok().flatten();
        if let Some(sig) = sig {
            store.save_signature(job, &sig, now).await?;
        }
    } else {
        store.delete_signature(job).await?;
    }
    store.record_job_hosts(job, report.verdict.as_str(), &hosts_of(report), now).await
}

/// The report with the earlier jobs like it attached (failed jobs with a recorded signature);
/// otherwise the report as it is. A store error leaves the report as it is, and is logged.
pub async fn with_history(store: &Arc<dyn Metastore>, report: Arc<Report>) -> Arc<Report> {
    if report.verdict != Verdict::Failed {
        return report;
    }
    match similar(store, &report).await {
        Ok(Some(similar)) => {
            let mut r = (*report).clone();
            r.similar_incidents = Some(similar);
            Arc::new(r)
        }
        Ok(None) => report,
        Err(e) => {
            tracing::warn!(job = %report.job_id, error = %e, "could not read the failure history");
            report
        }
    }
}

async fn similar(store: &Arc<dyn Metastore>, report: &Report) -> Result<Option<coroner_model::SimilarIncidents>, StoreError> {
    let Ok(job) = JobId::parse(&report.job_id) else { return Ok(None) };
    let Some(this) = store.signature(&job).await? else { return Ok(None) };
    // A report computed on demand can be ahead of the recorded history for a moment; links for
    // another culprit or class would mislead, so none are attached until the reporter catches up.
    let f = report.first_failure.as_ref();
    if f.map(|f| (f.class, f.rank)) != Some((this.signature.class, this.signature.rank)) {
        return Ok(None);
    }
    let filter = SignatureFilter { class: Some(this.signature.class), since_ns: None, limit: HISTORY_LIMIT };
    let past = store.signatures(&filter).await?;
    Ok(Some(history::similar_incidents(job.as_str(), &this.signature, &past)))
}

/// The suspect hosts and GPUs over the failures recorded since `since_ns` (all when None).
pub async fn suspects(store: &Arc<dyn Metastore>, since_ns: Option<i64>, all: bool) -> Result<Vec<Suspect>, StoreError> {
    let failures = store.signatures(&SignatureFilter { class: None, since_ns, limit: u32::MAX >> 1 }).await?;
    let jobs = store.job_hosts(since_ns).await?;
    Ok(history::suspects(&failures, &jobs, all))
}
