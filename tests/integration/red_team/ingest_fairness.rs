//! Finding: "One slow client holds everyone's ingest." A client that never read its
//! acknowledgements pinned 240 MB of the 256 MB budget and another job's agent timed out; eight
//! streams of 60 MiB batches peaked at 1.9 GB. Now a batch's budget goes back at its commit,
//! a stream holds at most its share, and the budget is reserved before a batch is decoded.

use super::{ingest, line, session, threads_and_rss};
use crate::served::{runtime, Served, TestServer};
use coroner_proto::v1;
use std::time::{Duration, Instant};

#[test]
fn a_stalled_reader_does_not_delay_another_jobs_acknowledgements() {
    let server = TestServer::start_with(|c| c.ingest_buffer_mb = 32);
    runtime().block_on(async {
        let mut stalled = ingest(&server.grpc_url).await;
        let s = session(&mut stalled, "rt-stalled", 0, 1, "node-a", "a").await;
        // 400 batches of ~1 MiB (400 MiB against a 32 MiB budget), acknowledgements never read.
        let (tx, rx) = tokio::sync::mpsc::channel::<v1::LogBatch>(4);
        let _acks = stalled.ship_logs(tokio_stream::wrappers::ReceiverStream::new(rx)).await.expect("ShipLogs");
        let sid = s.clone();
        let sender = tokio::spawn(async move {
            let text = vec![b'x'; 1000];
            let mut sent = 0u64;
            for b in 0..400u64 {
                let lines = (0..1000).map(|i| line(b * 1000 + i, &text)).collect();
                if tx.send(v1::LogBatch { session_id: sid.clone(), batch_id: b, lines, ..Default::default() }).await.is_err() {
                    break;
                }
                sent += 1;
            }
            sent
        });
        tokio::time::sleep(Duration::from_secs(3)).await;
        // Another job's agent: its acknowledgements come back at once.
        let mut other = ingest(&server.grpc_url).await;
        let o = session(&mut other, "rt-other", 0, 1, "node-b", "b").await;
        let mut worst = Duration::ZERO;
        for round in 0..5u64 {
            let started = Instant::now();
            super::ship(&mut other, &o, (0..100).map(|i| line(round * 100 + i, b"step loss")).collect(), 100).await;
            worst = worst.max(started.elapsed());
        }
        println!("another job's acknowledgements while a reader stalls: worst {worst:?}");
        assert!(worst < Duration::from_secs(5), "another job waited {worst:?} behind a stalled reader");
        sender.abort();
    });
    let (_, metrics) = server.get("/metrics");
    let buffered = super::metric(&metrics, "coroner_ingest_buffered_bytes");
    println!("budget held with the reader stalled: {buffered} bytes");
    assert!(buffered <= (32u64 << 20) as f64, "{buffered}");
}

#[test]
fn large_batches_are_reserved_before_they_are_decoded() {
    let server = Served::start_with(&["--ingest-buffer-mb", "64"]);
    let (_, rss0) = threads_and_rss(server.pid());
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let watch = {
        let (pid, peak) = (server.pid(), peak.clone());
        std::thread::spawn(move || {
            for _ in 0..400 {
                let (_, rss) = threads_and_rss(pid);
                peak.fetch_max(rss, std::sync::atomic::Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    runtime().block_on(async {
        let mut streams = Vec::new();
        for k in 0..8u32 {
            let url = server.grpc_url.clone();
            streams.push(tokio::spawn(async move {
                let mut client = ingest(&url).await;
                let s = session(&mut client, &format!("rt-big-{k}"), 0, 1, "node-a", "a").await;
                // Two batches of 60 MiB of lines each (the red team's eight streams).
                let text = vec![b'y'; 60 << 10];
                let batches: Vec<v1::LogBatch> = (0..2u64)
                    .map(|b| v1::LogBatch {
                        session_id: s.clone(),
                        batch_id: b,
                        lines: (0..1000).map(|i| line(b * 1000 + i, &text)).collect(),
                        ..Default::default()
                    })
                    .collect();
                let mut acks = client.ship_logs(tokio_stream::iter(batches)).await.expect("ShipLogs").into_inner();
                for _ in 0..2 {
                    tokio::time::timeout(Duration::from_secs(300), acks.message()).await.expect("in time").expect("ack").expect("ack");
                }
            }));
        }
        for s in streams {
            s.await.expect("a stream");
        }
    });
    let _ = watch.join();
    let peak = peak.load(std::sync::atomic::Ordering::Relaxed);
    println!("eight streams of 60 MiB batches, 64 MiB budget: RSS {rss0} MiB before, peak {peak} MiB");
    assert!(peak < rss0 + 1200, "peak RSS {peak} MiB");
}
