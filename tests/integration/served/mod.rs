//! A real coronerd for the integration tests, two ways, both on ports the server bound itself
//! (port 0, never a port picked beforehand and released):
//! - [`TestServer`] (`in_process.rs`): `coronerd::start` in this process, its own runtime and data
//!   dir, configured with a `coronerd::Config` value. For every test where the server binary is
//!   not the point: queries, the web, OTLP, metrics, snapshots, incidents, the red team's bounds.
//! - [`Served`] (`process.rs`): the `coronerd` binary, which reports its addresses through
//!   `--ready-file`. For tests of the binary itself (flags, signals, being killed and restarted,
//!   its threads and memory) and real agents around real commands end to end (the ring job,
//!   Slurm). Real agents whose lines are what a test looks at (live hang suspicion, claims, odd
//!   lines) ship to a `TestServer`.
//!
//! Both dereference to [`Endpoints`]: the CLI, plain HTTP and JSON against that server.

mod in_process;
mod process;

pub use in_process::TestServer;
pub use process::Served;

use coroner_tests::{binary, data_dir};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// Where a running coronerd answers, and the clients the tests use on it.
#[derive(Debug, Clone)]
pub struct Endpoints {
    pub grpc_url: String,
    pub http_port: u16,
}

impl Endpoints {
    /// The server's bound addresses, reached over loopback (also when it bound 0.0.0.0).
    pub fn new(bound: coronerd::Bound) -> Endpoints {
        Endpoints { grpc_url: format!("http://127.0.0.1:{}", bound.grpc.port()), http_port: bound.http.port() }
    }

    /// The `coroner` CLI against this server (no token or CA from the environment).
    pub fn coroner(&self, args: &[&str]) -> Output {
        Command::new(binary("coroner"))
            .env_remove("CORONER_TOKEN")
            .env_remove("CORONER_TLS_CA")
            .arg("--server")
            .arg(&self.grpc_url)
            .args(args)
            .output()
            .expect("run coroner")
    }

    /// Imports a corpus bundle as `job` and waits until its report is no longer `running`.
    pub fn import(&self, bundle: &str, job: &str) -> serde_json::Value {
        let path = data_dir().join("corpus").join(bundle);
        let out = self.coroner(&["import", path.to_str().expect("utf-8 path"), "--job", job]);
        assert!(out.status.success(), "import {bundle}: {}", String::from_utf8_lossy(&out.stderr));
        self.settled_report(job, Duration::from_secs(10))
    }

    /// The job's report (`coroner report --json`).
    pub fn report(&self, job: &str) -> serde_json::Value {
        let out = self.coroner(&["report", job, "--json"]);
        coroner_tests::assert_answered(&out);
        serde_json::from_slice(&out.stdout).expect("report JSON")
    }

    /// The job's report once its verdict is no longer `running`, or the last one after `within`.
    pub fn settled_report(&self, job: &str, within: Duration) -> serde_json::Value {
        let deadline = Instant::now() + within;
        loop {
            let r = self.report(job);
            if r["verdict"] != "running" || Instant::now() > deadline {
                return r;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Polls the job's report until `check` holds on it (at most 20 s; `what` names the wait in
    /// the failure). Exit status 2 is "no answer yet" (the job is not known yet); any other must
    /// be the code its verdict owes.
    pub fn report_until(&self, job: &str, what: &str, check: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let out = self.coroner(&["report", job, "--json"]);
            if out.status.code() != Some(2) {
                coroner_tests::assert_answered(&out);
                let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("report JSON");
                if check(&r) {
                    return r;
                }
                assert!(Instant::now() < deadline, "{what}: {r:#}");
            }
            assert!(Instant::now() < deadline, "{what}: {}", String::from_utf8_lossy(&out.stderr));
            std::thread::sleep(Duration::from_millis(150));
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

/// A multi-thread tokio runtime for gRPC clients in a test.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime")
}
