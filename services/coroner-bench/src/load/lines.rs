//! What simulated ranks print: a deterministic mix of the lines training jobs write (progress,
//! NCCL set-up, data loader timings, an occasional warning), about 100-150 bytes each.

/// The host a simulated rank runs on: eight ranks per host.
pub fn host(rank: u32) -> String {
    format!("load-node-{:03}", rank / 8)
}

/// Line `seq` of `rank`.
pub fn line(rank: u32, seq: u64) -> Vec<u8> {
    let step = seq / 4;
    let local = rank % 8;
    let loss = 2.5 + ((seq.wrapping_mul(2_654_435_761) % 1000) as f64) / 4000.0;
    match seq % 97 {
        96 => format!(
            "[rank{rank}]: /usr/lib/python3/site-packages/torch/utils/data/dataloader.py:558: UserWarning: This DataLoader will create 8 worker processes in total (step {step})"
        ),
        n if n % 4 == 0 => format!(
            "[rank{rank}]: 2026-11-30 12:00:00,000 INFO train.py:212 step {step} loss {loss:.4} lr 3.0e-04 grad_norm {:.3} tokens/s {}",
            loss / 3.0,
            180_000 + (seq % 977) * 13
        ),
        n if n % 4 == 1 => format!(
            "{}:{}:{} [{local}] NCCL INFO Channel {:02}/0 : {rank}[{local}] -> {}[{}] via P2P/CUMEM/read",
            host(rank),
            10_000 + rank,
            10_100 + rank,
            seq % 32,
            rank + 1,
            (local + 1) % 8
        ),
        n if n % 4 == 2 => format!(
            "[rank{rank}]: Epoch 3 [{}/50000] data time 0.0{} batch time 0.3{} samples/s {}",
            step % 50_000,
            seq % 10,
            seq % 100,
            4_000 + seq % 500
        ),
        _ => format!("[rank{rank}]: checkpoint shard {} of 64 queued for step {step} ({} MiB)", seq % 64, 512 + seq % 97),
    }
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_deterministic_and_varied() {
        assert_eq!(line(3, 10), line(3, 10));
        let text: Vec<String> = (0..97).map(|s| String::from_utf8(line(0, s)).unwrap()).collect();
        // NCCL channel lines repeat (32 channels), as they do in real jobs; the rest differ.
        let distinct: std::collections::HashSet<&String> = text.iter().collect();
        assert!(distinct.len() >= 75, "{} distinct lines of 97", distinct.len());
        for kind in ["loss", "NCCL INFO", "data time", "checkpoint", "UserWarning"] {
            assert!(text.iter().any(|l| l.contains(kind)), "no {kind} line");
        }
        assert!((0..400).all(|s| (60..220).contains(&line(7, s).len())), "line sizes drift");
    }
}
