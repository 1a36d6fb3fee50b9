//! Which agents speak for which rank of a job, and the range of sequence numbers each numbers
//! its lines in.
//!
//! Deduplication is by (rank, stream, sequence number): a line whose number the server already
//! passed is taken for a resent one. Two agents numbering one rank's lines from the same place
//! (two processes started with the same `RANK`, a restarted agent whose predecessor is still
//! shipping, two per-node launchers sharing the rankless streams) would see each other's lines
//! dropped as duplicates: silent loss. So the number space of each (rank, stream) is split into
//! **lanes** of 2^40 numbers (`seq >> 40`), each deduplicated on its own, and every new agent
//! instance that says it can (`OpenSessionRequest.seq_lanes`) gets a lane no other instance of
//! that rank ever had (`OpenSessionResponse.seq_offset`): the first instance lane 0, so a job
//! with one agent per rank numbers exactly as before, each later one the next lane. A reconnecting
//! instance names its offset and keeps its lane. Nothing here decides what is a duplicate: the
//! lanes alone keep instances apart, whatever the server knows about their liveness.
//!
//! Claims also tell the operator: an instance that opens a rank while another instance of that
//! rank has not reported its process end gets a note in the job's report. Clients that do not
//! number by lanes (older agents, `coroner import`, which numbers a bundle's lines itself) stay
//! in lane 0, as before; an import is not a live process and never counts as a claimant.

use super::positions::{lane_of, lane_start, Positions};
use std::collections::HashMap;

/// What opened a session, as far as claims go.
#[derive(Debug, Clone)]
pub struct Opening<'a> {
    pub session_id: &'a str,
    /// The session's rank; `None` for a per-node launcher agent.
    pub rank: Option<u32>,
    pub instance: &'a str,
    pub host: &'a str,
    pub pid: u32,
    pub launcher: &'a str,
    /// The client numbers from the offset it is given.
    pub lanes: bool,
    /// The offset an earlier session gave this instance.
    pub offset: Option<u64>,
}

/// What a session is told, and what the operator should hear.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Granted {
    pub lane: u32,
    /// `OpenSessionResponse.seq_offset`.
    pub seq_offset: u64,
    /// `OpenSessionResponse.resume_from`: the session's lane's positions, `<rank>/<stream>` keys.
    pub resume_from: HashMap<String, u64>,
    pub note: Option<String>,
    /// A new agent instance of a rank every earlier instance of which reported its process end:
    /// the rank started again, a later attempt of the job (what Slurm's requeue or a restarted
    /// pod does, whether or not its environment counts the restart).
    pub restarted: bool,
}

#[derive(Debug, Clone)]
struct Claim {
    instance: String,
    host: String,
    pid: u32,
    lane: u32,
    ended: bool,
}

/// A job's claims: per session rank, every agent instance seen by this server process.
#[derive(Debug, Default)]
pub struct Claims {
    by_rank: HashMap<Option<u32>, Vec<Claim>>,
    /// Session id to (rank, instance), to end a claim when its process end arrives.
    sessions: HashMap<String, (Option<u32>, String)>,
    /// Every (rank, instance) that opened a session, imports included.
    speakers: std::collections::HashSet<(Option<u32>, String)>,
}

fn is_import(launcher: &str) -> bool {
    launcher.starts_with("import")
}

fn rank_label(rank: Option<u32>) -> String {
    rank.map(|r| format!("rank {r}")).unwrap_or_else(|| "the launcher lines (no rank)".into())
}

impl Claims {
    /// Registers a session and says which lane it numbers in. `positions` are the job's
    /// committed positions (lanes already used, from before a restart, are never handed out again).
    pub fn open(&mut self, o: &Opening<'_>, positions: &Positions) -> Granted {
        let claims = self.by_rank.entry(o.rank).or_default();
        let known = claims.iter().position(|c| c.instance == o.instance);
        let lane = match (o.offset, known) {
            (Some(offset), _) => lane_of(offset),
            (None, Some(i)) => claims[i].lane,
            (None, None) if !o.lanes => 0,
            (None, None) => {
                let used = positions.keys().filter(|(r, _, _)| *r == o.rank).map(|(_, _, l)| *l);
                let held = claims.iter().map(|c| c.lane);
                used.chain(held).max().map_or(0, |l| l + 1)
            }
        };
        let restarted = known.is_none() && o.rank.is_some() && !is_import(o.launcher) && !claims.is_empty() && claims.iter().all(|c| c.ended);
        let note = match known {
            Some(_) => None,
            None if is_import(o.launcher) => None,
            None => claims.iter().find(|c| !c.ended).map(|other| {
                let apart = if o.lanes {
                    format!("its lines are numbered apart (lane {lane}) so none is taken for a duplicate")
                } else {
                    "this agent cannot number apart (upgrade it): lines of the two that share numbers are taken for duplicates".into()
                };
                format!(
                    "{}: the agent on {} (pid {}) opened a session while the agent on {} (pid {}) had not reported its process end; {apart}",
                    rank_label(o.rank),
                    o.host,
                    o.pid,
                    other.host,
                    other.pid
                )
            }),
        };
        match known {
            Some(i) => {
                claims[i].lane = lane;
                claims[i].ended = false;
            }
            None if is_import(o.launcher) => {}
            None => claims.push(Claim { instance: o.instance.to_string(), host: o.host.to_string(), pid: o.pid, lane, ended: false }),
        }
        self.sessions.insert(o.session_id.to_string(), (o.rank, o.instance.to_string()));
        self.speakers.insert((o.rank, o.instance.to_string()));
        // A ranked session resumes its own rank's streams only (its agent ships nothing else).
        let resume_from = positions
            .iter()
            .filter(|((r, _, l), _)| *l == lane && (o.rank.is_none() || *r == o.rank))
            .map(|((rank, stream, _), next)| {
                let rank = rank.map(|r| r.to_string()).unwrap_or_else(|| "-".into());
                (format!("{rank}/{}", stream.as_str()), *next)
            })
            .collect();
        Granted { lane, seq_offset: lane_start(lane), resume_from, note, restarted }
    }

    /// How many agents (rank and instance) opened sessions, imports and launchers included.
    pub fn speakers(&self) -> usize {
        self.speakers.len()
    }

    /// The process the session speaks for ended.
    pub fn end(&mut self, session_id: &str) {
        let Some((rank, instance)) = self.sessions.get(session_id) else { return };
        if let Some(c) = self.by_rank.get_mut(rank).and_then(|v| v.iter_mut().find(|c| &c.instance == instance)) {
            c.ended = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::positions::LANE_BITS;
    use coroner_model::Stream;

    fn opening<'a>(session_id: &'a str, instance: &'a str, host: &'a str) -> Opening<'a> {
        Opening { session_id, rank: Some(3), instance, host, pid: 7, launcher: "none", lanes: true, offset: None }
    }

    #[test]
    fn the_first_agent_of_a_rank_numbers_as_before_and_a_second_gets_a_lane_of_its_own() {
        let mut c = Claims::default();
        let mut pos = Positions::new();
        pos.insert((Some(3), Stream::Stdout, 0), 120);
        pos.insert((Some(4), Stream::Stdout, 0), 9);
        let a = c.open(&opening("s1", "a", "h1"), &pos);
        // The first instance this server sees continues lane 0 only when nothing was numbered
        // there yet; here lane 0 holds lines from before a restart, so it gets lane 1.
        assert_eq!(a.lane, 1);
        let mut c = Claims::default();
        let first = c.open(&opening("s1", "a", "h1"), &Positions::new());
        assert_eq!((first.lane, first.seq_offset, first.note.clone()), (0, 0, None));
        let second = c.open(&opening("s2", "b", "h2"), &Positions::new());
        assert_eq!((second.lane, second.seq_offset), (1, 1 << 40));
        let note = second.note.expect("the operator is told");
        assert!(note.contains("rank 3") && note.contains("h2") && note.contains("h1") && note.contains("lane 1"), "{note}");
    }

    #[test]
    fn a_reconnecting_instance_keeps_its_lane_and_sees_its_own_positions() {
        let mut c = Claims::default();
        let mut pos = Positions::new();
        pos.insert((Some(3), Stream::Stdout, 0), 50);
        pos.insert((Some(3), Stream::Stdout, 2), lane_start(2) + 8);
        let again = c.open(&Opening { offset: Some(lane_start(2)), ..opening("s9", "a", "h1") }, &pos);
        assert_eq!(again.lane, 2);
        assert_eq!(again.resume_from, HashMap::from([("3/stdout".to_string(), lane_start(2) + 8)]));
        assert_eq!(again.note, None);
        // Known instance without an offset (an agent that never learnt one): same lane.
        let same = c.open(&opening("s10", "a", "h1"), &pos);
        assert_eq!(same.lane, 2);
        // A new instance gets a lane beyond every used one.
        let fresh = c.open(&opening("s11", "b", "h1"), &pos);
        assert_eq!(fresh.lane, 3);
        assert!(fresh.resume_from.is_empty());
    }

    #[test]
    fn an_ended_claim_is_no_conflict_and_imports_and_old_clients_stay_in_lane_0() {
        let mut c = Claims::default();
        let first = c.open(&opening("s1", "a", "h1"), &Positions::new());
        c.end("s1");
        let restarted = c.open(&opening("s2", "b", "h1"), &Positions::new());
        assert!(!first.restarted && restarted.restarted, "a new agent of a rank whose process ended is a restart");
        assert_eq!((first.lane, restarted.lane, restarted.note), (0, 1, None));
        let old = c.open(&Opening { lanes: false, ..opening("s3", "c", "h2") }, &Positions::new());
        assert_eq!(old.lane, 0);
        assert!(old.note.expect("still told").contains("cannot number apart"));
        let import = c.open(&Opening { launcher: "import", lanes: false, ..opening("s4", "import-1", "h3") }, &Positions::new());
        assert_eq!((import.lane, import.note), (0, None));
        // An import never counts as a live claimant.
        c.end("s2");
        c.end("s3");
        assert_eq!(c.open(&opening("s5", "d", "h1"), &Positions::new()).note, None);
    }

    #[test]
    fn lanes_split_the_number_space() {
        assert_eq!(lane_of(5), 0);
        assert_eq!(lane_of(lane_start(7) + 5), 7);
        assert_eq!(lane_start(1), 1 << LANE_BITS);
    }
}
