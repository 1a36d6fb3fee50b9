//! Each rank's entry at a point of divergence, side by side, for the report's table.

use super::lanes::{sizes, Group, Unit};
use super::Clocks;
use coroner_model::{format_rfc3339_ns, FrEntryView, Rank};
use std::collections::BTreeSet;

/// At most this many ranks are shown: the culprits first, then the others in rank order.
const MAX_SHOWN: usize = 16;

pub fn entries(group: &Group<'_>, seq: u64, first: &[Rank], clocks: &Clocks) -> Vec<FrEntryView> {
    let mut order: Vec<Rank> = first.to_vec();
    order.extend(group.members.iter().copied().filter(|r| !first.contains(r)));
    order.truncate(MAX_SHOWN);
    let shown: BTreeSet<Rank> = order.iter().copied().collect();
    shown.into_iter().map(|r| entry(group, seq, r, clocks)).collect()
}

fn entry(group: &Group<'_>, seq: u64, rank: Rank, clocks: &Clocks) -> FrEntryView {
    let Some(lane) = group.lanes.get(&rank) else { return blank(rank, "no dump") };
    match lane.units.get(&seq) {
        Some(u) => issued(rank, u, u.op(), clocks),
        None => blank(rank, if lane.never_issued(seq) { "never issued" } else { "not in its buffer" }),
    }
}

/// A rank with nothing to show: `status` says why.
pub fn blank(rank: Rank, status: &str) -> FrEntryView {
    FrEntryView {
        rank,
        status: status.to_string(),
        op: String::new(),
        input_sizes: String::new(),
        output_sizes: String::new(),
        dtypes: String::new(),
        state: String::new(),
        created: None,
        duration_ms: None,
        call_site: None,
    }
}

/// What a rank issued: `op` names it (a collective's op, a point-to-point unit's peers).
pub fn issued(rank: Rank, u: &Unit<'_>, op: String, clocks: &Clocks) -> FrEntryView {
    let dtypes: BTreeSet<&str> = u.ops.iter().flat_map(|o| o.input_dtypes.iter().chain(&o.output_dtypes)).map(String::as_str).collect();
    let join = |f: &dyn Fn(&coroner_model::FrOp) -> String| u.ops.iter().filter(|o| o.op != "coalesced").map(|o| f(o)).collect::<Vec<_>>().join(" + ");
    let state = {
        let s = u.ops.iter().map(|o| o.state).min().map(|s| s.as_str()).unwrap_or("");
        if u.ops.iter().all(|o| o.retired) && s != "completed" {
            format!("{s}, retired")
        } else {
            s.to_string()
        }
    };
    FrEntryView {
        rank,
        status: "issued".to_string(),
        op,
        input_sizes: join(&|o| sizes(&o.input_sizes)),
        output_sizes: join(&|o| sizes(&o.output_sizes)),
        dtypes: dtypes.into_iter().collect::<Vec<_>>().join("/"),
        state,
        created: u.created_ns().and_then(|t| clocks.aligned(rank, t)).map(format_rfc3339_ns),
        duration_ms: u.ops.iter().filter_map(|o| o.duration_ms).reduce(f64::max),
        call_site: u.site_label.clone(),
    }
}
