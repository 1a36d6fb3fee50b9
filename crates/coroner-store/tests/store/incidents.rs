//! Conformance cases for the incident memory (signatures, job hosts, retention), run against
//! every backend through `suite.rs`.

use anyhow::Result;
use coroner_model::{FailureSignature, FaultClass, HostCount, JobId, Rank};
use coroner_store::{Metastore, SignatureFilter};
use std::sync::Arc;

type Store = Arc<dyn Metastore>;

fn job(s: &str) -> JobId {
    JobId::parse(s).expect("valid job id")
}

fn sig(id: &str, class: FaultClass, host: &str) -> FailureSignature {
    FailureSignature {
        id: id.to_string(),
        class,
        template: format!("template of {id}"),
        frames: vec!["forward (linear.py)".into(), "step (train.py)".into()],
        rank: Some(Rank(3)),
        host: Some(host.to_string()),
        gpu: Some("0000:18:00".into()),
        collective: None,
    }
}

fn hosts(list: &[(&str, u32)]) -> Vec<HostCount> {
    list.iter().map(|(h, n)| HostCount { host: h.to_string(), count: *n }).collect()
}

pub async fn signatures_round_trip_newest_first_and_keep_their_first_time(store: Store) -> Result<()> {
    let (a, b, c) = (job("sig-a"), job("sig-b"), job("sig-c"));
    store.save_signature(&a, &sig("s1", FaultClass::CudaOom, "n1"), 100).await?;
    store.save_signature(&b, &sig("s2", FaultClass::Segfault, "n2"), 200).await?;
    let mut third = sig("s1", FaultClass::CudaOom, "n3");
    third.rank = None;
    third.gpu = None;
    third.collective = Some("ALLREDUCE".into());
    store.save_signature(&c, &third, 300).await?;

    let got = store.signature(&c).await?.expect("saved");
    assert_eq!((got.job_id.as_str(), got.recorded_ns), ("sig-c", 300));
    assert_eq!(got.signature, third, "every field round-trips");

    let all = store.signatures(&SignatureFilter::default()).await?;
    let ids: Vec<&str> = all.iter().map(|f| f.job_id.as_str()).collect();
    assert_eq!(ids, ["sig-c", "sig-b", "sig-a"]);
    let oom = store.signatures(&SignatureFilter { class: Some(FaultClass::CudaOom), ..Default::default() }).await?;
    assert_eq!(oom.len(), 2);
    let recent = store.signatures(&SignatureFilter { since_ns: Some(200), limit: 1, ..Default::default() }).await?;
    assert_eq!(recent.iter().map(|f| f.job_id.as_str()).collect::<Vec<_>>(), ["sig-c"]);

    // A later report updates the signature; the first recording time stays.
    store.save_signature(&a, &sig("s9", FaultClass::GpuHardware, "n1"), 999).await?;
    let a2 = store.signature(&a).await?.expect("still there");
    assert_eq!((a2.signature.id.as_str(), a2.signature.class, a2.recorded_ns), ("s9", FaultClass::GpuHardware, 100));
    store.delete_signature(&a).await?;
    assert_eq!(store.signature(&a).await?, None);
    store.delete_signature(&a).await?;
    Ok(())
}

pub async fn job_hosts_are_replaced_per_job(store: Store) -> Result<()> {
    let (a, b) = (job("hosts-a"), job("hosts-b"));
    store.record_job_hosts(&a, "running", &hosts(&[("n1", 4), ("n2", 4)]), 50).await?;
    store.record_job_hosts(&a, "failed", &hosts(&[("n1", 8)]), 60).await?;
    store.record_job_hosts(&b, "succeeded", &hosts(&[("n3", 2), ("n1", 1)]), 70).await?;
    let all = store.job_hosts(None).await?;
    assert_eq!(all.len(), 2);
    assert_eq!((all[0].job_id.as_str(), all[0].verdict.as_str(), all[0].recorded_ns), ("hosts-a", "failed", 50));
    assert_eq!(all[0].hosts, hosts(&[("n1", 8)]));
    assert_eq!(all[1].hosts, hosts(&[("n1", 1), ("n3", 2)]), "by host name");
    let since = store.job_hosts(Some(60)).await?;
    assert_eq!(since.iter().map(|j| j.job_id.as_str()).collect::<Vec<_>>(), ["hosts-b"]);
    Ok(())
}

pub async fn retention_deletes_jobs_but_keeps_their_signatures(store: Store) -> Result<()> {
    let (old, new) = (job("expire-old"), job("expire-new"));
    store.touch_job(&old, Some(2), 1_000).await?;
    store.record_exit(&old, &coroner_model::ProcessEnd { rank: Rank(0), exit_code: Some(1), signal: None, at_ns: None }).await?;
    store.save_report(&old, "failed", Some(Rank(0)), Some("segfault"), "{}").await?;
    store.save_signature(&old, &sig("s1", FaultClass::Segfault, "n1"), 1_000).await?;
    store.record_job_hosts(&old, "failed", &hosts(&[("n1", 2)]), 1_000).await?;
    store.touch_job(&new, Some(2), 5_000).await?;

    let gone = store.expire_jobs(2_000).await?;
    assert_eq!(gone, vec![old.clone()]);
    assert_eq!(store.get_job(&old).await?, None);
    assert!(store.process_ends(&old).await?.is_empty(), "the job's rows go with it");
    assert!(store.get_job(&new).await?.is_some());
    assert!(store.signature(&old).await?.is_some(), "the signature outlives the job");
    assert_eq!(store.job_hosts(None).await?.len(), 1, "and so does where it ran");
    assert!(store.expire_jobs(2_000).await?.is_empty());
    Ok(())
}
