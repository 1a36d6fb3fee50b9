//! `coroner-bench [--quick] [--json]`: the figures of issue 8, each beside its physical reference
//! measured in the same run on the same data: parse MB/s beside a newline scan, end-to-end
//! ingest beside raw tantivy indexing, the agent's CPU and memory beside `cat`, report latency
//! on synthetic 1,024- and 16,384-rank jobs, search latency, and index size per raw byte.
//!
//! See docs/PERFORMANCE.md for the figures on the reference machine and what limits each.
//!
//! `coroner-bench field ...`: coroner's score on the field corpus of real logs, beside a grep
//! baseline (`coroner_field`, tests/data/field).
//!
//! `coroner-bench load ...`: the load and fault generator (simulated agents, a real coronerd
//! killed and restarted, cut networks; lines lost and duplicated), see [`load`] and docs/LOAD.md.

mod agent;
mod ingest;
mod live;
mod load;
mod offline_logs;
mod parse;
mod report;
mod scrape;
mod search;
mod synth;

use anyhow::{Context, Result};
use clap::Parser;
use serde_json::{json, Map, Value};

#[derive(Parser, Debug)]
#[command(name = "coroner-bench", about = "coroner's benchmarks, each figure beside its reference")]
struct Cli {
    /// A short run (about a minute): smaller inputs, the same report jobs.
    #[arg(long)]
    quick: bool,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// The smallest inputs (seconds); what the crate's test runs. Figures are not meaningful.
    #[arg(long, hide = true)]
    smoke: bool,
    /// Run only these sections (parse, report, live, search, ingest, agent); for profiling.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Scores `coroner analyze` on the field corpus (tests/data/field): per case, per class,
    /// framework, input shape and launcher, both halves, and the grep baseline with --baseline.
    /// Arguments: [--dir D] [--json] [--only ID] [--baseline] [--half dev|held] [--wrong] [--show].
    Field {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Simulated agents against a real coronerd that is killed and restarted mid-stream, with
    /// some agents' network cut; prints lines sent, indexed, duplicated and lost.
    Load(load::LoadArgs),
    /// What one /metrics scrape costs with 10 and with 10,000 job rows (docs/PERFORMANCE.md).
    Scrape(scrape::ScrapeArgs),
    /// Writes a folder of rank logs and a combined log of a synthetic job, the input of the
    /// offline memory figures (`/usr/bin/time -v coroner analyze DIR/ranks`; docs/PERFORMANCE.md).
    OfflineLogs(offline_logs::OfflineLogsArgs),
}

/// How much of everything one run does.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    parse_bytes: u64,
    ingest_lines: usize,
    ingest_agents: u32,
    agent_lines: usize,
    report_small: (u32, usize),
    report_large: (u32, usize),
    /// Ranks of the running job the live monitor evaluates, and its ticks.
    live: (u32, usize),
    search_lines: u64,
    search_queries: usize,
}

impl Sizes {
    fn full() -> Sizes {
        Sizes {
            parse_bytes: 400 << 20,
            ingest_lines: 2_000_000,
            ingest_agents: 16,
            agent_lines: 1_000_000,
            report_small: (1024, 2000),
            report_large: (16384, 200),
            live: (16384, 20),
            search_lines: 10_000_000,
            search_queries: 1000,
        }
    }

    fn quick() -> Sizes {
        Sizes {
            parse_bytes: 100 << 20,
            ingest_lines: 400_000,
            ingest_agents: 8,
            agent_lines: 300_000,
            search_lines: 500_000,
            search_queries: 300,
            ..Sizes::full()
        }
    }

    fn smoke() -> Sizes {
        Sizes {
            parse_bytes: 1 << 20,
            ingest_lines: 8_000,
            ingest_agents: 2,
            agent_lines: 5_000,
            report_small: (16, 200),
            report_large: (64, 60),
            live: (64, 4),
            search_lines: 20_000,
            search_queries: 20,
        }
    }
}

/// One row of the table.
struct Row {
    figure: &'static str,
    value: String,
    reference: String,
    target: &'static str,
    ok: Option<bool>,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Load(args)) => return load::main(args),
        Some(Command::Scrape(args)) => return scrape::main(args),
        Some(Command::OfflineLogs(args)) => return offline_logs::main(args),
        Some(Command::Field { args }) => {
            let code = coroner_field::cli::main(&args).map_err(anyhow::Error::msg)?;
            std::process::exit(if code == std::process::ExitCode::SUCCESS { 0 } else { 1 });
        }
        None => {}
    }
    let sizes = if cli.smoke {
        Sizes::smoke()
    } else if cli.quick {
        Sizes::quick()
    } else {
        Sizes::full()
    };
    let (fields, rows) = run(sizes, &cli.only, !cli.json)?;
    if cli.json {
        println!("{}", serde_json::to_string_pretty(&Value::Object(fields))?);
    } else {
        print_table(&rows);
    }
    Ok(())
}

fn progress(on: bool, what: &str) {
    if on {
        eprintln!("coroner-bench: {what}...");
    }
}

fn run(sizes: Sizes, only: &[String], verbose: bool) -> Result<(Map<String, Value>, Vec<Row>)> {
    let on = |s: &str| only.is_empty() || only.iter().any(|o| o == s);
    let mut f = Map::new();
    let mut rows = Vec::new();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    f.insert("cores".into(), json!(cores));
    f.insert("quick".into(), json!(sizes.parse_bytes < Sizes::full().parse_bytes));

    let corpus = parse::load_corpus(&parse::corpus_dir())?;
    if on("parse") {
        progress(verbose, "parse");
        let p = parse::run(&corpus, sizes.parse_bytes);
        f.insert("parse_mb_per_s".into(), json!(round(p.parse_mb_per_s)));
        f.insert("scan_mb_per_s".into(), json!(round(p.scan_mb_per_s)));
        f.insert("parse_bytes".into(), json!(p.bytes));
        rows.push(Row {
            figure: "parse, MB/s on one core (corpus mix)",
            value: format!("{:.0}", p.parse_mb_per_s),
            reference: format!("newline scan {:.0} MB/s ({} MB, {} events)", p.scan_mb_per_s, p.bytes >> 20, p.events),
            target: ">= 300",
            ok: Some(p.parse_mb_per_s >= 300.0),
        });
    }

    for (key, shape, limit_ms) in [("report_ms_1024_ranks", sizes.report_small, 1000.0), ("report_ms_16384_ranks", sizes.report_large, 10000.0)] {
        if !on("report") {
            continue;
        }
        progress(verbose, &format!("report, {} ranks x {} lines", shape.0, shape.1));
        let r = report::run(synth::Shape::new(shape.0, shape.1));
        f.insert(key.into(), json!(round(r.ms)));
        f.insert(format!("{key}_cpu"), json!(round(r.cpu_ms)));
        f.insert(format!("{key}_culprit"), json!(if r.culprit_ok { "ok" } else { "WRONG" }));
        rows.push(Row {
            figure: if limit_ms < 5000.0 { "report latency, ms (1,024-rank job)" } else { "report latency, ms (16,384-rank job)" },
            value: format!("{:.0}", r.ms),
            reference: format!(
                "{} ranks x {} lines ({} lines pushed in {:.1} s, {} events, evidence {:.0} ms, report CPU {:.0} ms); culprit {} ({})",
                shape.0,
                shape.1,
                r.lines,
                r.ingest_s,
                r.events,
                r.evidence_ms,
                r.cpu_ms,
                if r.culprit_ok { "ok" } else { "WRONG" },
                r.found
            ),
            target: if limit_ms < 5000.0 { "<= 1000" } else { "<= 10000" },
            ok: Some(r.ms <= limit_ms && r.culprit_ok),
        });
    }

    if on("live") {
        progress(verbose, &format!("live monitor, {} running ranks", sizes.live.0));
        let l = live::run(live::Shape { ranks: sizes.live.0, ticks: sizes.live.1 });
        f.insert("live_tick_ms_16384_ranks".into(), json!(round(l.p50_ms)));
        f.insert("live_tick_ms_16384_ranks_max".into(), json!(round(l.max_ms)));
        f.insert("live_tick_ms_16384_ranks_cpu".into(), json!(round(l.cpu_p50_ms)));
        f.insert("live_tick_16384_ranks_suspect".into(), json!(if l.suspect_ok { "ok" } else { "WRONG" }));
        rows.push(Row {
            figure: "live tick, ms (16,384 running ranks)",
            value: format!("{:.1}", l.p50_ms),
            reference: format!(
                "{} ranks, {} lines pushed in {:.1} s; {} ticks after {} new lines each: max {:.1} ms, CPU p50 {:.1} ms; suspects {} ({})",
                sizes.live.0,
                l.lines,
                l.ingest_s,
                sizes.live.1,
                live::LINES_PER_TICK,
                l.max_ms,
                l.cpu_p50_ms,
                l.found,
                if l.suspect_ok { "ok" } else { "WRONG" }
            ),
            target: "<= 50",
            ok: Some(l.p50_ms <= 50.0 && l.suspect_ok),
        });
        let lag = live::run_lagging(sizes.live.0, sizes.live.1.min(5));
        f.insert("live_tick_ms_16384_ranks_many_behind".into(), json!(round(lag.p50_ms)));
        f.insert("live_tick_16384_ranks_many_behind_suspects".into(), json!(if lag.all_suspected { "ok" } else { "WRONG" }));
        rows.push(Row {
            figure: "live tick, ms (16,384 ranks, 2 in 5 behind)",
            value: format!("{:.1}", lag.p50_ms),
            reference: format!(
                "{} of {} ranks stopped half way: max {:.1} ms; every one suspected: {}",
                lag.ranks_behind,
                sizes.live.0,
                lag.max_ms,
                if lag.all_suspected { "ok" } else { "WRONG" }
            ),
            target: "<= 50",
            ok: Some(lag.p50_ms <= 50.0 && lag.all_suspected),
        });
    }

    if on("search") {
        progress(verbose, &format!("search, building a {}-line job", sizes.search_lines));
        let s = search::run(sizes.search_lines, sizes.search_queries)?;
        f.insert("search_p50_ms".into(), json!(round(s.p50_ms)));
        f.insert("search_p99_ms".into(), json!(round(s.p99_ms)));
        f.insert("search_lines".into(), json!(s.lines));
        f.insert("index_bytes_per_raw_byte".into(), json!(round(s.index_bytes_per_raw_byte)));
        rows.push(Row {
            figure: "search latency p50 / p99, ms",
            value: format!("{:.1} / {:.1}", s.p50_ms, s.p99_ms),
            reference: format!("{} queries on {} lines (built in {:.0} s)", s.queries, s.lines, s.build_s),
            target: "p99 <= 50",
            ok: Some(s.p99_ms <= 50.0),
        });
        rows.push(Row {
            figure: "index bytes per raw byte",
            value: format!("{:.2}", s.index_bytes_per_raw_byte),
            reference: format!("{} MB index for {} MB of lines", s.index_bytes >> 20, s.raw_bytes >> 20),
            target: "reported",
            ok: None,
        });
    }

    let rt = tokio::runtime::Runtime::new().context("start the runtime")?;
    rt.block_on(async {
        let server = ingest::Server::start().await?;
        if on("ingest") {
            progress(verbose, &format!("ingest, {} agents x {} lines", sizes.ingest_agents, sizes.ingest_lines / sizes.ingest_agents as usize));
            let i = ingest::run(&server, &corpus, sizes.ingest_agents, sizes.ingest_lines).await?;
            f.insert("ingest_lines_per_s".into(), json!(i.ingest_lines_per_s.round()));
            f.insert("raw_index_docs_per_s".into(), json!(i.raw_index_docs_per_s.round()));
            f.insert("ingest_searchable".into(), json!(i.searchable));
            f.insert("ingest_cpu_s_per_million_lines".into(), json!(round(i.ingest_cpu_s_per_million)));
            f.insert("raw_index_cpu_s_per_million_docs".into(), json!(round(i.raw_cpu_s_per_million)));
            rows.push(Row {
                figure: "ingest, lines/s (gRPC agents -> committed)",
                value: format!("{:.0}", i.ingest_lines_per_s),
                reference: format!(
                    "raw JobIndex add+commit {:.0} docs/s ({} agents, {} lines, searchable: {}; CPU s per million: {:.2} ingest, {:.2} raw)",
                    i.raw_index_docs_per_s, i.agents, i.lines, i.searchable, i.ingest_cpu_s_per_million, i.raw_cpu_s_per_million
                ),
                target: ">= raw/2 and >= 150000",
                ok: Some(i.searchable && i.ingest_lines_per_s >= 150_000.0 && i.ingest_lines_per_s * 2.0 >= i.raw_index_docs_per_s),
            });
        }

        match agent::agent_binary().filter(|_| on("agent")) {
            Some(bin) => {
                progress(verbose, &format!("agent, {} lines through {}", sizes.agent_lines, bin.display()));
                let tmp = tempfile::Builder::new().prefix("coroner-bench-agent").tempdir()?;
                let (input, _) = agent::write_lines(&corpus, sizes.agent_lines, tmp.path())?;
                let a = agent::run(&server, &bin, &input, sizes.agent_lines as u64).await?;
                f.insert("agent_cpu_s_per_million_lines".into(), json!(round(a.cpu_s_per_million_lines)));
                f.insert("agent_rss_mb".into(), json!(round(a.rss_mb)));
                f.insert("agent_shipper_rss_mb".into(), json!(round(a.shipper_rss_mb)));
                f.insert("agent_shipper_cpu_s_per_million_lines".into(), json!(round(a.shipper_cpu_s_per_million_lines)));
                f.insert("cat_cpu_s_per_million_lines".into(), json!(round(a.cat_cpu_s_per_million_lines)));
                f.insert("agent_lines_committed".into(), json!(a.lines_committed));
                rows.push(Row {
                    figure: "agent CPU s per million lines",
                    value: format!("{:.2}", a.cpu_s_per_million_lines),
                    reference: format!(
                        "of which the shipper {:.2}; cat {:.3} s/M lines; {} of {} lines committed in {:.1} s",
                        a.shipper_cpu_s_per_million_lines, a.cat_cpu_s_per_million_lines, a.lines_committed, a.lines, a.wall_s
                    ),
                    target: "<= 1",
                    ok: Some(a.cpu_s_per_million_lines <= 1.0 && a.lines_committed == a.lines),
                });
                rows.push(Row {
                    figure: "agent peak RSS, MB (supervisor + shipper)",
                    value: format!("{:.1} + {:.1}", a.rss_mb, a.shipper_rss_mb),
                    reference: format!("cat {:.1} MB", a.cat_rss_mb),
                    target: "<= 30 + 60",
                    ok: Some(a.rss_mb <= 30.0 && a.shipper_rss_mb <= 60.0),
                });
            }
            None => {
                f.insert("agent_cpu_s_per_million_lines".into(), Value::Null);
                f.insert("agent_rss_mb".into(), Value::Null);
                rows.push(Row {
                    figure: "agent cost",
                    value: "skipped".into(),
                    reference: "coroner-agent is not built next to coroner-bench (cargo build --release -p coroner-agent)".into(),
                    target: "<= 1 s/M, <= 30 MB",
                    ok: None,
                });
            }
        }
        server.stop().await
    })?;
    Ok((f, rows))
}

fn round(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

fn print_table(rows: &[Row]) {
    let w0 = rows.iter().map(|r| r.figure.len()).max().unwrap_or(0);
    let w1 = rows.iter().map(|r| r.value.len()).max().unwrap_or(0).max(5);
    let w3 = rows.iter().map(|r| r.target.len()).max().unwrap_or(0);
    println!("{:w0$}  {:>w1$}  {:w3$}  {:5}  reference (same run, same data)", "figure", "value", "target", "met");
    for r in rows {
        let ok = match r.ok {
            Some(true) => "yes",
            Some(false) => "NO",
            None => "-",
        };
        println!("{:w0$}  {:>w1$}  {:w3$}  {:5}  {}", r.figure, r.value, r.target, ok, r.reference);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The smallest configuration end to end, so the bench does not rot. No timing assertions.
    #[test]
    fn smoke_run_produces_every_field() {
        let (f, rows) = run(Sizes::smoke(), &[], false).expect("smoke run");
        for k in [
            "parse_mb_per_s",
            "scan_mb_per_s",
            "ingest_lines_per_s",
            "raw_index_docs_per_s",
            "agent_cpu_s_per_million_lines",
            "agent_rss_mb",
            "report_ms_1024_ranks",
            "report_ms_16384_ranks",
            "live_tick_ms_16384_ranks",
            "search_p50_ms",
            "search_p99_ms",
            "index_bytes_per_raw_byte",
        ] {
            assert!(f.contains_key(k), "missing {k}");
        }
        assert_eq!(f["ingest_searchable"], json!(true));
        assert_eq!(f["report_ms_1024_ranks_culprit"], json!("ok"));
        assert_eq!(f["report_ms_16384_ranks_culprit"], json!("ok"));
        assert_eq!(f["live_tick_16384_ranks_suspect"], json!("ok"));
        assert_eq!(f["live_tick_16384_ranks_many_behind_suspects"], json!("ok"));
        assert!(!rows.is_empty());
    }
}
