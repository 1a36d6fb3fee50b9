//! `coroner-bench scrape`: what one `/metrics` scrape costs with 10 job rows and with 10,000, on
//! a real coronerd (in process, SQLite). Every row carries a report (a few KiB of JSON, as real
//! reports do). Beside each, the reference: reading every job row, which is what a scrape did
//! before the job tally (migration 0008) kept the counts. Figures only; no test asserts a time.

use anyhow::{Context, Result};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

/// Scrapes timed per size, after one to warm up.
const SCRAPES: usize = 50;

#[derive(clap::Args, Debug)]
pub struct ScrapeArgs {
    /// Job rows, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "10,10000")]
    jobs: Vec<usize>,
}

pub fn main(args: ScrapeArgs) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    println!("{:>8}  {:>14}  {:>14}  {:>22}", "jobs", "scrape p50", "scrape max", "reading every job row");
    for n in args.jobs {
        let (p50, max, reference) = rt.block_on(one(n))?;
        println!("{n:>8}  {:>14}  {:>14}  {:>22}", ms(p50), ms(max), ms(reference));
    }
    Ok(())
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

async fn one(jobs: usize) -> Result<(Duration, Duration, Duration)> {
    let dir = tempfile::tempdir()?;
    let config = coronerd::Config::for_tests(dir.path().to_path_buf());
    let store = coroner_store::connect(&config.database_url()).await?;
    let report = format!("{{\"verdict\":\"failed\",\"notes\":\"{}\"}}", "x".repeat(4096));
    for i in 0..jobs {
        let id = coroner_model::JobId::parse(&format!("bench-{i:05}"))?;
        store.touch_job(&id, Some(8), i as i64).await?;
        let (verdict, class) = if i % 3 == 0 { ("succeeded", None) } else { ("failed", Some(["nccl_error", "cuda_oom", "segfault"][i % 3])) };
        store.save_report(&id, verdict, None, class, &report).await?;
    }
    let shutdown = tokio_util::sync::CancellationToken::new();
    let (server, bound) = coronerd::start(config, shutdown.clone()).await?;
    let task = tokio::spawn(server);
    let port = bound.http.port();
    let mut times = Vec::with_capacity(SCRAPES);
    for i in 0..=SCRAPES {
        let started = Instant::now();
        let body = tokio::task::spawn_blocking(move || scrape(port)).await??;
        anyhow::ensure!(body.contains("coroner_jobs{verdict=\"failed\"}") || jobs == 0, "a scrape without the job counts: {body}");
        if i > 0 {
            times.push(started.elapsed());
        }
    }
    times.sort();
    let started = Instant::now();
    let rows = store.list_jobs(&Default::default()).await?.len();
    let reference = started.elapsed();
    anyhow::ensure!(rows == jobs, "{rows} rows listed, {jobs} written");
    shutdown.cancel();
    task.await??;
    Ok((times[times.len() / 2], times[times.len() - 1], reference))
}

/// One `GET /metrics` over HTTP/1.0: the body.
fn scrape(port: u16) -> Result<String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).context("connect to coronerd's HTTP port")?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    Ok(raw.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default())
}
