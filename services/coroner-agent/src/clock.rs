//! NTP-style clock exchanges with the server.
//!
//! The agent stamps `t1` when it sends a probe and `t4` when the reply arrives; the server stamps
//! `t2` and `t3`. Completed samples ride along in the next `LogBatch.clock`; the agent keeps them
//! all and leaves the fitting (min-RTT selection, drift) to the server.

use coroner_model::now_ns;
use coroner_proto::auth::Channel;
use coroner_proto::v1;
use coroner_proto::v1::ingest_client::IngestClient;
use std::time::Duration;

/// How often to probe while connected.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(5);

/// One exchange; `None` when the server did not answer in time.
pub async fn probe(mut client: IngestClient<Channel>, session_id: String) -> Option<v1::ClockProbe> {
    let t1 = now_ns();
    let request = v1::ClockProbe { session_id, t1_agent_send_ns: t1, ..Default::default() };
    let reply = tokio::time::timeout(Duration::from_secs(2), client.sync_clock(request)).await.ok()?.ok()?;
    let t4 = now_ns();
    complete(reply.into_inner(), t1, t4)
}

/// The completed sample, or `None` when the reply is not an answer to this probe.
pub fn complete(reply: v1::ClockProbe, t1: i64, t4: i64) -> Option<v1::ClockProbe> {
    if reply.t1_agent_send_ns != t1 || reply.t2_server_recv_ns == 0 || reply.t3_server_send_ns < reply.t2_server_recv_ns {
        return None;
    }
    Some(v1::ClockProbe { t4_agent_recv_ns: t4, ..reply })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_becomes_a_sample_with_t4() {
        let reply = v1::ClockProbe { session_id: "s".into(), t1_agent_send_ns: 100, t2_server_recv_ns: 5_150, t3_server_send_ns: 5_160, t4_agent_recv_ns: 0 };
        let s = complete(reply.clone(), 100, 210).unwrap();
        assert_eq!(s.t4_agent_recv_ns, 210);
        let sample = coroner_model::ClockSample {
            rank: coroner_model::Rank(0),
            t1_agent_send: s.t1_agent_send_ns,
            t2_server_recv: s.t2_server_recv_ns,
            t3_server_send: s.t3_server_send_ns,
            t4_agent_recv: s.t4_agent_recv_ns,
        };
        assert_eq!(sample.offset_ns(), 5_000);
        assert_eq!(sample.round_trip_ns(), 100);
        // Not our probe, or not stamped: no sample.
        assert!(complete(reply.clone(), 99, 210).is_none());
        assert!(complete(v1::ClockProbe { t2_server_recv_ns: 0, ..reply }, 100, 210).is_none());
    }
}
