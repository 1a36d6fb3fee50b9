//! Snapshots through the real server: a bundle imported into coronerd gets the same snapshot
//! highlights and flight recorder progress as `coroner analyze` finds offline, because the server
//! reads the stored bytes with the same readers.

use coroner_tests::{binary, data_dir};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn coroner(url: &str, args: &[&str]) -> std::process::Output {
    Command::new(binary("coroner")).arg("--server").arg(url).args(args).output().expect("run coroner")
}

#[test]
fn imported_snapshots_get_the_offline_highlights_and_progress() {
    let data = tempfile::tempdir().expect("tempdir");
    let (grpc, http) = (free_port(), free_port());
    let _server = Server(
        Command::new(binary("coronerd"))
            .arg("--data-dir")
            .arg(data.path())
            .args(["--grpc-addr", &format!("127.0.0.1:{grpc}"), "--http-addr", &format!("127.0.0.1:{http}")])
            .stderr(Stdio::null())
            .spawn()
            .expect("start coronerd"),
    );
    let url = format!("http://127.0.0.1:{grpc}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while coroner(&url, &["jobs"]).status.code() != Some(0) {
        assert!(Instant::now() < deadline, "coronerd did not come up");
        std::thread::sleep(Duration::from_millis(100));
    }
    let bundle = data_dir().join("corpus/nccl2_oom_r1");
    let out = coroner(&url, &["import", bundle.to_str().expect("utf-8 path"), "--job", "snap-import"]);
    assert!(out.status.success(), "import: {}", String::from_utf8_lossy(&out.stderr));
    let offline_out = Command::new(binary("coroner")).args(["analyze", "--json"]).arg(&bundle).output().expect("analyze");
    let offline: serde_json::Value = serde_json::from_slice(&offline_out.stdout).expect("json");
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let out = coroner(&url, &["report", "snap-import", "--json"]);
        let online: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let settled = online["verdict"] != "running" && online["snapshots"].as_array().is_some_and(|s| s.len() == 4);
        if settled || Instant::now() > deadline {
            assert_eq!(online["snapshots"], offline["snapshots"], "snapshot highlights differ");
            assert_eq!(online["collectives"], offline["collectives"], "flight recorder progress differs");
            let fr = &online["snapshots"][0];
            assert_eq!(fr["kind"], "flight_recorder");
            assert!(fr["highlights"][0].as_str().is_some_and(|h| h.contains("pending ALLREDUCE seq 11")), "{fr:#}");
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
