//! What the history of failures says: the earlier jobs like this one, and the hosts and GPUs whose
//! failures stand out. Pure: the caller reads the history from its store and passes it in.
//!
//! Suspects: each failed job's root cause counts for the host (and GPU) its culprit rank ran on,
//! weighted by class ([`class_weight`]: hardware most, code bugs least); a rank that merely
//! gave up because of another counts for nothing. A host is flagged when its score reaches
//! [`MIN_SCORE`] and at least [`SHARE_FACTOR`] times its share: the total weighted failures times
//! the part of all the work (rank slots: ranks times jobs, failed or not) that ran on it. A
//! software failure whose exact signature rooted on several hosts is spread over them (it
//! follows the code, not the machine). A GPU is flagged when its own score reaches [`MIN_SCORE`].

use crate::signature::compare;
use coroner_model::{format_rfc3339_ns, FailureSignature, FaultClass, HostCount, JobHosts, PastIncident, RecordedFailure, SimilarIncidents, Suspect};
use std::collections::{BTreeMap, BTreeSet};

/// A score at which a host or GPU can be flagged: two ordinary failures, or one hardware fault.
pub const MIN_SCORE: f64 = 2.0;
/// How far above its share a host's score must be to be flagged.
pub const SHARE_FACTOR: f64 = 2.0;
/// How many past incidents a report or a suspect lists.
pub const MAX_LISTED: usize = 20;

/// How much a root cause of this class says about the machine it ran on.
pub fn class_weight(class: FaultClass) -> f64 {
    match class {
        FaultClass::GpuHardware => 4.0,
        FaultClass::NcclError => 2.0,
        FaultClass::Segfault | FaultClass::BusError | FaultClass::Killed | FaultClass::Hang | FaultClass::NanInf => 1.0,
        FaultClass::CudaOom | FaultClass::Dataloader => 0.5,
        FaultClass::PythonException
        | FaultClass::CollectiveMismatch
        | FaultClass::ShapeMismatch
        | FaultClass::CheckpointMismatch
        | FaultClass::TokenizerMismatch => 0.25,
        FaultClass::None => 0.0,
    }
}

fn past(f: &RecordedFailure, same: bool, similarity: f64) -> PastIncident {
    PastIncident {
        job_id: f.job_id.clone(),
        time: format_rfc3339_ns(f.recorded_ns),
        class: f.signature.class,
        same,
        similarity,
        rank: f.signature.rank,
        host: f.signature.host.clone(),
        gpu: f.signature.gpu.clone(),
    }
}

/// The earlier jobs (other than `job_id`) whose signature is the same as or close to `this`.
pub fn similar_incidents(job_id: &str, this: &FailureSignature, history: &[RecordedFailure]) -> SimilarIncidents {
    let mut matches: Vec<(&RecordedFailure, bool, f64)> =
        history.iter().filter(|f| f.job_id != job_id).filter_map(|f| compare(this, &f.signature).map(|(same, s)| (f, same, s))).collect();
    matches.sort_by(|a, b| b.0.recorded_ns.cmp(&a.0.recorded_ns).then_with(|| a.0.job_id.cmp(&b.0.job_id)));
    let same = matches.iter().filter(|m| m.1).count() as u32;
    let mut hosts: BTreeMap<&str, u32> = BTreeMap::new();
    for (f, _, _) in &matches {
        if let Some(h) = &f.signature.host {
            *hosts.entry(h).or_default() += 1;
        }
    }
    let mut hosts: Vec<HostCount> = hosts.into_iter().map(|(host, count)| HostCount { host: host.to_string(), count }).collect();
    hosts.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.host.cmp(&b.host)));
    SimilarIncidents {
        signature: this.id.clone(),
        template: this.template.clone(),
        same,
        close: matches.len() as u32 - same,
        first_seen: matches.iter().map(|m| m.0.recorded_ns).min().map(format_rfc3339_ns),
        last_seen: matches.iter().map(|m| m.0.recorded_ns).max().map(format_rfc3339_ns),
        hosts,
        jobs: matches.iter().take(MAX_LISTED).map(|(f, same, s)| past(f, *same, *s)).collect(),
    }
}

#[derive(Default)]
struct Tally<'a> {
    score: f64,
    expected: f64,
    failures: u32,
    hardware: u32,
    jobs_seen: u32,
    incidents: Vec<&'a RecordedFailure>,
}

/// The hosts and GPUs with root-cause failures in `failures`, flagged ones first, then by score.
/// `jobs` says where every recorded job (failed or not) ran. With `all` false only flagged
/// entries are returned.
pub fn suspects(failures: &[RecordedFailure], jobs: &[JobHosts], all: bool) -> Vec<Suspect> {
    // On how many hosts each signature rooted: a software one there follows the code.
    let mut spread: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for f in failures {
        if let Some(h) = &f.signature.host {
            spread.entry(&f.signature.id).or_default().insert(h);
        }
    }
    let mut hosts: BTreeMap<&str, Tally<'_>> = BTreeMap::new();
    let mut gpus: BTreeMap<(&str, &str), Tally<'_>> = BTreeMap::new();
    // The work each host did: rank slots over every recorded job.
    let mut slots: BTreeMap<&str, f64> = BTreeMap::new();
    let recorded: BTreeSet<&str> = jobs.iter().map(|j| j.job_id.as_str()).collect();
    for j in jobs {
        for h in j.hosts.iter().filter(|h| h.count > 0) {
            hosts.entry(&h.host).or_default().jobs_seen += 1;
            *slots.entry(&h.host).or_default() += f64::from(h.count);
        }
    }
    let mut total_weight = 0.0;
    for f in failures {
        let Some(host) = f.signature.host.as_deref() else { continue };
        let class = f.signature.class;
        let mut w = class_weight(class);
        if !class.is_hardware() {
            w /= spread.get(f.signature.id.as_str()).map_or(1, |s| s.len().max(1)) as f64;
        }
        total_weight += w;
        if !recorded.contains(f.job_id.as_str()) {
            // Where the job ran was not recorded: it ran at least its culprit here.
            *slots.entry(host).or_default() += 1.0;
        }
        let t = hosts.entry(host).or_default();
        t.score += w;
        t.failures += 1;
        t.hardware += u32::from(class.is_hardware());
        t.incidents.push(f);
        if let Some(gpu) = f.signature.gpu.as_deref() {
            let g = gpus.entry((host, gpu)).or_default();
            g.score += w;
            g.failures += 1;
            g.hardware += u32::from(class.is_hardware());
            g.incidents.push(f);
        }
    }
    let total_slots: f64 = slots.values().sum();
    for (host, t) in &mut hosts {
        if total_slots > 0.0 {
            t.expected = total_weight * slots.get(host).copied().unwrap_or(0.0) / total_slots;
        }
    }
    let mut out = Vec::new();
    for (host, t) in hosts {
        if t.failures == 0 {
            continue;
        }
        let flagged = t.score >= MIN_SCORE - 1e-9 && t.score >= SHARE_FACTOR * t.expected - 1e-9;
        let reason = format!(
            "{} root-cause failure{} here ({} hardware), weighted {:.2} against a share of {:.2} ({} job{} ran here){}",
            t.failures,
            plural(t.failures),
            t.hardware,
            t.score,
            t.expected,
            t.jobs_seen,
            plural(t.jobs_seen),
            if flagged { ": drain it" } else { "" }
        );
        out.push(suspect(host, None, t, flagged, reason));
    }
    for ((host, gpu), t) in gpus {
        let flagged = t.score >= MIN_SCORE - 1e-9;
        let reason = format!(
            "{} root-cause failure{} on this GPU ({} hardware), weighted {:.2}{}",
            t.failures,
            plural(t.failures),
            t.hardware,
            t.score,
            if flagged { ": take it out of service" } else { "" }
        );
        out.push(suspect(host, Some(gpu), t, flagged, reason));
    }
    out.retain(|s| all || s.flagged);
    out.sort_by(|a, b| b.flagged.cmp(&a.flagged).then_with(|| b.score.total_cmp(&a.score)).then_with(|| (&a.host, &a.gpu).cmp(&(&b.host, &b.gpu))));
    out
}

fn suspect(host: &str, gpu: Option<&str>, t: Tally<'_>, flagged: bool, reason: String) -> Suspect {
    let mut incidents = t.incidents;
    incidents.sort_by(|a, b| b.recorded_ns.cmp(&a.recorded_ns).then_with(|| a.job_id.cmp(&b.job_id)));
    Suspect {
        host: host.to_string(),
        gpu: gpu.map(str::to_string),
        score: round2(t.score),
        expected: round2(t.expected),
        failures: t.failures,
        hardware_failures: t.hardware,
        jobs_seen: t.jobs_seen,
        flagged,
        reason,
        incidents: incidents.into_iter().take(MAX_LISTED).map(|f| past(f, true, 1.0)).collect(),
    }
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

fn plural(n: u32) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// The report's similar incidents for a person: whether this failure is new, and if not, how
/// often, since when and where it happened before.
pub fn write_similar(out: &mut String, r: &coroner_model::Report) -> std::fmt::Result {
    use std::fmt::Write;
    let Some(s) = &r.similar_incidents else { return Ok(()) };
    if s.same + s.close == 0 {
        return writeln!(out, "\nSimilar past incidents: none, this failure is new (signature {}).", s.signature);
    }
    writeln!(
        out,
        "\nSimilar past incidents: {} with the same signature, {} close (signature {}), first {}, last {}",
        s.same,
        s.close,
        s.signature,
        s.first_seen.as_deref().unwrap_or("-"),
        s.last_seen.as_deref().unwrap_or("-")
    )?;
    if !s.hosts.is_empty() {
        let hosts: Vec<String> = s.hosts.iter().map(|h| format!("{} ({})", h.host, h.count)).collect();
        writeln!(out, "  on hosts: {}", hosts.join(", "))?;
    }
    for j in &s.jobs {
        let rank = j.rank.map(|r| format!(" rank {r}")).unwrap_or_default();
        let host = j.host.as_ref().map(|h| format!(" on {h}")).unwrap_or_default();
        let gpu = j.gpu.as_ref().map(|g| format!(" GPU {g}")).unwrap_or_default();
        let how = if j.same { "same".to_string() } else { format!("close {:.2}", j.similarity) };
        writeln!(out, "  - job {} [{}] {}{rank}{host}{gpu} ({how})", j.job_id, j.time, j.class)?;
    }
    Ok(())
}

#[cfg(test)]
#[path = "history_tests.rs"]
mod tests;
