//! Horovod's stall inspector: `Stalled ops: allreduce.conv1.weight [ready ranks: 5, 1, 4], ...`
//! and `HorovodBroadcast_w_0 [missing ranks: 0]` (one op per line after `Stalled ops:`, or all
//! on the warning's own line). Each op listed is one `Stall` event: which ranks had submitted it
//! and which had not.

use coroner_model::{EventKind, Rank};

/// The stalled ops a line lists.
pub fn stalls(t: &str, out: &mut Vec<EventKind>) {
    if !t.contains(" ranks: ") {
        return;
    }
    let mut rest = t;
    while let Some(at) = rest.find(" ranks: ") {
        let head = &rest[..at];
        let Some(open) = head.rfind('[') else { break };
        let which = &head[open + 1..];
        let after = &rest[at + " ranks: ".len()..];
        let Some(close) = after.find(']') else { break };
        let ranks: Vec<Rank> = after[..close]
            .split(',')
            .filter_map(|r| r.trim().parse::<u32>().ok())
            .filter(|r| *r < coroner_model::MAX_WORLD_SIZE)
            .map(Rank)
            .collect();
        let op = head[..open]
            .trim_end()
            .rsplit([' ', ','])
            .next()
            .unwrap_or("")
            .trim_start_matches("ops:")
            .to_string();
        if !ranks.is_empty() && (which == "ready" || which == "missing") {
            let (ready, missing) = if which == "ready" { (ranks, Vec::new()) } else { (Vec::new(), ranks) };
            out.push(EventKind::Stall { op, ready, missing });
        }
        rest = &after[close + 1..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(t: &str) -> Vec<EventKind> {
        let mut out = Vec::new();
        stalls(t, &mut out);
        out
    }

    #[test]
    fn ready_and_missing_ranks_of_each_stalled_op() {
        let out = run("WARNING: One or more tensors were submitted ... Stalled ops: HorovodAllreduce_loss_0 [ready ranks: 3], HorovodAllreduce_grad_0 [ready ranks: 2, 0, 1]");
        assert_eq!(out, vec![
            EventKind::Stall { op: "HorovodAllreduce_loss_0".into(), ready: vec![Rank(3)], missing: vec![] },
            EventKind::Stall { op: "HorovodAllreduce_grad_0".into(), ready: vec![Rank(2), Rank(0), Rank(1)], missing: vec![] },
        ]);
        assert_eq!(run("HorovodBroadcast_fc_weights_0 [missing ranks: 0]"), vec![EventKind::Stall { op: "HorovodBroadcast_fc_weights_0".into(), ready: vec![], missing: vec![Rank(0)] }]);
        assert!(run("Parameter indices which did not receive grad for rank 0: 1").is_empty());
        assert!(run("waiting for [ranks: x]").is_empty());
    }
}
