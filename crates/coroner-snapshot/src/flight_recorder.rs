//! PyTorch flight recorder dumps (`nccl_trace_rank_<R>`, any prefix `TORCH_FR_DUMP_TEMP_FILE`
//! names): a dict with `version`, `pg_config`, `pg_status` and `entries`, pickled (`_dump_nccl_trace`,
//! the watchdog's dump) or as JSON (`_dump_nccl_trace_json`, [`crate::flight_json`]). Read as data
//! (see [`crate::pickle`]) into typed entries, and from them the collective-progress facts the
//! correlation engine uses and the bounded dump the cross-rank matcher reads ([`crate::flight_dump`]).
//!
//! Formats in the wild, all read here: before 2.2 an entry has one `seq_id` (collectives only);
//! from 2.2 `collective_seq_id`, `p2p_seq_id` and `op_id`; `process_group` as (name, desc) from 2.3,
//! before it `pg_id` alone; dtypes, `timeout_ms`, `is_p2p`, `thread_*` came later; from 2.7 the ops
//! of a coalesced group share their sequence number and end with a `coalesced` entry. JSON dumps
//! write numbers in `pg_status` as strings, absent times as 0, and no stacks. gloo (and ncclx, xccl)
//! entries have the same shape with another backend before the `:` of the profiling name; gloo never
//! marks an entry started or completed (it retires it), and `pg_config` keys are `''`.

use crate::pickle::{self, Value};
use crate::SnapshotError;
use coroner_model::{FrFrame, PgId, SeqNo};
use std::collections::BTreeMap;

/// One recorded collective or point-to-point operation.
#[derive(Debug, Clone, PartialEq)]
pub struct FrEntry {
    pub record_id: Option<i64>,
    pub pg_id: Option<i64>,
    /// The process group's name from `process_group` (`("0", "default_pg")`), else `pg_id`.
    pub pg_name: String,
    /// Its description (`default_pg`), when the entry says.
    pub pg_desc: String,
    /// `collective_seq_id`, or `seq_id` before format 2.2.
    pub collective_seq_id: Option<i64>,
    pub p2p_seq_id: Option<i64>,
    pub op_id: Option<i64>,
    /// `nccl:all_reduce`.
    pub profiling_name: String,
    pub is_p2p: bool,
    pub time_created_ns: Option<i64>,
    /// `scheduled`, `started` or `completed`.
    pub state: String,
    pub input_sizes: Vec<Vec<i64>>,
    pub output_sizes: Vec<Vec<i64>>,
    pub input_dtypes: Vec<String>,
    pub output_dtypes: Vec<String>,
    /// gloo's way of saying done (its entries stay `scheduled`).
    pub retired: bool,
    /// When the watchdog saw it start and complete (NCCL only; absent as None or 0).
    pub time_started_ns: Option<i64>,
    pub time_completed_ns: Option<i64>,
    pub duration_ms: Option<f64>,
    pub timeout_ms: Option<i64>,
    /// Innermost first, as recorded.
    pub frames: Vec<FrFrame>,
}

impl FrEntry {
    /// `ALLREDUCE` from `nccl:all_reduce`.
    pub fn op(&self) -> String {
        let name = self.profiling_name.rsplit(':').next().unwrap_or(&self.profiling_name);
        name.replace('_', "").to_ascii_uppercase()
    }
}

/// What `pg_status` says about one process group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FrPgStatus {
    pub last_enqueued: Option<SeqNo>,
    pub last_started: Option<SeqNo>,
    pub last_completed: Option<SeqNo>,
}

/// A whole dump.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FlightRecord {
    pub version: String,
    /// Process group name to its description and ranks (`default_pg`, `[0, 1]`).
    pub pg_config: BTreeMap<String, (String, String)>,
    pub pg_status: BTreeMap<String, FrPgStatus>,
    pub entries: Vec<FrEntry>,
}

/// The progress one rank's dump shows for one process group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrProgress {
    pub pg: PgId,
    pub last_enqueued: Option<SeqNo>,
    pub last_started: Option<SeqNo>,
    pub last_completed: Option<SeqNo>,
    /// The oldest collective not completed: (seq, op, state, elements of its first input).
    pub pending: Option<(SeqNo, String, String, Option<u64>)>,
}

/// An integer, also as JSON dumps write some (`"11"`).
fn int_of(v: &Value) -> Option<i64> {
    match v {
        Value::Str(s) => s.trim().parse().ok(),
        other => other.as_i64(),
    }
}

fn seq(v: Option<&Value>) -> Option<SeqNo> {
    v.and_then(int_of).and_then(|i| u64::try_from(i).ok()).map(SeqNo)
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_seq).unwrap_or_default().iter().filter_map(|d| d.as_str().map(str::to_string)).collect()
}

fn sizes(v: Option<&Value>) -> Vec<Vec<i64>> {
    let Some(outer) = v.and_then(Value::as_seq) else { return Vec::new() };
    outer.iter().map(|s| s.as_seq().map(|d| d.iter().filter_map(Value::as_i64).collect()).unwrap_or_default()).collect()
}

fn key_string(k: &Value) -> String {
    match k {
        Value::Str(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        other => format!("{other:?}"),
    }
}

fn entry(v: &Value) -> Result<FrEntry, SnapshotError> {
    if !matches!(v, Value::Dict(_)) {
        return Err(SnapshotError::Format("flight recorder entry is not a dict".into()));
    }
    let int = |k: &str| v.get(k).and_then(int_of);
    // Times: JSON writes 0 for a time never taken.
    let time = |k: &str| int(k).filter(|t| *t > 0);
    let string = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
    let (pg_name, pg_desc) = match v.get("process_group").and_then(Value::as_seq) {
        Some([name, desc, ..]) => (name.as_str().map(str::to_string), desc.as_str().unwrap_or_default().to_string()),
        Some([name]) => (name.as_str().map(str::to_string), String::new()),
        _ => (None, String::new()),
    };
    let frames = v.get("frames").and_then(Value::as_seq).unwrap_or_default().iter().map(|f| FrFrame {
        name: f.get("name").and_then(Value::as_str).unwrap_or("?").to_string(),
        file: f.get("filename").and_then(Value::as_str).unwrap_or("?").to_string(),
        line: f.get("line").and_then(int_of).and_then(|l| u32::try_from(l).ok()).unwrap_or(0),
    });
    Ok(FrEntry {
        record_id: int("record_id"),
        pg_id: int("pg_id"),
        pg_name: pg_name.or_else(|| int("pg_id").map(|i| i.to_string())).unwrap_or_else(|| "0".into()),
        pg_desc,
        collective_seq_id: int("collective_seq_id").or_else(|| int("seq_id")),
        p2p_seq_id: int("p2p_seq_id"),
        op_id: int("op_id"),
        profiling_name: string("profiling_name"),
        is_p2p: match v.get("is_p2p") {
            Some(Value::Bool(b)) => *b,
            // Before `is_p2p` (2.5): the profiling name says it (`nccl:send 0->1`).
            _ => {
                let name = string("profiling_name");
                let op = name.split_once(':').map_or(name.as_str(), |(_, op)| op);
                op.starts_with("send") || op.starts_with("recv")
            }
        },
        time_created_ns: int("time_created_ns"),
        state: string("state"),
        input_sizes: sizes(v.get("input_sizes")),
        output_sizes: sizes(v.get("output_sizes")),
        input_dtypes: strings(v.get("input_dtypes")),
        output_dtypes: strings(v.get("output_dtypes")),
        retired: matches!(v.get("retired"), Some(Value::Bool(true))),
        time_started_ns: time("time_discovered_started_ns"),
        time_completed_ns: time("time_discovered_completed_ns"),
        duration_ms: match v.get("duration_ms") {
            Some(Value::Float(f)) if f.is_finite() && *f >= 0.0 => Some(*f),
            Some(Value::Int(i)) if *i >= 0 => Some(*i as f64),
            _ => None,
        },
        timeout_ms: int("timeout_ms"),
        frames: frames.collect(),
    })
}

/// Reads a dump, pickled or JSON. A dict without `entries` is not a flight recorder dump.
pub fn parse(bytes: &[u8]) -> Result<FlightRecord, SnapshotError> {
    let top = if crate::flight_json::is_json(bytes) { crate::flight_json::parse(bytes)? } else { pickle::parse(bytes)? };
    let Value::Dict(_) = &top else {
        return Err(SnapshotError::Format("flight recorder dump is not a dict".into()));
    };
    let entries = top.get("entries").and_then(Value::as_seq).ok_or_else(|| SnapshotError::Format("no `entries` list: not a flight recorder dump".into()))?;
    let mut rec = FlightRecord {
        version: match top.get("version") {
            Some(Value::Str(s)) => s.clone(),
            Some(v) => format!("{v:?}"),
            None => String::new(),
        },
        entries: entries.iter().map(entry).collect::<Result<_, _>>()?,
        ..Default::default()
    };
    if let Some(Value::Dict(cfg)) = top.get("pg_config") {
        for (k, v) in cfg {
            let desc = v.get("desc").and_then(Value::as_str).unwrap_or_default().to_string();
            let ranks = match v.get("ranks") {
                Some(Value::Str(s)) => s.clone(),
                Some(other) => format!("{other:?}"),
                None => String::new(),
            };
            rec.pg_config.insert(key_string(k), (desc, ranks));
        }
    }
    if let Some(Value::Dict(status)) = top.get("pg_status") {
        for (k, v) in status {
            rec.pg_status.insert(
                key_string(k),
                FrPgStatus {
                    last_enqueued: seq(v.get("last_enqueued_collective")),
                    last_started: seq(v.get("last_started_collective")),
                    last_completed: seq(v.get("last_completed_collective")),
                },
            );
        }
    }
    Ok(rec)
}

fn raise(slot: &mut Option<SeqNo>, v: SeqNo) {
    *slot = Some(slot.map_or(v, |o| o.max(v)));
}

impl FlightRecord {
    /// Per process group: last enqueued / started / completed collective and the oldest pending
    /// one, from the entries and `pg_status` together (the ring buffer may have dropped old
    /// entries; `pg_status` may be missing in old versions).
    pub fn progress(&self) -> Vec<FrProgress> {
        let mut by_pg: BTreeMap<String, FrProgress> = BTreeMap::new();
        let slot = |by_pg: &mut BTreeMap<String, FrProgress>, pg: &str| {
            by_pg
                .entry(pg.to_string())
                .or_insert_with(|| FrProgress { pg: PgId(pg.to_string()), last_enqueued: None, last_started: None, last_completed: None, pending: None })
                .clone()
        };
        for e in self.entries.iter().filter(|e| !e.is_p2p) {
            let Some(s) = e.collective_seq_id.and_then(|s| u64::try_from(s).ok()).map(SeqNo) else { continue };
            let mut p = slot(&mut by_pg, &e.pg_name);
            raise(&mut p.last_enqueued, s);
            // gloo never marks an entry completed; it retires it when the work is over.
            let done = e.state == "completed" || e.retired;
            match e.state.as_str() {
                _ if done => {
                    raise(&mut p.last_started, s);
                    raise(&mut p.last_completed, s);
                }
                "started" => raise(&mut p.last_started, s),
                _ => {}
            }
            if !done && p.pending.as_ref().is_none_or(|(ps, ..)| s < *ps) {
                // Sizes come from the file: the product saturates rather than overflow.
                let numel = e.input_sizes.first().map(|d| d.iter().map(|x| u64::try_from(*x).unwrap_or(0)).fold(1, u64::saturating_mul));
                p.pending = Some((s, e.op(), e.state.clone(), numel));
            }
            by_pg.insert(e.pg_name.clone(), p);
        }
        for (key, st) in &self.pg_status {
            let pg = &self.status_group(key);
            let mut p = slot(&mut by_pg, pg);
            for (dst, src) in [(&mut p.last_enqueued, st.last_enqueued), (&mut p.last_started, st.last_started), (&mut p.last_completed, st.last_completed)] {
                if let Some(v) = src {
                    raise(dst, v);
                }
            }
            by_pg.insert(pg.clone(), p);
        }
        by_pg.into_values().collect()
    }

    /// The group a `pg_status` key stands for. PyTorch keys `pg_status` by the group's uid
    /// (`pg_id`), which is its name only for groups made in the same order everywhere: gloo's
    /// second group of ranks 2 and 3 is `pg_id` 1 but named `"2"`. Entries carry both.
    pub fn status_group(&self, key: &str) -> String {
        self.entries.iter().find(|e| e.pg_id.is_some_and(|id| id.to_string() == key)).map_or_else(|| key.to_string(), |e| e.pg_name.clone())
    }

    /// Short lines for the report.
    pub fn highlights(&self) -> Vec<String> {
        let mut out = Vec::new();
        for p in self.progress() {
            let n = |s: Option<SeqNo>| s.map_or("none".to_string(), |s| s.to_string());
            let mut line =
                format!("flight recorder: pg {} last enqueued {}, started {}, completed {}", p.pg, n(p.last_enqueued), n(p.last_started), n(p.last_completed));
            if let Some((seq, op, state, numel)) = &p.pending {
                line.push_str(&format!("; pending {op} seq {seq} {state}"));
                if let Some(n) = numel {
                    line.push_str(&format!(" ({n} elements)"));
                }
            }
            out.push(line);
        }
        if out.is_empty() {
            out.push(format!("flight recorder: {} entries, no collectives", self.entries.len()));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const R0: &[u8] = include_bytes!("../../../tests/data/snapshots/hang_nccl_trace_rank_0");
    const R1: &[u8] = include_bytes!("../../../tests/data/snapshots/hang_nccl_trace_rank_1");

    #[test]
    fn corpus_hang_dumps() {
        let r1 = parse(R1).unwrap();
        assert_eq!(r1.version, "2.10");
        assert_eq!(r1.entries.len(), 10);
        let e = &r1.entries[0];
        assert_eq!((e.pg_name.as_str(), e.collective_seq_id, e.op().as_str(), e.state.as_str()), ("0", Some(1), "ALLGATHER", "completed"));
        assert_eq!(e.input_sizes, vec![vec![1]]);
        assert_eq!(e.output_sizes, vec![vec![2, 1]]);
        assert!(e.frames[0].to_string().starts_with("_verify_param_shape_across_processes ("), "{}", e.frames[0]);
        assert_eq!(r1.pg_config.get("0"), Some(&("default_pg".to_string(), "[0, 1]".to_string())));
        let p1 = r1.progress();
        assert_eq!(p1.len(), 1);
        assert_eq!((p1[0].last_enqueued, p1[0].last_completed, p1[0].pending.clone()), (Some(SeqNo(10)), Some(SeqNo(10)), None));

        let r0 = parse(R0).unwrap();
        let p0 = r0.progress();
        assert_eq!(p0[0].last_enqueued, Some(SeqNo(11)));
        assert_eq!(p0[0].last_completed, Some(SeqNo(10)));
        assert_eq!(p0[0].pending, Some((SeqNo(11), "ALLREDUCE".into(), "scheduled".into(), Some(1153))));
        assert_eq!(
            r0.highlights(),
            vec!["flight recorder: pg 0 last enqueued 11, started 10, completed 10; pending ALLREDUCE seq 11 scheduled (1153 elements)"]
        );
    }

    #[test]
    fn every_truncation_is_an_error_not_a_panic() {
        for cut in 0..R0.len() {
            assert!(parse(&R0[..cut]).is_err(), "cut at {cut}");
        }
    }

    /// Found while writing the snapshot fuzz target: a pending entry whose input sizes multiply
    /// past u64 panicked with an overflow (debug builds).
    #[test]
    fn huge_input_sizes_saturate_the_element_count() {
        let mut r0 = parse(R0).unwrap();
        let pending = r0.entries.iter_mut().find(|e| e.state != "completed").unwrap();
        pending.input_sizes = vec![vec![1 << 40, 1 << 40]];
        assert_eq!(r0.progress()[0].pending.as_ref().unwrap().3, Some(u64::MAX));
    }

    #[test]
    fn other_pickles_are_not_dumps() {
        // A pickled empty dict and a pickled list.
        assert!(parse(b"\x80\x02}.").unwrap_err().to_string().contains("not a flight recorder dump"));
        assert!(parse(b"\x80\x02].").unwrap_err().to_string().contains("not a dict"));
    }
}
