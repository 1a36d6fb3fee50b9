//! A job on a real store and index: commit, dedup, the report, recovery, and configuration
//! passed as a value.

use super::*;
use crate::limits::LimitsConfig;
use crate::metrics::Metrics;
use crate::writers::Writers;
use coroner_analysis::live::LiveConfig;
use coroner_model::{Rank, Stream};

/// What a server's jobs share, on a SQLite store in `dir` (also for `jobs.rs`' tests).
pub(crate) async fn shared(dir: &std::path::Path, live: LiveConfig) -> Shared {
    let store = coroner_store::connect(&format!("sqlite://{}?mode=rwc", dir.join("coroner.db").display())).await.expect("a store");
    let metrics = Arc::new(Metrics::default());
    Shared {
        data_dir: dir.to_path_buf(),
        store,
        rules: Arc::new(RuleSet::builtin()),
        writers: Arc::new(Writers::new(8, metrics.clone())),
        metrics: metrics.clone(),
        limits: Arc::new(LimitsConfig::default()),
        live,
        notifier: crate::notify::Notifier::off(metrics.clone()),
    }
}

async fn open(shared: &Shared, id: &str) -> Arc<Job> {
    let id = JobId::parse(id).expect("an id");
    shared.store.touch_job(&id, Some(1), 1).await.expect("touch");
    Job::open(&id, shared).await.expect("open")
}

fn lines(seqs: std::ops::Range<u64>) -> Vec<LogLine> {
    seqs.map(|seq| LogLine {
        rank: Some(Rank(0)),
        stream: Stream::Stdout,
        seq,
        capture_ns: 1_000 + seq as i64,
        bytes: format!("step {seq} loss 1.0").into_bytes(),
    })
    .collect()
}

#[tokio::test]
async fn an_acknowledged_batch_is_in_the_next_report_and_a_resent_one_is_all_duplicates() {
    let dir = tempfile::tempdir().expect("tempdir");
    let shared = shared(dir.path(), LiveConfig::default()).await;
    let job = open(&shared, "acked").await;
    assert_eq!(job.commit(lines(0..3), "h".into()).await.expect("commit"), 0);
    let report = job.current_report().await.expect("report");
    assert_eq!(report.ranks.iter().map(|r| r.lines).sum::<u64>(), 3, "acknowledged lines are in the report");
    assert_eq!(job.commit(lines(1..4), "h".into()).await.expect("resend"), 2, "two of the four were held");
    assert_eq!(job.positions()[&(Some(0), Stream::Stdout, 0)], 4);
    assert_eq!(job.current_report().await.expect("report").ranks.iter().map(|r| r.lines).sum::<u64>(), 4);
}

#[tokio::test]
async fn a_reopened_job_resumes_where_its_index_stands() {
    let dir = tempfile::tempdir().expect("tempdir");
    let shared = shared(dir.path(), LiveConfig::default()).await;
    let job = open(&shared, "reopened").await;
    job.commit(lines(0..5), "h".into()).await.expect("commit");
    let before = job.current_report().await.expect("report");
    drop(job);
    // The committer lets the index go once the handle is dropped; opening waits for its lock.
    let job = open(&shared, "reopened").await;
    assert_eq!(job.positions()[&(Some(0), Stream::Stdout, 0)], 5);
    assert_eq!(job.commit(lines(0..5), "h".into()).await.expect("resend"), 5, "all held before the restart");
    let after = job.current_report().await.expect("report");
    assert_eq!(serde_json::to_string(&after.ranks).ok(), serde_json::to_string(&before.ranks).ok(), "the same evidence again");
}

#[tokio::test]
async fn two_servers_in_one_process_keep_their_own_live_thresholds() {
    let (a, b) = (tempfile::tempdir().expect("tempdir"), tempfile::tempdir().expect("tempdir"));
    let strict = shared(a.path(), LiveConfig { floor_ns: 1_000_000_000, ..LiveConfig::default() }).await;
    let lenient = shared(b.path(), LiveConfig { floor_ns: 60_000_000_000, ..LiveConfig::default() }).await;
    let (ja, jb) = (open(&strict, "same-id").await, open(&lenient, "same-id").await);
    let floor = |j: &Job| j.evidence.read(|p| p.live().map(|m| m.config().floor_ns));
    assert_eq!((floor(&ja), floor(&jb)), (Some(1_000_000_000), Some(60_000_000_000)));
}

#[tokio::test]
async fn the_ranks_a_per_node_agents_lines_name_take_its_host_and_keep_it_when_reopened() {
    let dir = tempfile::tempdir().expect("tempdir");
    let shared = shared(dir.path(), LiveConfig::default()).await;
    let job = open(&shared, "per-node").await;
    let line = LogLine { rank: None, stream: Stream::Stdout, seq: 0, capture_ns: 1_000, bytes: b"[default3]:step 1 loss 2.0".to_vec() };
    job.commit(vec![line], "node-7".into()).await.expect("commit");
    let host_of_3 = |r: &coroner_model::Report| r.ranks.iter().find(|x| x.rank == Rank(3)).and_then(|x| x.host.clone());
    assert_eq!(host_of_3(&job.current_report().await.expect("report")).as_deref(), Some("node-7"));
    drop(job);
    let job = open(&shared, "per-node").await;
    assert_eq!(host_of_3(&job.current_report().await.expect("report")).as_deref(), Some("node-7"), "replayed from the index");
}
