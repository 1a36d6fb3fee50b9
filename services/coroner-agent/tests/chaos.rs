//! The agent never hurts the job it wraps, whatever happens to the agent: its supervisor or its
//! shipper SIGKILLed mid-job, no identity, settings that do not parse, no server for the whole
//! job, a spool disk that refuses writes, an output storm. Each test runs the built agent around
//! a real child with an unreachable server (tests/integration/agent_fail_safe.rs does the same
//! against a real coronerd).

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const DEAD_SERVER: &str = "http://127.0.0.1:1";

fn agent(spool: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_coroner-agent"));
    c.arg("run").arg("--spool-dir").arg(spool).args(["--server", DEAD_SERVER]);
    c.env_remove("CORONER_SERVER").env_remove("CORONER_JOB").env("CORONER_GPU_SAMPLE_SECS", "0");
    c
}

/// A shell job printing `steps` numbered lines `pause` apart, then `done` (and a marker file).
fn job(steps: u32, pause: &str, marker: &Path) -> Vec<String> {
    let script = format!("i=0; while [ $i -lt {steps} ]; do echo \"step $i\"; i=$((i+1)); sleep {pause}; done; echo done > '{}'; echo done", marker.display());
    vec!["--".into(), "sh".into(), "-c".into(), script]
}

/// Reads a pipe to its end on a thread.
fn collect(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        buf
    })
}

/// The pids of `parent`'s children whose command name is `name`.
fn children_named(parent: u32, name: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // pid (comm) state ppid ...
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { continue };
        let comm = &stat[open + 1..close];
        let ppid = stat[close + 2..].split(' ').nth(1).and_then(|p| p.parse::<u32>().ok());
        if comm == name && ppid == Some(parent) {
            found.push(pid);
        }
    }
    found
}

fn wait_for(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_child(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(Instant::now() < deadline, "the agent did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn steps_in(out: &[u8]) -> Vec<u32> {
    String::from_utf8_lossy(out).lines().filter_map(|l| l.strip_prefix("step ")?.parse().ok()).collect()
}

#[test]
fn sigkill_of_the_agent_mid_job_leaves_the_job_running_and_its_output_flowing() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("finished");
    let mut child = agent(&dir.path().join("spool"))
        .args(["--job", "chaos-kill"])
        .args(job(60, "0.02", &marker))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = collect(child.stdout.take().unwrap());
    let err = collect(child.stderr.take().unwrap());
    std::thread::sleep(Duration::from_millis(300));
    child.kill().unwrap(); // SIGKILL to the process the launcher started
    let _ = child.wait();
    wait_for("the job to finish", Duration::from_secs(30), || marker.exists());
    let out = out.join().unwrap();
    let err = String::from_utf8_lossy(&err.join().unwrap()).into_owned();
    let steps = steps_in(&out);
    let missing: Vec<u32> = (0..60).filter(|s| !steps.contains(s)).collect();
    assert_eq!(
        steps,
        (0..60).collect::<Vec<_>>(),
        "every line printed, in order (missing {missing:?}); stdout: {}; stderr: {err}",
        String::from_utf8_lossy(&out)
    );
    assert!(String::from_utf8_lossy(&out).ends_with("done\n"));
    assert!(err.contains("supervisor is gone"), "the shipper took over the pass-through: {err}");
}

#[test]
fn sigkill_of_the_agent_in_an_output_burst_loses_and_repeats_no_line() {
    // The supervisor is killed while it is busy passing output through (not idle in a read):
    // the shipper takes over exactly where it stopped. A burst that ended before the kill
    // proves nothing, so the burst grows until three kills land inside one (a quiet fast
    // machine runs 200,000 lines in well under the wait; a loaded one takes seconds).
    let mut lines: u32 = 200_000;
    let mut landed = 0;
    for attempt in 0..8 {
        if landed == 3 {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("finished");
        let script = format!("i=0; while [ $i -lt {lines} ]; do echo \"step $i\"; i=$((i+1)); done; echo done > '{}'", marker.display());
        let mut child = agent(&dir.path().join("spool"))
            .args(["--job", "chaos-burst", "--", "sh", "-c", &script])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = collect(child.stdout.take().unwrap());
        std::thread::sleep(Duration::from_millis(100 + 100 * landed));
        let mid_burst = !marker.exists();
        child.kill().unwrap();
        let _ = child.wait();
        wait_for("the job to finish", Duration::from_secs(120), || marker.exists());
        let steps = steps_in(&out.join().unwrap());
        // Every line, in order; a kill in the instant between a syscall and its count may
        // repeat what one read held (docs/AGENT.md), never lose a line.
        let mut seen = vec![0u32; lines as usize];
        for s in &steps {
            seen[*s as usize] += 1;
        }
        let missing = seen.iter().filter(|n| **n == 0).count();
        let repeated = steps.len() - (lines as usize - missing);
        assert_eq!(missing, 0, "attempt {attempt}: {missing} lines lost");
        assert!(repeated < 6_000, "attempt {attempt}: {repeated} lines repeated, more than one read holds");
        let mut deduped = steps.clone();
        deduped.dedup_by(|a, b| a <= b);
        assert_eq!(deduped.len(), lines as usize, "attempt {attempt}: out of order beyond one repeated read");
        if mid_burst {
            landed += 1;
        } else {
            lines = lines.saturating_mul(4).min(12_800_000);
        }
    }
    assert_eq!(landed, 3, "the burst ({lines} lines) never outlasted the wait before the kill");
}

#[test]
fn sigkill_of_the_shipper_mid_job_changes_nothing_for_the_job_and_a_new_one_starts() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("finished");
    let mut child = agent(&dir.path().join("spool"))
        .args(["--job", "chaos-shipper"])
        .args(job(140, "0.05", &marker))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = collect(child.stdout.take().unwrap());
    let err = collect(child.stderr.take().unwrap());
    let pid = child.id();
    let mut first = Vec::new();
    wait_for("the shipper", Duration::from_secs(10), || {
        first = children_named(pid, "coroner-shipper");
        !first.is_empty()
    });
    // SAFETY: SIGKILL to the shipper process found above.
    unsafe {
        libc::kill(first[0] as libc::pid_t, libc::SIGKILL);
    }
    wait_for("a new shipper", Duration::from_secs(15), || children_named(pid, "coroner-shipper").iter().any(|p| *p != first[0]));
    let status = wait_child(&mut child, Duration::from_secs(60));
    let out = out.join().unwrap();
    let err = String::from_utf8_lossy(&err.join().unwrap()).into_owned();
    assert_eq!(status.code(), Some(0), "the agent exits with the job's status: {err}");
    assert_eq!(steps_in(&out), (0..140).collect::<Vec<_>>(), "stderr: {err}");
    assert!(err.contains("killed by signal 9"), "{err}");
}

#[test]
fn no_identity_anywhere_still_runs_the_command_and_says_which_job_it_made_up() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_coroner-agent"))
        .arg("run")
        .arg("--spool-dir")
        .arg(dir.path())
        .args(["--server", DEAD_SERVER, "--", "sh", "-c", "echo ran; exit 4"])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap())
        .env("RANK", "abc")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert_eq!(out.stdout, b"ran\n");
    assert!(err.contains("no job id") && err.contains("shipping as job"), "{err}");
    assert!(err.contains("RANK=\"abc\" is not a number"), "{err}");
}

#[test]
fn options_the_agent_cannot_read_still_run_the_command() {
    let dir = tempfile::tempdir().unwrap();
    // Unparseable values in the environment: defaults, and the command is shipped as usual.
    let out = agent(dir.path())
        .args(["--job", "j", "--", "sh", "-c", "echo ran"])
        .env("CORONER_SPOOL_MAX_BYTES", "lots")
        .env("CORONER_LINGER", "soon")
        .env("CORONER_LAUNCHER", "mpi")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!((out.status.code(), &out.stdout[..]), (Some(0), &b"ran\n"[..]), "{err}");
    assert!(err.contains("\"lots\" is not a size") && err.contains("\"soon\" is not a duration"), "{err}");
    // A flag the agent does not know: the command runs unwrapped.
    let out = agent(dir.path()).args(["--no-such-flag", "--", "sh", "-c", "echo ran; exit 5"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!((out.status.code(), &out.stdout[..]), (Some(5), &b"ran\n"[..]), "{err}");
    assert!(err.contains("running the command without coroner"), "{err}");
}

#[test]
fn no_server_for_the_whole_job_does_not_hold_the_launcher() {
    let dir = tempfile::tempdir().unwrap();
    // A linger of a minute: were the agent waiting for the unreachable server, it would show.
    let start = Instant::now();
    let out = agent(dir.path()).args(["--job", "j", "--linger", "60s", "--", "sh", "-c", "echo a; echo b >&2; exit 3"]).output().unwrap();
    let took = start.elapsed();
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(out.stdout, b"a\n");
    assert!(took < Duration::from_secs(20), "held the launcher {took:?} for a server that is not there");
}

#[test]
fn a_spool_disk_that_refuses_writes_does_not_hurt_the_job() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = agent(dir.path());
    cmd.args(["--job", "j", "--", "sh", "-c", "i=0; while [ $i -lt 3000 ]; do echo \"line $i with some padding to fill the spool up\"; i=$((i+1)); done"]);
    // Every file the agent writes stops at 4 KiB: its spool writes fail as on a full disk.
    // SAFETY: setrlimit in the child before exec; async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit { rlim_cur: 4096, rlim_max: 4096 };
            libc::setrlimit(libc::RLIMIT_FSIZE, &lim);
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let lines: Vec<_> = String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 3000, "{err}");
    assert!(err.contains("write the spool") || err.contains("create the spool"), "the spool's failure is said: {err}");
}

#[test]
fn an_output_storm_passes_through_whole_and_the_agent_stays_small() {
    let dir = tempfile::tempdir().unwrap();
    // 256 MiB in lines of 1 KiB as fast as the child can write them (a storm of 1 GB a minute
    // is 17 MiB/s; this is faster), with a small spool so the disk is not the test's.
    let script = "import sys\nline = b'x' * 1023 + b'\\n'\nw = sys.stdout.buffer\nfor _ in range(256 * 1024):\n    w.write(line)\nw.flush()\n";
    let mut child = agent(dir.path())
        .args(["--job", "storm", "--spool-max-bytes", "32MiB", "--", "python3", "-c", script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut out = child.stdout.take().unwrap();
    let err = collect(child.stderr.take().unwrap());
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let sampler = {
        let peak = peak.clone();
        std::thread::spawn(move || {
            // The supervisor's resident memory at its highest (VmHWM), until it exits.
            while let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
                if let Some(kb) =
                    status.lines().find_map(|l| l.strip_prefix("VmHWM:")).and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
                {
                    peak.fetch_max(kb, std::sync::atomic::Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let mut total = 0u64;
    let mut bad = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = out.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        total += n as u64;
        bad += buf[..n].iter().filter(|b| **b != b'x' && **b != b'\n').count() as u64;
    }
    let status = wait_child(&mut child, Duration::from_secs(120));
    let _ = sampler.join();
    let err = String::from_utf8_lossy(&err.join().unwrap()).into_owned();
    assert_eq!(status.code(), Some(0), "{err}");
    assert_eq!((total, bad), (256 << 20, 0), "every byte passed through unchanged");
    let peak_mb = peak.load(std::sync::atomic::Ordering::Relaxed) / 1024;
    assert!(peak_mb < 64, "the supervisor held {peak_mb} MB at its peak");
}
