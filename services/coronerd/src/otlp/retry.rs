//! An exporter's retry is not a duplicate. Pure.
//!
//! OTLP has no acknowledgement per record: a Collector or Vector that timed out, or got a 503,
//! sends the same records again, and a record carries no sequence number of its own. So a
//! record is identified by what coroner keeps of it: its (job, rank, stream), its capture time
//! (`time_unix_nano`, else `observed_time_unix_nano`, both set once by the sender and resent
//! unchanged) and its line's bytes. A record whose identity the job's index already holds, or
//! that an export carries twice, is dropped; the rest are numbered after what the job holds.
//!
//! What this costs: two records that agree on all of that (the same text, on the same rank and
//! stream, at the same nanosecond) are one line; a record that carries neither time is stamped
//! on arrival, so its retry is not recognised.

use super::mapping::Mapped;
use std::collections::HashSet;

/// A stored line's identity within its (job, rank, stream).
pub type Identity = (i64, Vec<u8>);

/// The capture-time span of `records` (both ends inclusive), where their held copies would be.
pub fn span(records: &[Mapped]) -> Option<(i64, i64)> {
    let lo = records.iter().map(|m| m.time_ns).min()?;
    let hi = records.iter().map(|m| m.time_ns).max()?;
    Some((lo, hi))
}

/// Drops from `records` (one job's, one rank's, one stream's) those whose identity is in `held`
/// or came earlier in `records`. Returns how many were dropped.
pub fn drop_held(records: &mut Vec<Mapped>, mut held: HashSet<Identity>) -> usize {
    let before = records.len();
    records.retain(|m| held.insert((m.time_ns, m.bytes.clone())));
    before - records.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use coroner_model::{JobId, Stream};

    fn rec(t: i64, line: &str) -> Mapped {
        Mapped {
            job: JobId::parse("j").expect("job id"),
            rank: Some(0),
            host: String::new(),
            world_size: None,
            stream: Stream::Stdout,
            time_ns: t,
            bytes: line.as_bytes().to_vec(),
        }
    }

    fn lines(records: &[Mapped]) -> Vec<(i64, &str)> {
        records.iter().map(|m| (m.time_ns, std::str::from_utf8(&m.bytes).unwrap_or("?"))).collect()
    }

    #[test]
    fn rule_a_record_the_index_holds_is_dropped() {
        let mut records = vec![rec(1, "a"), rec(2, "b"), rec(3, "c")];
        let held = HashSet::from([(1, b"a".to_vec()), (2, b"b".to_vec())]);
        assert_eq!(drop_held(&mut records, held), 2);
        assert_eq!(lines(&records), vec![(3, "c")]);
    }

    #[test]
    fn rule_a_record_repeated_within_one_export_is_kept_once() {
        let mut records = vec![rec(1, "a"), rec(1, "a"), rec(1, "b")];
        assert_eq!(drop_held(&mut records, HashSet::new()), 1);
        assert_eq!(lines(&records), vec![(1, "a"), (1, "b")]);
    }

    #[test]
    fn rule_the_same_text_at_another_time_is_another_line() {
        let mut records = vec![rec(2, "a")];
        assert_eq!(drop_held(&mut records, HashSet::from([(1, b"a".to_vec())])), 0);
    }

    #[test]
    fn the_span_covers_every_record() {
        assert_eq!(span(&[rec(5, "x"), rec(-2, "y"), rec(9, "z")]), Some((-2, 9)));
        assert_eq!(span(&[]), None);
    }
}
