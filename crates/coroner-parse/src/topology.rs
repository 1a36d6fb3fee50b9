//! What a launcher prints about where its node's workers sit in the job: their global ranks, the
//! world size, and (torchrun) which restart this is. The agent around a per-node launcher and the
//! pipeline both learn a node's ranks from it ([`crate::RankFiler::observe`]), so a launcher run
//! without `--node-rank` (the rendezvous assigns it) still files every line under its global rank.
//!
//! Formats, from the launchers' sources:
//! - torchrun (`torch/distributed/elastic/agent/server/api.py`, `SimpleElasticAgent._rendezvous`),
//!   at INFO, one record over several lines:
//!   ```text
//!   [default] Rendezvous complete for workers. Result:
//!     restart_count=0
//!     master_addr=node0
//!     master_port=29500
//!     group_rank=1
//!     group_world_size=2
//!     local_ranks=[0, 1]
//!     role_ranks=[2, 3]
//!     global_ranks=[2, 3]
//!     role_world_sizes=[4, 4]
//!     global_world_sizes=[4, 4]
//!   ```
//!   Older PyTorch prints the continuation lines bare (Python logging, `INFO:torch...:` on the
//!   first only); PyTorch 2.4 and later put its glog-style header (`I1210 18:28:01.790000 1
//!   .../api.py:525]`) before every one. `accelerate launch` and `torch.distributed.launch` run
//!   the same agent, so they print the same record.
//! - DeepSpeed's per-node launcher (`deepspeed/launcher/launch.py`, `main`), at INFO:
//!   `nnodes=2, num_local_procs=2, node_rank=1`, then
//!   `global_rank_mapping=defaultdict(<class 'list'>, {'worker-0': [0, 1], 'worker-1': [2, 3]})`
//!   and `dist_world_size=4`.
//!
//! Pure and total: lines that are none of these change nothing.

use crate::glog;

/// Where one node's workers sit, as its launcher said.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeTopology {
    /// (local rank, global rank) of each worker of the node.
    pub workers: Vec<(u32, u32)>,
    /// The job's world size, when said.
    pub world_size: Option<u32>,
    /// torchrun's restart count: 0 for the first start of the workers, n after n restarts.
    pub restart_count: Option<u32>,
}

/// Reads launcher lines one by one and completes a [`NodeTopology`] when a record ends.
#[derive(Debug, Clone, Default)]
pub struct TopologyReader {
    /// A torchrun record being read: its fields so far.
    torchrun: Option<TorchrunRecord>,
    /// DeepSpeed's `node_rank` and `num_local_procs`, waiting for the mapping line.
    deepspeed_node: Option<(u32, u32)>,
    deepspeed_workers: Vec<(u32, u32)>,
}

#[derive(Debug, Clone, Default)]
struct TorchrunRecord {
    restart_count: Option<u32>,
    local_ranks: Vec<u32>,
    global_ranks: Vec<u32>,
    world_sizes: Vec<u32>,
}

const TORCHRUN_HEAD: &str = "Rendezvous complete for workers. Result:";

impl TopologyReader {
    /// Reads one line of a launcher's output; answers a node's topology when `line` completed one.
    pub fn push(&mut self, line: &[u8]) -> Option<NodeTopology> {
        // Cheap prefilter: every line of interest holds `=` or the record's head.
        if memchr::memchr(b'=', line).is_none() && memchr::memmem::find(line, TORCHRUN_HEAD.as_bytes()).is_none() {
            return self.torchrun.take().and_then(TorchrunRecord::finish);
        }
        let text = String::from_utf8_lossy(line);
        let body = message(&text).trim();
        if body.ends_with(TORCHRUN_HEAD) {
            let earlier = self.torchrun.replace(TorchrunRecord::default());
            return earlier.and_then(TorchrunRecord::finish);
        }
        if let Some(record) = &mut self.torchrun {
            match record.field(body) {
                Field::Last => return self.torchrun.take().and_then(TorchrunRecord::finish),
                Field::Taken => return None,
                Field::NotOne => return self.torchrun.take().and_then(TorchrunRecord::finish),
            }
        }
        self.deepspeed(body)
    }

    fn deepspeed(&mut self, body: &str) -> Option<NodeTopology> {
        if let Some(at) = body.find("nnodes=") {
            let r = &body[at..];
            let node_rank = number_after(r, "node_rank=")?;
            let procs = number_after(r, "num_local_procs=")?;
            self.deepspeed_node = Some((node_rank, procs));
            self.deepspeed_workers.clear();
            return None;
        }
        if let Some(at) = body.find("global_rank_mapping=") {
            let (node_rank, procs) = self.deepspeed_node?;
            // The mapping lists each node's global ranks in node order: this node's is list `node_rank`.
            let lists: Vec<Vec<u32>> = body[at..].split('[').skip(1).filter_map(|s| s.split(']').next()).map(numbers).collect();
            let mine = lists.get(node_rank as usize).filter(|l| l.len() == procs as usize)?;
            self.deepspeed_workers = mine.iter().enumerate().filter_map(|(i, g)| Some((u32::try_from(i).ok()?, *g))).collect();
            let world = lists.iter().map(Vec::len).sum::<usize>();
            return Some(NodeTopology { workers: self.deepspeed_workers.clone(), world_size: u32::try_from(world).ok(), restart_count: None });
        }
        if let Some(at) = body.find("dist_world_size=") {
            self.deepspeed_node?;
            let world = number_after(&body[at..], "dist_world_size=")?;
            return Some(NodeTopology { workers: self.deepspeed_workers.clone(), world_size: Some(world), restart_count: None });
        }
        None
    }
}

enum Field {
    Taken,
    Last,
    NotOne,
}

impl TorchrunRecord {
    fn field(&mut self, body: &str) -> Field {
        let Some((key, value)) = body.split_once('=') else { return Field::NotOne };
        match key.trim() {
            "restart_count" => self.restart_count = value.trim().parse().ok(),
            "local_ranks" => self.local_ranks = numbers(value),
            "global_ranks" => self.global_ranks = numbers(value),
            "global_world_sizes" => {
                self.world_sizes = numbers(value);
                return Field::Last;
            }
            "master_addr" | "master_port" | "group_rank" | "group_world_size" | "role_ranks" | "role_world_sizes" => {}
            _ => return Field::NotOne,
        }
        Field::Taken
    }

    fn finish(self) -> Option<NodeTopology> {
        if self.local_ranks.is_empty() || self.local_ranks.len() != self.global_ranks.len() {
            return None;
        }
        let workers = self.local_ranks.into_iter().zip(self.global_ranks).collect();
        Some(NodeTopology { workers, world_size: self.world_sizes.into_iter().max(), restart_count: self.restart_count })
    }
}

/// The message of a launcher's log record: after a glog header (torchrun), a Python logging
/// `LEVEL:logger:` head, or DeepSpeed's `[date] [LEVEL] [file:line:func] `; else the line.
fn message(text: &str) -> &str {
    if let Some(g) = glog::parse(text) {
        return g.body;
    }
    for level in ["INFO:", "WARNING:", "DEBUG:"] {
        if let Some(rest) = text.strip_prefix(level) {
            // `INFO:torch.distributed.elastic.agent.server.api:[default] Rendezvous ...`
            if let Some((logger, msg)) = rest.split_once(':') {
                if !logger.contains(' ') {
                    return msg;
                }
            }
        }
    }
    if text.starts_with('[') {
        if let Some(at) = text.find("] [INFO] [") {
            if let Some(end) = text[at + 10..].find("] ") {
                return &text[at + 10 + end + 2..];
            }
        }
    }
    text
}

fn numbers(s: &str) -> Vec<u32> {
    s.split(|c: char| !c.is_ascii_digit()).filter(|t| !t.is_empty()).filter_map(|t| t.parse().ok()).collect()
}

fn number_after(s: &str, key: &str) -> Option<u32> {
    let at = s.find(key)? + key.len();
    let digits: &str = &s[at..];
    let end = digits.find(|c: char| !c.is_ascii_digit()).unwrap_or(digits.len());
    digits[..end].parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(lines: &[&str]) -> Vec<NodeTopology> {
        let mut r = TopologyReader::default();
        lines.iter().filter_map(|l| r.push(l.as_bytes())).collect()
    }

    const BARE: &[&str] = &[
        "INFO:torch.distributed.elastic.agent.server.api:[default] Rendezvous complete for workers. Result:",
        "  restart_count=1",
        "  master_addr=node0",
        "  master_port=29500",
        "  group_rank=1",
        "  group_world_size=2",
        "  local_ranks=[0, 1]",
        "  role_ranks=[2, 3]",
        "  global_ranks=[2, 3]",
        "  role_world_sizes=[4, 4]",
        "  global_world_sizes=[4, 4]",
        "",
    ];

    #[test]
    fn torchruns_record_with_bare_continuation_lines() {
        let t = read(BARE);
        assert_eq!(t, vec![NodeTopology { workers: vec![(0, 2), (1, 3)], world_size: Some(4), restart_count: Some(1) }]);
    }

    #[test]
    fn torchruns_record_with_a_header_on_every_line() {
        let lines: Vec<String> = BARE
            .iter()
            .map(|l| {
                let body = l.strip_prefix("INFO:torch.distributed.elastic.agent.server.api:").unwrap_or(l);
                format!("I1210 18:28:01.790000 1 site-packages/torch/distributed/elastic/agent/server/api.py:525] {body}")
            })
            .collect();
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        assert_eq!(read(&refs)[0].workers, vec![(0, 2), (1, 3)]);
    }

    #[test]
    fn a_record_cut_short_by_other_lines_still_counts_when_its_ranks_were_read() {
        let mut lines: Vec<&str> = BARE[..9].to_vec();
        lines.push("[default0]:step 1");
        let t = read(&lines);
        assert_eq!((t[0].workers.clone(), t[0].world_size), (vec![(0, 2), (1, 3)], None));
        assert!(read(&BARE[..6]).is_empty(), "no ranks read: nothing learnt");
    }

    #[test]
    fn deepspeeds_launcher_lines() {
        let t = read(&[
            "[2026-11-30 09:00:00,000] [INFO] [launch.py:146:main] WORLD INFO DICT: {'worker-0': [0, 1], 'worker-1': [0, 1]}",
            "[2026-11-30 09:00:00,000] [INFO] [launch.py:152:main] nnodes=2, num_local_procs=2, node_rank=1",
            "[2026-11-30 09:00:00,000] [INFO] [launch.py:163:main] global_rank_mapping=defaultdict(<class 'list'>, {'worker-0': [0, 1], 'worker-1': [2, 3]})",
            "[2026-11-30 09:00:00,000] [INFO] [launch.py:164:main] dist_world_size=4",
        ]);
        assert_eq!(t.len(), 2);
        assert_eq!((t[0].workers.clone(), t[0].world_size), (vec![(0, 2), (1, 3)], Some(4)));
        assert_eq!(t[1].world_size, Some(4));
    }

    #[test]
    fn lines_that_only_look_alike_teach_nothing() {
        assert!(read(&["global_ranks=[2, 3]", "loss=1.5 step=3", "dist_world_size=8", "global_rank_mapping=[0, 1]"]).is_empty());
    }
}
