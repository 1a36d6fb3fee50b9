//! Where this agent instance's sequence numbers start on the server.
//!
//! The agent numbers each (rank, stream) from 0. Its first session tells it where each stream
//! starts on the server: `resume_from` names the streams the server already holds lines of, and
//! `seq_offset` is the start of a lane of numbers of this instance's own for every other stream
//! (so two agents speaking for one rank never collide). That pair is the instance's [`SeqBase`]:
//! learnt once, spooled (so a replaying agent sends an orphan's lines in its lane), and named
//! again when reopening a session (`OpenSessionRequest.seq_offset`), so the instance keeps its
//! lane across reconnects.
//!
//! A base spooled by an agent from before lanes has no offset: its streams start at 0.

use coroner_proto::v1;
use std::collections::HashMap;

/// The stream key the server uses in `resume_from`: `<rank>/<stream>`, `-` for no rank.
pub fn stream_key(rank: Option<u32>, stream: i32) -> String {
    let rank = rank.map(|r| r.to_string()).unwrap_or_else(|| "-".into());
    let stream = match v1::StreamKind::try_from(stream) {
        Ok(v1::StreamKind::Stdout) => "stdout",
        Ok(v1::StreamKind::Stderr) => "stderr",
        Ok(v1::StreamKind::File) => "file",
        _ => "unknown",
    };
    format!("{rank}/{stream}")
}

/// This instance's sequence base: each named stream's start, and the lane for the others.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeqBase {
    /// Streams the server already held lines of when the base was learnt (`resume_from`).
    streams: HashMap<String, u64>,
    /// Where this instance numbers every other stream (the session's `seq_offset`).
    offset: u64,
}

impl SeqBase {
    /// The base an `OpenSession` answer gives: `resume_from`, and `seq_offset` for other streams.
    pub fn from_session(resume_from: &HashMap<String, u64>, seq_offset: u64) -> Self {
        SeqBase { streams: resume_from.clone(), offset: seq_offset }
    }

    /// Where the stream `key` (see [`stream_key`]) starts.
    pub fn start_of(&self, key: &str) -> u64 {
        self.streams.get(key).copied().unwrap_or(self.offset)
    }

    /// The lane's start, named when reopening a session.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The named streams, sorted by key (for the spool's base record).
    pub fn streams(&self) -> impl Iterator<Item = (&str, u64)> {
        let mut entries: Vec<_> = self.streams.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        entries.sort();
        entries.into_iter()
    }

    /// A base from its parts as the spool keeps them.
    pub fn from_parts(streams: HashMap<String, u64>, offset: u64) -> Self {
        SeqBase { streams, offset }
    }
}

/// Rebases a batch's local sequence numbers (on `base`, or none for lines numbered on it
/// already) and leaves out lines the server already has.
pub fn prepare_lines(lines: &[v1::LogLine], session_rank: Option<u32>, base: Option<&SeqBase>, resume_from: &HashMap<String, u64>) -> Vec<v1::LogLine> {
    lines
        .iter()
        .filter_map(|l| {
            let key = stream_key(l.rank.or(session_rank), l.stream);
            let seq = base.map_or(0, |b| b.start_of(&key)) + l.seq;
            (seq >= resume_from.get(&key).copied().unwrap_or(0)).then(|| v1::LogLine { seq, ..l.clone() })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_rebased_and_already_delivered_ones_skipped() {
        let line = |rank: Option<u32>, stream: i32, seq: u64| v1::LogLine { rank, stream, seq, ..Default::default() };
        let lines = vec![line(None, 1, 0), line(None, 1, 1), line(None, 2, 0), line(Some(4), 1, 0)];
        let base = SeqBase::from_session(&[("3/stdout".to_string(), 10)].into(), 0);
        let resume: HashMap<String, u64> = [("3/stdout".to_string(), 11), ("4/stdout".to_string(), 0)].into();
        let out = prepare_lines(&lines, Some(3), Some(&base), &resume);
        let got: Vec<(Option<u32>, i32, u64)> = out.iter().map(|l| (l.rank, l.stream, l.seq)).collect();
        assert_eq!(got, vec![(None, 1, 11), (None, 2, 0), (Some(4), 1, 0)]);
        assert_eq!(stream_key(None, 2), "-/stderr");
    }

    #[test]
    fn streams_the_server_did_not_name_start_at_the_sessions_offset() {
        let line = |stream: i32, seq: u64| v1::LogLine { stream, seq, ..Default::default() };
        let base = SeqBase::from_session(&[("3/stdout".to_string(), 10)].into(), 1 << 40);
        let out = prepare_lines(&[line(1, 0), line(2, 5)], Some(3), Some(&base), &HashMap::new());
        let got: Vec<u64> = out.iter().map(|l| l.seq).collect();
        assert_eq!(got, vec![10, (1 << 40) + 5]);
        // Lines numbered on the base already keep their numbers.
        let out = prepare_lines(&[line(2, 5)], Some(3), None, &HashMap::new());
        assert_eq!(out[0].seq, 5);
        // A base without an offset (an older agent's): streams start at 0.
        assert_eq!(SeqBase::default().start_of("3/stderr"), 0);
    }
}
