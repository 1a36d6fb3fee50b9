//! Horovod's stall inspector: `Stalled ops: allreduce.conv1.weight [ready ranks: 5, 1, 4], ...`
//! and `HorovodBroadcast_w_0 [missing ranks: 0]` (one op per line after `Stalled ops:`, or all
//! on the warning's own line). Each op listed is one `Stall` event: which ranks had submitted it
//! and which had not.

use coroner_model::{EventKind, Rank};

/// The newer stall report names ranks one per line under a header: `Stalled ranks:` (or
/// `Missing ranks:`), then `6: [horovod_allreduce.0, horovod_allreduce.1, ...]`, each line a rank
/// that had not submitted the ops listed. Reads those lines while armed by the header.
#[derive(Debug, Clone, Default)]
pub struct RankList {
    armed: bool,
}

impl RankList {
    /// Reads one line; pushes a `Stall` for each rank line under a header.
    pub fn observe(&mut self, t: &str, out: &mut Vec<EventKind>) {
        let t = t.trim();
        if t == "Stalled ranks:" || t == "Missing ranks:" {
            self.armed = true;
            return;
        }
        if !self.armed {
            return;
        }
        let parsed = t.split_once(": [").and_then(|(n, ops)| {
            let rank = n.trim().parse::<u32>().ok().filter(|r| *r < coroner_model::MAX_WORLD_SIZE)?;
            let op = ops.split([',', ']']).next().unwrap_or("").trim().to_string();
            Some((Rank(rank), op))
        });
        match parsed {
            Some((rank, op)) => out.push(EventKind::Stall { op, ready: Vec::new(), missing: vec![rank] }),
            None => self.armed = false,
        }
    }
}

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
        let ranks: Vec<Rank> =
            after[..close].split(',').filter_map(|r| r.trim().parse::<u32>().ok()).filter(|r| *r < coroner_model::MAX_WORLD_SIZE).map(Rank).collect();
        let op = head[..open].trim_end().rsplit([' ', ',']).next().unwrap_or("").trim_start_matches("ops:").to_string();
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
        assert_eq!(
            out,
            vec![
                EventKind::Stall { op: "HorovodAllreduce_loss_0".into(), ready: vec![Rank(3)], missing: vec![] },
                EventKind::Stall { op: "HorovodAllreduce_grad_0".into(), ready: vec![Rank(2), Rank(0), Rank(1)], missing: vec![] },
            ]
        );
        assert_eq!(
            run("HorovodBroadcast_fc_weights_0 [missing ranks: 0]"),
            vec![EventKind::Stall { op: "HorovodBroadcast_fc_weights_0".into(), ready: vec![], missing: vec![Rank(0)] }]
        );
        assert!(run("Parameter indices which did not receive grad for rank 0: 1").is_empty());
        assert!(run("waiting for [ranks: x]").is_empty());
    }

    #[test]
    fn ranks_listed_one_per_line_under_the_header() {
        let mut list = RankList::default();
        let mut out = Vec::new();
        for line in [
            "One or more tensors were submitted ...",
            "Stalled ranks:",
            "6: [horovod_allreduce.0, horovod_allreduce.1 ...]",
            "7: [horovod_allreduce.3]",
            "step 5 loss 1.0",
            "9: [x]",
        ] {
            list.observe(line, &mut out);
        }
        let missing: Vec<(String, Vec<Rank>)> = out
            .into_iter()
            .map(|k| match k {
                EventKind::Stall { op, missing, .. } => (op, missing),
                _ => panic!(),
            })
            .collect();
        assert_eq!(missing, vec![("horovod_allreduce.0".to_string(), vec![Rank(6)]), ("horovod_allreduce.3".to_string(), vec![Rank(7)])]);
    }
}
