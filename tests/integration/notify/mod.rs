//! Notifications from a real coronerd (in process) to receivers in the test (`receiver.rs`):
//! a failed job is one signed event, not sent again after a restart; a suspected hang and its end
//! arrive the same way; a receiver that fails twice gets the event on the third try; Slack and
//! Alertmanager get their own shapes; the delivery log and the metrics say what happened.

mod receiver;

use crate::otlp_metrics::resource;
use crate::served::{runtime, TestServer};
use hmac::{Hmac, Mac};
use opentelemetry_proto::tonic::collector::logs::v1::{logs_service_client::LogsServiceClient, ExportLogsServiceRequest};
use receiver::{Received, Receiver};
use sha2::Sha256;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

const SECRET: &str = "s3cret-for-tests";

/// A secret file readable by its owner only, as coronerd demands.
fn secret_file(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("webhook.secret");
    std::fs::write(&path, format!("{SECRET}\n")).expect("write the secret");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod 600");
    path
}

/// Checks the signature as a receiver would, with its own HMAC: over `<timestamp>.<body>`.
fn assert_signed(r: &Received) {
    let ts = r.headers.get("x-coroner-timestamp").expect("a timestamp header");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs() as i64;
    assert!((now - ts.parse::<i64>().expect("Unix seconds")).abs() < 300, "a fresh timestamp: {ts}");
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).expect("key");
    mac.update(format!("{ts}.").as_bytes());
    mac.update(&r.body);
    let want = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
    assert_eq!(r.headers.get("x-coroner-signature"), Some(&want), "the signature over the timestamp and body");
}

fn events(got: &[Received]) -> Vec<serde_json::Value> {
    got.iter().map(|r| r.json()["event"].clone()).collect()
}

/// Sends `job` a rank that runs out of GPU memory (OTLP, in process) and waits until its report is failed.
fn fail_job(served: &TestServer, job: &str) {
    let t0 = coroner_model::now_ns() as u64;
    let lines = ["step 1 loss 2.1", "Traceback (most recent call last):", "  File \"train.py\", line 10, in <module>", OOM];
    runtime().block_on(async {
        let mut logs = LogsServiceClient::connect(served.grpc_url.clone()).await.expect("connect");
        let resource_logs = vec![resource(job, 0, "node-a", t0, &["step 1 loss 2.1", "step 2 loss 2.0"]), resource(job, 1, "node-b", t0, &lines)];
        logs.export(ExportLogsServiceRequest { resource_logs }).await.expect("export");
    });
    report_until(served, job, |r| r["verdict"] == "failed");
}

const OOM: &str = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB";

/// Polls the job's report (HTTP, no CLI) until `check` holds on it, at most 30 s.
fn report_until(served: &TestServer, job: &str, check: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = served.get(&format!("/jobs/{job}/report.json"));
        if status == 200 {
            let r: serde_json::Value = serde_json::from_str(&body).expect("report JSON");
            if check(&r) {
                return r;
            }
        }
        assert!(Instant::now() < deadline, "{job}: {status} {body}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn metric_line(served: &TestServer, prefix: &str) -> Option<String> {
    let (_, text) = served.get("/metrics");
    text.lines().find(|l| l.starts_with(prefix)).map(str::to_string)
}

#[test]
fn a_failed_job_is_one_signed_event_and_not_sent_again_after_a_restart() {
    let hook = Receiver::start(&[]);
    let dir = tempfile::tempdir().expect("tempdir");
    let secret = secret_file(dir.path());
    let mut served = TestServer::start_with(|c| {
        c.notify.webhook = Some(format!("{}/hook", hook.url));
        c.notify.webhook_secret_file = Some(secret.clone());
    });
    let sent = Instant::now();
    fail_job(&served, "notify-oom");
    let got = hook.until("the failed job's event", |g| !g.is_empty());
    eprintln!("notify: the webhook had the failure {:?} after its lines were sent", sent.elapsed());
    let e = &events(&got)[0];
    assert_eq!((e["kind"].as_str(), e["job_id"].as_str(), e["verdict"].as_str()), (Some("verdict"), Some("notify-oom"), Some("failed")), "{e:#}");
    assert_eq!((e["rank"].as_u64(), e["class"].as_str()), (Some(1), Some("cuda_oom")), "{e:#}");
    assert_eq!(got[0].json()["format_version"], 1);
    assert!(e["report_url"].as_str().is_some_and(|u| u.ends_with("/jobs/notify-oom")), "{e:#}");
    assert_eq!(got[0].path, "/hook");
    assert_signed(&got[0]);
    assert_eq!(metric_line(&served, "coroner_job_failures_total{class=\"cuda_oom\"}").as_deref(), Some("coroner_job_failures_total{class=\"cuda_oom\"} 1"));

    // The same data dir again; a new line makes the job's report be computed anew.
    served.restart();
    let t0 = coroner_model::now_ns() as u64;
    runtime().block_on(async {
        let mut logs = LogsServiceClient::connect(served.grpc_url.clone()).await.expect("connect");
        logs.export(ExportLogsServiceRequest { resource_logs: vec![resource("notify-oom", 0, "node-a", t0, &["a line after the restart"])] })
            .await
            .expect("export");
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while metric_line(&served, "coroner_report_builds_total ").is_none_or(|l| l.ends_with(" 0")) {
        assert!(Instant::now() < deadline, "the restarted server computed no report");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(report_until(&served, "notify-oom", |_| true)["verdict"], "failed");
    let (_, log) = served.get_json("/api/notifications?job=notify-oom");
    let rows = log.as_array().expect("the delivery log");
    assert_eq!(rows.len(), 1, "{log:#}");
    assert_eq!((rows[0]["state"].as_str(), rows[0]["attempts"].as_u64(), rows[0]["sink"].as_str()), (Some("delivered"), Some(1), Some("webhook")), "{log:#}");
    std::thread::sleep(Duration::from_secs(2));
    let got = hook.received();
    assert_eq!(got.len(), 1, "no second event: {:#?}", events(&got));
}

#[test]
fn a_suspected_hang_and_its_end_arrive_as_events() {
    let hook = Receiver::start(&[]);
    let dir = tempfile::tempdir().expect("tempdir");
    let secret = secret_file(dir.path());
    let served = TestServer::start_with(|c| {
        c.notify.webhook = Some(hook.url.clone());
        c.notify.webhook_secret_file = Some(secret.clone());
        c.notify.webhook_events = vec!["hang".into(), "hang_over".into()];
        c.hang_floor = Duration::from_secs(1);
        c.hang_step_multiple = 3.0;
    });
    let job = "notify-hang";
    let kinds_for = |got: &[Received], kind: &str| events(got).into_iter().filter(|e| e["kind"] == kind && e["rank"] == 2).count();
    runtime().block_on(async {
        let mut logs = LogsServiceClient::connect(served.grpc_url.clone()).await.expect("connect");
        // Four ranks step every 200 ms; after step 10 rank 2 goes silent while the others go on.
        let deadline = Instant::now() + Duration::from_secs(40);
        let mut step = 0u64;
        let mut resumed = false;
        loop {
            let got = hook.received();
            let hanging = kinds_for(&got, "hang") > 0;
            if hanging && kinds_for(&got, "hang_over") > 0 {
                break;
            }
            assert!(Instant::now() < deadline, "no hang and end of it for rank 2: {:#?}", events(&got));
            // Once suspected, rank 2 prints again: the suspicion ends.
            resumed |= hanging;
            let now = coroner_model::now_ns() as u64;
            let ranks = (0..4).filter(|r| *r != 2 || step < 10 || resumed);
            let resource_logs =
                ranks.map(|r| resource(job, r, &format!("node-{r}"), now, &[&format!("INFO train: step {step} loss 1.{}", step * 7 % 10)])).collect();
            logs.export(ExportLogsServiceRequest { resource_logs }).await.expect("export");
            step += 1;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    let got = hook.received();
    let hang = events(&got).into_iter().find(|e| e["kind"] == "hang").expect("the hang event");
    assert_eq!((hang["rank"].as_u64(), hang["host"].as_str(), hang["class"].as_str()), (Some(2), Some("node-2"), Some("hang")), "{hang:#}");
    assert_eq!(kinds_for(&got, "hang"), 1, "raised once: {:#?}", events(&got));
    let over = events(&got).into_iter().find(|e| e["kind"] == "hang_over" && e["rank"] == 2).expect("its end");
    assert_eq!(over["key"], hang["key"], "the end names the suspicion it ends");
    got.iter().for_each(assert_signed);
}

#[test]
fn retries_reach_a_receiver_that_failed_twice_and_slack_and_alertmanager_get_their_shapes() {
    let rx = Receiver::start(&[("/hook", &[503, 503, 200])]);
    let dir = tempfile::tempdir().expect("tempdir");
    let secret = secret_file(dir.path());
    let config = dir.path().join("notify.toml");
    let toml = format!(
        "[retry]\nattempts = 4\nfirst_delay = \"100ms\"\nmax_delay = \"400ms\"\n\n\
         [[sink]]\nname = \"oncall\"\nformat = \"webhook\"\nurl = \"{u}/hook\"\nsecret_file = \"{s}\"\n\n\
         [[sink]]\nname = \"chat\"\nformat = \"slack\"\nurl = \"{u}/slack\"\n\n\
         [[sink]]\nname = \"am\"\nformat = \"alertmanager\"\nurl = \"{u}\"\n",
        u = rx.url,
        s = secret.display()
    );
    std::fs::write(&config, toml).expect("write the config");
    let served = TestServer::start_with(|c| c.notify.notify_config = Some(config.clone()));
    fail_job(&served, "notify-retry");
    let got = rx.until("three tries on /hook, and Slack and Alertmanager", |g| {
        g.iter().filter(|r| r.path == "/hook").count() >= 3 && g.iter().any(|r| r.path == "/slack") && g.iter().any(|r| r.path == "/api/v2/alerts")
    });
    let hooks: Vec<&Received> = got.iter().filter(|r| r.path == "/hook").collect();
    assert_eq!(hooks.len(), 3, "two refusals, then delivered: no fourth try");
    assert!(hooks.iter().all(|r| r.json()["event"]["id"] == "notify-retry/verdict/failed"));
    hooks.iter().for_each(|r| assert_signed(r));

    let slack = got.iter().find(|r| r.path == "/slack").expect("slack").json();
    let text = slack["text"].as_str().expect("text");
    assert!(text.contains("notify-retry") && text.contains("rank 1") && text.contains("cuda_oom"), "{slack:#}");
    assert_eq!((slack["blocks"][0]["type"].as_str(), slack["blocks"][0]["text"]["type"].as_str()), (Some("section"), Some("mrkdwn")), "{slack:#}");
    assert!(got.iter().filter(|r| r.path != "/hook").all(|r| !r.headers.contains_key("x-coroner-signature")), "only the webhook is signed");

    let am = got.iter().find(|r| r.path == "/api/v2/alerts").expect("alertmanager").json();
    let alert = &am.as_array().expect("a list of alerts")[0];
    let labels = &alert["labels"];
    assert_eq!(
        (labels["alertname"].as_str(), labels["job"].as_str(), labels["rank"].as_str(), labels["class"].as_str()),
        (Some("CoronerJobFailed"), Some("notify-retry"), Some("1"), Some("cuda_oom")),
        "{am:#}"
    );
    assert!(alert["annotations"]["summary"].as_str().is_some_and(|s| s.contains("rank 1")) && alert["startsAt"].is_string(), "{am:#}");

    // The delivery log and the metrics agree.
    let deadline = Instant::now() + Duration::from_secs(20);
    let log = loop {
        let (status, log) = served.get_json("/api/notifications?job=notify-retry&state=delivered");
        assert_eq!(status, 200, "{log}");
        if log.as_array().is_some_and(|rows| rows.len() == 3) || Instant::now() > deadline {
            break log;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let rows = log.as_array().expect("rows");
    let oncall = rows.iter().find(|r| r["sink"] == "oncall").unwrap_or_else(|| panic!("{log:#}"));
    assert_eq!((oncall["attempts"].as_u64(), oncall["last_status"].as_u64()), (Some(3), Some(200)), "{log:#}");
    assert_eq!(
        metric_line(&served, "coroner_notifications_total{sink=\"oncall\",outcome=\"retried\"}").as_deref(),
        Some("coroner_notifications_total{sink=\"oncall\",outcome=\"retried\"} 2")
    );
    assert_eq!(
        metric_line(&served, "coroner_notifications_total{sink=\"oncall\",outcome=\"delivered\"}").as_deref(),
        Some("coroner_notifications_total{sink=\"oncall\",outcome=\"delivered\"} 1")
    );
    let (status, body) = served.get("/api/notifications?state=lost");
    assert!(status == 400 && body.contains("pending, delivered or failed"), "{status} {body}");
}

#[test]
fn a_bad_notification_config_stops_the_start_with_what_to_fix() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("notify.toml");
    std::fs::write(&config, "[[sink]]\nname = \"x\"\nformat = \"webhook\"\nurl = \"http://127.0.0.1:9/h\"\n").expect("write");
    let refused = TestServer::try_start_with(|c| c.notify.notify_config = Some(config.clone())).err().expect("refused");
    let message = format!("{refused:#}");
    assert!(message.contains("notify.toml") && message.contains("sink \"x\"") && message.contains("give its secret"), "{message}");
}
