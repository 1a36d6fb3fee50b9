//! The ingest messages of `coroner.v1` (prost decode of OpenSessionRequest, LogBatch,
//! ProcessExit, SnapshotChunk, ClockProbe), then what coronerd does with them on the way to the
//! analysis: `coroner_proto::convert::line_from_wire` for every line, the session checks of
//! `coronerd/src/ingest.rs` (job id, rank within the world size), the lines, clock samples and
//! ends into a `JobPipeline` with its live monitor on, a live evaluation and the report.
//! coronerd's own handlers are private to the service, so their checks are mirrored here.
//!
//! Input: frames of `tag, u16 length, message bytes` (`coroner_fuzz::frames`).
//! Checked: no panic; a decoded message encodes and decodes to itself; a wire line converts iff
//! its stream kind is known, keeping its bytes, seq, time and its own rank over the session's;
//! the report is for this job and its JSON reads back.

#![no_main]

use coroner_analysis::{live::LiveConfig, RuleSet};
use coroner_fuzz::{frames, Tag};
use coroner_model::{ClockSample, JobId, ProcessEnd, Rank, Report, Stream};
use coroner_pipeline::JobPipeline;
use coroner_proto::convert::{line_from_wire, line_to_wire, WireError};
use coroner_proto::v1;
use libfuzzer_sys::fuzz_target;
use prost::Message;
use std::sync::OnceLock;

/// The server's clock for live evaluation (a day after the corpus lines).
const NOW: i64 = 1_796_115_600_000_000_000;

fn rules() -> &'static RuleSet {
    static RULES: OnceLock<RuleSet> = OnceLock::new();
    RULES.get_or_init(RuleSet::builtin)
}

/// Decodes `body` as `M`; a message that decodes encodes to bytes that decode to it again.
fn decode<M: Message + Default + PartialEq + std::fmt::Debug>(body: &[u8]) -> Option<M> {
    let m = M::decode(body).ok()?;
    let again = M::decode(m.encode_to_vec().as_slice()).expect("a decoded message re-encodes to something decodable");
    assert_eq!(again, m, "decode(encode(m)) != m");
    Some(m)
}

/// What coronerd keeps of an open session.
struct Session {
    rank: Option<Rank>,
    world_size: Option<u32>,
}

fuzz_target!(|data: &[u8]| {
    let mut pipeline = JobPipeline::new("fuzz");
    pipeline.enable_live(LiveConfig::default());
    let mut session: Option<Session> = None;
    let mut fed = false;
    for (tag, body) in frames(data) {
        match tag {
            Tag::OpenSession => {
                let Some(r) = decode::<v1::OpenSessionRequest>(body) else { continue };
                if JobId::parse(&r.job_id).is_err() {
                    continue;
                }
                if let (Some(rank), Some(world)) = (r.rank, r.world_size) {
                    if rank >= world {
                        continue;
                    }
                }
                if let Some(w) = r.world_size {
                    pipeline.set_world_size(w);
                }
                if let Some(rank) = r.rank {
                    pipeline.set_host(Rank(rank), &r.host);
                }
                if let Some(base) = r.node_rank_base {
                    // One session here: its lines are numbered in lane 0.
                    pipeline.set_node_rank_base(0, base);
                }
                // coronerd marks a later attempt as begun when its session opens.
                pipeline.mark_attempt(r.attempt.unwrap_or(0), 0);
                session = Some(Session { rank: r.rank.map(Rank), world_size: r.world_size });
            }
            Tag::LogBatch => {
                let Some(batch) = decode::<v1::LogBatch>(body) else { continue };
                let Some(s) = &session else { continue };
                let mut lines = Vec::with_capacity(batch.lines.len());
                let mut refused = false;
                for wire in batch.lines {
                    let known = matches!(wire.stream, 1..=3);
                    match line_from_wire(wire.clone(), s.rank) {
                        Ok(line) => {
                            assert!(known, "stream kind {} accepted", wire.stream);
                            assert_eq!((line.seq, line.capture_ns), (wire.seq, wire.capture_ns));
                            assert_eq!(line.rank, wire.rank.map(Rank).or(s.rank));
                            // Lines over 1 MiB are cut with a marker; no fuzz input is that long.
                            if wire.raw.len() <= 1 << 20 {
                                assert_eq!(line.bytes, wire.raw);
                                let back = line_to_wire(&line);
                                assert_eq!(back, v1::LogLine { rank: line.rank.map(|r| r.0), file: String::new(), ..wire });
                            }
                            if let (Some(r), Some(w)) = (line.rank, s.world_size) {
                                if r.0 >= w {
                                    refused = true;
                                    break;
                                }
                            }
                            lines.push(line);
                        }
                        Err(e) => {
                            assert!(!known, "stream kind {} refused: {e}", wire.stream);
                            assert_eq!(e, WireError::UnknownStream { seq: wire.seq, value: wire.stream });
                            refused = true;
                            break;
                        }
                    }
                }
                if refused {
                    // coronerd refuses the whole batch.
                    continue;
                }
                if let Some(rank) = s.rank {
                    pipeline.add_clock_samples(batch.clock.iter().map(|c| ClockSample {
                        rank,
                        t1_agent_send: c.t1_agent_send_ns,
                        t2_server_recv: c.t2_server_recv_ns,
                        t3_server_send: c.t3_server_send_ns,
                        t4_agent_recv: c.t4_agent_recv_ns,
                    }));
                }
                for line in lines {
                    assert!(matches!(line.stream, Stream::Stdout | Stream::Stderr | Stream::File));
                    pipeline.push_line(line);
                    fed = true;
                }
            }
            Tag::ProcessExit => {
                let Some(r) = decode::<v1::ProcessExit>(body) else { continue };
                let Some(s) = &session else { continue };
                match r.rank.map(Rank).or(s.rank) {
                    None => {
                        pipeline.add_launcher_end(r.exit_code, r.signal);
                        pipeline.set_finished(true);
                    }
                    Some(rank) if s.world_size.is_some_and(|w| rank.0 >= w) => {}
                    Some(rank) => pipeline.add_end(ProcessEnd { rank, exit_code: r.exit_code, signal: r.signal, at_ns: (r.at_ns != 0).then_some(r.at_ns) }),
                }
            }
            Tag::SnapshotChunk => {
                let _ = decode::<v1::SnapshotChunk>(body);
            }
            Tag::ClockProbe => {
                let _ = decode::<v1::ClockProbe>(body);
            }
        }
    }
    if !fed {
        return;
    }
    if let Some(live) = pipeline.live() {
        let hangs = live.evaluate(NOW);
        let mut ranks: Vec<Rank> = hangs.iter().map(|h| h.rank).collect();
        ranks.sort();
        ranks.dedup();
        assert_eq!(ranks.len(), hangs.len(), "a rank suspected twice: {hangs:?}");
        for h in &hangs {
            assert!(h.silent_ms >= h.threshold_ms, "suspected before its threshold: {h:?}");
            assert!(h.last_lines.len() <= LiveConfig::default().last_lines, "{h:?}");
        }
    }
    let report = pipeline.report(rules());
    assert_eq!(report.job_id, "fuzz");
    let json = serde_json::to_string(&report).expect("a report serializes");
    let back: Report = serde_json::from_str(&json).unwrap_or_else(|e| panic!("a report's JSON does not read back ({e}): {json}"));
    assert_eq!(back.job_id, report.job_id);
});
