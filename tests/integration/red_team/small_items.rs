//! Finding: the smaller items. `seq = u64::MAX` wrapped the dedup; a dropped-lines count of
//! 2^64-1 wrapped a counter; no header-read timeout on HTTP; no Cache-Control, CSP,
//! X-Frame-Options or nosniff on authenticated pages. (The `Secure` cookie under TLS:
//! `auth.rs`'s unit test; a new upload at offset 0: `partial_uploads.rs`.)

use super::{http, ingest, line, metric, session, ship};
use crate::served::{runtime, TestServer};
use coroner_proto::v1::{self, query_client::QueryClient};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

#[test]
fn seq_u64_max_does_not_wrap_the_dedup_and_dropped_lines_do_not_wrap_the_counter() {
    let server = TestServer::start();
    runtime().block_on(async {
        let mut client = ingest(&server.grpc_url).await;
        let s = session(&mut client, "rt-seq", 0, 1, "node-a", "a").await;
        ship(&mut client, &s, vec![line(0, b"first"), line(1, b"second"), line(u64::MAX, b"the end of numbers")], 10).await;
        // The same lines again (a resend): all duplicates, none indexed twice.
        let batch = v1::LogBatch { session_id: s.clone(), batch_id: 9, lines: vec![line(0, b"first"), line(1, b"second")], ..Default::default() };
        let mut acks = client.ship_logs(tokio_stream::iter(vec![batch])).await.expect("ShipLogs").into_inner();
        let ack = acks.message().await.expect("ack").expect("ack");
        assert_eq!(ack.duplicates, 2, "a resend after u64::MAX is still a resend");
        let mut query = QueryClient::connect(server.grpc_url.clone()).await.expect("connect");
        let r = query.search(v1::SearchRequest { job_id: "rt-seq".into(), limit: 10, ..Default::default() }).await.expect("search").into_inner();
        assert_eq!(r.total, 2, "{:?}", r.hits);
        for _ in 0..2 {
            let exit = v1::ProcessExit { session_id: s.clone(), rank: Some(0), exit_code: Some(1), dropped_lines: u64::MAX, ..Default::default() };
            client.report_exit(exit).await.expect("ReportExit");
        }
    });
    let (_, metrics) = server.get("/metrics");
    assert_eq!(metric(&metrics, "coroner_agent_dropped_lines_total"), u64::MAX as f64, "{metrics}");
}

#[test]
fn a_slow_header_is_cut_off_and_pages_carry_the_security_headers() {
    let server = TestServer::start_with(|c| c.limits.http_header_timeout = Duration::from_secs(1));
    let mut slow = std::net::TcpStream::connect(("127.0.0.1", server.http_port)).expect("connect");
    slow.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").expect("half a request");
    slow.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
    let started = Instant::now();
    let mut rest = Vec::new();
    let _ = slow.read_to_end(&mut rest);
    println!("a request whose headers never end was cut off after {:?}", started.elapsed());
    assert!(started.elapsed() < Duration::from_secs(10), "the slow client held its connection {:?}", started.elapsed());
    let (status, head, _) = http(server.http_port, "GET / HTTP/1.0\r\nHost: x\r\n\r\n");
    assert_eq!(status, 200);
    let head = head.to_ascii_lowercase();
    for h in ["cache-control: no-store", "content-security-policy: default-src 'self'", "x-frame-options: deny", "x-content-type-options: nosniff"] {
        assert!(head.contains(h), "missing {h}: {head}");
    }
}
