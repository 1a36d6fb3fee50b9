//! Filing a launcher's line under the worker rank its prefix names: the one rule the agent (an
//! agent around torchrun speaks for a whole node) and the pipeline (a combined log no session
//! owns) both follow.
//!
//! - `[rankN]:` (PyTorch's exception handler) and Horovod/MPI tags name a **global** rank.
//! - torchrun's `[<role>N]:` (`--tee`) names a **local** rank, which is `base + N` (the global
//!   rank of the node's local rank 0) unless a line carrying both prefixes (or the launcher's
//!   failure table, through [`RankFiler::learn`]) taught the real mapping.
//! - `srun --label`'s `N: ` is the Slurm task id, which is the global rank under srun.
//! - A line with none of these is the launcher's own: no rank. The launcher's own lines also say
//!   where its node sits (torchrun's rendezvous result, DeepSpeed's rank mapping: `topology.rs`):
//!   the filer learns the node's global ranks, the world size and torchrun's restart count from
//!   them, so a node whose rank the rendezvous assigned (no `--node-rank`) files its local
//!   prefixes under the right global ranks.
//!
//! The line's bytes are never altered; the prefixes are read by [`split_rank_prefix`].

use crate::prefix::split_rank_prefix;
use crate::topology::{NodeTopology, TopologyReader};
use coroner_model::Rank;
use std::collections::BTreeMap;

/// Files lines of one launcher's output under worker ranks, learning local-to-global mappings.
#[derive(Debug, Default, Clone)]
pub struct RankFiler {
    base: u32,
    local_to_global: BTreeMap<u32, u32>,
    topology: TopologyReader,
    world_size: Option<u32>,
    restart_count: Option<u32>,
}

impl RankFiler {
    /// A filer whose node starts at global rank `base`.
    pub fn new(base: u32) -> Self {
        RankFiler { base, ..RankFiler::default() }
    }

    pub fn set_base(&mut self, base: u32) {
        self.base = base;
    }

    /// Local rank `local` is global rank `global` on this node.
    pub fn learn(&mut self, local: u32, global: u32) {
        self.local_to_global.insert(local, global);
    }

    /// The global rank of local rank `local`.
    pub fn global_of(&self, local: u32) -> Rank {
        Rank(self.local_to_global.get(&local).copied().unwrap_or(self.base.saturating_add(local)))
    }

    /// The rank that owns `line`, or `None` for the launcher's own lines.
    pub fn owner(&mut self, line: &[u8]) -> Option<Rank> {
        let p = split_rank_prefix(line);
        match (p.global_rank, p.local_rank, p.task_id) {
            (Some(global), Some(local), _) => {
                self.learn(local, global);
                Some(Rank(global))
            }
            (Some(global), None, _) => Some(Rank(global)),
            (None, Some(local), _) => Some(self.global_of(local)),
            (None, None, Some(task)) => Some(Rank(task)),
            (None, None, None) => {
                if let Some(t) = self.topology.push(line) {
                    self.take_topology(t);
                }
                None
            }
        }
    }

    /// The job's world size, as the launcher said it (its rendezvous result or rank mapping).
    pub fn world_size(&self) -> Option<u32> {
        self.world_size
    }

    /// torchrun's restart count as of the last line read: how many times it restarted its workers.
    pub fn restart_count(&self) -> Option<u32> {
        self.restart_count
    }

    /// What the launcher said about its node: each worker's global rank (local rank 0's is the
    /// base of the others), the world size, the restart count.
    fn take_topology(&mut self, t: NodeTopology) {
        for &(local, global) in &t.workers {
            self.learn(local, global);
            if local == 0 {
                self.base = global;
            }
        }
        self.world_size = t.world_size.or(self.world_size);
        self.restart_count = t.restart_count.or(self.restart_count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn global_prefixes_file_as_named_and_the_launchers_own_lines_under_none() {
        let mut f = RankFiler::new(8);
        assert_eq!(f.owner(b"[rank9]: Traceback (most recent call last):"), Some(Rank(9)));
        assert_eq!(f.owner(b"[1,3]<stderr>:Traceback"), Some(Rank(3)));
        assert_eq!(f.owner(b"W1130 09:03:42.336000 3148 torch/distributed/elastic/api.py:986] failed"), None);
        assert_eq!(f.owner(b"[E1130 08:59:11.424 ProcessGroupNCCL.cpp:689] x"), None);
    }

    #[test]
    fn local_ranks_map_on_the_base_until_both_prefixes_teach_the_mapping() {
        let mut f = RankFiler::new(8);
        assert_eq!(f.owner(b"[default1]:step 4 loss 1.2"), Some(Rank(9)));
        assert_eq!(f.owner(b"[default1]:[rank13]: Traceback"), Some(Rank(13)));
        assert_eq!(f.owner(b"[default1]:step 5"), Some(Rank(13)));
        assert_eq!(f.owner(b"[trainer0]:other role"), Some(Rank(8)));
        f.learn(2, 40);
        assert_eq!(f.global_of(2), Rank(40));
        f.set_base(100);
        assert_eq!(f.global_of(3), Rank(103));
    }

    #[test]
    fn a_node_whose_rank_the_rendezvous_assigned_learns_its_global_ranks_from_torchruns_result() {
        let mut f = RankFiler::new(0);
        assert_eq!(f.owner(b"[default1]:before the rendezvous"), Some(Rank(1)));
        for line in [
            "I1201 10:00:00.100000 7 torch/distributed/elastic/agent/server/api.py:525] [default] Rendezvous complete for workers. Result:",
            "I1201 10:00:00.100000 7 torch/distributed/elastic/agent/server/api.py:525]   restart_count=0",
            "I1201 10:00:00.100000 7 torch/distributed/elastic/agent/server/api.py:525]   group_rank=1",
            "I1201 10:00:00.100000 7 torch/distributed/elastic/agent/server/api.py:525]   local_ranks=[0, 1]",
            "I1201 10:00:00.100000 7 torch/distributed/elastic/agent/server/api.py:525]   global_ranks=[6, 7]",
            "I1201 10:00:00.100000 7 torch/distributed/elastic/agent/server/api.py:525]   global_world_sizes=[8, 8]",
        ] {
            assert_eq!(f.owner(line.as_bytes()), None, "the launcher's own line");
        }
        assert_eq!(f.owner(b"[default0]:step 1"), Some(Rank(6)));
        assert_eq!(f.owner(b"[default1]:step 1"), Some(Rank(7)));
        assert_eq!((f.world_size(), f.restart_count()), (Some(8), Some(0)));
    }

    #[test]
    fn srun_labels_name_the_task_which_is_the_global_rank() {
        let mut f = RankFiler::new(0);
        assert_eq!(f.owner(b"3: srun says"), Some(Rank(3)));
        // A time is not a label.
        assert_eq!(f.owner(b"08:58:51 x"), None);
    }
}
