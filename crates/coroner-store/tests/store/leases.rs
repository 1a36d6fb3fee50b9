//! Conformance cases for job ownership leases (several coronerd instances on one database), run
//! against every backend through `suite.rs`. TTLs are real time on the database's clock, so the
//! expiry cases wait a little past a short TTL.

use anyhow::Result;
use coroner_model::JobId;
use coroner_store::{Claimant, Lease, LeaseGrant, Metastore};
use std::sync::Arc;
use std::time::Duration;

type Store = Arc<dyn Metastore>;

const LONG: Duration = Duration::from_secs(60);
const SHORT: Duration = Duration::from_millis(300);

fn job(s: &str) -> JobId {
    JobId::parse(s).expect("valid job id")
}

/// Instance `name`, serving at `http://name:7070` (gRPC) and `:7071` (HTTP).
fn who(name: &str) -> Claimant {
    let host = name.to_lowercase();
    Claimant { owner: name.to_string(), grpc_address: format!("http://{host}:7070"), http_address: format!("http://{host}:7071") }
}

fn granted(g: LeaseGrant) -> Lease {
    match g {
        LeaseGrant::Granted(l) => l,
        LeaseGrant::HeldBy(l) => panic!("expected the lease, but {} holds it", l.owner),
    }
}

fn held_by(g: LeaseGrant) -> Lease {
    match g {
        LeaseGrant::HeldBy(l) => l,
        LeaseGrant::Granted(l) => panic!("expected a refusal, but {} got the lease", l.owner),
    }
}

async fn expire(ttl: Duration) {
    tokio::time::sleep(ttl + Duration::from_millis(150)).await;
}

pub async fn a_lease_is_exclusive_while_it_lives(store: Store) -> Result<()> {
    let j = job("lease-a");
    assert_eq!(store.lease_holder(&j).await?, None);
    let a = granted(store.acquire_lease(&j, &who("A"), LONG).await?);
    assert_eq!((a.owner.as_str(), a.grpc_address.as_str(), a.http_address.as_str(), a.epoch), ("A", "http://a:7070", "http://a:7071", 1));
    let refused = held_by(store.acquire_lease(&j, &who("B"), LONG).await?);
    assert_eq!(refused, a, "B is told who owns the job and where");
    assert_eq!(store.lease_holder(&j).await?, Some(a.clone()));
    // The owner asking again keeps its epoch; its expiry only moves forward.
    let again = granted(store.acquire_lease(&j, &who("A"), LONG).await?);
    assert_eq!(again.epoch, 1);
    assert!(again.expires_ns >= a.expires_ns);
    // Leases are per job.
    let other = granted(store.acquire_lease(&job("lease-a2"), &who("B"), LONG).await?);
    assert_eq!(other.owner, "B");
    Ok(())
}

pub async fn an_expired_lease_is_taken_over_with_a_new_epoch(store: Store) -> Result<()> {
    let j = job("lease-b");
    let a = granted(store.acquire_lease(&j, &who("A"), SHORT).await?);
    expire(SHORT).await;
    assert_eq!(store.lease_holder(&j).await?, None, "an expired lease has no holder");
    let b = granted(store.acquire_lease(&j, &who("B"), LONG).await?);
    assert_eq!((b.owner.as_str(), b.epoch), ("B", a.epoch + 1));
    // The old owner can neither renew nor release the lease it lost.
    assert_eq!(store.renew_lease(&j, "A", a.epoch, LONG).await?, None);
    assert!(!store.release_lease(&j, "A", a.epoch).await?);
    assert_eq!(store.lease_holder(&j).await?.map(|l| l.owner), Some("B".into()));
    // Even the same owner coming back after expiry gets a new epoch: it may have missed writes.
    let c = granted(store.acquire_lease(&job("lease-b2"), &who("A"), SHORT).await?);
    expire(SHORT).await;
    let c2 = granted(store.acquire_lease(&job("lease-b2"), &who("A"), LONG).await?);
    assert_eq!(c2.epoch, c.epoch + 1);
    Ok(())
}

pub async fn renewing_extends_and_releasing_frees_without_resetting_the_epoch(store: Store) -> Result<()> {
    let j = job("lease-c");
    let a = granted(store.acquire_lease(&j, &who("A"), SHORT).await?);
    for _ in 0..3 {
        tokio::time::sleep(SHORT / 3).await;
        let renewed = store.renew_lease(&j, "A", a.epoch, SHORT).await?.expect("still A's");
        assert_eq!(renewed.epoch, a.epoch);
    }
    // Renewed past its first expiry: still A's.
    assert_eq!(store.lease_holder(&j).await?.map(|l| l.owner), Some("A".into()));
    assert_eq!(store.renew_lease(&j, "A", a.epoch + 1, SHORT).await?, None, "a wrong epoch does not renew");
    assert_eq!(store.renew_lease(&j, "B", a.epoch, SHORT).await?, None, "nor does another owner");
    assert!(store.release_lease(&j, "A", a.epoch).await?);
    assert_eq!(store.lease_holder(&j).await?, None);
    assert!(!store.release_lease(&j, "A", a.epoch).await?, "releasing twice does nothing");
    let b = granted(store.acquire_lease(&j, &who("B"), LONG).await?);
    assert_eq!(b.epoch, a.epoch + 1, "the epoch survives a release");
    Ok(())
}

pub async fn concurrent_acquires_grant_one_owner(store: Store) -> Result<()> {
    let j = job("lease-d");
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let store = store.clone();
            let j = j.clone();
            tokio::spawn(async move { store.acquire_lease(&j, &who(&format!("I{i}")), LONG).await })
        })
        .collect();
    let mut winners = Vec::new();
    let mut told = Vec::new();
    for t in tasks {
        match t.await?? {
            LeaseGrant::Granted(l) => winners.push(l),
            LeaseGrant::HeldBy(l) => told.push(l),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one instance owns the job: {winners:?}");
    assert!(told.iter().all(|l| *l == winners[0]), "the others are told who owns it");
    Ok(())
}
