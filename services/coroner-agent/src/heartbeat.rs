//! Heartbeats: every [`PERIOD`], the rank process's CPU time and disk traffic to the server (`coroner.v1.Liveness`),
//! so the server can tell a silent-but-busy rank (a checkpoint being written) from a silent idle
//! one. When the server answers that it suspects this rank of hanging, the agent takes what stack
//! dumps it can without stopping the process and leaves them in the snapshot folder, which the
//! snapshot watcher uploads:
//! - `py-spy dump --pid` when `py-spy` is on the PATH (every Python thread's stack);
//! - PyTorch's flight recorder, by writing to its dump pipe (`TORCH_NCCL_DEBUG_INFO_PIPE_FILE`,
//!   which the agent sets for the child); the dump lands in the watched flight recorder folder.

use crate::connection::open_channel;
use coroner_proto::v1::{liveness_client::LivenessClient, HeartbeatRequest};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub const PERIOD: Duration = Duration::from_secs(1);
/// How long `py-spy dump` may take.
const DUMP_LIMIT: Duration = Duration::from_secs(20);

pub struct Settings {
    pub server: String,
    pub auth: coroner_proto::auth::ClientAuth,
    pub job: String,
    pub rank: u32,
    pub pid: u32,
    pub snapshot_dir: PathBuf,
    /// The flight recorder's dump pipe (`<prefix><rank>.pipe`), when the child has one.
    pub fr_pipe: Option<PathBuf>,
}

/// Runs until aborted (the agent aborts it when the child exits).
pub async fn run(s: Settings) {
    let mut client = None;
    let mut dumps = 0u32;
    loop {
        tokio::time::sleep(PERIOD).await;
        if client.is_none() {
            // Any instance will do: one that does not own the job passes the heartbeat on.
            let first = crate::connection::servers(&s.server).first().copied().unwrap_or_default();
            client = open_channel(first, &s.auth).await.ok().map(LivenessClient::new);
        }
        let Some(c) = client.as_mut() else { continue };
        let req = HeartbeatRequest {
            job_id: s.job.clone(),
            rank: s.rank,
            at_ns: coroner_model::now_ns(),
            cpu_ns: cpu_time_ns(s.pid),
            gpu_util_pct: None,
            io_bytes: io_bytes(s.pid),
        };
        match c.heartbeat(req).await {
            Ok(r) if r.get_ref().dump_stack => {
                dumps += 1;
                dump_stacks(&s, dumps).await;
            }
            Ok(_) => {}
            Err(status) if status.code() == tonic::Code::Unimplemented => {
                tracing::debug!("the server takes no heartbeats; not sending them");
                return;
            }
            Err(status) => {
                tracing::debug!("heartbeat: {}", status.message());
                client = None;
            }
        }
    }
}

/// User plus system CPU time of a process, from `/proc/<pid>/stat`.
pub fn cpu_time_ns(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let ticks = parse_cpu_ticks(&stat)?;
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = u64::try_from(hz).ok().filter(|h| *h > 0)?;
    Some(ticks.saturating_mul(1_000_000_000) / hz)
}

/// Bytes read and written through system calls (`rchar + wchar` of `/proc/<pid>/io`).
pub fn io_bytes(pid: u32) -> Option<u64> {
    parse_io(&std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?)
}

fn parse_io(text: &str) -> Option<u64> {
    let field = |name: &str| text.lines().find_map(|l| l.strip_prefix(name)?.trim().parse::<u64>().ok());
    Some(field("rchar:")? + field("wchar:")?)
}

/// utime + stime, the 14th and 15th fields; the command name (2nd) may hold spaces and parentheses.
fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

async fn dump_stacks(s: &Settings, n: u32) {
    tracing::warn!("coronerd suspects rank {} of hanging; taking stack dumps", s.rank);
    let mut took = false;
    if let Some(pipe) = &s.fr_pipe {
        took |= poke_pipe(pipe);
    }
    if let Some(py_spy) = find_on_path("py-spy") {
        let run = tokio::process::Command::new(&py_spy).args(["dump", "--pid", &s.pid.to_string()]).kill_on_drop(true).output();
        match tokio::time::timeout(DUMP_LIMIT, run).await {
            Ok(Ok(out)) if out.status.success() => {
                let path = s.snapshot_dir.join(format!("rank{}.live_stack.{n}.txt", s.rank));
                match std::fs::create_dir_all(&s.snapshot_dir).and_then(|_| std::fs::write(&path, &out.stdout)) {
                    Ok(()) => took = true,
                    Err(e) => tracing::warn!("write {}: {e}", path.display()),
                }
            }
            Ok(Ok(out)) => tracing::warn!("py-spy dump failed: {}", String::from_utf8_lossy(&out.stderr).trim()),
            Ok(Err(e)) => tracing::warn!("run {}: {e}", py_spy.display()),
            Err(_) => tracing::warn!("py-spy dump took longer than {DUMP_LIMIT:?}; gave up"),
        }
    }
    if !took {
        tracing::warn!("no stack dump of rank {}: install py-spy, or run PyTorch with the NCCL flight recorder", s.rank);
    }
}

/// Asks PyTorch for a flight recorder dump through its pipe. Non-blocking: a pipe nobody reads
/// (the process is not using NCCL) is left alone.
fn poke_pipe(pipe: &Path) -> bool {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let opened = std::fs::OpenOptions::new().write(true).custom_flags(libc::O_NONBLOCK).open(pipe);
    match opened.and_then(|mut f| f.write_all(b"1\n")) {
        Ok(()) => true,
        Err(e) => {
            tracing::debug!("flight recorder pipe {}: {e}", pipe.display());
            false
        }
    }
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(name)).find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_come_from_after_the_command_name() {
        let stat = "1234 (python3 (x) y) S 1 1234 1234 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 9 0 100 0 0";
        assert_eq!(parse_cpu_ticks(stat), Some(300));
        assert_eq!(parse_cpu_ticks("garbage"), None);
        assert!(cpu_time_ns(std::process::id()).is_some(), "this process has a /proc entry");
        assert_eq!(parse_io("rchar: 100\nwchar: 23\nsyscr: 5\n"), Some(123));
        assert_eq!(parse_io("syscr: 5\n"), None);
    }
}
