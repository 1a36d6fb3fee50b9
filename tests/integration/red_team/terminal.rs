//! Finding: "Terminal injection." Escape sequences in log lines reached `coroner report`,
//! `search`, `watch`, `timeline` and `snapshot list` raw: title changes, screen clears, OSC 8
//! links, bidi overrides. Now every output path shows them as `\x1b`, unless `--raw`; and the
//! server refuses host names and snapshot kinds with control characters at the door.

use super::{ingest, line, session, ship};
use crate::served::{runtime, TestServer};
use coroner_proto::v1;
use coroner_tests::binary;
use std::process::{Command, Stdio};
use std::time::Duration;

const TITLE: &str = "\x1b]0;pwned\x07";
const CLEAR: &str = "\x1b[2J\x1b[H";
const LINK: &str = "\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\";
const BIDI: &str = "\u{202e}gpj.exe";
const C1: &str = "\u{9b}31m";

fn raw_controls(bytes: &[u8]) -> bool {
    let text = String::from_utf8_lossy(bytes);
    bytes.contains(&0x1b) || bytes.contains(&0x07) || text.contains('\u{202e}') || text.contains('\u{9b}')
}

#[test]
fn no_cli_output_holds_a_raw_escape() {
    let server = TestServer::start();
    let evil = format!("RuntimeError: CUDA error: an illegal memory access {TITLE}{CLEAR}{LINK}{BIDI}{C1}");
    runtime().block_on(async {
        let mut client = ingest(&server.grpc_url).await;
        // The door: a host name or snapshot kind with control characters is refused.
        let bad_host = client
            .open_session(v1::OpenSessionRequest {
                job_id: "rt-term".into(),
                rank: Some(0),
                world_size: Some(2),
                host: format!("node{CLEAR}"),
                ..Default::default()
            })
            .await
            .expect_err("a host name with an escape sequence");
        assert_eq!(bad_host.code(), tonic::Code::InvalidArgument, "{bad_host:?}");
        let s0 = session(&mut client, "rt-term", 0, 2, "node-a", "a0").await;
        let lines = vec![
            line(0, b"step 1 loss 2.0"),
            line(1, b"Traceback (most recent call last):"),
            line(2, b"  File \"train.py\", line 10, in <module>"),
            line(3, evil.as_bytes()),
        ];
        ship(&mut client, &s0, lines, 10).await;
        let s1 = session(&mut client, "rt-term", 1, 2, "node-b", "a1").await;
        ship(&mut client, &s1, vec![line(0, format!("step 1 {LINK}").as_bytes())], 10).await;
        let status = client
            .snapshot_status(v1::SnapshotStatusRequest {
                session_id: s0.clone(),
                header: Some(v1::SnapshotHeader {
                    kind: format!("stack{TITLE}"),
                    name: "x/stack.txt".into(),
                    sha256: "ab".repeat(32),
                    size: 1,
                    ..Default::default()
                }),
            })
            .await
            .expect_err("a snapshot kind with an escape sequence");
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    });
    std::thread::sleep(Duration::from_millis(500));
    let deep = "(".repeat(50);
    let runs: Vec<Vec<&str>> = vec![
        vec!["report", "rt-term"],
        vec!["report", "rt-term", "--json"],
        vec!["search", "rt-term", "RuntimeError OR step"],
        vec!["search", "rt-term", "RuntimeError", "--json"],
        vec!["timeline", "rt-term"],
        vec!["timeline", "rt-term", "--json"],
        vec!["snapshot", "list", "rt-term"],
        vec!["jobs"],
        vec!["count", "rt-term", "step"],
        vec!["search", "rt-term", &deep],
    ];
    for args in &runs {
        let out = server.coroner(args);
        assert!(!raw_controls(&out.stdout), "coroner {args:?} printed a raw escape:\n{}", String::from_utf8_lossy(&out.stdout));
        assert!(!raw_controls(&out.stderr), "coroner {args:?} printed a raw escape on stderr:\n{}", String::from_utf8_lossy(&out.stderr));
    }
    let shown = server.coroner(&["search", "rt-term", "RuntimeError"]);
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(text.contains("\\x1b]0;pwned\\x07") && text.contains("\\u{202e}"), "the escapes are shown, not dropped: {text}");
    // --raw: the bytes exactly as logged.
    let raw = server.coroner(&["--raw", "search", "rt-term", "RuntimeError"]);
    assert!(raw.stdout.windows(TITLE.len()).any(|w| w == TITLE.as_bytes()), "--raw passes bytes through");
    // watch: the first update, then stop it.
    let mut watch = Command::new(binary("coroner"))
        .args(["--server", &server.grpc_url, "watch", "rt-term"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("coroner watch");
    std::thread::sleep(Duration::from_secs(2));
    let _ = watch.kill();
    let out = watch.wait_with_output().expect("watch output");
    assert!(!out.stdout.is_empty(), "watch printed nothing");
    assert!(!raw_controls(&out.stdout), "coroner watch printed a raw escape:\n{}", String::from_utf8_lossy(&out.stdout));
    // Offline analysis of the same log: the same guarantee.
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("rank0.log");
    std::fs::write(&log, format!("Traceback (most recent call last):\n{evil}\n")).expect("write");
    let out = Command::new(binary("coroner")).arg("analyze").arg(&log).output().expect("analyze");
    assert!(!raw_controls(&out.stdout), "coroner analyze printed a raw escape:\n{}", String::from_utf8_lossy(&out.stdout));
}
