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

/// Line `seq` of a rank's NCCL start-up output (NCCL_DEBUG=INFO): versions, the communicator,
/// its rings and trees, then one line per channel and peer.
pub fn nccl_init_line(rank: u32, world: u32, seq: u64) -> Vec<u8> {
    let (local, node) = (rank % 8, host(rank));
    let pid = 10_000 + rank;
    let head = format!("{node}:{pid}:{pid} [{local}] NCCL INFO");
    match seq {
        0 => format!("{head} Bootstrap : Using eth0:10.{}.{}.{}<0>", rank / 65_536 % 256, rank / 256 % 256, rank % 256),
        1 => format!("{head} NCCL version 2.21.5+cuda12.4"),
        2 => format!("{head} cudaDriverVersion 12040"),
        3 => format!(
            "{head} comm 0x{:x} rank {rank} nranks {world} cudaDev {local} nvmlDev {local} busId {:x}000 commId 0x5f1e2d3c4b5a6978 - Init START",
            0x5562_0000_u64 + u64::from(rank),
            0x18 + local * 0x10
        ),
        4 => format!("{head} Setting affinity for GPU {local} to ffffff,ffffffff"),
        5 => format!("{head} NVLS multicast support is not available on dev {local}"),
        n if n % 5 == 0 => format!("{head} Trees [{}] {}/-1/-1->{rank}->{}", n % 32, rank.saturating_sub(1), (rank + 1) % world),
        n if n % 5 == 1 => {
            format!("{head} Channel {:02}/{:02} : {rank}[{local}] -> {}[{}] via P2P/CUMEM/read", n % 32, 32, (rank + 1) % world, (local + 1) % 8)
        }
        n if n % 5 == 2 => {
            format!("{head} Channel {:02}/0 : {rank}[{local}] -> {}[{}] [send] via NET/IB/{}/GDRDMA", n % 32, (rank + 8) % world, local, local % 4)
        }
        n if n % 5 == 3 => format!("{head} Connected all rings, use ring PXN 0 GDR 1 (step {n})"),
        n => format!("{head} threadThresholds 8/8/64 | {}/8/64 | 512 | 512 (channel {})", world * 8, n % 32),
    }
    .into_bytes()
}

/// Line `seq` of a rank's training progress (one a second in the steady profile).
pub fn progress_line(rank: u32, seq: u64) -> Vec<u8> {
    let loss = 2.5 + ((seq.wrapping_mul(2_654_435_761) % 1000) as f64) / 4000.0;
    format!(
        "[rank{rank}]: 2026-11-30 12:00:00,000 INFO train.py:212 step {seq} loss {loss:.4} lr 3.0e-04 grad_norm {:.3} tokens/s {}",
        loss / 3.0,
        180_000 + (seq % 977) * 13
    )
    .into_bytes()
}

/// Line `seq` of a rank's 40-line traceback: a collective that timed out on every rank.
pub fn traceback_line(rank: u32, seq: u64) -> Vec<u8> {
    let frames = ["train.py", "engine.py", "torch/nn/parallel/distributed.py", "torch/distributed/c10d_logger.py", "torch/distributed/distributed_c10d.py"];
    let text = match seq {
        0 => "Traceback (most recent call last):".to_string(),
        38 => format!(
            "torch.distributed.DistBackendError: [Rank {rank}] NCCL watchdog thread terminated with exception: Watchdog caught collective operation timeout"
        ),
        n if n >= 39 => format!("RuntimeError: [Rank {rank}] ProcessGroupNCCL: WorkNCCL(SeqNum=4242, OpType=ALLREDUCE) ran for 600000 ms before timing out"),
        n if n % 2 == 1 => {
            let f = frames[(n as usize / 2) % frames.len()];
            format!("  File \"/opt/conda/lib/python3.11/site-packages/{f}\", line {}, in frame_{}", 100 + n * 7, n / 2)
        }
        n => format!("    return self._run(inputs, step={}, rank={rank})", n / 2),
    };
    format!("[rank{rank}]: {text}").into_bytes()
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
