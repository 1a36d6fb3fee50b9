//! What coronerd tells the world, as values (pure: no IO, no clock read here).
//!
//! An [`Event`] is about one job and is identified by (job, kind, key): the notifier sends each
//! identity once, whatever recomputes it (the store claims it, `coroner_store::NotificationStore`).
//!
//! - `verdict`: the job's verdict became terminal (`failed`, `succeeded` or `unknown`); key: the
//!   verdict. A job whose verdict goes back and forth is told each verdict once.
//! - `culprit`: a failed job's culprit (rank, host or class) changed after its verdict was told;
//!   key: the new culprit.
//! - `hang`: the live monitor suspects a silent rank; key: the rank and the start of its silence
//!   (its last line's time), so the same silence is one event and a new one another.
//! - `hang_over`: that suspicion ended (the rank spoke again, or every process ended); same key.
//! - `suspect_host`: a job's failure made a host a suspect to drain (`coroner suspects`); key: the host.

use coroner_model::{format_rfc3339_ns, JobId, Report, SuspectedHang, Verdict};
use serde::{Deserialize, Serialize};

/// The version of the event as webhooks receive it; a change that removes or renames a field
/// gets a new one (added fields do not).
pub const FORMAT_VERSION: u32 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Verdict,
    Culprit,
    Hang,
    HangOver,
    SuspectHost,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Verdict => "verdict",
            Kind::Culprit => "culprit",
            Kind::Hang => "hang",
            Kind::HangOver => "hang_over",
            Kind::SuspectHost => "suspect_host",
        }
    }
}

/// One event, as stored and as the generic webhook's body carries it (`"event"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// `<job>/<kind>/<key>`: the same for every delivery of this event (receivers may dedup on it).
    pub id: String,
    pub kind: Kind,
    pub job_id: String,
    pub key: String,
    /// When coronerd raised it, RFC 3339 on the server's clock.
    pub time: String,
    #[serde(skip)]
    pub at_ns: i64,
    /// The job's verdict when the event was raised.
    pub verdict: String,
    /// The rank, host and fault class the event is about, when it is about one.
    pub rank: Option<u32>,
    pub host: Option<String>,
    pub class: Option<String>,
    /// The event in one sentence, for a person.
    pub summary: String,
    /// The job's page on this server (`--advertise-http`), filled in by the notifier.
    pub report_url: Option<String>,
}

impl Event {
    fn new(job: &str, kind: Kind, key: String, at_ns: i64) -> Event {
        Event {
            id: format!("{job}/{}/{key}", kind.as_str()),
            kind,
            job_id: job.to_string(),
            key,
            time: format_rfc3339_ns(at_ns),
            at_ns,
            verdict: Verdict::Running.as_str().to_string(),
            rank: None,
            host: None,
            class: None,
            summary: String::new(),
            report_url: None,
        }
    }

    /// What sinks subscribe to: the verdict itself for verdict events, else the kind.
    pub fn topic(&self) -> &str {
        match self.kind {
            Kind::Verdict => &self.verdict,
            other => other.as_str(),
        }
    }
}

/// Where a job stands, as far as notifications care: its verdict and culprit.
#[derive(Debug, Clone, PartialEq)]
pub struct Standing {
    pub verdict: Verdict,
    pub rank: Option<u32>,
    /// `None` when it was read back from the store, which does not keep the culprit's host.
    pub host: Option<String>,
    pub class: Option<String>,
    pub summary: String,
}

impl Standing {
    pub fn of(r: &Report) -> Standing {
        let f = r.first_failure.as_ref();
        Standing {
            verdict: r.verdict,
            rank: f.and_then(|f| f.rank).map(|r| r.0),
            host: f.and_then(|f| f.host.clone()),
            class: f.map(|f| f.class.as_str().to_string()),
            summary: f.map(|f| f.summary.clone()).unwrap_or_default(),
        }
    }

    /// The standing a stored job row records (what a job reopened here was last reported as).
    pub fn stored(verdict: &str, rank: Option<u32>, class: Option<&str>) -> Option<Standing> {
        Some(Standing { verdict: Verdict::parse(verdict)?, rank, host: None, class: class.map(str::to_string), summary: String::new() })
    }

    fn culprit_differs(&self, before: &Standing) -> bool {
        self.rank != before.rank || self.class != before.class || (before.host.is_some() && self.host != before.host)
    }

    fn culprit_key(&self) -> String {
        let rank = self.rank.map_or_else(|| "unknown".to_string(), |r| r.to_string());
        format!("rank={rank};host={};class={}", self.host.as_deref().unwrap_or("unknown"), self.class.as_deref().unwrap_or("unknown"))
    }

    fn describe(&self, job: &str) -> String {
        let mut s = format!("job {job} {}", self.verdict);
        if self.verdict == Verdict::Failed {
            let rank = self.rank.map_or_else(|| "rank unknown".to_string(), |r| format!("rank {r}"));
            s.push_str(&format!(": {rank}"));
            if let Some(h) = &self.host {
                s.push_str(&format!(" on {h}"));
            }
            if let Some(c) = &self.class {
                s.push_str(&format!(" ({c})"));
            }
        }
        if !self.summary.is_empty() {
            s.push_str(&format!(": {}", self.summary));
        }
        s
    }

    fn event(&self, job: &str, kind: Kind, key: String, at_ns: i64) -> Event {
        let mut e = Event::new(job, kind, key, at_ns);
        e.verdict = self.verdict.as_str().to_string();
        e.rank = self.rank;
        e.host = self.host.clone();
        e.class = self.class.clone();
        e.summary = self.describe(job);
        e
    }
}

/// The events a report's standing raises, given the standing before it (`None`: never reported).
pub fn on_report(job: &JobId, before: Option<&Standing>, now: &Standing, at_ns: i64) -> Vec<Event> {
    let job = job.as_str();
    if now.verdict == Verdict::Running {
        return Vec::new();
    }
    match before {
        Some(b) if b.verdict == now.verdict => {
            if now.verdict == Verdict::Failed && now.culprit_differs(b) {
                let mut e = now.event(job, Kind::Culprit, now.culprit_key(), at_ns);
                e.summary = format!("culprit changed: {}", e.summary);
                vec![e]
            } else {
                Vec::new()
            }
        }
        _ => vec![now.event(job, Kind::Verdict, now.verdict.as_str().to_string(), at_ns)],
    }
}

/// The key of a suspicion: the rank and the start of its silence.
fn hang_key(f: &SuspectedHang) -> String {
    format!("rank={};since={}", f.rank, f.last_line_time.as_deref().unwrap_or(&f.raised_at))
}

/// A rank the live monitor now suspects of hanging.
pub fn hang(job: &JobId, f: &SuspectedHang, at_ns: i64) -> Event {
    let mut e = Event::new(job.as_str(), Kind::Hang, hang_key(f), at_ns);
    e.rank = Some(f.rank.0);
    e.host = f.host.clone();
    e.class = Some("hang".into());
    e.summary = format!("job {job}: {}", f.summary);
    e
}

/// The end of a suspicion: `why` it ended.
pub fn hang_over(job: &JobId, f: &SuspectedHang, at_ns: i64, why: &str) -> Event {
    over(hang(job, f, at_ns), at_ns, why)
}

/// The end of the suspicion `hang` raised (as it was sent: the same key, rank and host).
pub fn over(hang: Event, at_ns: i64, why: &str) -> Event {
    let rank = hang.rank.map_or_else(|| "unknown".to_string(), |r| r.to_string());
    Event {
        id: format!("{}/{}/{}", hang.job_id, Kind::HangOver.as_str(), hang.key),
        kind: Kind::HangOver,
        time: format_rfc3339_ns(at_ns),
        at_ns,
        summary: format!("job {}: rank {rank} is no longer suspected of hanging: {why}", hang.job_id),
        ..hang
    }
}

/// A host that a job's failure made a suspect to drain.
pub fn suspect_host(job: &str, host: &str, reason: &str, at_ns: i64) -> Event {
    let mut e = Event::new(job, Kind::SuspectHost, host.to_string(), at_ns);
    e.verdict = Verdict::Failed.as_str().to_string();
    e.host = Some(host.to_string());
    e.summary = format!("host {host} is a suspect (after job {job} failed): {reason}");
    e
}

/// A suspicion as the live monitor raises one, for tests.
#[cfg(test)]
pub(crate) fn finding(rank: u32, host: Option<&str>, summary: &str, last_line_time: Option<&str>, raised_at: &str) -> SuspectedHang {
    SuspectedHang {
        rank: coroner_model::Rank(rank),
        host: host.map(str::to_string),
        why: "behind".into(),
        summary: summary.into(),
        last_step: None,
        peers_step: None,
        steps_behind: 0,
        silent_ms: 0,
        threshold_ms: 0,
        median_step_ms: None,
        last_line_time: last_line_time.map(str::to_string),
        last_lines: Vec::new(),
        raised_at: raised_at.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> JobId {
        JobId::parse("train-7").expect("job id")
    }

    fn standing(verdict: Verdict, rank: Option<u32>, host: Option<&str>, class: Option<&str>) -> Standing {
        Standing { verdict, rank, host: host.map(str::to_string), class: class.map(str::to_string), summary: "NCCL timeout".into() }
    }

    #[test]
    fn a_running_job_raises_nothing() {
        assert!(on_report(&job(), None, &standing(Verdict::Running, Some(1), None, None), 1).is_empty());
    }

    #[test]
    fn a_new_terminal_verdict_is_one_verdict_event_with_its_culprit() {
        let failed = standing(Verdict::Failed, Some(3), Some("node-7"), Some("nccl_error"));
        let events = on_report(&job(), Some(&standing(Verdict::Running, None, None, None)), &failed, 5);
        assert_eq!(events.len(), 1);
        let e = &events[0];
        assert_eq!((e.kind, e.key.as_str(), e.id.as_str(), e.topic()), (Kind::Verdict, "failed", "train-7/verdict/failed", "failed"));
        assert_eq!((e.rank, e.host.as_deref(), e.class.as_deref()), (Some(3), Some("node-7"), Some("nccl_error")));
        assert_eq!(e.summary, "job train-7 failed: rank 3 on node-7 (nccl_error): NCCL timeout");
        let ok = on_report(&job(), None, &standing(Verdict::Succeeded, None, None, None), 5);
        assert_eq!(ok[0].topic(), "succeeded");
    }

    #[test]
    fn the_same_standing_again_raises_nothing() {
        let failed = standing(Verdict::Failed, Some(3), Some("node-7"), Some("nccl_error"));
        assert!(on_report(&job(), Some(&failed), &failed, 9).is_empty());
        // Read back from the store, the host is not known: only rank and class count.
        let stored = Standing::stored("failed", Some(3), Some("nccl_error")).expect("a verdict");
        assert!(on_report(&job(), Some(&stored), &failed, 9).is_empty());
    }

    #[test]
    fn a_failed_job_whose_culprit_changes_raises_a_culprit_event() {
        let before = standing(Verdict::Failed, Some(3), Some("node-7"), Some("nccl_error"));
        for now in [
            standing(Verdict::Failed, Some(5), Some("node-7"), Some("nccl_error")),
            standing(Verdict::Failed, Some(3), Some("node-8"), Some("nccl_error")),
            standing(Verdict::Failed, Some(3), Some("node-7"), Some("gpu_hardware")),
        ] {
            let events = on_report(&job(), Some(&before), &now, 9);
            assert_eq!(events.len(), 1, "{now:?}");
            assert_eq!(events[0].kind, Kind::Culprit);
            assert_eq!(events[0].key, now.culprit_key());
        }
    }

    #[test]
    fn a_hang_and_its_end_share_a_key_tied_to_the_silence() {
        let f = finding(5, Some("node-2"), "rank 5 silent for 12 s", Some("2026-12-01T10:00:00Z"), "2026-12-01T10:00:12Z");
        let raised = hang(&job(), &f, 1);
        let over = hang_over(&job(), &f, 2, "it printed again");
        assert_eq!(raised.key, "rank=5;since=2026-12-01T10:00:00Z");
        assert_eq!((raised.key.as_str(), over.kind, over.topic()), (over.key.as_str(), Kind::HangOver, "hang_over"));
        assert_ne!(raised.id, over.id);
        // Raised again by a restarted server for the same silence: the same event.
        let again = SuspectedHang { raised_at: "2026-12-01T10:05:00Z".into(), ..f };
        assert_eq!(hang(&job(), &again, 3).id, raised.id);
    }

    #[test]
    fn the_body_names_its_fields_as_documented() {
        let e = suspect_host("train-7", "node-9", "3 failures", 1_700_000_000_000_000_000);
        let v = serde_json::to_value(&e).expect("JSON");
        for field in ["id", "kind", "job_id", "key", "time", "verdict", "rank", "host", "class", "summary", "report_url"] {
            assert!(v.get(field).is_some(), "{field} in {v}");
        }
        assert_eq!((v["kind"].as_str(), v["time"].as_str()), (Some("suspect_host"), Some("2023-11-14T22:13:20.000000000Z")));
        assert!(v.get("at_ns").is_none());
    }
}
