//! Conformance cases for bounded storage (migration 0008): deleting a job, the bytes counted for
//! retention by size, the job tally behind `/metrics`, and the snapshot content protocol that
//! keeps a sweep and a concurrent upload of the same content from both winning.

use anyhow::Result;
use coroner_model::{JobId, Rank};
use coroner_store::{ContentRef, Metastore, SnapshotRecord, StorageUsage, StoreError, TallyRow};
use std::sync::Arc;

type Store = Arc<dyn Metastore>;

fn job(s: &str) -> JobId {
    JobId::parse(s).expect("valid job id")
}

fn reference(job_id: &JobId, sha: &str, stored_bytes: u64) -> SnapshotRecord {
    SnapshotRecord {
        job_id: job_id.clone(),
        rank: Some(Rank(0)),
        kind: "stack".into(),
        name: "rank0.stack.txt".into(),
        size: stored_bytes,
        sha256: sha.into(),
        captured_ns: 1,
        stored_bytes,
    }
}

fn tally(rows: &[TallyRow]) -> Vec<(String, Option<String>, u64)> {
    rows.iter().map(|r| (r.verdict.clone(), r.fault_class.clone(), r.jobs)).collect()
}

pub async fn deleting_a_job_takes_its_rows_and_references(store: Store) -> Result<()> {
    let (a, b) = (job("del-a"), job("del-b"));
    for j in [&a, &b] {
        store.touch_job(j, Some(1), 10).await?;
        store.add_snapshot(&reference(j, "shared", 100)).await?;
    }
    store.add_snapshot(&reference(&a, "only-a", 40)).await?;
    assert!(store.delete_job(&a).await?);
    assert!(!store.delete_job(&a).await?, "a job deleted twice is not there the second time");
    assert_eq!(store.get_job(&a).await?, None);
    assert!(store.snapshots(&a).await?.is_empty());
    let orphaned: Vec<String> = store.unreferenced_contents(None, 10).await?.into_iter().map(|c| c.sha256).collect();
    assert_eq!(orphaned, ["only-a"], "the shared content is still named by del-b");
    assert_eq!(store.unreferenced_contents(Some("shared"), 10).await?, vec![]);
    Ok(())
}

pub async fn storage_usage_counts_indexes_and_each_content_once(store: Store) -> Result<()> {
    assert_eq!(store.storage_usage().await?, StorageUsage::default());
    let (a, b) = (job("use-a"), job("use-b"));
    store.touch_job(&a, None, 10).await?;
    store.touch_job(&b, None, 20).await?;
    store.set_index_bytes(&a, 1_000).await?;
    store.set_index_bytes(&b, 500).await?;
    store.set_index_bytes(&b, 700).await?;
    store.add_snapshot(&reference(&a, "c1", 100)).await?;
    store.add_snapshot(&reference(&b, "c1", 100)).await?;
    store.add_snapshot(&reference(&b, "c2", 30)).await?;
    assert_eq!(store.storage_usage().await?, StorageUsage { index_bytes: 1_700, snapshot_bytes: 130 });
    // Jobs with lines and no size (from before the sizes were recorded), listed by id in pages.
    let (c, d, empty) = (job("use-c"), job("use-d"), job("use-empty"));
    for j in [&c, &d, &empty] {
        store.touch_job(j, None, 30).await?;
    }
    store.add_lines_count(&c, 5).await?;
    store.add_lines_count(&d, 5).await?;
    store.add_lines_count(&a, 5).await?;
    assert_eq!(store.unsized_jobs("", 1).await?, vec![c.clone()]);
    assert_eq!(store.unsized_jobs(c.as_str(), 10).await?, vec![d], "a, sized, and the job without lines are not listed");
    Ok(())
}

pub async fn oldest_finished_jobs_come_first_and_running_ones_never(store: Store) -> Result<()> {
    for (name, seen, verdict) in [("old-run", 1, "running"), ("old-fail", 2, "failed"), ("new-ok", 9, "succeeded"), ("mid-ok", 5, "succeeded")] {
        let j = job(name);
        store.touch_job(&j, None, seen).await?;
        store.set_index_bytes(&j, seen as u64 * 10).await?;
        if verdict != "running" {
            store.save_report(&j, verdict, None, None, "{}").await?;
        }
    }
    let order: Vec<(String, u64)> = store.oldest_finished_jobs(10).await?.into_iter().map(|j| (j.job_id.to_string(), j.index_bytes)).collect();
    assert_eq!(order, [("old-fail".to_string(), 20), ("mid-ok".to_string(), 50), ("new-ok".to_string(), 90)]);
    assert_eq!(store.oldest_finished_jobs(1).await?.len(), 1);
    Ok(())
}

pub async fn the_job_tally_follows_creation_verdicts_and_deletion(store: Store) -> Result<()> {
    let (a, b, c) = (job("tally-a"), job("tally-b"), job("tally-c"));
    for j in [&a, &b, &c] {
        store.touch_job(j, None, 1).await?;
    }
    store.touch_job(&a, Some(4), 2).await?;
    assert_eq!(tally(&store.job_tally().await?), [("running".into(), None, 3)], "touching a known job adds nothing");
    store.save_report(&a, "failed", Some(Rank(1)), Some("nccl_error"), "{}").await?;
    store.save_report(&a, "failed", Some(Rank(1)), Some("nccl_error"), "{}").await?;
    store.save_report(&b, "succeeded", None, None, "{}").await?;
    assert_eq!(tally(&store.job_tally().await?), [("failed".into(), Some("nccl_error".into()), 1), ("running".into(), None, 1), ("succeeded".into(), None, 1)]);
    store.save_report(&a, "failed", Some(Rank(2)), Some("cuda_oom"), "{}").await?;
    store.delete_job(&b).await?;
    assert_eq!(store.expire_jobs(5).await?.len(), 2, "expiry goes through the same triggers");
    assert!(store.job_tally().await?.is_empty(), "{:?}", store.job_tally().await?);
    Ok(())
}

pub async fn a_reference_filed_after_the_sweep_looked_wins(store: Store) -> Result<()> {
    let (a, b) = (job("race-a"), job("race-b"));
    store.touch_job(&a, None, 1).await?;
    store.touch_job(&b, None, 1).await?;
    store.add_snapshot(&reference(&a, "sha-x", 10)).await?;
    store.delete_job(&a).await?;
    let found = store.unreferenced_contents(None, 10).await?;
    assert_eq!(found.len(), 1);
    // An upload of the same content files it for job b after the sweep found it unreferenced...
    assert!(store.add_snapshot(&reference(&b, "sha-x", 10)).await?);
    // ...so the sweep's mark fails (the generation moved) and the file stays.
    assert!(!store.mark_deleting(&found[0], 5).await?);
    assert!(store.unreferenced_contents(None, 10).await?.is_empty());
    // Even a stale view with the new generation is refused while b names it.
    let fresh = ContentRef { generation: found[0].generation + 1, ..found[0].clone() };
    assert!(!store.mark_deleting(&fresh, 5).await?);
    Ok(())
}

pub async fn a_reference_to_a_content_being_deleted_is_refused_until_it_is_gone(store: Store) -> Result<()> {
    let (a, b) = (job("gone-a"), job("gone-b"));
    store.touch_job(&a, None, 1).await?;
    store.touch_job(&b, None, 1).await?;
    store.add_snapshot(&reference(&a, "sha-y", 10)).await?;
    store.delete_job(&a).await?;
    let found = store.unreferenced_contents(Some("sha-y"), 10).await?;
    assert!(store.mark_deleting(&found[0], 5).await?);
    let refused = store.add_snapshot(&reference(&b, "sha-y", 10)).await;
    assert!(matches!(refused, Err(StoreError::ContentBeingDeleted(ref s)) if s == "sha-y"), "{refused:?}");
    assert!(refused.err().is_some_and(|e| e.to_string().contains("upload it again")));
    assert!(store.snapshots(&b).await?.is_empty(), "the refused reference left no row");
    store.forget_content("sha-y").await?;
    assert!(store.add_snapshot(&reference(&b, "sha-y", 10)).await?, "once deleted, the content is stored anew");
    assert_eq!(store.storage_usage().await?.snapshot_bytes, 10);
    Ok(())
}

pub async fn sweeps_and_uploads_racing_never_both_win(store: Store) -> Result<()> {
    // Each round: a content only a deleted job named, then at once a sweep that found it
    // unreferenced and an upload filing it for another job. Exactly one wins.
    for round in 0..40 {
        let (a, b) = (job(&format!("round-{round}-a")), job(&format!("round-{round}-b")));
        let sha = format!("sha-{round}");
        store.touch_job(&a, None, 1).await?;
        store.touch_job(&b, None, 1).await?;
        store.add_snapshot(&reference(&a, &sha, 10)).await?;
        store.delete_job(&a).await?;
        let found = store.unreferenced_contents(Some(&sha), 1).await?.pop().expect("unreferenced");
        let (sweeper, uploader) = (store.clone(), store.clone());
        let record = reference(&b, &sha, 10);
        let sweep = tokio::spawn(async move { sweeper.mark_deleting(&found, 5).await });
        let upload = tokio::spawn(async move { uploader.add_snapshot(&record).await });
        let (marked, filed) = (sweep.await??, upload.await?);
        match filed {
            Ok(true) => assert!(!marked, "round {round}: the content was marked for deletion while job b names it"),
            Err(StoreError::ContentBeingDeleted(_)) => assert!(marked, "round {round}: refused without a sweep deleting it"),
            other => panic!("round {round}: {other:?}"),
        }
    }
    Ok(())
}

pub async fn orphans_are_claimed_once_and_abandoned_deletions_revive(store: Store) -> Result<()> {
    assert!(store.claim_orphan("orphan", 100).await?);
    assert!(!store.claim_orphan("orphan", 100).await?, "a second sweeper does not claim it again");
    assert_eq!(store.registered_contents().await?, ["orphan"]);
    assert_eq!(store.revive_abandoned_deletions(50).await?, 0, "marked after the cutoff: still in progress");
    assert_eq!(store.revive_abandoned_deletions(200).await?, 1);
    let again = store.unreferenced_contents(None, 10).await?;
    assert_eq!(again.len(), 1, "revived, it is decided afresh");
    assert!(store.mark_deleting(&again[0], 300).await?);
    store.forget_content("orphan").await?;
    assert!(store.registered_contents().await?.is_empty());
    Ok(())
}
