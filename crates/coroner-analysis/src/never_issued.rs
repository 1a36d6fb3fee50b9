//! "Which rank never issued collective k of group g?", asked once per victim of a cascade: on a
//! 16,384-rank job that is 16k questions over 16k ranks, so each is a binary search over the
//! group's ranks sorted by their last enqueued collective instead of a scan.

use crate::progress::Progress;
use coroner_model::{PgId, Rank, SeqNo};
use std::collections::HashMap;

/// One process group's ranks that reported a last enqueued collective.
struct Group {
    /// Last enqueued collective of each rank, ascending.
    enqueued: Vec<SeqNo>,
    /// For the ranks `..=i` of `enqueued`: the lowest and the second lowest rank.
    lowest: Vec<(Rank, Option<Rank>)>,
}

/// The never-issued lookup over a job's collective progress, built once per analysis.
pub struct NeverIssued<'p> {
    progress: &'p Progress,
    groups: HashMap<&'p PgId, Group>,
}

impl<'p> NeverIssued<'p> {
    pub fn new(progress: &'p Progress) -> Self {
        let groups = progress
            .groups
            .iter()
            .map(|(pg, ranks)| {
                let mut rows: Vec<(SeqNo, Rank)> = ranks.iter().filter_map(|(r, p)| Some((p.last_enqueued?, *r))).collect();
                rows.sort_unstable();
                let mut lowest = Vec::with_capacity(rows.len());
                let mut acc: Option<(Rank, Option<Rank>)> = None;
                for (_, r) in &rows {
                    acc = Some(match acc {
                        None => (*r, None),
                        Some((a, _)) if *r < a => (*r, Some(a)),
                        Some((a, b)) => (a, Some(b.map_or(*r, |b| b.min(*r)))),
                    });
                    lowest.extend(acc);
                }
                (pg, Group { enqueued: rows.into_iter().map(|(s, _)| s).collect(), lowest })
            })
            .collect();
        NeverIssued { progress, groups }
    }

    /// Of the ranks of `pg` other than `rank` whose last enqueued collective is before `seq`: the
    /// culprit when it is one of them, else the lowest. Ranks that reported no progress on the
    /// group are not counted (nothing says what they issued).
    pub fn parent(&self, pg: &PgId, seq: SeqNo, rank: Rank, culprit: Rank) -> Option<Rank> {
        let ranks = self.progress.groups.get(pg)?;
        if culprit != rank && ranks.get(&culprit).is_some_and(|p| p.last_enqueued.is_some_and(|e| e < seq)) {
            return Some(culprit);
        }
        let group = self.groups.get(pg)?;
        let before = group.enqueued.partition_point(|e| *e < seq);
        let (lowest, second) = *group.lowest.get(before.checked_sub(1)?)?;
        if lowest != rank {
            Some(lowest)
        } else {
            second
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::progress::PgProgress;

    fn progress(rows: &[(u32, Option<u64>)]) -> Progress {
        let mut p = Progress::default();
        let g = p.groups.entry(PgId::default_pg()).or_default();
        for (r, en) in rows {
            g.insert(Rank(*r), PgProgress { last_enqueued: en.map(SeqNo), ..Default::default() });
        }
        p
    }

    /// The scan this replaces, as the reference.
    fn scan(p: &Progress, seq: u64, rank: u32, culprit: u32) -> Option<Rank> {
        let never: Vec<Rank> =
            p.groups[&PgId::default_pg()].iter().filter(|(r, p)| r.0 != rank && p.last_enqueued.is_some_and(|e| e < SeqNo(seq))).map(|(r, _)| *r).collect();
        if never.contains(&Rank(culprit)) {
            Some(Rank(culprit))
        } else {
            never.first().copied()
        }
    }

    #[test]
    fn agrees_with_a_scan_over_every_rank() {
        // A deterministic mix: ranks behind, level and ahead, some without progress.
        let rows: Vec<(u32, Option<u64>)> = (0..97u32).map(|r| (r, (r % 7 != 3).then_some(u64::from((r * 37) % 13)))).collect();
        let p = progress(&rows);
        let index = NeverIssued::new(&p);
        for seq in 0..15 {
            for rank in 0..97 {
                for culprit in [0, 5, 40, 96, 200] {
                    assert_eq!(
                        index.parent(&PgId::default_pg(), SeqNo(seq), Rank(rank), Rank(culprit)),
                        scan(&p, seq, rank, culprit),
                        "seq {seq} rank {rank} culprit {culprit}"
                    );
                }
            }
        }
    }

    #[test]
    fn an_unknown_group_or_nobody_behind_is_no_parent() {
        let p = progress(&[(0, Some(5)), (1, Some(5))]);
        let index = NeverIssued::new(&p);
        assert_eq!(index.parent(&PgId("7".into()), SeqNo(5), Rank(0), Rank(1)), None);
        assert_eq!(index.parent(&PgId::default_pg(), SeqNo(5), Rank(0), Rank(1)), None);
        assert_eq!(index.parent(&PgId::default_pg(), SeqNo(6), Rank(0), Rank(9)), Some(Rank(1)));
        assert_eq!(index.parent(&PgId::default_pg(), SeqNo(6), Rank(1), Rank(1)), Some(Rank(0)), "a rank is never its own parent");
    }
}
