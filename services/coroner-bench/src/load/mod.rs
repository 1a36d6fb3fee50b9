//! `coroner-bench load`: N simulated agents ship to a real `coronerd` process over loopback
//! while the server is killed with SIGKILL and restarted, and some agents' network is cut; then
//! every rank's lines are read back from the server. Prints lines sent, acknowledged, indexed,
//! duplicated and lost, the sustained rate, acknowledgement latency and the server's memory.
//!
//! Faults are scheduled by progress, not by time, so the same run means the same thing on a fast
//! and a slow machine: `--kill-at 0.3,0.6` kills the server when 30 % and 60 % of all lines are
//! acknowledged; `--cut N --cut-at 0.5 --cut-for 5` silences N agents' connections for 5 s.
//!
//! `--profile burst|steady|failure` gives the ranks a real job's output shapes (`profile.rs`);
//! the run also measures the server's memory per idle connected agent, how long the output took
//! to be absorbed, and how soon an acknowledged line is found by search (`freshness.rs`).

mod agent;
mod freshness;
mod lines;
mod partition;
pub mod profile;
mod progress;
mod server;
mod verify;

use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

#[derive(clap::Args, Debug, Clone)]
pub struct LoadArgs {
    /// Simulated agents (ranks of one job).
    #[arg(long, default_value_t = 64)]
    pub agents: u32,
    /// What the ranks print and when (`load/profile.rs`): flat (--lines at --rate), burst (200
    /// NCCL lines at once), steady (1 line/s), failure (a 40-line traceback within 2 s).
    #[arg(long, value_enum, default_value = "flat")]
    pub profile: profile::Profile,
    /// Lines each agent ships [default: the profile's: flat 4000, burst 200, steady 60, failure 40].
    #[arg(long)]
    pub lines: Option<u64>,
    /// Lines per second each agent's process prints; 0: every line waits at the start and the
    /// agents send as fast as the server acknowledges (the sustained rate is then the server's)
    /// [default: the profile's: steady 1, failure 20, else 0].
    #[arg(long)]
    pub rate: Option<f64>,
    /// Lines per batch (the real agent's default).
    #[arg(long, default_value_t = 1000)]
    pub batch_lines: usize,
    /// Kill the server with SIGKILL when these fractions of all lines are acknowledged, and start
    /// it again in place after --down.
    #[arg(long, value_delimiter = ',')]
    pub kill_at: Vec<f64>,
    /// How long the killed server stays down (`1s`, `500ms`; a bare number is seconds).
    #[arg(long, default_value = "1s", value_parser = coroner_model::parse_duration)]
    pub down: Duration,
    /// Agents whose network is cut (packets vanish; nothing is closed) once, at --cut-at.
    #[arg(long, default_value_t = 0)]
    pub cut: u32,
    #[arg(long, default_value_t = 0.5)]
    pub cut_at: f64,
    /// How long the cut lasts; then every connection it held is reset. Longer than about 25 s,
    /// the agents' keepalive notices the silence first.
    #[arg(long, default_value = "5s", value_parser = coroner_model::parse_duration)]
    pub cut_for: Duration,
    /// The server binary [default: coronerd beside this one, or $CORONERD].
    #[arg(long)]
    pub coronerd: Option<std::path::PathBuf>,
    /// Use this PostgreSQL database instead of the embedded SQLite.
    #[arg(long)]
    pub database_url: Option<String>,
    /// Give up (and report what was lost) after this long.
    #[arg(long, default_value = "10m", value_parser = coroner_model::parse_duration)]
    pub timeout: Duration,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// No progress lines on stderr while it runs (one every 5 s by default).
    #[arg(long)]
    pub quiet: bool,
    /// Keep the run's folder (the server's data and its log, coronerd.log) and print where it is.
    #[arg(long)]
    pub keep: bool,
    /// More arguments for coronerd (e.g. `--server-arg=--ingest-buffer-mb=512`).
    #[arg(long, allow_hyphen_values = true)]
    pub server_arg: Vec<String>,
}

impl LoadArgs {
    fn lines(&self) -> u64 {
        self.lines.unwrap_or(self.profile.default_lines())
    }

    fn rate(&self) -> f64 {
        self.rate.unwrap_or(self.profile.default_rate())
    }
}

#[derive(Debug, Serialize)]
pub struct LoadFigures {
    pub profile: profile::Profile,
    pub agents: u32,
    pub lines_per_agent: u64,
    /// Distinct lines the agents had to deliver.
    pub lines_sent: u64,
    /// Line transmissions, resends included.
    pub lines_transmitted: u64,
    pub lines_resent: u64,
    /// Lines acknowledged, by an ack or by the server's `resume_from` on a new session.
    pub lines_acknowledged: u64,
    pub lines_skipped_on_resume: u64,
    pub lines_indexed: u64,
    pub sql_lines: u64,
    pub duplicates: u64,
    pub lost: u64,
    pub never_sent_but_held: u64,
    pub server_reported_duplicates: u64,
    pub server_kills: u32,
    pub server_restart_s: Vec<f64>,
    pub agents_cut: u32,
    pub sessions: u64,
    pub exits_reported: u32,
    pub wall_s: f64,
    pub sustained_lines_per_s: f64,
    pub ack_p50_ms: f64,
    pub ack_p99_ms: f64,
    pub ack_max_ms: f64,
    /// From the instant every agent was connected to the last line acknowledged.
    pub absorbed_s: f64,
    /// How long the agents took to connect, open their sessions and log streams.
    pub connect_s: f64,
    /// From a line's acknowledgement to a search that finds it, over a sample of batches.
    pub fresh_p50_ms: f64,
    pub fresh_p99_ms: f64,
    pub fresh_samples: u64,
    pub fresh_not_found: u64,
    /// The server's resident memory growth per connected agent, every log stream open and idle
    /// (sessions, connections, streams), KiB.
    pub idle_kb_per_agent: f64,
    /// `coroner_ingest_streams` with every agent connected, and after they all left.
    pub server_streams_connected: i64,
    pub server_streams_after: i64,
    /// Peak resident memory while the agents shipped (index pages the server mapped included).
    pub server_rss_peak_mb: f64,
    /// Peak anonymous resident memory (heap, buffers, queues) while the agents shipped.
    pub server_anon_peak_mb: f64,
    /// Resident memory after every line was read back.
    pub server_rss_end_mb: f64,
    /// Errors the agents met and backed off from (a timeout, a closed stream), resolved or not,
    /// and the most frequent kinds.
    pub agent_errors: u64,
    pub agent_error_kinds: Vec<(String, u64)>,
    pub problems: Vec<String>,
}

impl LoadFigures {
    /// Nothing lost, nothing duplicated, every line acknowledged and held, every exit reported.
    pub fn clean(&self) -> bool {
        self.lost == 0
            && self.duplicates == 0
            && self.never_sent_but_held == 0
            && self.lines_acknowledged == self.lines_sent
            && self.lines_indexed == self.lines_sent
            && self.exits_reported == self.agents
            && self.problems.is_empty()
    }
}

pub fn main(args: LoadArgs) -> Result<()> {
    if args.agents == 0 || args.lines() == 0 {
        bail!("--agents and --lines must be at least 1");
    }
    // One connection per agent, here and in the server (which raises its own limit the same way).
    let fds = coronerd::fd_limit::raise_open_file_limit().context("raise the open-file limit")?;
    let need = u64::from(args.agents) + 256;
    if fds.now < need {
        bail!(
            "{} agents need about {need} open files, and the hard limit is {}: raise it (`ulimit -Hn {need}` as root, or LimitNOFILE=)",
            args.agents,
            fds.hard
        );
    }
    if args.kill_at.iter().chain([&args.cut_at]).any(|f| !(0.0..1.0).contains(f)) {
        bail!("--kill-at and --cut-at are fractions of all lines, in [0, 1)");
    }
    let rt = tokio::runtime::Runtime::new().context("start the runtime")?;
    let figures = rt.block_on(run(&args))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&figures)?);
    } else {
        print(&figures);
    }
    if !figures.clean() {
        bail!("lines were lost or duplicated (see above)");
    }
    Ok(())
}

pub async fn run(args: &LoadArgs) -> Result<LoadFigures> {
    let bin = args
        .coronerd
        .clone()
        .or_else(server::coronerd_binary)
        .context("coronerd is not built beside coroner-bench (cargo build --release -p coronerd) and --coronerd was not given")?;
    let tmp = tempfile::Builder::new().prefix("coroner-load").tempdir().context("create the run's folder")?;
    let mut server = server::ServerProcess::new(bin, tmp.path(), args.database_url.clone(), args.server_arg.clone())?;
    server.start().await.context("start coronerd")?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_before_agents = server.memory().last_mb();
    if args.keep {
        eprintln!("coroner-bench load: coronerd at {} (HTTP {}), its log in {}", server.grpc, server.http, tmp.path().join("coronerd.log").display());
    }

    let job = format!("load-{}", u64::from(std::process::id()) * 1000 + (coroner_model::now_ns() / 1_000_000 % 1000).unsigned_abs());
    let (lines, rate) = (args.lines(), args.rate());
    let total = u64::from(args.agents) * lines;
    let (go_tx, go) = tokio::sync::watch::channel(None);
    let start = agent::Start { ready: Arc::new(AtomicU64::new(0)), go };
    let (fresh_tx, fresh_rx) = tokio::sync::mpsc::channel(16);
    let fresh_every = (args.agents / 64).max(1);
    let progress = Arc::new(progress::Progress::default());
    let partition = if args.cut > 0 { Some(partition::Partition::start(server.grpc).await.context("start the partition relay")?) } else { None };
    let give_up = Instant::now() + args.timeout;
    let cut_every = args.agents.checked_div(args.cut).map_or(u32::MAX, |n| n.max(1));
    let mut tasks = Vec::new();
    let mut cut_agents = 0;
    for rank in 0..args.agents {
        let behind_partition = partition.is_some() && rank % cut_every == 0 && cut_agents < args.cut;
        cut_agents += u32::from(behind_partition);
        let plan = agent::Plan {
            job: job.clone(),
            rank,
            world: args.agents,
            lines,
            rate,
            batch_lines: args.batch_lines.max(1),
            profile: args.profile,
            start: start.clone(),
            fresh: (rank % fresh_every == 0).then(|| fresh_tx.clone()),
            url: match (&partition, behind_partition) {
                (Some(p), true) => p.url(),
                _ => server.url(),
            },
        };
        tasks.push(tokio::spawn(agent::run(plan, progress.clone(), give_up)));
    }
    drop(fresh_tx);
    let fresh = tokio::spawn(freshness::check(server.url(), job.clone(), fresh_rx));
    let memory = server.memory_handle();
    let reporter = (!args.quiet).then(|| {
        progress::report(
            progress::Sources {
                progress: progress.clone(),
                ready: start.ready.clone(),
                agents: args.agents,
                total_lines: total,
                rss_mb: Box::new(move || memory.last_mb()),
            },
            Duration::from_secs(5),
        )
    });

    // Every agent connected with its log stream open, before anything is printed (the server
    // closes a stream idle for 5 minutes: the gate opens before that, whoever is missing).
    let connecting = Instant::now();
    let gate = connecting + args.timeout.min(Duration::from_secs(240));
    while start.ready.load(Relaxed) < u64::from(args.agents) && Instant::now() < gate {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let connect_s = connecting.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle_kb_per_agent = (server.memory().last_mb() - rss_before_agents) * 1024.0 / f64::from(args.agents);
    let streams_connected = server.metric("coroner_ingest_streams").await.unwrap_or(-1.0) as i64;
    let started = Instant::now();
    go_tx.send_replace(Some(started));

    // The fault schedule, by progress.
    let mut kills = args.kill_at.clone();
    kills.sort_by(f64::total_cmp);
    let mut kills = kills.into_iter().peekable();
    let mut cut_pending = partition.is_some();
    let mut restart_s = Vec::new();
    let mut problems = Vec::new();
    while tasks.iter().any(|t| !t.is_finished()) {
        let done = progress.acked.load(Relaxed) as f64 / total as f64;
        if kills.peek().is_some_and(|&f| done >= f) {
            kills.next();
            server.kill9()?;
            tokio::time::sleep(args.down).await;
            match server.start().await {
                Ok(took) => restart_s.push(round(took.as_secs_f64())),
                Err(e) => {
                    problems.push(format!("the server did not come back: {e:#}"));
                    break;
                }
            }
        }
        if cut_pending && done >= args.cut_at {
            cut_pending = false;
            let p = partition.clone().expect("a partition when cutting");
            let heal_after = args.cut_for;
            p.cut();
            tokio::spawn(async move {
                tokio::time::sleep(heal_after).await;
                p.heal();
            });
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut tallies = Vec::new();
    for t in tasks {
        tallies.push(t.await.context("join an agent")?);
    }
    let wall = started.elapsed().as_secs_f64();
    let fresh = fresh.await.context("join the freshness check")??;
    // The server counts a stream closed once it read the stream's end: poll a while.
    let mut streams_after = -1;
    let leave_by = Instant::now() + Duration::from_secs(60);
    while Instant::now() < leave_by {
        streams_after = server.metric("coroner_ingest_streams").await.unwrap_or(-1.0) as i64;
        if streams_after == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The memory figures are the ingest's: reading every line back maps the index's pages too.
    let (rss_peak, anon_peak) = (server.memory().peak_mb(), server.memory().peak_anon_mb());
    if !args.quiet {
        eprintln!("coroner-bench load: every agent done after {wall:.1} s; reading every rank's lines back");
    }
    let held = verify::check(&server.url(), &job, args.agents, lines).await?;
    if let Some(r) = reporter {
        r.abort();
    }
    let rss_end = server.memory().last_mb();
    server.stop();
    if args.keep {
        eprintln!("coroner-bench load: the run's folder is kept at {}", tmp.keep().display());
    }

    let mut latencies: Vec<u32> = tallies.iter().flat_map(|t| t.latencies_us.iter().copied()).collect();
    latencies.sort_unstable();
    let pct = |p: f64| -> f64 {
        if latencies.is_empty() {
            return 0.0;
        }
        let i = ((latencies.len() as f64 * p).ceil() as usize).clamp(1, latencies.len()) - 1;
        round(f64::from(latencies[i]) / 1000.0)
    };
    let first = tallies.iter().filter_map(|t| t.first_send).min();
    let last = tallies.iter().filter_map(|t| t.last_ack).max();
    let acked: u64 = tallies.iter().map(|t| t.acked).sum();
    let span = match (first, last) {
        (Some(a), Some(b)) if b > a => b.duration_since(a).as_secs_f64(),
        _ => wall,
    };
    for t in &tallies {
        if t.acked < lines || !t.exit_reported {
            if let Some(e) = &t.last_error {
                if problems.len() < 8 {
                    problems.push(e.clone());
                }
            }
        }
    }
    problems.extend(held.bad_ranks.iter().cloned());
    let mut fresh_ms = fresh.ms;
    fresh_ms.sort_by(f64::total_cmp);
    let fresh_pct = |p: f64| fresh_ms.get(((fresh_ms.len() as f64 * p).ceil() as usize).clamp(1, fresh_ms.len().max(1)) - 1).map_or(0.0, |&x| round(x));
    Ok(LoadFigures {
        profile: args.profile,
        agents: args.agents,
        lines_per_agent: lines,
        lines_sent: total,
        lines_transmitted: tallies.iter().map(|t| t.transmitted).sum(),
        lines_resent: tallies.iter().map(|t| t.resent).sum(),
        lines_acknowledged: acked,
        lines_skipped_on_resume: tallies.iter().map(|t| t.skipped_on_resume).sum(),
        lines_indexed: held.indexed,
        sql_lines: held.sql_lines,
        duplicates: held.duplicated,
        lost: held.lost,
        never_sent_but_held: held.unexpected,
        server_reported_duplicates: tallies.iter().map(|t| t.server_duplicates).sum(),
        server_kills: server.starts().saturating_sub(1),
        server_restart_s: restart_s,
        agents_cut: cut_agents,
        sessions: tallies.iter().map(|t| u64::from(t.sessions)).sum(),
        exits_reported: tallies.iter().filter(|t| t.exit_reported).count() as u32,
        wall_s: round(wall),
        sustained_lines_per_s: (acked as f64 / span).round(),
        ack_p50_ms: pct(0.50),
        ack_p99_ms: pct(0.99),
        ack_max_ms: pct(1.0),
        absorbed_s: round(last.map_or(wall, |l| l.duration_since(started).as_secs_f64())),
        connect_s: round(connect_s),
        fresh_p50_ms: fresh_pct(0.50),
        fresh_p99_ms: fresh_pct(0.99),
        fresh_samples: fresh_ms.len() as u64,
        fresh_not_found: fresh.not_found,
        idle_kb_per_agent: round(idle_kb_per_agent),
        server_streams_connected: streams_connected,
        server_streams_after: streams_after,
        server_rss_peak_mb: round(rss_peak),
        server_anon_peak_mb: round(anon_peak),
        server_rss_end_mb: round(rss_end),
        agent_errors: progress.errors.load(Relaxed),
        agent_error_kinds: progress.error_kinds(3),
        problems,
    })
}

fn round(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

fn print(f: &LoadFigures) {
    println!(
        "agents                 {} x {} lines, profile {:?} ({} cut off, server killed {} times)",
        f.agents, f.lines_per_agent, f.profile, f.agents_cut, f.server_kills
    );
    println!(
        "connected              in {:.1} s: {:.1} KiB server memory per idle agent, {} streams open",
        f.connect_s, f.idle_kb_per_agent, f.server_streams_connected
    );
    println!("lines sent             {}", f.lines_sent);
    println!("lines acknowledged     {} ({} through resume_from: committed, but the ack was lost)", f.lines_acknowledged, f.lines_skipped_on_resume);
    println!("lines transmitted      {} ({} resent)", f.lines_transmitted, f.lines_resent);
    println!("lines indexed          {} (SQL count {})", f.lines_indexed, f.sql_lines);
    println!("duplicates             {} (the server dropped {} redelivered lines)", f.duplicates, f.server_reported_duplicates);
    println!("lost                   {}", f.lost);
    println!("sustained              {:.0} lines/s over {:.1} s", f.sustained_lines_per_s, f.wall_s);
    println!("ack latency            p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms", f.ack_p50_ms, f.ack_p99_ms, f.ack_max_ms);
    println!("absorbed               {:.1} s after the start", f.absorbed_s);
    println!(
        "freshness              ack to found by search: p50 {:.1} ms, p99 {:.1} ms ({} samples, {} not found in 30 s)",
        f.fresh_p50_ms, f.fresh_p99_ms, f.fresh_samples, f.fresh_not_found
    );
    println!(
        "server memory          peak {:.1} MB resident ({:.1} MB anonymous), {:.1} MB after reading every line back",
        f.server_rss_peak_mb, f.server_anon_peak_mb, f.server_rss_end_mb
    );
    if !f.server_restart_s.is_empty() {
        println!("server restarts        {:?} s until it answered", f.server_restart_s);
    }
    println!("sessions               {} ({} exits reported; {} streams open after)", f.sessions, f.exits_reported, f.server_streams_after);
    println!("agent errors           {} (each followed by a backoff and a new session)", f.agent_errors);
    for (kind, n) in &f.agent_error_kinds {
        println!("                       {n} x {kind}");
    }
    for p in &f.problems {
        println!("PROBLEM                {p}");
    }
    println!("{}", if f.clean() { "OK: zero lost, zero duplicated" } else { "FAILED" });
}
