//! Tokens: coronerd started with a write and a read token refuses calls without the right one,
//! on gRPC (UNAUTHENTICATED with the reason) and HTTP (401), lets the write token write and both
//! read, and refuses to bind beyond loopback without tokens.

use crate::postgres::TestDatabase;
use crate::served::{runtime, TestServer};
use coroner_tests::{binary, data_dir, eventually, printed};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const WRITE: &str = "w-0123456789abcdef";
const READ: &str = "r-fedcba9876543210";

/// An in-process coronerd with the write and read tokens, as `--write-token` and `--read-token` give them.
struct Guarded {
    server: TestServer,
}

impl Guarded {
    fn start() -> Guarded {
        Guarded::start_with(|_| {})
    }

    /// With the tokens, after `configure` changed the test defaults.
    fn start_with(configure: impl FnOnce(&mut coronerd::Config)) -> Guarded {
        let server = TestServer::start_with(|c| {
            c.write_token = Some(WRITE.into());
            c.read_token = Some(READ.into());
            configure(c);
        });
        Guarded { server }
    }

    fn coroner(&self, token: Option<&str>, args: &[&str]) -> Output {
        let mut c = Command::new(binary("coroner"));
        c.env_remove("CORONER_TOKEN").arg("--server").arg(&self.server.grpc_url);
        if let Some(t) = token {
            c.args(["--token", t]);
        }
        c.args(args).output().expect("run coroner")
    }

    /// A plain HTTP/1.0 GET with extra header lines: (status, head, body).
    fn get(&self, path: &str, headers: &[&str]) -> (u16, String, String) {
        let extra: String = headers.iter().map(|h| format!("{h}\r\n")).collect();
        crate::red_team::http(self.server.http_port, &format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n{extra}\r\n"))
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn grpc_calls_need_the_right_token() {
    let g = Guarded::start();

    // The status code itself, from a plain client.
    let rt = runtime();
    let code = rt.block_on(async {
        let mut q = coroner_proto::v1::query_client::QueryClient::connect(g.server.grpc_url.clone()).await.expect("connect");
        q.list_jobs(coroner_proto::v1::ListJobsRequest::default()).await.expect_err("no token").code()
    });
    assert_eq!(code, tonic::Code::Unauthenticated);

    let out = g.coroner(None, &["jobs"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("needs the read token"), "{}", stderr(&out));
    let out = g.coroner(Some("not-the-token"), &["jobs"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("not valid"), "{}", stderr(&out));
    for t in [READ, WRITE] {
        let out = g.coroner(Some(t), &["jobs"]);
        assert!(out.status.success(), "jobs with a token: {}", stderr(&out));
    }

    let bundle = data_dir().join("corpus").join("nccl2_hang_r1");
    let bundle = bundle.to_str().expect("utf-8 path");
    let out = g.coroner(Some(READ), &["import", bundle, "--job", "auth-job"]);
    assert!(!out.status.success(), "the read token imported");
    assert!(stderr(&out).contains("read token cannot write"), "{}", stderr(&out));
    let out = g.coroner(None, &["import", bundle, "--job", "auth-job"]);
    assert!(!out.status.success(), "an import without a token went through");
    assert!(stderr(&out).contains("needs the write token"), "{}", stderr(&out));

    let out = g.coroner(Some(WRITE), &["import", bundle, "--job", "auth-job"]);
    assert!(out.status.success(), "import with the write token: {}", stderr(&out));
    let out = g.coroner(Some(READ), &["jobs", "--json"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("auth-job"), "the imported job is not listed");
}

#[test]
fn an_agent_with_the_write_token_ships() {
    let g = Guarded::start();
    let spool = tempfile::tempdir().expect("tempdir");
    let status = Command::new(binary("coroner-agent"))
        .args(["run", "--job", "auth-agent", "--rank", "0", "--world-size", "1"])
        .args(["--server", &g.server.grpc_url, "--flush-timeout", "5", "--quiet", "--token", WRITE])
        .arg("--spool-dir")
        .arg(spool.path())
        .args(["--", "sh", "-c", "echo token-line-marker"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run coroner-agent");
    assert!(status.success());
    eventually(Duration::from_secs(20), "the agent's line never arrived", || {
        printed(&g.coroner(Some(READ), &["search", "auth-agent", "token-line-marker"]), "token-line-marker")
    });
}

#[test]
fn the_child_never_sees_the_agents_token() {
    let g = Guarded::start();
    let spool = tempfile::tempdir().expect("tempdir");
    // A training script that prints its whole environment into the job's logs.
    let out = Command::new(binary("coroner-agent"))
        .args(["run", "--job", "auth-env", "--rank", "0", "--world-size", "1"])
        .args(["--server", &g.server.grpc_url, "--linger", "5", "--quiet"])
        .arg("--spool-dir")
        .arg(spool.path())
        .args(["--", "sh", "-c", "env; echo env-printed"])
        .env("CORONER_TOKEN", WRITE)
        .output()
        .expect("run coroner-agent");
    assert!(out.status.success());
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(printed.contains("env-printed") && printed.contains("CORONER_JOB=auth-env"), "{printed}");
    assert!(!printed.contains(WRITE), "the child saw the write token:\n{printed}");
    eventually(Duration::from_secs(20), "the agent's lines never arrived", || {
        coroner_tests::printed(&g.coroner(Some(READ), &["search", "auth-env", "env-printed"]), "env-printed")
    });
    let found = g.coroner(Some(READ), &["search", "auth-env", &format!("\"{WRITE}\"")]);
    assert!(found.status.success(), "{}", stderr(&found));
    assert!(!String::from_utf8_lossy(&found.stdout).contains(WRITE), "a read user finds the write token in the logs");
}

#[test]
fn http_needs_the_read_token() {
    let g = Guarded::start();
    let (status, head, body) = g.get("/api/jobs", &[]);
    assert_eq!(status, 401, "{head}\n{body}");
    assert!(body.contains("read token"), "{body}");
    assert_eq!(g.get("/api/jobs", &["Authorization: Bearer wrong"]).0, 401);
    assert_eq!(g.get("/metrics", &[]).0, 401);
    assert_eq!(g.get("/healthz", &[]).0, 200);
    assert_eq!(g.get("/assets/style.css", &[]).0, 200);
    assert_eq!(g.get("/api/jobs", &[&format!("Authorization: Bearer {READ}")]).0, 200);
    assert_eq!(g.get("/api/jobs", &[&format!("Authorization: Bearer {WRITE}")]).0, 200);
    // A browser: the token in the address once, then the cookie.
    let (status, head, _) = g.get(&format!("/?token={READ}"), &[]);
    assert_eq!(status, 200);
    assert!(head.to_ascii_lowercase().contains(&format!("set-cookie: coroner_token={READ}").to_ascii_lowercase()), "{head}");
    assert_eq!(g.get("/api/jobs", &[&format!("Cookie: coroner_token={READ}")]).0, 200);
}

#[test]
fn refuses_to_bind_beyond_loopback_without_tokens() {
    let beyond: std::net::SocketAddr = "0.0.0.0:0".parse().expect("literal address");
    let refused = TestServer::try_start_with(|c| {
        c.grpc_addr = beyond;
        c.read_token = Some(READ.into());
    });
    let e = format!("{:#}", refused.err().expect("coronerd served 0.0.0.0 without a write token"));
    assert!(e.contains("refusing to serve on 0.0.0.0") && e.contains("--write-token") && e.contains("127.0.0.1"), "{e}");

    // With both tokens, or told to, it serves.
    drop(Guarded::start_with(|c| c.grpc_addr = beyond));
    let open = TestServer::start_with(|c| {
        c.grpc_addr = beyond;
        c.http_addr = beyond;
        c.insecure_no_auth = true;
    });
    assert!(open.coroner(&["jobs"]).status.success());
}

/// The same flag refused by the binary: its exit status and its one line on stderr.
#[test]
fn the_binary_refuses_beyond_loopback_without_tokens() {
    let data = tempfile::tempdir().expect("tempdir");
    let out = Command::new(binary("coronerd"))
        .arg("--data-dir")
        .arg(data.path())
        .args(["--grpc-addr", "0.0.0.0:0", "--http-addr", "127.0.0.1:0", "--read-token", READ])
        .env_remove("CORONER_WRITE_TOKEN")
        .env_remove("CORONER_READ_TOKEN")
        .output()
        .expect("run coronerd");
    assert!(!out.status.success(), "coronerd served 0.0.0.0 without a write token");
    let e = stderr(&out);
    assert!(e.contains("refusing to serve on 0.0.0.0") && e.contains("--write-token"), "{e}");
}

/// Two instances on one PostgreSQL with the same tokens: a query asked of the one that does not
/// own the job is proxied to the owner with the caller's token.
#[test]
fn a_proxied_query_carries_the_callers_token() {
    let rt = runtime();
    let Some(db) = TestDatabase::create(&rt, "auth") else { return };
    let db_url = db.url.clone();
    let shared = tempfile::tempdir().expect("tempdir");
    // Two servers in this one process, each its own configuration; the CLI is the client.
    let instance = |id: &'static str| {
        Guarded::start_with(|c| {
            c.data_dir = shared.path().to_path_buf();
            c.database_url = Some(db_url.clone());
            c.instance_id = Some(id.into());
        })
    };
    let a = instance("auth-a");
    let b = instance("auth-b");
    let bundle = data_dir().join("corpus").join("nccl2_hang_r1");
    let out = a.coroner(Some(WRITE), &["import", bundle.to_str().expect("utf-8 path"), "--job", "auth-proxied"]);
    assert!(out.status.success(), "import at a: {}", stderr(&out));
    let out = b.coroner(Some(READ), &["report", "auth-proxied", "--json"]);
    coroner_tests::assert_answered(&out);
    assert!(String::from_utf8_lossy(&out.stdout).contains("auth-proxied"));
    let out = b.coroner(None, &["report", "auth-proxied"]);
    assert!(out.status.code() == Some(2) && stderr(&out).contains("needs the read token"), "{}", stderr(&out));
}

/// What deploy/kubernetes asks of a coronerd that enforces tokens: every HTTP probe path in the
/// manifests (startup, liveness, readiness) answers 200 without a token, the readiness probe's
/// gRPC health check of the whole server ("") says SERVING without one, and the ServiceMonitor's
/// /metrics answers with the read token it is given.
#[test]
fn the_kubernetes_probes_answer_without_a_token() {
    let manifests: String = ["deploy/kubernetes/base/statefulset.yaml", "deploy/kubernetes/components/tls/statefulset-tls.yaml"]
        .iter()
        .map(|p| std::fs::read_to_string(data_dir().join("../..").join(p)).unwrap_or_else(|e| panic!("read {p}: {e}")))
        .collect();
    let paths: Vec<&str> = manifests.lines().filter_map(|l| l.trim().strip_prefix("path: ")).collect();
    assert!(paths.len() >= 3, "the manifests' probes name their paths: {paths:?}");
    assert!(manifests.contains("grpc:\n              port: 7070"), "the readiness probe asks gRPC health on the agents' port");

    let g = Guarded::start();
    for path in paths {
        assert_eq!(g.get(path, &[]).0, 200, "the probe path {path} without a token");
    }
    let status = runtime().block_on(async {
        use tonic_health::pb::{health_client::HealthClient, HealthCheckRequest};
        let channel = tonic::transport::Channel::from_shared(g.server.grpc_url.clone()).expect("url").connect().await.expect("connect");
        let mut health = HealthClient::new(channel);
        health.check(HealthCheckRequest { service: String::new() }).await.expect("a health check needs no token").into_inner().status
    });
    assert_eq!(status, tonic_health::pb::health_check_response::ServingStatus::Serving as i32);

    let monitor =
        std::fs::read_to_string(data_dir().join("../../deploy/kubernetes/components/servicemonitor/servicemonitor.yaml")).expect("servicemonitor.yaml");
    assert!(monitor.contains("path: /metrics") && monitor.contains("key: read"), "the ServiceMonitor scrapes /metrics with the read token");
    assert_eq!(g.get("/metrics", &[&format!("Authorization: Bearer {READ}")]).0, 200);
}
