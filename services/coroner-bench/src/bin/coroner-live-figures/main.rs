//! `coroner-live-figures [CORPUS_DIR] [--hours H] [--json]`: the figures of docs/LIVE.md.
//!
//! - For each corpus bundle whose lines show a collective or transport timeout, the live monitor
//!   (default thresholds) replayed over the bundle's lines at their captured times: which rank it
//!   suspected, how long after that rank's last line, against when the timeout line came and the
//!   timeout the job ran with.
//! - False alarms per hour: every bundle the analysis calls succeeded, and synthetic long-running
//!   healthy jobs ([`synth`]: different print rates, slow first steps, checkpoints, evaluations,
//!   data stalls), replayed the same way; plus synthetic hangs in long jobs.
//!
//! The replay is [`coroner_analysis::live::replay`]: the same monitor coronerd runs, fed the same
//! way, evaluated every 100 ms of replay time.

mod synth;

use anyhow::{Context, Result};
use coroner_analysis::live::{replay, Feed, LiveConfig, Raised};
use coroner_bundle::Sink;
use coroner_model::{EventKind, LogLine, Nanos, ProcessEnd, Rank, SnapshotSummary, Verdict};
use coroner_pipeline::JobPipeline;
use serde_json::json;
use std::path::{Path, PathBuf};

const S: Nanos = 1_000_000_000;
const TICK: Nanos = S / 10;

#[derive(Default)]
struct Lines {
    lines: Vec<LogLine>,
    ends: Vec<ProcessEnd>,
    world: Option<u32>,
}

impl Sink for Lines {
    fn line(&mut self, line: LogLine) {
        self.lines.push(line);
    }
    fn end(&mut self, end: ProcessEnd) {
        self.ends.push(end);
    }
    fn world_size(&mut self, n: u32) {
        self.world = Some(n);
    }
    fn snapshot(&mut self, _summary: SnapshotSummary, _facts: coroner_bundle::SnapshotFacts, _dir: &Path) {}
    fn note(&mut self, _note: String) {}
    fn finished(&mut self) {}
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let json_out = args.iter().any(|a| a == "--json");
    let hours: f64 = match args.iter().position(|a| a == "--hours") {
        Some(i) => args.get(i + 1).context("--hours takes a number")?.parse().context("--hours takes a number")?,
        None => 2.0,
    };
    let corpus = args
        .iter()
        .enumerate()
        .find(|(i, a)| !a.starts_with("--") && (*i == 0 || args[i - 1] != "--hours"))
        .map(|(_, a)| PathBuf::from(a))
        .unwrap_or_else(|| PathBuf::from("tests/data/corpus"));
    let mut bundles: Vec<PathBuf> = std::fs::read_dir(&corpus)
        .with_context(|| format!("read the corpus folder {} (pass it as the first argument)", corpus.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    bundles.sort();

    let mut hang_rows = Vec::new();
    let mut other_rows = Vec::new();
    let (mut healthy_ns, mut healthy_alarms, mut healthy_names) = (0i64, 0usize, Vec::new());
    for b in &bundles {
        let name = b.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let mut l = Lines::default();
        coroner_bundle::load_paths(std::slice::from_ref(b), &mut l).with_context(|| format!("load {}", b.display()))?;
        let (verdict, timeout) = analyse(&name, &l);
        let feed = feed_of(&l);
        let Some((start, end)) = span(&feed) else { continue };
        let raised = replay(&feed, LiveConfig::default(), TICK, end);
        if verdict == Verdict::Succeeded {
            healthy_ns += end - start;
            healthy_alarms += raised.len();
            healthy_names.push(name.clone());
        }
        if verdict != Verdict::Succeeded && (timeout.is_none() || raised.is_empty()) {
            // The other failures (a crash, an exception; survivors may time out later).
            other_rows.push(json!({"bundle": name, "suspicions": raised.iter().map(describe).collect::<Vec<_>>()}));
        }
        if let (Some((timeout_at, timeout_ms)), Some(first)) = (timeout, raised.first()) {
            let rank = first.finding.rank;
            let last = last_line_before(&feed, rank, first.at);
            hang_rows.push(json!({
                "bundle": name,
                "suspected_rank": rank.0,
                "why": first.finding.why,
                "after_last_line_s": secs(first.at - last),
                "timeout_line_after_last_line_s": secs(timeout_at - last),
                "configured_timeout_s": timeout_ms.map(|t| t as f64 / 1e3),
                "other_ranks_suspected": raised.iter().filter(|r| r.finding.rank != rank).count(),
            }));
        }
    }

    let synthetic = synth::healthy_jobs(hours);
    let mut synth_rows = Vec::new();
    let (mut synth_ns, mut synth_alarms) = (0i64, 0usize);
    for job in &synthetic {
        let (start, end) = span(&job.feed).unwrap_or((0, 0));
        let raised = replay(&job.feed, LiveConfig::default(), TICK, end);
        if job.counted {
            synth_ns += end - start;
            synth_alarms += raised.len();
        }
        synth_rows.push(json!({"job": job.name, "counted": job.counted, "hours": (end - start) as f64 / 3600e9, "false_alarms": raised.len(),
            "alarms": raised.iter().map(describe).collect::<Vec<_>>()}));
    }
    let mut hang_synth = Vec::new();
    for job in synth::hung_jobs() {
        let end = span(&job.feed).map_or(0, |s| s.1) + 700 * S;
        let raised = replay(&job.feed, LiveConfig::default(), TICK, end);
        let first = raised.iter().find(|r| r.finding.rank == job.culprit);
        hang_synth.push(json!({"job": job.name, "culprit": job.culprit.0,
            "suspected_after_last_line_s": first.map(|f| secs(f.at - job.culprit_last)),
            "watchdog_s": 600, "other_ranks_suspected": raised.iter().filter(|r| r.finding.rank != job.culprit).count()}));
    }

    let per_hour = |alarms: usize, ns: i64| if ns > 0 { alarms as f64 / (ns as f64 / 3600e9) } else { 0.0 };
    let out = json!({
        "config": {"step_multiple": LiveConfig::default().step_multiple, "floor_s": secs(LiveConfig::default().floor_ns), "tick_s": secs(TICK)},
        "hang_bundles": hang_rows,
        "other_failed_bundles": other_rows,
        "healthy_bundles": {"bundles": healthy_names, "hours": healthy_ns as f64 / 3600e9, "false_alarms": healthy_alarms},
        "synthetic_healthy": {"jobs": synth_rows, "hours": synth_ns as f64 / 3600e9, "false_alarms": synth_alarms,
            "false_alarms_per_hour": per_hour(synth_alarms + healthy_alarms, synth_ns + healthy_ns)},
        "synthetic_hangs": hang_synth,
    });
    if json_out {
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print_table(&out);
    }
    Ok(())
}

/// The report's verdict, and the first collective or transport timeout line: (its capture time,
/// the timeout it states).
fn analyse(name: &str, l: &Lines) -> (Verdict, Option<(Nanos, Option<u64>)>) {
    let mut p = JobPipeline::new(name);
    if let Some(w) = l.world {
        p.set_world_size(w);
    }
    for line in &l.lines {
        p.push_line(line.clone());
    }
    for e in &l.ends {
        p.add_end(e.clone());
    }
    p.set_finished(true);
    let evidence = p.evidence();
    let timeout = evidence
        .ranks
        .values()
        .flat_map(|r| r.events.iter())
        .filter_map(|e| match &e.kind {
            EventKind::WatchdogTimeout { timeout_ms, .. } => Some((e.capture_ns, *timeout_ms)),
            EventKind::TransportTimeout { timeout_ms, .. } => Some((e.capture_ns, *timeout_ms)),
            _ => None,
        })
        .min_by_key(|t| t.0);
    (p.report(&coroner_analysis::RuleSet::builtin()).verdict, timeout)
}

/// The lines, and each rank's process ending at its last line (a bundle has no end times).
fn feed_of(l: &Lines) -> Feed {
    let lines: Vec<(Rank, Nanos, String)> = l.lines.iter().filter_map(|x| Some((x.rank?, x.capture_ns, x.text().into_owned()))).collect();
    let mut ends: Vec<(Rank, Nanos)> = Vec::new();
    for (r, t, _) in &lines {
        match ends.iter_mut().find(|e| e.0 == *r) {
            Some(e) => e.1 = e.1.max(*t),
            None => ends.push((*r, *t)),
        }
    }
    Feed { lines, ends, liveness: Vec::new() }
}

fn span(feed: &Feed) -> Option<(Nanos, Nanos)> {
    let start = feed.lines.iter().map(|l| l.1).min()?;
    let end = feed.lines.iter().map(|l| l.1).max()?;
    Some((start, end))
}

fn last_line_before(feed: &Feed, rank: Rank, at: Nanos) -> Nanos {
    feed.lines.iter().filter(|l| l.0 == rank && l.1 <= at).map(|l| l.1).max().unwrap_or(at)
}

fn describe(r: &Raised) -> String {
    format!("rank {} ({}) at {:.1} s: {}", r.finding.rank, r.finding.why, r.at as f64 / 1e9, r.finding.summary)
}

fn secs(ns: Nanos) -> f64 {
    (ns as f64 / 1e8).round() / 10.0
}

fn print_table(v: &serde_json::Value) {
    println!(
        "live hang suspicion, default thresholds: max({} x median step, {} s), evaluated every {} s",
        v["config"]["step_multiple"], v["config"]["floor_s"], v["config"]["tick_s"]
    );
    println!("\nhang bundles (replayed at their captured times)");
    println!("{:<16} {:>8} {:>10} {:>22} {:>22} {:>10}", "bundle", "suspect", "why", "suspected after (s)", "timeout line after (s)", "timeout");
    for r in v["hang_bundles"].as_array().into_iter().flatten() {
        println!(
            "{:<16} {:>8} {:>10} {:>22} {:>22} {:>10}",
            r["bundle"].as_str().unwrap_or(""),
            r["suspected_rank"].to_string(),
            r["why"].as_str().unwrap_or(""),
            r["after_last_line_s"].to_string(),
            r["timeout_line_after_last_line_s"].to_string(),
            r["configured_timeout_s"].as_f64().map(|t| format!("{t} s")).unwrap_or_else(|| "-".into())
        );
    }
    let others = v["other_failed_bundles"].as_array().cloned().unwrap_or_default();
    let quiet: Vec<&str> = others.iter().filter(|o| o["suspicions"].as_array().is_some_and(|a| a.is_empty())).filter_map(|o| o["bundle"].as_str()).collect();
    println!("\nother failed bundles, nothing suspected: {}", quiet.join(", "));
    for o in others.iter().filter(|o| o["suspicions"].as_array().is_some_and(|a| !a.is_empty())) {
        println!("  {}: {}", o["bundle"].as_str().unwrap_or(""), o["suspicions"]);
    }
    let h = &v["healthy_bundles"];
    println!("\nhealthy bundles {}: {:.4} h replayed, {} false alarms", h["bundles"], h["hours"].as_f64().unwrap_or(0.0), h["false_alarms"]);
    println!("\nsynthetic healthy jobs");
    for j in v["synthetic_healthy"]["jobs"].as_array().into_iter().flatten() {
        let note = if j["counted"] == false { "  (a limitation, not counted)" } else { "" };
        println!("  {:<30} {:>6.1} h  {} false alarms{note}", j["job"].as_str().unwrap_or(""), j["hours"].as_f64().unwrap_or(0.0), j["false_alarms"]);
        for a in j["alarms"].as_array().into_iter().flatten() {
            println!("      {}", a.as_str().unwrap_or(""));
        }
    }
    let s = &v["synthetic_healthy"];
    println!(
        "  total {:.1} h, {} false alarms: {:.2} per hour (corpus and synthetic)",
        s["hours"].as_f64().unwrap_or(0.0),
        s["false_alarms"],
        s["false_alarms_per_hour"].as_f64().unwrap_or(0.0)
    );
    println!("\nsynthetic hangs in long jobs (watchdog 600 s)");
    for j in v["synthetic_hangs"].as_array().into_iter().flatten() {
        println!(
            "  {:<30} culprit {}: suspected {} after its last line; other ranks suspected: {}",
            j["job"].as_str().unwrap_or(""),
            j["culprit"],
            j["suspected_after_last_line_s"].as_f64().map(|t| format!("{t} s")).unwrap_or_else(|| "never (watchdog: 600 s)".into()),
            j["other_ranks_suspected"]
        );
    }
}
