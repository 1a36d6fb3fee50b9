//! A coronerd whose database goes away answers UNAVAILABLE (retry), not INTERNAL, and answers
//! again once the database is back. The server reaches a real PostgreSQL (a fresh database per
//! run, as in takeover.rs) through a TCP relay in this test; losing the store is the relay
//! cutting every connection and refusing new ones, as a database host that went down would.
//!
//! PostgreSQL: see `postgres.rs` (`CORONER_TEST_POSTGRES_URL`, `CORONER_SKIP_POSTGRES=1`).

use crate::postgres::TestDatabase;
use crate::served::{runtime, TestServer};
use coroner_proto::v1::{self, query_client::QueryClient};
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

/// A `postgres://[user@]host[:port]/db` URL as (scheme, `user@` or nothing, `host:port`, db).
fn url_parts(url: &str) -> (&str, String, String, &str) {
    let (scheme, rest) = url.split_once("://").unwrap_or(("postgres", url));
    let (authority, db) = rest.split_once('/').unwrap_or((rest, ""));
    let (user, server) = authority.rsplit_once('@').map_or((String::new(), authority), |(u, s)| (format!("{u}@"), s));
    let server = if server.contains(':') { server.to_string() } else { format!("{server}:5432") };
    (scheme, user, server, db)
}

#[test]
fn a_lost_database_answers_unavailable_and_then_recovers() {
    let rt = runtime();
    let Some(db) = TestDatabase::create(&rt, "store_lost") else { return };
    let (scheme, user, server, name) = url_parts(&db.url);
    let (port, down) = rt.block_on(relay(server));
    run(&rt, &format!("{scheme}://{user}127.0.0.1:{port}/{name}"), down);
}

fn run(rt: &tokio::runtime::Runtime, url: &str, down: watch::Sender<bool>) {
    let served = TestServer::start_with(|c| c.database_url = Some(url.to_string()));
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
