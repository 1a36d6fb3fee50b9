//! A coronerd whose database goes away answers UNAVAILABLE (retry), not INTERNAL, and answers
//! again once the database is back. The server reaches a real PostgreSQL (a fresh database per
//! run, as in takeover.rs) through a TCP relay in this test; losing the store is the relay
//! cutting every connection and refusing new ones, as a database host that went down would.
//!
//! PostgreSQL is found at `CORONER_TEST_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`); `CORONER_SKIP_POSTGRES=1` skips the test (with
//! a note) when it is unreachable.

use crate::served::{runtime, TestServer};
use coroner_proto::v1::{self, query_client::QueryClient};
use sqlx::Connection;
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A TCP relay to `upstream` on a port it bound itself; `down.send(true)` cuts every relayed
/// connection and turns new ones away until `down.send(false)`.
async fn relay(upstream: String) -> (u16, watch::Sender<bool>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the relay");
    let port = listener.local_addr().expect("relay address").port();
    let (down, watch_down) = watch::channel(false);
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            if *watch_down.borrow() {
                continue; // dropped: the client sees its connection closed at once
            }
            let upstream = upstream.clone();
            let mut cut = watch_down.clone();
            tokio::spawn(async move {
                let Ok(mut server) = TcpStream::connect(&upstream).await else { return };
                tokio::select! {
                    _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                    _ = cut.wait_for(|down| *down) => {}
                }
            });
        }
    });
    (port, down)
}

/// `host:port` of a `postgres://user@host:port/db` URL.
fn host_port(url: &str) -> String {
    let authority = url.split_once("://").map_or(url, |(_, rest)| rest).split('/').next().unwrap_or_default();
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if host.contains(':') {
        host.to_string()
    } else {
        format!("{host}:5432")
    }
}

#[test]
fn a_lost_database_answers_unavailable_and_then_recovers() {
    let admin_url = std::env::var("CORONER_TEST_POSTGRES_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let rt = runtime();
    let mut admin = match rt.block_on(sqlx::PgConnection::connect(&admin_url)) {
        Ok(c) => c,
        Err(e) if std::env::var("CORONER_SKIP_POSTGRES").is_ok_and(|v| v == "1") => {
            eprintln!("SKIPPED store_lost: PostgreSQL at {admin_url} is unreachable ({e}) and CORONER_SKIP_POSTGRES=1");
            return;
        }
        Err(e) => panic!("PostgreSQL at {admin_url} is unreachable: {e}; start it, point CORONER_TEST_POSTGRES_URL at one, or set CORONER_SKIP_POSTGRES=1"),
    };
    let db = format!("coroner_store_lost_{}", std::process::id());
    rt.block_on(sqlx::query(&format!("CREATE DATABASE {db}")).execute(&mut admin)).expect("create the test database");
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&rt, &admin_url, &db)));
    rt.block_on(sqlx::query(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)")).execute(&mut admin)).expect("drop the test database");
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

fn run(rt: &tokio::runtime::Runtime, admin_url: &str, db: &str) {
    let (port, down) = rt.block_on(relay(host_port(admin_url)));
    let user = admin_url.split_once("://").and_then(|(_, rest)| rest.split_once('@')).map_or("postgres", |(u, _)| u);
    let url = format!("postgres://{user}@127.0.0.1:{port}/{db}");
    let served = TestServer::start_with(|c| c.database_url = Some(url));
    rt.block_on(async {
        let mut q = QueryClient::connect(served.grpc_url.clone()).await.expect("connect");
        q.list_jobs(v1::ListJobsRequest::default()).await.expect("jobs while the database is up");

        down.send_replace(true);
        // The pool may hand out a connection it has not yet seen die; the first answers after the
        // loss may come from it. Every one must be UNAVAILABLE, never INTERNAL.
        let status = q.list_jobs(v1::ListJobsRequest::default()).await.expect_err("jobs without a database");
        assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
        assert!(status.message().contains("metadata store is unavailable"), "{status:?}");
        let status = q.get_report(v1::GetReportRequest { job_id: "never-seen".into() }).await.expect_err("a report without a database");
        assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");

        // Back up: the same server answers again without a restart (what a client's retry sees).
        down.send_replace(false);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match q.list_jobs(v1::ListJobsRequest::default()).await {
                Ok(_) => break,
                Err(s) => {
                    assert_eq!(s.code(), tonic::Code::Unavailable, "{s:?}");
                    assert!(Instant::now() < deadline, "coronerd did not recover from the database's return: {s:?}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    });
}
