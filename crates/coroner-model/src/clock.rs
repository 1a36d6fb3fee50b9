//! NTP-style clock samples between an agent and the server.

use crate::{Nanos, Rank};
use serde::{Deserialize, Serialize};

/// One four-timestamp exchange: t1 agent send, t2 server receive, t3 server send, t4 agent receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockSample {
    pub rank: Rank,
    pub t1_agent_send: Nanos,
    pub t2_server_recv: Nanos,
    pub t3_server_send: Nanos,
    pub t4_agent_recv: Nanos,
}

impl ClockSample {
    /// How far the agent's clock is *behind* the server's: add it to an agent time to get server time.
    /// The times come from the wire: the sum is taken wide and saturates, it never overflows.
    pub fn offset_ns(&self) -> i64 {
        saturate((wide(self.t2_server_recv) - wide(self.t1_agent_send) + wide(self.t3_server_send) - wide(self.t4_agent_recv)) / 2)
    }

    /// The round trip less the server's processing time; the offset's error is at most half of it.
    pub fn round_trip_ns(&self) -> i64 {
        saturate(wide(self.t4_agent_recv) - wide(self.t1_agent_send) - (wide(self.t3_server_send) - wide(self.t2_server_recv))).max(0)
    }
}

fn wide(t: Nanos) -> i128 {
    i128::from(t)
}

fn saturate(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_and_round_trip_of_a_symmetric_exchange() {
        // Agent 5 ms behind the server, 2 ms each way, 1 ms at the server.
        let s = ClockSample {
            rank: Rank(0),
            t1_agent_send: 1_000_000,
            t2_server_recv: 1_000_000 + 5_000_000 + 2_000_000,
            t3_server_send: 1_000_000 + 5_000_000 + 3_000_000,
            t4_agent_recv: 1_000_000 + 5_000_000,
        };
        assert_eq!(s.offset_ns(), 5_000_000);
        assert_eq!(s.round_trip_ns(), 4_000_000);
    }

    /// Found by fuzzing the ingest messages: clock probes from the wire with extreme times
    /// overflowed here (a panic in debug builds, a wrapped offset in release).
    #[test]
    fn extreme_wire_times_saturate_instead_of_overflowing() {
        let s = ClockSample { rank: Rank(0), t1_agent_send: i64::MIN, t2_server_recv: i64::MAX, t3_server_send: i64::MAX, t4_agent_recv: i64::MIN };
        assert_eq!(s.offset_ns(), i64::MAX);
        assert_eq!(s.round_trip_ns(), 0);
        let s = ClockSample { rank: Rank(0), t1_agent_send: i64::MIN, t2_server_recv: 0, t3_server_send: 0, t4_agent_recv: i64::MAX };
        assert_eq!(s.round_trip_ns(), i64::MAX);
        assert_eq!(s.offset_ns(), 0);
    }
}
