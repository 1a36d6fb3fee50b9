//! From a whole dump ([`FlightRecord`]) to what the cross-rank matcher keeps of it
//! ([`coroner_model::FrDump`]): typed operations with their sequence counter, the newest
//! [`MAX_OPS_PER_GROUP`] per process group, and each call stack once, its user frames only (the
//! frames inside PyTorch, the standard library and the process launcher say nothing about which
//! line of the training script issued an operation).

use crate::flight_recorder::{FlightRecord, FrEntry};
use coroner_model::{FrDump, FrFrame, FrOp, FrSeq, FrState, PgId, MAX_FRAMES, MAX_OPS_PER_GROUP};
use std::collections::{BTreeMap, HashMap};

impl FlightRecord {
    /// The bounded dump; `encoding` is `pickle` or `json`.
    pub fn dump(&self, encoding: &str) -> FrDump {
        let mut d = FrDump { version: self.version.clone(), encoding: encoding.to_string(), ..Default::default() };
        let mut per_group: BTreeMap<&str, usize> = BTreeMap::new();
        for e in &self.entries {
            *per_group.entry(e.pg_name.as_str()).or_default() += 1;
        }
        let mut skip: BTreeMap<&str, usize> = per_group.iter().map(|(pg, n)| (*pg, n.saturating_sub(MAX_OPS_PER_GROUP))).collect();
        let mut stacks: HashMap<Vec<FrFrame>, u32> = HashMap::new();
        // The previous operation of each group: the `coalesced` entry that closes a
        // `batch_isend_irecv` is written as a collective (`is_p2p` false, the group's last
        // collective number) but carries the batch's `p2p_seq_id`.
        let mut previous: HashMap<&str, FrSeq> = HashMap::new();
        for e in &self.entries {
            let after = previous.get(e.pg_name.as_str()).copied();
            let seq = seq_of(e, after);
            if let Some(s) = seq {
                previous.insert(e.pg_name.as_str(), s);
            }
            let left = skip.get_mut(e.pg_name.as_str()).expect("counted above");
            if *left > 0 {
                *left -= 1;
                d.dropped += 1;
                continue;
            }
            let Some(op) = seq.map(|s| op_of(e, s, &mut stacks, &mut d.stacks)) else {
                d.dropped += 1;
                continue;
            };
            let g = d.groups.entry(op.pg.clone()).or_default();
            if g.desc.is_empty() {
                g.desc = e.pg_desc.clone();
            }
            d.ops.push(op);
        }
        for (key, st) in &self.pg_status {
            let g = d.groups.entry(PgId(self.status_group(key))).or_default();
            (g.last_enqueued, g.last_started, g.last_completed) = (st.last_enqueued, st.last_started, st.last_completed);
        }
        // `pg_config` is keyed by group name, except gloo's single '' key for the default group.
        let lone = (self.pg_config.len() == 1 && d.groups.len() == 1).then(|| self.pg_config.values().next()).flatten();
        for (pg, g) in &mut d.groups {
            if let Some((desc, ranks)) = self.pg_config.get(&pg.0).or(lone) {
                g.ranks = parse_ranks(ranks);
                if g.desc.is_empty() {
                    g.desc = desc.clone();
                }
            }
        }
        d
    }
}

fn counter(v: Option<i64>) -> Option<u64> {
    v.and_then(|s| u64::try_from(s).ok())
}

/// The entry's counter; `after` is the previous operation's of its group. A `coalesced` entry
/// right after point-to-point operations with its `p2p_seq_id` closes their batch.
fn seq_of(e: &FrEntry, after: Option<FrSeq>) -> Option<FrSeq> {
    let p2p = counter(e.p2p_seq_id);
    let closes_batch = e.profiling_name.rsplit(':').next() == Some("coalesced") && p2p.is_some() && after == p2p.map(FrSeq::P2p);
    if e.is_p2p || closes_batch {
        Some(FrSeq::P2p(p2p?))
    } else {
        Some(FrSeq::Collective(counter(e.collective_seq_id)?))
    }
}

fn op_of(e: &FrEntry, seq: FrSeq, stacks: &mut HashMap<Vec<FrFrame>, u32>, table: &mut Vec<Vec<FrFrame>>) -> FrOp {
    let (backend, rest) = e.profiling_name.split_once(':').unwrap_or(("", e.profiling_name.as_str()));
    let (op, detail) = match rest.split_once(' ') {
        Some((op, detail)) => (op, Some(detail.trim().to_string())),
        None => (rest, None),
    };
    let frames = user_frames(&e.frames);
    let stack = (!frames.is_empty()).then(|| {
        let next = table.len() as u32;
        *stacks.entry(frames.clone()).or_insert_with(|| {
            table.push(frames);
            next
        })
    });
    FrOp {
        record_id: counter(e.record_id),
        pg: PgId(e.pg_name.clone()),
        seq,
        op_id: counter(e.op_id),
        backend: backend.to_string(),
        op: op.to_string(),
        detail,
        input_sizes: e.input_sizes.clone(),
        output_sizes: e.output_sizes.clone(),
        input_dtypes: e.input_dtypes.clone(),
        output_dtypes: e.output_dtypes.clone(),
        state: match e.state.as_str() {
            "completed" => FrState::Completed,
            "started" => FrState::Started,
            _ => FrState::Scheduled,
        },
        retired: e.retired,
        created_ns: e.time_created_ns.filter(|t| *t > 0),
        started_ns: e.time_started_ns,
        completed_ns: e.time_completed_ns,
        duration_ms: e.duration_ms,
        timeout_ms: counter(e.timeout_ms),
        stack,
    }
}

/// Frames of the training code: not PyTorch's, the standard library's or the launcher's. When
/// none is left (a collective PyTorch issues itself), the innermost recorded frames.
pub fn user_frames(frames: &[FrFrame]) -> Vec<FrFrame> {
    let library = |f: &FrFrame| {
        let file = f.file.as_str();
        file.contains("/torch/")
            || file.contains("typing_extensions")
            || file.starts_with('<')
            || (file.contains("/lib/python3") && !file.contains("-packages/"))
    };
    let user: Vec<FrFrame> = frames.iter().filter(|f| !library(f)).take(MAX_FRAMES).cloned().collect();
    if user.is_empty() {
        frames.iter().take(MAX_FRAMES).cloned().collect()
    } else {
        user
    }
}

/// `"[0, 1, 2]"` (how PyTorch writes them) or a list.
fn parse_ranks(s: &str) -> Vec<u32> {
    s.split(|c: char| !c.is_ascii_digit()).filter(|t| !t.is_empty()).filter_map(|t| t.parse().ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flight_recorder::parse;

    const R0: &[u8] = include_bytes!("../../../tests/data/snapshots/hang_nccl_trace_rank_0");
    const GLOO: &[u8] = include_bytes!("../../../tests/data/fr/gloo4_extra_r1/nccl_trace_rank_1");
    const JSON: &[u8] = include_bytes!("../../../tests/data/fr/gloo4_size_r1_json/nccl_trace_rank_0.json");

    #[test]
    fn nccl_dump_keeps_every_operation_typed() {
        let d = parse(R0).unwrap().dump("pickle");
        assert_eq!((d.ops.len(), d.dropped), (11, 0));
        let last = d.ops.last().unwrap();
        assert_eq!((last.backend.as_str(), last.op.as_str(), last.seq, last.state), ("nccl", "all_reduce", FrSeq::Collective(11), FrState::Scheduled));
        assert_eq!((last.input_sizes.clone(), last.timeout_ms), (vec![vec![1153]], Some(20000)));
        let g = &d.groups[&PgId("0".into())];
        assert_eq!((g.desc.as_str(), g.ranks.clone(), g.last_enqueued), ("default_pg", vec![0, 1], Some(coroner_model::SeqNo(11))));
        // DDP's own first collective: PyTorch's frames dropped, the script's line that built DDP kept.
        assert_eq!(d.stack_of(&d.ops[0])[0].to_string(), "main (worker.py:68)");
        let torch_only = [FrFrame { name: "_verify".into(), file: "/x/site-packages/torch/distributed/utils.py".into(), line: 286 }];
        assert_eq!(user_frames(&torch_only), torch_only.to_vec(), "nothing but PyTorch: its frames are kept");
    }

    #[test]
    fn gloo_dump_gets_its_ranks_from_the_lone_config_and_user_frames_only() {
        let d = parse(GLOO).unwrap().dump("pickle");
        assert_eq!(d.groups[&PgId("0".into())].ranks, vec![0, 1, 2, 3]);
        assert!(d.ops.iter().all(|o| o.backend == "gloo" && o.retired != (o.seq == FrSeq::Collective(11))));
        let stack = d.stack_of(&d.ops[5]);
        assert_eq!((stack[0].name.as_str(), stack[0].line, stack[1].line), ("collective", 24, 32), "{stack:?}");
        // Eleven entries, two call stacks.
        assert_eq!(d.stacks.len(), 2);
    }

    #[test]
    fn json_dump_reads_like_the_pickle() {
        let d = parse(JSON).unwrap().dump("json");
        assert_eq!((d.version.as_str(), d.ops.len(), d.stacks.len()), ("2.10", 6, 0));
        assert_eq!(d.groups[&PgId("0".into())].last_enqueued, Some(coroner_model::SeqNo(6)));
        assert_eq!((d.ops[5].created_ns.is_some(), d.ops[5].started_ns, d.ops[5].retired), (true, None, false));
    }

    #[test]
    fn old_formats_and_odd_names_still_read() {
        let mut rec = parse(R0).unwrap();
        for e in &mut rec.entries {
            e.collective_seq_id = e.record_id.map(|r| r + 1);
        }
        rec.entries[3].profiling_name = "nccl:send 0->1".into();
        rec.entries[3].is_p2p = true;
        rec.entries[3].p2p_seq_id = Some(1);
        rec.entries[4].profiling_name = "allreduce".into();
        let d = rec.dump("pickle");
        assert_eq!((d.ops[3].seq, d.ops[3].op.as_str(), d.ops[3].detail.as_deref()), (FrSeq::P2p(1), "send", Some("0->1")));
        assert_eq!((d.ops[4].backend.as_str(), d.ops[4].op.as_str()), ("", "allreduce"));
    }

    #[test]
    fn only_the_newest_operations_of_each_group_are_kept() {
        let mut rec = parse(R0).unwrap();
        let one = rec.entries[10].clone();
        rec.entries = (0..300).map(|i| FrEntry { collective_seq_id: Some(i + 1), record_id: Some(i), ..one.clone() }).collect();
        let d = rec.dump("pickle");
        assert_eq!((d.ops.len(), d.dropped), (MAX_OPS_PER_GROUP, 300 - MAX_OPS_PER_GROUP as u64));
        assert_eq!(d.ops[0].seq, FrSeq::Collective(300 - MAX_OPS_PER_GROUP as u64 + 1));
    }

    /// `pg_status` is keyed by uid: on ranks 2 and 3 uid 1 is the group named "2".
    #[test]
    fn group_status_goes_to_the_group_the_entries_name() {
        let d = parse(include_bytes!("../../../tests/data/fr/gloo4_pg2_r1/nccl_trace_rank_2")).unwrap().dump("pickle");
        assert_eq!(d.groups.keys().map(|k| k.0.as_str()).collect::<Vec<_>>(), vec!["0", "2"]);
        assert_eq!(d.groups[&PgId("2".into())].last_enqueued, Some(coroner_model::SeqNo(6)));
    }

    /// NCCL 2.11's `batch_isend_irecv`: a send and a recv sharing a p2p number, then a
    /// `coalesced` entry written as a collective with the batch's p2p number: it closes the batch.
    #[test]
    fn batch_isend_irecv_is_one_p2p_unit() {
        let d = parse(include_bytes!("../../../tests/data/fr/nccl2_batch_size_r1/nccl_trace_rank_1")).unwrap().dump("pickle");
        let last: Vec<(&str, Option<&str>, FrSeq)> = d.ops.iter().rev().take(4).map(|o| (o.op.as_str(), o.detail.as_deref(), o.seq)).collect();
        assert_eq!(
            last,
            vec![
                ("coalesced", None, FrSeq::P2p(6)),
                ("recv", Some("1<-0"), FrSeq::P2p(6)),
                ("send", Some("1->0"), FrSeq::P2p(6)),
                ("all_reduce", None, FrSeq::Collective(5))
            ]
        );
        assert_eq!((d.ops[d.ops.len() - 2].output_sizes.clone(), d.ops[d.ops.len() - 1].state), (vec![vec![512]], FrState::Scheduled));
    }

    #[test]
    fn ranks_as_pytorch_writes_them() {
        assert_eq!(parse_ranks("[0, 1, 12]"), vec![0, 1, 12]);
        assert_eq!(parse_ranks("[]"), Vec::<u32>::new());
    }
}
