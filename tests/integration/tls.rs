//! TLS: coronerd (in process) with a self-signed certificate (made here) serves gRPC and HTTP
//! over TLS; the CLI, an agent and an HTTPS client that trust it (`--tls-ca`) get through; a
//! client that does not, or that speaks plain text to a TLS port, is refused.

use crate::served::TestServer;
use coroner_tests::{binary, eventually, printed};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

struct Tls {
    _server: TestServer,
    port: u16,
    http_port: u16,
    ca: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

/// GET over TLS trusting `ca`: the response's text ("" when no connection or handshake).
fn https_get(port: u16, ca: &std::path::Path, path: &str) -> String {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(rustls::pki_types::CertificateDer::from_pem_file(ca).expect("read the CA")).expect("a CA certificate");
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("server name");
    let conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name).expect("client connection");
    let Ok(tcp) = TcpStream::connect(("127.0.0.1", port)) else { return String::new() };
    let _ = tcp.set_read_timeout(Some(Duration::from_secs(10)));
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    if write!(tls, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").is_err() {
        return String::new();
    }
    let mut raw = Vec::new();
    let _ = tls.read_to_end(&mut raw);
    String::from_utf8_lossy(&raw).into_owned()
}

fn plain_get(port: u16, path: &str) -> String {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else { return String::new() };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = write!(s, "GET {path} HTTP/1.0\r\n\r\n");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn start() -> Tls {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string(), "localhost".to_string()]).expect("a certificate");
    let (cert, key_file) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert, key.cert.pem()).expect("write cert");
    std::fs::write(&key_file, key.key_pair.serialize_pem()).expect("write key");
    let server = TestServer::start_with(|c| {
        c.tls_cert = Some(cert.clone());
        c.tls_key = Some(key_file.clone());
    });
    let (grpc, http) = (server.bound().grpc.port(), server.bound().http.port());
    let health = https_get(http, &cert, "/healthz");
    assert!(health.starts_with("HTTP/1.0 200"), "/healthz over HTTPS: {health:?}");
    Tls { _server: server, port: grpc, http_port: http, ca: cert, _dir: dir }
}

fn coroner(server: &str, ca: Option<&std::path::Path>, args: &[&str]) -> Output {
    let mut c = Command::new(binary("coroner"));
    c.env_remove("CORONER_TLS_CA").env_remove("CORONER_TOKEN").args(["--server", server]);
    if let Some(ca) = ca {
        c.arg("--tls-ca").arg(ca);
    }
    c.args(args).output().expect("run coroner")
}

#[test]
fn grpc_and_http_over_tls_with_a_trusted_self_signed_certificate() {
    let t = start();
    let https = format!("https://127.0.0.1:{}", t.port);
    let ok = coroner(&https, Some(&t.ca), &["jobs"]);
    assert!(ok.status.success(), "jobs over TLS: {}", String::from_utf8_lossy(&ok.stderr));
    assert!(!coroner(&https, None, &["jobs"]).status.success(), "an untrusted certificate was accepted");
    assert!(!coroner(&format!("http://127.0.0.1:{}", t.port), None, &["jobs"]).status.success(), "plain HTTP/2 reached the TLS port");

    let page = https_get(t.http_port, &t.ca, "/api/jobs");
    assert!(page.starts_with("HTTP/1.0 200") && page.contains("\r\n\r\n["), "HTTPS /api/jobs: {page}");
    assert!(!plain_get(t.http_port, "/healthz").contains(" 200 "), "plain HTTP reached the HTTPS port");

    let spool = tempfile::tempdir().expect("tempdir");
    let status = Command::new(binary("coroner-agent"))
        .args(["run", "--job", "tls-agent", "--rank", "0", "--world-size", "1", "--server", &https])
        .arg("--tls-ca")
        .arg(&t.ca)
        .args(["--flush-timeout", "5", "--quiet", "--spool-dir"])
        .arg(spool.path())
        .args(["--", "sh", "-c", "echo tls-line-marker"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run coroner-agent");
    assert!(status.success());
    eventually(Duration::from_secs(20), "the agent's line never arrived over TLS", || {
        printed(&coroner(&https, Some(&t.ca), &["search", "tls-agent", "tls-line-marker"]), "tls-line-marker")
    });
}
