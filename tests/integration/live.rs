//! Live hang suspicion: corpus bundles replayed as if they were running.
//!
//! - Through the monitor alone, every bundle: the hang bundles raise the culprit long before the
//!   first watchdog or timeout line; the healthy ones raise nothing.
//! - Through the real server and real agents: each rank's lines are printed again by a small
//!   shell script at their captured times (twice as fast), under `coroner-agent`; `coroner watch
//!   --json` must show the suspected hang on the culprit before the watchdog line would have been
//!   printed, and nothing on the healthy jobs; the job page shows it; the culprit's agent,
//!   asked for a stack dump, runs `py-spy dump` (a stand-in script here) and uploads it; and the
//!   finding is withdrawn once the culprit prints again or the others end.

use crate::served::{Endpoints, TestServer};
use coroner_analysis::live::{replay, Feed, LiveConfig};
use coroner_model::{Nanos, Rank};
use coroner_tests::{binary, data_dir, truth, Collected};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const S: Nanos = 1_000_000_000;

type Lines = Vec<(Rank, Nanos, String)>;

/// A bundle's lines as (rank, capture time, text), and each rank's last capture time.
fn lines_of(bundle: &Path) -> (Lines, Vec<(Rank, Nanos)>) {
    let c = Collected::load(bundle);
    let lines: Vec<(Rank, Nanos, String)> = c.lines.iter().filter_map(|l| Some((l.rank?, l.capture_ns, l.text().into_owned()))).collect();
    let mut last: Vec<(Rank, Nanos)> = Vec::new();
    for (r, t, _) in &lines {
        match last.iter_mut().find(|(x, _)| x == r) {
            Some(e) => e.1 = e.1.max(*t),
            None => last.push((*r, *t)),
        }
    }
    (lines, last)
}

/// The job-wide silence of a hang bundle: the first gap of over 10 s with no line on any rank (the
/// collective timeouts in the corpus are 20 s), as (the last line before it, the first line after
/// it: the watchdog's or the transport's timeout).
fn silence(lines: &[(Rank, Nanos, String)]) -> (Nanos, Nanos) {
    let mut times: Vec<Nanos> = lines.iter().map(|l| l.1).collect();
    times.sort_unstable();
    times.windows(2).map(|w| (w[0], w[1])).find(|(a, b)| b - a > 10 * S).expect("a silence of over 10 s")
}

#[test]
fn every_corpus_bundle_replayed_through_the_monitor() {
    for bundle in coroner_tests::corpus_bundles() {
        let name = bundle.file_name().unwrap().to_string_lossy().into_owned();
        let (verdict, culprit, class) = truth(&bundle);
        let (lines, ends) = lines_of(&bundle);
        let until = ends.iter().map(|e| e.1).max().unwrap_or(0);
        let feed = Feed { lines: lines.clone(), ends: ends.clone(), liveness: Vec::new() };
        let raised = replay(&feed, LiveConfig::default(), S / 10, until);
        if verdict == "succeeded" {
            assert!(raised.is_empty(), "{name}: a healthy job raised {raised:?}");
        }
        if class == "hang" {
            let culprit = Rank(culprit.expect("a hang has a culprit"));
            let (quiet, watchdog) = silence(&lines);
            let first = raised.first().unwrap_or_else(|| panic!("{name}: nothing raised"));
            assert_eq!(first.finding.rank, culprit, "{name}: {raised:?}");
            assert!(raised.iter().all(|r| r.finding.rank == culprit), "{name}: only the culprit: {raised:?}");
            assert!(first.at < watchdog, "{name}: raised at {} s, the watchdog at {} s", secs(first.at - quiet), secs(watchdog - quiet));
            let last_own = lines.iter().filter(|l| l.0 == culprit && l.1 <= quiet).map(|l| l.1).max().unwrap();
            let lead = first.at - last_own;
            eprintln!(
                "{name} (monitor only, default thresholds): rank {} suspected {} s after its last line; the watchdog line came {} s after it",
                culprit,
                secs(lead),
                secs(watchdog - last_own)
            );
            assert!(lead <= 6 * S, "{name}: {} s after the culprit's last line", secs(lead));
            assert!(!first.finding.last_lines.is_empty() && first.finding.summary.contains(&format!("rank {culprit}")));
        }
    }
}

fn secs(ns: Nanos) -> String {
    format!("{:.1}", ns as f64 / 1e9)
}

/// A shell script that prints one rank's lines at their captured times (relative to `t0`),
/// `speed` times faster; stderr lines to stderr.
fn replay_script(lines: &[(Rank, Nanos, String, bool)], rank: Rank, t0: Nanos, speed: f64, dir: &Path) -> PathBuf {
    let mut s = String::from("#!/bin/sh\n");
    let mut at = t0;
    for (r, t, text, stderr) in lines.iter().filter(|l| l.0 == rank) {
        let _ = r;
        let gap = (*t - at) as f64 / 1e9 / speed;
        if gap >= 0.001 {
            s.push_str(&format!("sleep {gap:.3}\n"));
            at = *t;
        }
        let quoted = text.replace('\'', "'\\''");
        s.push_str(&format!("printf '%s\\n' '{quoted}'{}\n", if *stderr { " >&2" } else { "" }));
    }
    let path = dir.join(format!("rank{}.sh", rank.0));
    std::fs::File::create(&path).and_then(|mut f| f.write_all(s.as_bytes())).expect("write the replay script");
    path
}

struct LiveJob {
    name: String,
    agents: Vec<Child>,
    updates: mpsc::Receiver<(Duration, serde_json::Value)>,
    watcher: Child,
    /// Replay-time seconds: culprit's last line before the silence, the first line after it.
    quiet: Option<(f64, f64)>,
    culprit: Option<u32>,
}

const SPEED: f64 = 2.0;

fn start(bundle: &str, grpc: &str, spool: &Path, tools: &Path, started: Instant) -> LiveJob {
    let path = data_dir().join("corpus").join(bundle);
    let c = Collected::load(&path);
    let lines: Vec<(Rank, Nanos, String, bool)> =
        c.lines.iter().filter_map(|l| Some((l.rank?, l.capture_ns, l.text().into_owned(), l.stream == coroner_model::Stream::Stderr))).collect();
    let t0 = lines.iter().map(|l| l.1).min().expect("lines");
    let world = c.world_size.expect("world size");
    let job = format!("live-{bundle}");
    let dir = spool.join(bundle);
    std::fs::create_dir_all(&dir).expect("script dir");
    let (verdict, culprit, class) = truth(&path);
    let _ = verdict;
    let quiet = (class == "hang").then(|| {
        let plain: Vec<(Rank, Nanos, String)> = lines.iter().map(|l| (l.0, l.1, l.2.clone())).collect();
        let (q, w) = silence(&plain);
        let own = plain.iter().filter(|l| Some(l.0 .0) == culprit && l.1 <= q).map(|l| l.1).max().expect("culprit lines");
        ((own - t0) as f64 / 1e9, (w - t0) as f64 / 1e9)
    });
    let mut watcher = Command::new(binary("coroner"))
        .args(["--server", grpc, "watch", &job, "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start coroner watch");
    let out = watcher.stdout.take().expect("watch stdout");
    let (tx, updates) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str(&line) {
                if tx.send((started.elapsed(), v)).is_err() {
                    return;
                }
            }
        }
    });
    let agents = (0..world)
        .map(|r| {
            let script = replay_script(&lines, Rank(r), t0, SPEED, &dir);
            Command::new(binary("coroner-agent"))
                .args(["run", "--job", &job, "--rank", &r.to_string(), "--world-size", &world.to_string()])
                .args(["--server", grpc, "--flush-timeout", "2", "--quiet"])
                .arg("--spool-dir")
                .arg(spool)
                .arg("--")
                .arg("sh")
                .arg(&script)
                .env("PATH", path_with(tools))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start coroner-agent")
        })
        .collect();
    LiveJob { name: bundle.to_string(), agents, updates, watcher, quiet, culprit }
}

fn path_with(dir: &Path) -> std::ffi::OsString {
    let mut dirs = vec![dir.to_path_buf()];
    dirs.extend(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()));
    std::env::join_paths(dirs).expect("a PATH")
}

/// A stand-in for `py-spy` that prints a stack in its format.
fn fake_py_spy(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("py-spy");
    let script =
        "#!/bin/sh\necho \"Process $3: python worker.py\"\necho 'Thread 0x7F28588CB140 (idle): \"MainThread\"'\necho '    main (/opt/job/worker.py:88)'\n";
    std::fs::write(&path, script).expect("write py-spy");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod py-spy");
}

/// Waits for a stack snapshot of `rank` in the job's report.
fn stack_of(server: &Endpoints, job: &str, rank: u64) -> Option<String> {
    let deadline = Instant::now() + Duration::from_secs(8);
    while Instant::now() < deadline {
        let out = server.coroner(&["report", job, "--json"]);
        let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let found = r["snapshots"].as_array().into_iter().flatten().find(|s| s["kind"] == "stack" && s["rank"].as_u64() == Some(rank));
        if let Some(s) = found {
            return s["name"].as_str().map(str::to_string);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    None
}

fn stop(mut j: LiveJob) {
    for a in &mut j.agents {
        let _ = Command::new("kill").arg(a.id().to_string()).stderr(Stdio::null()).status();
    }
    for a in &mut j.agents {
        let _ = a.wait();
    }
    let _ = j.watcher.kill();
    let _ = j.watcher.wait();
}

fn suspects(v: &serde_json::Value) -> Vec<u64> {
    v["live_findings"].as_array().map(|a| a.iter().filter_map(|f| f["rank"].as_u64()).collect()).unwrap_or_default()
}

#[test]
fn replayed_live_through_agents_the_hang_is_suspected_long_before_the_watchdog() {
    let spool = tempfile::tempdir().expect("tempdir");
    let server = TestServer::start_with(|c| c.hang_floor = Duration::from_secs(2));
    let endpoints: &Endpoints = &server;
    let tools = tempfile::tempdir().expect("tempdir");
    fake_py_spy(tools.path());
    let started = Instant::now();
    let jobs: Vec<LiveJob> = ["nccl2_hang_r1", "gloo8_hang_r5", "nccl2_ok", "gloo4_slow_r2"]
        .iter()
        .map(|b| start(b, &endpoints.grpc_url, spool.path(), tools.path(), started))
        .collect();
    // Each job is watched by a thread of its own, in real time: checked one after the other,
    // a later job's finding could come and go (buffered in its channel) while an earlier one was
    // still being looked at, and its page and withdrawal were then looked for too late.
    let failures: Vec<String> = std::thread::scope(|scope| {
        let checks: Vec<_> = jobs.into_iter().map(|j| scope.spawn(|| watch_job(j, started, endpoints))).collect();
        checks.into_iter().flat_map(|c| c.join().expect("a job's watcher panicked")).collect()
    });
    drop(server);
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Follows one replayed job from its start: a hang job's finding before the watchdog line, on
/// its page, with a stack dump, then withdrawn; a healthy job's never. What went wrong, in words.
fn watch_job(mut j: LiveJob, started: Instant, server: &Endpoints) -> Vec<String> {
    let mut failures = Vec::new();
    let mut seen: Vec<(Duration, Vec<u64>)> = Vec::new();
    match j.quiet {
        Some((last_line, watchdog)) => {
            // Wait until the watchdog line would be printed (in wall time), or the finding.
            let limit = Duration::from_secs_f64(watchdog / SPEED);
            loop {
                match j.updates.recv_timeout(Duration::from_millis(100)) {
                    Ok((at, _)) if at > limit => break,
                    Ok((at, v)) => {
                        let s = suspects(&v);
                        if !s.is_empty() {
                            seen.push((at, s));
                            break;
                        }
                    }
                    Err(_) if started.elapsed() > limit => break,
                    Err(_) => {}
                }
            }
            match seen.first() {
                Some((at, ranks)) => {
                    let replay_s = at.as_secs_f64() * SPEED;
                    eprintln!(
                        "{}: suspected hang on ranks {ranks:?} at {replay_s:.1} s of replay: {:.1} s after the culprit's last line, {:.1} s before the watchdog line",
                        j.name,
                        replay_s - last_line,
                        watchdog - replay_s
                    );
                    if ranks != &vec![u64::from(j.culprit.unwrap())] {
                        failures.push(format!("{}: suspected {ranks:?}, the culprit is {:?}", j.name, j.culprit));
                    }
                    if replay_s - last_line > 8.0 {
                        failures.push(format!("{}: {:.1} s after the culprit's last line", j.name, replay_s - last_line));
                    }
                    let culprit = u64::from(j.culprit.unwrap());
                    // The page renders the job's current report, which may trail the watch
                    // stream by a re-evaluation on a loaded machine: look for up to 5 s.
                    let shows = |page: &str| page.contains("id=\"live-findings\"") && page.contains(&format!("data-rank=\"{culprit}\""));
                    let asked = std::time::Instant::now();
                    let page_of = || server.get(&format!("/jobs/live-{}", j.name)).1;
                    let mut page = page_of();
                    while !shows(&page) && asked.elapsed() < std::time::Duration::from_secs(5) {
                        std::thread::sleep(std::time::Duration::from_millis(100));
                        page = page_of();
                    }
                    if !shows(&page) {
                        failures.push(format!("{}: the job page does not show the suspected hang", j.name));
                    }
                    match stack_of(server, &format!("live-{}", j.name), culprit) {
                        Some(name) => eprintln!("{}: the culprit's agent uploaded the stack dump {name}", j.name),
                        None => failures.push(format!("{}: no stack dump of the culprit was uploaded", j.name)),
                    }
                    // Once the culprit prints again (the watchdog's dump request reaches it)
                    // or the others end, the finding is withdrawn.
                    let until = Duration::from_secs_f64(watchdog / SPEED) + Duration::from_secs(6);
                    let mut retracted = None;
                    while retracted.is_none() && started.elapsed() < until {
                        if let Ok((at, v)) = j.updates.recv_timeout(Duration::from_millis(100)) {
                            if suspects(&v).is_empty() {
                                retracted = Some(at);
                            }
                        }
                    }
                    match retracted {
                        Some(at) => eprintln!("{}: withdrawn at {:.1} s of replay", j.name, at.as_secs_f64() * SPEED),
                        None => failures.push(format!("{}: the finding was never withdrawn", j.name)),
                    }
                }
                None => failures.push(format!("{}: no suspected hang before the watchdog line", j.name)),
            }
        }
        None => {
            // A healthy job: nothing, until every agent has exited.
            let deadline = Instant::now() + Duration::from_secs(40);
            while j.agents.iter_mut().any(|a| a.try_wait().ok().flatten().is_none()) && Instant::now() < deadline {
                while let Ok((_, v)) = j.updates.try_recv() {
                    let s = suspects(&v);
                    if !s.is_empty() {
                        failures.push(format!("{}: a healthy job raised a suspected hang on {s:?}", j.name));
                    }
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            std::thread::sleep(Duration::from_millis(500));
            while let Ok((_, v)) = j.updates.try_recv() {
                if !suspects(&v).is_empty() {
                    failures.push(format!("{}: a healthy job raised {v}", j.name));
                }
            }
        }
    }
    stop(j);
    failures
}
