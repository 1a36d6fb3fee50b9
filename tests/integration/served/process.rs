//! [`Served`]: the `coronerd` binary as a child process. It binds port 0 (unless told an
//! address) and writes what it bound to `--ready-file`, which the test reads: no port is ever
//! picked by the test and released for the server to take.
//!
//! [`Served::restart`] starts a new process on the address the first one bound. That is safe
//! where a port picked beforehand was not: the port was the server's own until its process
//! died, nothing else in this test process listens on it, and the kernel hands ports of bind(0)
//! out at random from its ephemeral range, so another test's server lands on it rarely. Then
//! the bind fails loudly ("bind the gRPC address ... in use"), which `restart` retries for a
//! bounded time; it never talks to a stranger the way a test that guessed a port could.

use super::Endpoints;
use coroner_tests::binary;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a starting coronerd may take to write its ready file.
const START_LIMIT: Duration = Duration::from_secs(60);

/// A coronerd process, killed when dropped.
pub struct Served {
    child: Child,
    endpoints: Endpoints,
    bound: coronerd::Bound,
    extra: Vec<String>,
    data_dir: PathBuf,
    log: PathBuf,
    /// Holds the ready file (and the data and log, unless they were given).
    root: tempfile::TempDir,
}

impl Served {
    pub fn start() -> Served {
        Served::start_with(&[])
    }

    /// Starts coronerd with extra flags.
    pub fn start_with(extra: &[&str]) -> Served {
        let root = tempfile::tempdir().expect("tempdir");
        let (data_dir, log) = (root.path().join("data"), root.path().join("coronerd.log"));
        Served::start_as(root, data_dir, log, extra)
    }

    /// Starts coronerd with its data in `data_dir` (several instances may share one) and its
    /// log (stderr) in `log`, with extra flags.
    pub fn start_in(data_dir: &Path, log: &Path, extra: &[&str]) -> Served {
        Served::start_as(tempfile::tempdir().expect("tempdir"), data_dir.to_path_buf(), log.to_path_buf(), extra)
    }

    fn start_as(root: tempfile::TempDir, data_dir: PathBuf, log: PathBuf, extra: &[&str]) -> Served {
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let any_port: std::net::SocketAddr = "127.0.0.1:0".parse().expect("literal address");
        let (child, bound) = spawn(root.path(), &data_dir, &log, [any_port, any_port], &extra).unwrap_or_else(|e| panic!("{e:#}"));
        Served { child, endpoints: Endpoints::new(bound), bound, extra, data_dir, log, root }
    }

    /// Kills the process (SIGKILL) if it still runs and starts a new one on the same addresses
    /// and data dir, retrying while the old port is not free yet (see the module's header for
    /// why reusing it is safe).
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + START_LIMIT;
        loop {
            match spawn(self.root.path(), &self.data_dir, &self.log, [self.bound.grpc, self.bound.http], &self.extra) {
                Ok((child, bound)) => {
                    assert_eq!(bound, self.bound, "the restarted coronerd bound other addresses");
                    self.child = child;
                    return;
                }
                Err(e) if Instant::now() < deadline => eprintln!("restart coronerd on {:?}: {e:#}; retrying", self.bound),
                Err(e) => panic!("restart coronerd on {:?}: {e:#}", self.bound),
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Kills the process (SIGKILL) and reaps it; the data dir stays.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM and waits up to `within` for the process to exit; whether it did.
    pub fn terminate(&self, within: Duration) -> bool {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // Gone, or a zombie waiting for this test to reap it.
            if state.is_empty() || state.split_whitespace().nth(2) == Some("Z") {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// The server's process id (for its threads and memory in /proc).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl std::ops::Deref for Served {
    type Target = Endpoints;
    fn deref(&self) -> &Endpoints {
        &self.endpoints
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts coronerd on `addrs` (gRPC, HTTP) and waits for its ready file (in `root`); the
/// process and what it bound, or why it did not start (the end of its `log`).
fn spawn(root: &Path, data_dir: &Path, log: &Path, addrs: [std::net::SocketAddr; 2], extra: &[String]) -> anyhow::Result<(Child, coronerd::Bound)> {
    let ready = root.join("ready.json");
    let _ = std::fs::remove_file(&ready);
    let stderr = std::fs::OpenOptions::new().create(true).append(true).open(log)?;
    let mut command = Command::new(binary("coronerd"));
    // Its configuration is the flags here, not whatever `CORONER_*` this test process inherited
    // (a developer's token would turn every test's server into a guarded one); logging aside.
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("CORONER_") && key != "CORONER_LOG" {
            command.env_remove(key);
        }
    }
    let mut child = command
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--grpc-addr", &addrs[0].to_string(), "--http-addr", &addrs[1].to_string()])
        .arg("--ready-file")
        .arg(&ready)
        .args(extra)
        .stderr(stderr)
        .stdout(Stdio::null())
        .spawn()?;
    let deadline = Instant::now() + START_LIMIT;
    loop {
        if let Some(bound) = coronerd::Bound::read_ready_file(&ready)? {
            return Ok((child, bound));
        }
        if let Some(status) = child.try_wait()? {
            anyhow::bail!("coronerd exited ({status}) before it was ready: {}", tail(log));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            anyhow::bail!("coronerd was not ready within {START_LIMIT:?}: {}", tail(log));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The last lines of a log, for a failure message.
fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(5)..].join("\n")
}
