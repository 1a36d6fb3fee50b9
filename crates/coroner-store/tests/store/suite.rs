//! The metastore conformance suite, written once against `Arc<dyn Metastore>` and run against
//! every backend by `conformance_tests!` in main.rs.

use anyhow::Result;
use coroner_model::{ClockSample, JobId, ProcessEnd, Rank};
use coroner_store::{JobFilter, Metastore, SessionRecord, SnapshotRecord, StoreError};
use std::collections::BTreeMap;
use std::sync::Arc;

pub type Store = Arc<dyn Metastore>;

pub use crate::incidents::*;
pub use crate::leases::*;

pub use crate::notifications::*;
pub use crate::storage::*;

fn job(s: &str) -> JobId {
    JobId::parse(s).expect("valid job id")
}

fn session(id: &str, job_id: &JobId, rank: Option<u32>, opened_ns: i64) -> SessionRecord {
    SessionRecord {
        session_id: id.to_string(),
        job_id: job_id.clone(),
        rank: rank.map(Rank),
        local_rank: rank.map(|r| r % 8),
        world_size: Some(16),
        host: format!("node-{}", rank.unwrap_or(99) / 8),
        pid: 4242 + rank.unwrap_or(0),
        launcher: "torchrun".to_string(),
        agent_instance: "agent-1".to_string(),
        versions: BTreeMap::from([("torch".to_string(), "2.5.1".to_string()), ("nccl".to_string(), "2.21.5".to_string())]),
        opened_ns,
        attempt: 0,
    }
}

fn sample(rank: u32, t1: i64) -> ClockSample {
    ClockSample { rank: Rank(rank), t1_agent_send: t1, t2_server_recv: t1 + 7, t3_server_send: t1 + 8, t4_agent_recv: t1 + 3 }
}

fn snapshot(job_id: &JobId, rank: Option<u32>, name: &str, sha: &str) -> SnapshotRecord {
    SnapshotRecord {
        job_id: job_id.clone(),
        rank: rank.map(Rank),
        kind: "py-spy".to_string(),
        name: name.to_string(),
        size: 5_000_000_000,
        sha256: sha.to_string(),
        captured_ns: 1_000 + i64::from(rank.unwrap_or(0)),
        stored_bytes: 1 << 20,
    }
}

pub async fn touch_job_creates_then_only_widens(store: Store) -> Result<()> {
    let j = job("touch-1");
    assert_eq!(store.get_job(&j).await?, None);
    store.touch_job(&j, None, 100).await?;
    let row = store.get_job(&j).await?.expect("job exists");
    assert_eq!((row.first_seen_ns, row.last_seen_ns, row.world_size), (100, 100, None));
    assert_eq!((row.verdict.as_str(), row.lines, row.culprit_rank), ("running", 0, None));
    assert_eq!((row.fault_class, row.report_json), (None, None));
    store.touch_job(&j, Some(8), 50).await?;
    store.touch_job(&j, Some(4), 200).await?;
    store.touch_job(&j, None, 150).await?;
    let row = store.get_job(&j).await?.expect("job exists");
    assert_eq!((row.first_seen_ns, row.last_seen_ns, row.world_size), (50, 200, Some(8)));
    Ok(())
}

pub async fn sessions_round_trip_and_reopen_replaces(store: Store) -> Result<()> {
    let j = job("sessions-1");
    store.touch_job(&j, Some(16), 1).await?;
    let s1 = session("s-b", &j, Some(1), 20);
    let s0 = session("s-a", &j, Some(0), 10);
    let launcher = SessionRecord { versions: BTreeMap::new(), ..session("s-c", &j, None, 30) };
    for s in [&s1, &s0, &launcher] {
        store.open_session(s).await?;
    }
    assert_eq!(store.sessions(&j).await?, vec![s0.clone(), s1.clone(), launcher.clone()]);
    let s1_again = SessionRecord { pid: 7, opened_ns: 40, ..s1.clone() };
    store.open_session(&s1_again).await?;
    assert_eq!(store.sessions(&j).await?, vec![s0, launcher, s1_again]);
    assert!(store.sessions(&job("nobody")).await?.is_empty());
    Ok(())
}

/// Migration 0004: a session keeps the job's attempt it belongs to, and a reopened one its new attempt.
pub async fn sessions_keep_their_attempt(store: Store) -> Result<()> {
    let j = job("attempts-1");
    store.touch_job(&j, Some(2), 1).await?;
    let first = session("s-0", &j, Some(0), 10);
    let restarted = SessionRecord { attempt: 3, agent_instance: "agent-2".into(), ..session("s-1", &j, Some(0), 20) };
    store.open_session(&first).await?;
    store.open_session(&restarted).await?;
    let attempts: Vec<u32> = store.sessions(&j).await?.iter().map(|s| s.attempt).collect();
    assert_eq!(attempts, vec![0, 3]);
    store.open_session(&SessionRecord { attempt: 4, ..restarted.clone() }).await?;
    assert_eq!(store.sessions(&j).await?.last().map(|s| s.attempt), Some(4));
    Ok(())
}

/// Sessions opened together (a start-up burst) are one transaction: a group with a session of an
/// unknown job records none of them and names that job; a good group records every one.
pub async fn sessions_open_in_groups_all_or_none(store: Store) -> Result<()> {
    let j = job("group-1");
    store.touch_job(&j, Some(4), 1).await?;
    let stray = session("g-x", &job("group-unknown"), Some(0), 5);
    let bad = [session("g-0", &j, Some(0), 10), stray, session("g-1", &j, Some(1), 11)];
    assert!(matches!(store.open_sessions(&bad).await, Err(StoreError::UnknownJob(ref id)) if id == "group-unknown"));
    assert!(store.sessions(&j).await?.is_empty(), "a refused group leaves no session behind");
    let good: Vec<SessionRecord> = (0..4).map(|r| session(&format!("g-{r}"), &j, Some(r), i64::from(r) + 10)).collect();
    store.open_sessions(&good).await?;
    store.open_sessions(&[]).await?;
    assert_eq!(store.sessions(&j).await?, good);
    Ok(())
}

pub async fn clock_samples_keep_rank_then_arrival_order(store: Store) -> Result<()> {
    let j = job("clock-1");
    store.touch_job(&j, None, 1).await?;
    store.add_clock_samples(&j, &[]).await?;
    store.add_clock_samples(&j, &[sample(1, 300), sample(0, 500)]).await?;
    store.add_clock_samples(&j, &[sample(1, 100), sample(0, -5)]).await?;
    let got = store.clock_samples(&j).await?;
    assert_eq!(got, vec![sample(0, 500), sample(0, -5), sample(1, 300), sample(1, 100)]);
    Ok(())
}

/// Ends reported together (every rank of a job finishing at once) are one transaction: a group
/// with an end of an unknown job records none and names that job; a good group records every
/// one, a rank ending twice in it keeping its later end.
pub async fn exits_record_in_groups_all_or_none(store: Store) -> Result<()> {
    let (a, b) = (job("exits-a"), job("exits-b"));
    store.touch_job(&a, Some(4), 1).await?;
    store.touch_job(&b, Some(4), 1).await?;
    let end = |r: u32, code: i32| ProcessEnd { rank: Rank(r), exit_code: Some(code), signal: None, at_ns: Some(i64::from(code)) };
    let bad = [(a.clone(), end(0, 0)), (job("exits-unknown"), end(1, 0)), (b.clone(), end(1, 0))];
    assert!(matches!(store.record_exits(&bad).await, Err(StoreError::UnknownJob(ref id)) if id == "exits-unknown"));
    assert!(store.process_ends(&a).await?.is_empty() && store.process_ends(&b).await?.is_empty(), "a refused group leaves no end behind");
    let good = [(a.clone(), end(1, 1)), (b.clone(), end(0, 0)), (a.clone(), end(0, 0)), (a.clone(), end(1, 9))];
    store.record_exits(&good).await?;
    store.record_exits(&[]).await?;
    assert_eq!(store.process_ends(&a).await?, vec![end(0, 0), end(1, 9)]);
    assert_eq!(store.process_ends(&b).await?, vec![end(0, 0)]);
    Ok(())
}

pub async fn process_ends_upsert_per_rank(store: Store) -> Result<()> {
    let j = job("exit-1");
    store.touch_job(&j, None, 1).await?;
    let e3 = ProcessEnd { rank: Rank(3), exit_code: None, signal: Some(9), at_ns: Some(77) };
    let e0 = ProcessEnd { rank: Rank(0), exit_code: Some(1), signal: None, at_ns: None };
    store.record_exit(&j, &e3).await?;
    store.record_exit(&j, &e0).await?;
    let e0_later = ProcessEnd { rank: Rank(0), exit_code: Some(-15), signal: None, at_ns: Some(90) };
    store.record_exit(&j, &e0_later).await?;
    assert_eq!(store.process_ends(&j).await?, vec![e0_later, e3]);
    Ok(())
}

pub async fn lines_and_report_update_the_job(store: Store) -> Result<()> {
    let j = job("report-1");
    store.touch_job(&j, Some(2), 1).await?;
    store.add_lines_count(&j, 10).await?;
    store.add_lines_count(&j, 32).await?;
    store.save_report(&j, "failed", Some(Rank(1)), Some("nccl_timeout"), "{\"v\":1}").await?;
    let row = store.get_job(&j).await?.expect("job exists");
    assert_eq!(row.lines, 42);
    assert_eq!((row.verdict.as_str(), row.culprit_rank), ("failed", Some(Rank(1))));
    assert_eq!(row.fault_class.as_deref(), Some("nccl_timeout"));
    assert_eq!(row.report_json.as_deref(), Some("{\"v\":1}"));
    store.save_report(&j, "succeeded", None, None, "{}").await?;
    let row = store.get_job(&j).await?.expect("job exists");
    assert_eq!((row.culprit_rank, row.fault_class), (None, None));
    Ok(())
}

pub async fn list_jobs_filters_newest_first(store: Store) -> Result<()> {
    for (name, seen, verdict, class) in
        [("list-a", 100, "failed", Some("oom")), ("list-b", 300, "failed", Some("nccl_timeout")), ("list-c", 200, "running", None)]
    {
        let j = job(name);
        store.touch_job(&j, None, seen).await?;
        if verdict != "running" {
            store.save_report(&j, verdict, None, class, "{}").await?;
        }
    }
    let names = |rows: Vec<coroner_store::JobRow>| rows.into_iter().map(|r| r.job_id.to_string()).collect::<Vec<_>>();
    assert_eq!(names(store.list_jobs(&JobFilter::default()).await?), ["list-b", "list-c", "list-a"]);
    let failed = JobFilter { verdict: Some("failed".into()), ..Default::default() };
    assert_eq!(names(store.list_jobs(&failed).await?), ["list-b", "list-a"]);
    let oom = JobFilter { fault_class: Some("oom".into()), ..Default::default() };
    assert_eq!(names(store.list_jobs(&oom).await?), ["list-a"]);
    let recent = JobFilter { since_ns: Some(200), ..Default::default() };
    assert_eq!(names(store.list_jobs(&recent).await?), ["list-b", "list-c"]);
    let none = JobFilter { verdict: Some("running".into()), since_ns: Some(250), ..Default::default() };
    assert!(store.list_jobs(&none).await?.is_empty());
    // By host: the hosts a finished report recorded.
    let host = |h: &str| coroner_model::HostCount { host: h.into(), count: 1 };
    store.record_job_hosts(&job("list-a"), "failed", &[host("n1"), host("n2")], 400).await?;
    store.record_job_hosts(&job("list-b"), "failed", &[host("n2")], 400).await?;
    let on = |h: &str| JobFilter { host: Some(h.into()), ..Default::default() };
    assert_eq!(names(store.list_jobs(&on("n2")).await?), ["list-b", "list-a"]);
    assert_eq!(names(store.list_jobs(&on("n1")).await?), ["list-a"]);
    assert!(store.list_jobs(&on("n3")).await?.is_empty());
    let oom_on_n2 = JobFilter { host: Some("n2".into()), ..oom };
    assert_eq!(names(store.list_jobs(&oom_on_n2).await?), ["list-a"]);
    // A running job has no recorded hosts yet: its agents' sessions name them.
    store.open_session(&session("list-c-s", &job("list-c"), Some(17), 250)).await?;
    assert_eq!(names(store.list_jobs(&on("node-2")).await?), ["list-c"]);
    store.record_job_hosts(&job("list-b"), "failed", &[host("node-2")], 400).await?;
    assert_eq!(names(store.list_jobs(&on("node-2")).await?), ["list-b", "list-c"], "each job once, from either source");
    Ok(())
}

/// Keyset pages visit every job once, in order, also across jobs seen at the same instant; the
/// filters hold on every page.
pub async fn list_jobs_pages_by_keyset(store: Store) -> Result<()> {
    for (name, seen, first) in [("page-a", 500, 10), ("page-b", 500, 20), ("page-c", 400, 30), ("page-d", 500, 40), ("page-e", 100, 50)] {
        let j = job(name);
        store.touch_job(&j, None, first).await?;
        store.touch_job(&j, None, seen).await?;
    }
    let names = |rows: &[coroner_store::JobRow]| rows.iter().map(|r| r.job_id.to_string()).collect::<Vec<_>>();
    let all = store.list_jobs(&JobFilter::default()).await?;
    assert_eq!(names(&all), ["page-a", "page-b", "page-d", "page-c", "page-e"]);
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = store.list_jobs(&JobFilter { after: after.clone(), limit: Some(2), ..Default::default() }).await?;
        assert!(page.len() <= 2);
        let Some(last) = page.last() else { break };
        after = Some(last.position());
        seen.extend(names(&page));
    }
    assert_eq!(seen, names(&all));
    // `until_ns` bounds the first sighting; paging keeps it.
    let early = JobFilter { until_ns: Some(30), limit: Some(1), ..Default::default() };
    let first = store.list_jobs(&early).await?;
    assert_eq!(names(&first), ["page-a"]);
    let rest = store.list_jobs(&JobFilter { after: first.last().map(|r| r.position()), limit: Some(10), ..early }).await?;
    assert_eq!(names(&rest), ["page-b", "page-c"]);
    Ok(())
}

pub async fn snapshots_are_deduplicated(store: Store) -> Result<()> {
    let j = job("snap-1");
    store.touch_job(&j, None, 1).await?;
    let a = snapshot(&j, Some(2), "stack.txt", "aa");
    assert!(store.add_snapshot(&a).await?);
    assert!(!store.add_snapshot(&SnapshotRecord { captured_ns: 5, ..a.clone() }).await?);
    let other_rank = snapshot(&j, Some(3), "stack.txt", "aa");
    assert!(store.add_snapshot(&other_rank).await?);
    let no_rank = snapshot(&j, None, "nvidia-smi.txt", "bb");
    assert!(store.add_snapshot(&no_rank).await?);
    assert!(!store.add_snapshot(&no_rank).await?, "a snapshot without a rank is deduplicated too");
    assert_eq!(store.snapshots(&j).await?, vec![no_rank, a, other_rank]);
    let mut contents = store.snapshot_contents().await?;
    contents.sort();
    assert_eq!(contents, ["aa", "bb"], "each content once, whichever jobs and ranks name it");
    Ok(())
}

pub async fn unknown_jobs_are_refused_clearly(store: Store) -> Result<()> {
    let j = job("never-touched");
    let unknown = |r: Result<(), StoreError>| matches!(r, Err(StoreError::UnknownJob(ref id)) if id == "never-touched");
    assert!(unknown(store.open_session(&session("s-x", &j, Some(0), 1)).await));
    assert!(unknown(store.add_clock_samples(&j, &[sample(0, 1)]).await));
    let end = ProcessEnd { rank: Rank(0), exit_code: Some(0), signal: None, at_ns: None };
    assert!(unknown(store.record_exit(&j, &end).await));
    assert!(unknown(store.add_lines_count(&j, 1).await));
    assert!(unknown(store.save_report(&j, "failed", None, None, "{}").await));
    assert!(unknown(store.add_snapshot(&snapshot(&j, None, "x", "cc")).await.map(|_| ())));
    let msg = StoreError::UnknownJob("never-touched".into()).to_string();
    assert!(msg.contains("touch_job"), "{msg}");
    assert_eq!(store.get_job(&j).await?, None);
    Ok(())
}

pub async fn jobs_do_not_see_each_other(store: Store) -> Result<()> {
    let (a, b) = (job("iso-a"), job("iso-b"));
    store.touch_job(&a, None, 1).await?;
    store.touch_job(&b, None, 1).await?;
    store.open_session(&session("iso-s", &a, Some(0), 1)).await?;
    store.add_clock_samples(&a, &[sample(0, 1)]).await?;
    store.record_exit(&a, &ProcessEnd { rank: Rank(0), exit_code: Some(0), signal: None, at_ns: None }).await?;
    store.add_snapshot(&snapshot(&a, None, "x", "dd")).await?;
    assert!(store.sessions(&b).await?.is_empty());
    assert!(store.clock_samples(&b).await?.is_empty());
    assert!(store.process_ends(&b).await?.is_empty());
    assert!(store.snapshots(&b).await?.is_empty());
    assert!(store.add_snapshot(&snapshot(&b, None, "x", "dd")).await?);
    Ok(())
}

pub async fn many_tasks_at_once(store: Store) -> Result<()> {
    let j = job("busy-1");
    store.touch_job(&j, Some(64), 0).await?;
    let mut tasks = tokio::task::JoinSet::new();
    for r in 0..64u32 {
        let (store, j) = (store.clone(), j.clone());
        tasks.spawn(async move {
            store.touch_job(&j, Some(64), i64::from(r)).await?;
            store.open_session(&session(&format!("busy-{r}"), &j, Some(r), i64::from(r))).await?;
            store.add_clock_samples(&j, &[sample(r, 1), sample(r, 2)]).await?;
            for _ in 0..5 {
                store.add_lines_count(&j, 1).await?;
            }
            store.record_exit(&j, &ProcessEnd { rank: Rank(r), exit_code: Some(0), signal: None, at_ns: None }).await?;
            store.get_job(&j).await?;
            Ok::<_, StoreError>(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    let row = store.get_job(&j).await?.expect("job exists");
    assert_eq!((row.lines, row.last_seen_ns), (64 * 5, 63));
    assert_eq!(store.sessions(&j).await?.len(), 64);
    assert_eq!(store.clock_samples(&j).await?.len(), 128);
    assert_eq!(store.process_ends(&j).await?.len(), 64);
    Ok(())
}
