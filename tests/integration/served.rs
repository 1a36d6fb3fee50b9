//! A real coronerd on free ports for the query, web, metrics and OTLP tests, with plain HTTP
//! and gRPC helpers.

use coroner_tests::{binary, data_dir};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

/// A coronerd process, killed when dropped.
pub struct Served {
    child: Child,
    pub grpc_url: String,
    pub http_port: u16,
    _data: tempfile::TempDir,
}

impl Served {
    pub fn start() -> Served {
        Served::start_with(&[])
    }

    /// Starts coronerd with extra flags.
    pub fn start_with(extra: &[&str]) -> Served {
        Served::start_on(free_port(), extra)
    }

    /// Starts coronerd with its gRPC port chosen beforehand (agents already pointed at it).
    pub fn start_on(grpc: u16, extra: &[&str]) -> Served {
        let data = tempfile::tempdir().expect("tempdir");
        let http = free_port();
        let child = Command::new(binary("coronerd"))
            .arg("--data-dir")
            .arg(data.path())
            .args(["--grpc-addr", &format!("127.0.0.1:{grpc}"), "--http-addr", &format!("127.0.0.1:{http}")])
            .args(extra)
            .stderr(Stdio::null())
            .spawn()
            .expect("start coronerd");
        let served = Served { child, grpc_url: format!("http://127.0.0.1:{grpc}"), http_port: http, _data: data };
        let deadline = Instant::now() + Duration::from_secs(30);
        while served.coroner(&["jobs"]).status.code() != Some(0) || served.get("/healthz").0 != 200 {
            assert!(Instant::now() < deadline, "coronerd did not come up");
            std::thread::sleep(Duration::from_millis(100));
        }
        served
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

    /// The server's data dir (its SQLite metastore is `coroner.db` there).
    pub fn data_path(&self) -> &std::path::Path {
        self._data.path()
    }

    pub fn coroner(&self, args: &[&str]) -> Output {
        Command::new(binary("coroner")).arg("--server").arg(&self.grpc_url).args(args).output().expect("run coroner")
    }

    /// Imports a corpus bundle as `job` and waits until its report is no longer `running`.
    pub fn import(&self, bundle: &str, job: &str) -> serde_json::Value {
        let path = data_dir().join("corpus").join(bundle);
        let out = self.coroner(&["import", path.to_str().expect("utf-8 path"), "--job", job]);
        assert!(out.status.success(), "import {bundle}: {}", String::from_utf8_lossy(&out.stderr));
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let out = self.coroner(&["report", job, "--json"]);
            coroner_tests::assert_answered(&out);
            let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("report JSON");
            if r["verdict"] != "running" || Instant::now() > deadline {
                return r;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A plain HTTP/1.0 GET: (status, body).
    pub fn get(&self, path: &str) -> (u16, String) {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.http_port)) else { return (0, String::new()) };
        let _ = s.set_read_timeout(Some(Duration::from_secs(20)));
        let _ = write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
        let mut raw = Vec::new();
        let _ = s.read_to_end(&mut raw);
        let text = String::from_utf8_lossy(&raw).into_owned();
        let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
        (status, body)
    }

    pub fn get_json(&self, path: &str) -> (u16, serde_json::Value) {
        let (status, body) = self.get(path);
        (status, serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: not JSON ({e}): {body}")))
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A current-thread tokio runtime for gRPC clients in a test.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime")
}
