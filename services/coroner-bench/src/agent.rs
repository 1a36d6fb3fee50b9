//! Agent cost: the real `coroner-agent` binary (next to this one in `target/<profile>/`) runs
//! `cat FILE` and ships every line to the in-process coronerd; its stdout goes into a pipe that
//! the bench drains. The reference: `cat FILE` into a pipe.
//!
//! The agent is two processes: the supervisor (the one started) and its shipper (a child named
//! `coroner-shipper`). CPU is both processes' own user+system time (not the wrapped command's):
//! the shipper's sampled from `/proc/<pid>/stat` every 5 ms while it runs (its last reading
//! counts), the supervisor's read while the exited supervisor is still a zombie (`waitid` with
//! `WNOWAIT`). Peak memory is each one's `VmHWM`, sampled the same way (not `ru_maxrss`: after a
//! fork from this large process it reports the parent's high-water mark).

use crate::ingest::Server;
use anyhow::{bail, Context, Result};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub struct AgentFigures {
    /// Supervisor and shipper together.
    pub cpu_s_per_million_lines: f64,
    /// Of which the shipper's.
    pub shipper_cpu_s_per_million_lines: f64,
    /// The supervisor's peak.
    pub rss_mb: f64,
    /// The shipper's peak.
    pub shipper_rss_mb: f64,
    pub cat_cpu_s_per_million_lines: f64,
    pub cat_rss_mb: f64,
    pub lines: u64,
    pub lines_committed: u64,
    pub wall_s: f64,
}

/// `coroner-agent` beside the running executable (or `$CORONER_AGENT`).
pub fn agent_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CORONER_AGENT") {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    // target/<profile>/coroner-bench, or target/<profile>/deps/<test> under `cargo test`.
    exe.ancestors().skip(1).take(2).map(|d| d.join("coroner-agent")).find(|p| p.is_file())
}

/// Writes `lines` corpus lines to a file; returns its path and size.
pub fn write_lines(files: &[crate::parse::CorpusFile], lines: usize, dir: &Path) -> Result<(PathBuf, u64)> {
    let path = dir.join("agent-input.log");
    let mut w = std::io::BufWriter::new(std::fs::File::create(&path).context("create the agent's input")?);
    let source: Vec<&[u8]> = files.iter().flat_map(|f| f.lines.iter().map(|l| l.bytes.as_slice())).collect();
    let mut bytes = 0u64;
    for i in 0..lines {
        let l = source[i % source.len()];
        w.write_all(l)?;
        w.write_all(b"\n")?;
        bytes += l.len() as u64 + 1;
    }
    w.flush()?;
    Ok((path, bytes))
}

struct Usage {
    /// The process's own CPU time, plus its shippers' when it is the agent.
    cpu_s: f64,
    /// Of which the shippers'.
    shipper_cpu_s: f64,
    hwm_kb: u64,
    /// The largest shipper's peak (0 for a command without one).
    shipper_hwm_kb: u64,
    wall_s: f64,
}

/// The agent's shipper processes, as last seen: pid -> (CPU s, peak KiB).
#[derive(Default)]
struct Shippers(std::collections::HashMap<u32, (f64, u64)>);

impl Shippers {
    fn sample(&mut self, parent: libc::pid_t) {
        let Ok(children) = std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children")) else { return };
        for pid in children.split_whitespace().filter_map(|p| p.parse::<u32>().ok()) {
            let is_shipper = std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "coroner-shipper");
            if !is_shipper {
                continue;
            }
            if let (Some(cpu), Some(hwm)) = (self_cpu_s(pid as libc::pid_t), vm_hwm_kb(pid as libc::pid_t)) {
                let e = self.0.entry(pid).or_default();
                e.0 = e.0.max(cpu);
                e.1 = e.1.max(hwm);
            }
        }
    }
}

/// Runs `cmd` with stdout into a drained pipe; measures the process itself, not its children.
fn measure(mut cmd: Command) -> Result<Usage> {
    cmd.stdout(Stdio::piped()).stderr(Stdio::null()).stdin(Stdio::null());
    let started = Instant::now();
    let mut child = cmd.spawn().context("spawn")?;
    let pid = child.id() as libc::pid_t;
    let mut out = child.stdout.take().context("stdout pipe")?;
    let drain = std::thread::spawn(move || {
        let mut buf = vec![0u8; 1 << 16];
        let mut n = 0u64;
        while let Ok(k) = out.read(&mut buf) {
            if k == 0 {
                break;
            }
            n += k as u64;
        }
        n
    });
    let sampler = std::thread::spawn(move || {
        let mut hwm = 0;
        let mut shippers = Shippers::default();
        while let Some(kb) = vm_hwm_kb(pid) {
            hwm = hwm.max(kb);
            shippers.sample(pid);
            std::thread::sleep(Duration::from_millis(5));
        }
        (hwm, shippers)
    });
    // Wait for the exit without reaping, read the zombie's own CPU times, then reap.
    // SAFETY: plain syscalls on our own child's pid with zeroed out-structs.
    let (cpu_s, status) = unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        if libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOWAIT) != 0 {
            bail!("waitid: {}", std::io::Error::last_os_error());
        }
        let cpu_s = self_cpu_s(pid).unwrap_or(f64::NAN);
        let mut status = 0;
        let mut ru: libc::rusage = std::mem::zeroed();
        if libc::wait4(pid, &mut status, 0, &mut ru) != pid {
            bail!("wait4: {}", std::io::Error::last_os_error());
        }
        (cpu_s, status)
    };
    let wall_s = started.elapsed().as_secs_f64();
    let _ = drain.join();
    let (hwm, mut shippers) = sampler.join().unwrap_or_default();
    // A shipper still delivering when the supervisor left: follow it to its end.
    for (pid, e) in &mut shippers.0 {
        while let (Some(cpu), Some(kb)) = (self_cpu_s(*pid as libc::pid_t), vm_hwm_kb(*pid as libc::pid_t)) {
            e.0 = e.0.max(cpu);
            e.1 = e.1.max(kb);
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
        bail!("the command failed (wait status {status})");
    }
    drop(child);
    Ok(Usage {
        cpu_s: cpu_s + shippers.0.values().map(|e| e.0).sum::<f64>(),
        shipper_cpu_s: shippers.0.values().map(|e| e.0).sum::<f64>(),
        hwm_kb: hwm,
        shipper_hwm_kb: shippers.0.values().map(|e| e.1).max().unwrap_or(0),
        wall_s,
    })
}

fn vm_hwm_kb(pid: libc::pid_t) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// utime + stime of the process itself, in seconds (`/proc/<pid>/stat` fields 14 and 15).
fn self_cpu_s(pid: libc::pid_t) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state).
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some((utime + stime) / hz)
}

pub async fn run(server: &Server, agent: &Path, input: &Path, lines: u64) -> Result<AgentFigures> {
    let spool = tempfile::Builder::new().prefix("coroner-bench-spool").tempdir()?;
    let job = "bench-agent";
    let mut cmd = Command::new(agent);
    cmd.args(["run", "--job", job, "--rank", "0", "--world-size", "1", "--launcher", "none", "--quiet"])
        .arg("--server")
        .arg(server.url())
        .arg("--spool-dir")
        .arg(spool.path())
        // The linger by environment, so builds from before `--linger` (`CORONER_FLUSH_TIMEOUT`)
        // can be measured the same way (`CORONER_AGENT=path`).
        .env("CORONER_LINGER", "120")
        .env("CORONER_FLUSH_TIMEOUT", "120")
        .args(["--gpu-sample-secs", "0", "--", "cat"])
        .arg(input);
    for var in ["RANK", "LOCAL_RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"] {
        cmd.env_remove(var);
    }
    let agent_usage = tokio::task::spawn_blocking(move || measure(cmd)).await??;
    let committed = server.count(job, "").await?;

    let mut cat = Command::new("cat");
    cat.arg(input);
    let cat_usage = tokio::task::spawn_blocking(move || measure(cat)).await??;

    let per_m = |cpu: f64| cpu / (lines as f64 / 1e6);
    Ok(AgentFigures {
        cpu_s_per_million_lines: per_m(agent_usage.cpu_s),
        shipper_cpu_s_per_million_lines: per_m(agent_usage.shipper_cpu_s),
        rss_mb: agent_usage.hwm_kb as f64 / 1024.0,
        shipper_rss_mb: agent_usage.shipper_hwm_kb as f64 / 1024.0,
        cat_cpu_s_per_million_lines: per_m(cat_usage.cpu_s),
        cat_rss_mb: cat_usage.hwm_kb as f64 / 1024.0,
        lines,
        lines_committed: committed,
        wall_s: agent_usage.wall_s,
    })
}
