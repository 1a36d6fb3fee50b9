//! The server under load: the real `coronerd` binary as a child process with a data dir that
//! outlives it, so it can be killed with SIGKILL and started again in place. The first start
//! binds port 0 and reports what it bound (`--ready-file`); every later start binds those same
//! addresses, which the agents were given: the port was this server's own, and a restart waits
//! (up to 60 s) while the kernel has not released it yet. No port is picked here and released.
//! A sampler thread reads the running process's resident memory every 50 ms.

use anyhow::{bail, Context, Result};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct ServerProcess {
    bin: PathBuf,
    data_dir: PathBuf,
    database_url: Option<String>,
    extra_args: Vec<String>,
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    child: Option<Child>,
    starts: u32,
    memory: Arc<MemorySampler>,
}

/// Resident memory of whichever server process runs now: all of it (`VmRSS`, which counts the
/// index files' pages that searches and merges mapped) and the anonymous part (`RssAnon`: heap,
/// buffers, queues - what the ingest budget bounds).
#[derive(Default)]
pub struct MemorySampler {
    pid: AtomicU32,
    peak_kb: AtomicU64,
    last_kb: AtomicU64,
    peak_anon_kb: AtomicU64,
    stop: AtomicBool,
}

impl MemorySampler {
    fn run(self: Arc<Self>) {
        while !self.stop.load(Relaxed) {
            let pid = self.pid.load(Relaxed);
            if pid != 0 {
                if let Some((rss, anon)) = rss_kb(pid) {
                    self.last_kb.store(rss, Relaxed);
                    self.peak_kb.fetch_max(rss, Relaxed);
                    self.peak_anon_kb.fetch_max(anon, Relaxed);
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn peak_mb(&self) -> f64 {
        self.peak_kb.load(Relaxed) as f64 / 1024.0
    }

    pub fn last_mb(&self) -> f64 {
        self.last_kb.load(Relaxed) as f64 / 1024.0
    }

    pub fn peak_anon_mb(&self) -> f64 {
        self.peak_anon_kb.load(Relaxed) as f64 / 1024.0
    }
}

/// `VmRSS` and `RssAnon` of a process, in KiB.
fn rss_kb(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        line.split_whitespace().nth(1)?.parse().ok()
    };
    Some((field("VmRSS:")?, field("RssAnon:").unwrap_or(0)))
}

/// `coronerd` beside the running executable, or `$CORONERD`.
pub fn coronerd_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CORONERD") {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    exe.ancestors().skip(1).take(2).map(|d| d.join("coronerd")).find(|p| p.is_file())
}

impl ServerProcess {
    pub fn new(bin: PathBuf, data_dir: &Path, database_url: Option<String>, extra_args: Vec<String>) -> Result<ServerProcess> {
        let memory = Arc::new(MemorySampler::default());
        let m = memory.clone();
        std::thread::Builder::new().name("rss-sampler".into()).spawn(move || m.run())?;
        Ok(ServerProcess {
            bin,
            data_dir: data_dir.to_path_buf(),
            database_url,
            extra_args,
            // Any free port, until the first start says which it bound.
            grpc: SocketAddr::from(([127, 0, 0, 1], 0)),
            http: SocketAddr::from(([127, 0, 0, 1], 0)),
            child: None,
            starts: 0,
            memory,
        })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.grpc)
    }

    /// The sampler itself, for a task that outlives this borrow (the progress lines).
    pub fn memory_handle(&self) -> Arc<MemorySampler> {
        self.memory.clone()
    }

    pub fn memory(&self) -> &MemorySampler {
        &self.memory
    }

    /// Starts the process and waits until its gRPC port answers (at most 60 s).
    pub async fn start(&mut self) -> Result<Duration> {
        let started = Instant::now();
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.data_dir.join("coronerd.log")).context("open the server's log file")?;
        let ready = self.data_dir.join("coronerd.ready");
        let _ = std::fs::remove_file(&ready);
        let mut cmd = Command::new(&self.bin);
        // The read-back after the run searches every rank: as many at once as the check asks
        // (the default, 2 per job, is for people's browsers). A --server-arg flag overrides it.
        cmd.env("CORONER_MAX_SEARCHES_PER_JOB", super::verify::CONCURRENT_READS.to_string());
        cmd.arg("--data-dir")
            .arg(self.data_dir.join("data"))
            .arg("--grpc-addr")
            .arg(self.grpc.to_string())
            .arg("--http-addr")
            .arg(self.http.to_string())
            .arg("--ready-file")
            .arg(&ready)
            .args(&self.extra_args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        if let Some(url) = &self.database_url {
            cmd.arg("--database-url").arg(url);
        }
        // A port the killed process held may take a moment to be free again.
        let deadline = started + Duration::from_secs(60);
        loop {
            let mut child = cmd.spawn().with_context(|| format!("start {}", self.bin.display()))?;
            self.memory.pid.store(child.id(), Relaxed);
            loop {
                if let Some(status) = child.try_wait()? {
                    if Instant::now() > deadline {
                        bail!("coronerd exited ({status}) at start; see {}", self.data_dir.join("coronerd.log").display());
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    break;
                }
                // The first start learns its addresses here; later ones bind the same.
                if let Some(bound) = coronerd::Bound::read_ready_file(&ready)? {
                    (self.grpc, self.http) = (bound.grpc, bound.http);
                    if self.answers().await {
                        self.child = Some(child);
                        self.starts += 1;
                        return Ok(started.elapsed());
                    }
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    bail!("coronerd did not answer within 60 s; see {}", self.data_dir.join("coronerd.log").display());
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }

    async fn answers(&self) -> bool {
        let Ok(endpoint) = coroner_proto::auth::ClientAuth::default().endpoint(&self.url()) else { return false };
        let Ok(Ok(channel)) = tokio::time::timeout(Duration::from_secs(1), endpoint.connect()).await else { return false };
        let mut q = coroner_proto::v1::query_client::QueryClient::new(channel);
        matches!(tokio::time::timeout(Duration::from_secs(2), q.list_jobs(coroner_proto::v1::ListJobsRequest::default())).await, Ok(Ok(_)))
    }

    /// One value from the server's `/metrics` (a metric without labels).
    pub async fn metric(&self, name: &str) -> Result<f64> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let scrape = async {
            let mut conn = tokio::net::TcpStream::connect(self.http).await.context("connect to the metrics port")?;
            conn.write_all(format!("GET /metrics HTTP/1.0\r\nHost: {}\r\n\r\n", self.http).as_bytes()).await?;
            let mut text = String::new();
            conn.read_to_string(&mut text).await.context("read /metrics")?;
            anyhow::Ok(text)
        };
        let text = tokio::time::timeout(Duration::from_secs(10), scrape).await.context("scrape /metrics: timed out")??;
        let value = text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')).with_context(|| format!("/metrics has no {name}"))?;
        value.trim().parse().with_context(|| format!("{name} is not a number: {value:?}"))
    }

    /// SIGKILL: no shutdown, no flush; what was not committed is gone from the server.
    pub fn kill9(&mut self) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill().context("SIGKILL coronerd")?;
            child.wait()?;
            self.memory.pid.store(0, Relaxed);
        }
        Ok(())
    }

    /// How many times it was started.
    pub fn starts(&self) -> u32 {
        self.starts
    }

    /// Stops it with SIGTERM (a clean end) and waits at most 20 s.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        self.memory.pid.store(0, Relaxed);
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.memory.stop.store(true, Relaxed);
    }
}
