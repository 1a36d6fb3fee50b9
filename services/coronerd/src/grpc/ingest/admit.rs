//! A batch's lines as the server keeps them. One bad line never costs the batch's other lines
//! (an agent drops a whole batch the server refuses, so refusing for one line loses them all):
//!
//! - a line whose stream kind is unspecified or unknown is left out (its number is skipped);
//! - a line that names a rank beyond the session's world size is kept under that rank (it is
//!   what the agent saw; the world size may be the wrong one);
//! - a line over 1 MiB is cut with a marker (`coroner_proto::convert::line_from_wire`);
//! - a line numbered `u64::MAX` is left out: it has no successor, and dedup keeps "the next number
//!   expected" (it wrapped to 0 and took every later line for new).
//!
//! Each kind of problem becomes one note in the job's report per agent host.

use coroner_model::{LogLine, Rank};
use coroner_proto::convert::line_from_wire;
use coroner_proto::v1;

pub(super) struct Admitted {
    pub lines: Vec<LogLine>,
    /// For the job's report.
    pub notes: Vec<String>,
}

pub(super) fn admit(wire: Vec<v1::LogLine>, session_rank: Option<Rank>, world_size: Option<u32>, host: &str) -> Admitted {
    let mut lines = Vec::with_capacity(wire.len());
    let mut unknown_stream = (0u64, None);
    let mut beyond: Vec<(u32, u64)> = Vec::new();
    let mut unnumbered = 0u64;
    for l in wire {
        if l.seq == u64::MAX {
            unnumbered += 1;
            continue;
        }
        match line_from_wire(l, session_rank) {
            Ok(line) => {
                if let (Some(r), Some(w)) = (line.rank, world_size) {
                    if r.0 >= w {
                        match beyond.iter_mut().find(|(b, _)| *b == r.0) {
                            Some((_, n)) => *n += 1,
                            None => beyond.push((r.0, 1)),
                        }
                    }
                }
                lines.push(line);
            }
            Err(e) => {
                unknown_stream.0 += 1;
                unknown_stream.1.get_or_insert(e.to_string());
            }
        }
    }
    let mut notes = Vec::new();
    if unnumbered > 0 {
        notes.push(format!("the agent on {host} sent {unnumbered} lines numbered {}; they were left out", u64::MAX));
    }
    if let (n, Some(first)) = unknown_stream {
        tracing::warn!(host, "left out {n} lines of a batch: {first}");
        notes.push(format!("the agent on {host} sent lines with an unknown stream kind; they were left out ({first})"));
    }
    for (rank, n) in beyond {
        let w = world_size.unwrap_or_default();
        tracing::warn!(host, rank, world_size = w, lines = n, "lines name a rank beyond the world size; kept under that rank");
        notes.push(format!("the agent on {host} filed lines under rank {rank}, beyond its world size {w}; they are kept under rank {rank}"));
    }
    Admitted { lines, notes }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(seq: u64, stream: i32, rank: Option<u32>) -> v1::LogLine {
        v1::LogLine { seq, stream, rank, raw: format!("line {seq}").into_bytes(), ..Default::default() }
    }

    #[test]
    fn bad_lines_cost_only_themselves_and_are_told() {
        let a = admit(vec![wire(0, 1, None), wire(1, 0, None), wire(2, 1, Some(9)), wire(3, 2, Some(9)), wire(4, 1, Some(1))], None, Some(4), "node-a");
        let got: Vec<(u64, Option<u32>)> = a.lines.iter().map(|l| (l.seq, l.rank.map(|r| r.0))).collect();
        assert_eq!(got, vec![(0, None), (2, Some(9)), (3, Some(9)), (4, Some(1))]);
        assert_eq!(a.notes.len(), 2, "{:?}", a.notes);
        assert!(a.notes[0].contains("unknown stream kind") && a.notes[0].contains("node-a"), "{:?}", a.notes);
        assert!(a.notes[1].contains("rank 9") && a.notes[1].contains("world size 4"), "{:?}", a.notes);
        assert!(admit(vec![wire(0, 1, Some(3))], None, Some(4), "h").notes.is_empty());
    }

    #[test]
    fn a_line_numbered_u64_max_is_left_out_and_told() {
        let a = admit(vec![wire(5, 1, None), wire(u64::MAX, 1, None)], None, None, "node-a");
        assert_eq!(a.lines.iter().map(|l| l.seq).collect::<Vec<_>>(), vec![5]);
        assert!(a.notes.iter().any(|n| n.contains("18446744073709551615")), "{:?}", a.notes);
    }
}
