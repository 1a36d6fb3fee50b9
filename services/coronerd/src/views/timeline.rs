//! A job's timeline: per rank (or per host, for large jobs) the events that matter, on the
//! aligned clock, each with the role the rules give it. Computed from the pipeline's evidence and
//! the current report's clock offsets; nothing aligned is stored.
//!
//! Bounded whatever the job's size: at most `max_lanes` lanes before ranks are grouped per host,
//! and at most `max_events_per_lane` events per lane (root causes and symptoms first, progress
//! sampled evenly, noise dropped).

use coroner_analysis::{JobEvidence, RuleSet};
use coroner_model::{Event, Rank, Report, Role};
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy)]
pub struct TimelineOptions {
    pub group_by_host: bool,
    pub max_lanes: usize,
    pub max_events_per_lane: usize,
}

impl Default for TimelineOptions {
    fn default() -> Self {
        TimelineOptions { group_by_host: false, max_lanes: 256, max_events_per_lane: 200 }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Timeline {
    pub job_id: String,
    pub verdict: String,
    pub grouped_by_host: bool,
    pub start_ns: i64,
    pub end_ns: i64,
    pub culprit_rank: Option<u32>,
    pub failure_ns: Option<i64>,
    pub lanes: Vec<Lane>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Lane {
    pub label: String,
    pub ranks: Vec<u32>,
    pub host: String,
    pub role: String,
    pub start_ns: i64,
    pub end_ns: i64,
    pub events: Vec<TimelineEvent>,
    pub events_total: u64,
    pub ended: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct TimelineEvent {
    pub time_ns: i64,
    pub rank: Option<u32>,
    pub kind: String,
    pub role: String,
    pub text: String,
    pub stream: String,
    pub seq: u64,
}

pub fn role_name(r: Role) -> &'static str {
    match r {
        Role::Root => "root",
        Role::Symptom => "symptom",
        Role::Progress => "progress",
        Role::Noise => "noise",
    }
}

/// How telling a rank's report role is: the lane of a host shows its most telling rank.
fn role_weight(role: &str) -> u8 {
    match role {
        "culprit" => 5,
        "failed" => 4,
        "victim" => 3,
        "unknown" => 2,
        "ok" => 1,
        _ => 0,
    }
}

/// Parses the report's RFC 3339 times back to ns.
pub fn parse_time(s: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(s).ok().and_then(|t| t.timestamp_nanos_opt())
}

fn event(e: &Event, offset: i64, rules: &RuleSet) -> Option<TimelineEvent> {
    let role = rules.classify(e).role;
    if role == Role::Noise {
        return None;
    }
    let mut text = e.text.clone();
    if text.len() > 300 {
        let mut cut = 300;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push('…');
    }
    Some(TimelineEvent {
        time_ns: e.capture_ns.saturating_add(offset),
        rank: e.rank.map(|r| r.0),
        kind: e.kind.name().to_string(),
        role: role_name(role).to_string(),
        text,
        stream: e.line.stream.as_str().to_string(),
        seq: e.line.seq,
    })
}

/// Keeps root causes and symptoms first, then progress sampled evenly, in time order.
fn cap(mut events: Vec<TimelineEvent>, max: usize) -> Vec<TimelineEvent> {
    if events.len() > max {
        let (mut keep, progress): (Vec<_>, Vec<_>) = events.into_iter().partition(|e| e.role != "progress");
        keep.sort_by_key(|e| (e.role != "root", e.time_ns));
        keep.truncate(max);
        let room = max - keep.len();
        if room > 0 && !progress.is_empty() {
            let step = progress.len().div_ceil(room);
            keep.extend(progress.into_iter().step_by(step.max(1)));
        }
        events = keep;
    }
    events.sort_by_key(|e| (e.time_ns, e.rank, e.seq));
    events
}

pub fn build(evidence: &JobEvidence, report: &Report, rules: &RuleSet, opts: TimelineOptions) -> Timeline {
    let culprit = report.first_failure.as_ref().and_then(|f| f.rank.map(|r| r.0));
    let failure_ns = report.first_failure.as_ref().and_then(|f| f.time.as_deref()).and_then(parse_time);
    let summaries: BTreeMap<Rank, &coroner_model::RankSummary> = report.ranks.iter().map(|r| (r.rank, r)).collect();
    let mut ranks: Vec<Rank> = summaries.keys().copied().collect();
    ranks.extend(evidence.ranks.keys().filter(|r| !summaries.contains_key(r)));
    ranks.sort();
    let grouped = opts.group_by_host || ranks.len() > opts.max_lanes.max(1);

    // One lane per rank first; grouping merges them by host.
    let per_rank = ranks.iter().map(|rank| rank_lane(*rank, summaries.get(rank).copied(), evidence.ranks.get(rank).map(|e| &**e), rules));
    let mut lanes: Vec<Lane> = if grouped { group_by_host(per_rank, opts.max_events_per_lane.max(1)) } else { per_rank.collect() };
    for lane in &mut lanes {
        let events = std::mem::take(&mut lane.events);
        lane.events = cap(events, opts.max_events_per_lane.max(1));
    }
    let start_ns = lanes.iter().filter(|l| l.start_ns != 0).map(|l| l.start_ns).min().unwrap_or(0);
    let end_ns = lanes.iter().map(|l| l.end_ns).max().unwrap_or(0).max(start_ns);
    Timeline {
        job_id: report.job_id.clone(),
        verdict: report.verdict.as_str().to_string(),
        grouped_by_host: grouped,
        start_ns,
        end_ns,
        culprit_rank: culprit,
        failure_ns,
        lanes,
    }
}

/// One rank's lane: its events on the aligned clock, its host, role and span.
fn rank_lane(rank: Rank, summary: Option<&coroner_model::RankSummary>, ev: Option<&coroner_analysis::RankEvidence>, rules: &RuleSet) -> Lane {
    let offset = summary.map(|s| s.clock.offset_ns).unwrap_or(0);
    let events: Vec<TimelineEvent> = ev.map(|ev| ev.events.iter().filter_map(|e| event(e, offset, rules)).collect()).unwrap_or_default();
    let host = summary.and_then(|s| s.host.clone()).or_else(|| ev.and_then(|e| e.host.clone())).unwrap_or_default();
    let start = ev.and_then(|e| e.first_capture_ns).map(|t| t + offset);
    let end = ev.and_then(|e| e.last_capture_ns).map(|t| t + offset);
    Lane {
        label: format!("rank {}", rank.0),
        ranks: vec![rank.0],
        host,
        role: summary.map(|s| s.role.clone()).unwrap_or_else(|| "unknown".into()),
        start_ns: start.or(events.first().map(|e| e.time_ns)).unwrap_or(0),
        end_ns: end.or(events.last().map(|e| e.time_ns)).unwrap_or(0),
        events_total: events.len() as u64,
        events,
        ended: summary.and_then(|s| s.ended.clone()).unwrap_or_default(),
    }
}

/// Merges rank lanes into one lane per host (the most telling role shows), keeping at most a
/// few times `max_events` events per lane while merging.
fn group_by_host(per_rank: impl Iterator<Item = Lane>, max_events: usize) -> Vec<Lane> {
    let mut by_host: BTreeMap<String, Lane> = BTreeMap::new();
    for lane in per_rank {
        let key = if lane.host.is_empty() { "(unknown host)".to_string() } else { lane.host.clone() };
        let g = by_host.entry(key.clone()).or_insert_with(|| Lane {
            label: key.clone(),
            ranks: Vec::new(),
            host: lane.host.clone(),
            role: String::new(),
            start_ns: i64::MAX,
            end_ns: i64::MIN,
            events: Vec::new(),
            events_total: 0,
            ended: String::new(),
        });
        g.ranks.extend(&lane.ranks);
        if role_weight(&lane.role) > role_weight(&g.role) {
            g.role = lane.role.clone();
            g.ended = lane.ended.clone();
        }
        if lane.start_ns != 0 || lane.end_ns != 0 {
            g.start_ns = g.start_ns.min(lane.start_ns);
            g.end_ns = g.end_ns.max(lane.end_ns);
        }
        g.events_total += lane.events_total;
        g.events.extend(lane.events);
        // Bound memory while merging thousands of ranks.
        if g.events.len() > 4 * max_events {
            let events = std::mem::take(&mut g.events);
            g.events = cap(events, max_events);
        }
    }
    by_host
        .into_values()
        .map(|mut l| {
            if l.start_ns == i64::MAX {
                (l.start_ns, l.end_ns) = (0, 0);
            }
            l.label = format!("{} (ranks {})", l.label, rank_ranges(&l.ranks));
            l
        })
        .collect()
}

/// `0-7,9` for a sorted list of ranks.
pub fn rank_ranges(ranks: &[u32]) -> String {
    let mut sorted = ranks.to_vec();
    sorted.sort_unstable();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        out.push(if start == end { start.to_string() } else { format!("{start}-{end}") });
        i += 1;
    }
    out.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2048 ranks on 256 hosts: lanes are hosts, each bounded, the culprit's host marked.
    #[test]
    fn thousands_of_ranks_are_grouped_per_host_and_bounded() {
        use coroner_model::{LogLine, ProcessEnd, Stream};
        let mut p = coroner_pipeline::JobPipeline::new("big");
        p.set_world_size(2048);
        let t0 = 1_700_000_000_000_000_000i64;
        for r in 0..2048u32 {
            p.set_host(Rank(r), &format!("node{:03}", r / 8));
            for step in 0..20u64 {
                let text = format!("[rank{r}] step {step} loss 1.0");
                p.push_line(LogLine {
                    rank: Some(Rank(r)),
                    stream: Stream::Stdout,
                    seq: step,
                    capture_ns: t0 + step as i64 * 1_000_000_000,
                    bytes: text.into_bytes(),
                });
            }
            if r == 77 {
                let text = "RuntimeError: CUDA error: an illegal memory access was encountered";
                p.push_line(LogLine { rank: Some(Rank(r)), stream: Stream::Stderr, seq: 0, capture_ns: t0 + 20_500_000_000, bytes: text.as_bytes().to_vec() });
            }
            p.add_end(ProcessEnd { rank: Rank(r), exit_code: Some(if r == 77 { 1 } else { 0 }), signal: None, at_ns: Some(t0 + 21_000_000_000) });
        }
        p.set_finished(true);
        let rules = RuleSet::builtin();
        let report = p.report(&rules);
        let t = build(&p.evidence(), &report, &rules, TimelineOptions { max_events_per_lane: 50, ..Default::default() });
        assert!(t.grouped_by_host);
        assert_eq!(t.lanes.len(), 256);
        assert!(t.lanes.iter().all(|l| l.events.len() <= 50 && l.ranks.len() == 8));
        assert_eq!(t.lanes[9].label, "node009 (ranks 72-79)");
        assert_eq!(t.culprit_rank, Some(77), "{:?}", report.first_failure);
        assert_eq!(t.lanes[9].role, "culprit");
        assert!(t.lanes[9].events.iter().any(|e| e.role == "root" && e.rank == Some(77)));
    }

    #[test]
    fn rank_ranges_compress() {
        assert_eq!(rank_ranges(&[3, 0, 1, 2, 7, 9, 10]), "0-3,7,9-10");
        assert_eq!(rank_ranges(&[]), "");
    }

    #[test]
    fn cap_keeps_roots_and_samples_progress() {
        let ev = |t: i64, role: &str| TimelineEvent {
            time_ns: t,
            rank: Some(0),
            kind: "k".into(),
            role: role.into(),
            text: String::new(),
            stream: "stdout".into(),
            seq: t as u64,
        };
        let mut events: Vec<_> = (0..1000).map(|t| ev(t, "progress")).collect();
        events.push(ev(500, "root"));
        events.push(ev(900, "symptom"));
        let kept = cap(events, 10);
        assert!(kept.len() <= 10 + 1);
        assert!(kept.iter().any(|e| e.role == "root") && kept.iter().any(|e| e.role == "symptom"));
        assert!(kept.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
    }
}
