//! Files a per-node launcher's lines under their worker's global rank.
//!
//! `[rankN]:` names the global rank; torchrun's `[defaultN]:` names the *local* rank, which maps to
//! `base + N` unless a line carrying both prefixes (or the launcher's failure table) taught the
//! mapping; `srun --label`'s `N: ` is the task id, the global rank under srun.

use coroner_model::Rank;
use coroner_parse::prefix::split_rank_prefix;
use std::collections::BTreeMap;

#[derive(Debug, Default, Clone)]
pub struct Demux {
    base: u32,
    local_to_global: BTreeMap<u32, u32>,
}

impl Demux {
    pub fn set_base(&mut self, base: u32) {
        self.base = base;
    }

    pub fn learn(&mut self, local: u32, global: u32) {
        self.local_to_global.insert(local, global);
    }

    pub fn global_of(&self, local: u32) -> Option<Rank> {
        Some(Rank(self.local_to_global.get(&local).copied().unwrap_or(self.base.saturating_add(local))))
    }

    /// The owner of an unowned line, or None for the launcher's own lines.
    pub fn owner(&mut self, line: &[u8]) -> Option<Rank> {
        let p = split_rank_prefix(line);
        match (p.global_rank, p.local_rank, p.task_id) {
            (Some(g), Some(l), _) => {
                self.learn(l, g);
                Some(Rank(g))
            }
            (Some(g), None, _) => Some(Rank(g)),
            (None, Some(l), _) => self.global_of(l),
            (None, None, Some(t)) => Some(Rank(t)),
            (None, None, None) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_ranks_map_through_what_both_prefixes_taught() {
        let mut d = Demux::default();
        d.set_base(8);
        assert_eq!(d.owner(b"[default1]:step 4"), Some(Rank(9)));
        assert_eq!(d.owner(b"[default1]:[rank13]: Traceback"), Some(Rank(13)));
        assert_eq!(d.owner(b"[default1]:step 5"), Some(Rank(13)));
        assert_eq!(d.owner(b"W1130 09:03:29.350000 3148 torch/distributed/run.py:851]"), None);
        assert_eq!(d.owner(b"3: srun says"), Some(Rank(3)));
    }
}
