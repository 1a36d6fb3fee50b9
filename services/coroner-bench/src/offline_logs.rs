//! `coroner-bench offline-logs`: writes the input of the offline memory figures
//! (docs/PERFORMANCE.md, "`coroner analyze` of large inputs"): a folder of plain rank logs and a
//! combined log, in the formats of the synthetic jobs (`synth.rs`: a CUDA OOM culprit with its
//! traceback, every other rank timing out in the NCCL watchdog). Each rank's file is written as
//! it is made, so the generator itself needs one rank's lines at a time (the combined log: all of
//! its ranks' lines, to interleave them).

use crate::synth::{rank_lines, Shape};
use anyhow::{Context, Result};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct OfflineLogsArgs {
    /// Where to write `ranks/rank<R>.log` and `combined/train.log`.
    #[arg(long)]
    out: PathBuf,
    /// Rank logs to write (0 for none).
    #[arg(long, default_value_t = 1024)]
    ranks: u32,
    /// About how many MiB each rank log holds.
    #[arg(long, default_value_t = 1.0)]
    rank_mib: f64,
    /// About how many MiB the combined log holds (0 for none).
    #[arg(long, default_value_t = 300)]
    combined_mib: u64,
    /// Ranks whose lines the combined log interleaves, each behind its `[rank<R>]:` prefix.
    #[arg(long, default_value_t = 64)]
    combined_ranks: u32,
}

pub fn main(args: OfflineLogsArgs) -> Result<()> {
    let per_line = bytes_per_line();
    if args.ranks > 0 {
        let lines = (args.rank_mib * f64::from(1 << 20) / per_line) as usize;
        let shape = Shape::new(args.ranks, lines);
        let dir = args.out.join("ranks");
        std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
        let mut bytes = 0;
        for r in 0..args.ranks {
            let mut w = create(&dir.join(format!("rank{r}.log")))?;
            for l in rank_lines(&shape, r) {
                w.write_all(&l.bytes)?;
                w.write_all(b"\n")?;
                bytes += l.bytes.len() as u64 + 1;
            }
            w.flush()?;
        }
        println!("{}: {} rank logs, {bytes} bytes; the culprit (cuda_oom) is rank {}", dir.display(), args.ranks, shape.culprit);
    }
    if args.combined_mib > 0 {
        let n = args.combined_ranks.max(2);
        let lines = (args.combined_mib as f64 * f64::from(1 << 20) / (per_line + 9.0) / f64::from(n)) as usize;
        let shape = Shape::new(n, lines);
        let dir = args.out.join("combined");
        std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
        let ranks: Vec<_> = (0..n).map(|r| rank_lines(&shape, r)).collect();
        let longest = ranks.iter().map(Vec::len).max().unwrap_or(0);
        let mut w = create(&dir.join("train.log"))?;
        let mut bytes = 0;
        // Line i of every rank, then line i + 1: the ranks run in step, as a console shows them.
        for i in 0..longest {
            for (r, lines) in ranks.iter().enumerate() {
                let Some(l) = lines.get(i) else { continue };
                let prefix = if l.bytes.starts_with(b"[rank") { String::new() } else { format!("[rank{r}]:") };
                w.write_all(prefix.as_bytes())?;
                w.write_all(&l.bytes)?;
                w.write_all(b"\n")?;
                bytes += (prefix.len() + l.bytes.len() + 1) as u64;
            }
        }
        w.flush()?;
        println!("{}: one combined log of {n} ranks, {bytes} bytes; the culprit (cuda_oom) is rank {}", dir.display(), shape.culprit);
    }
    Ok(())
}

fn create(path: &Path) -> Result<BufWriter<std::fs::File>> {
    Ok(BufWriter::with_capacity(1 << 20, std::fs::File::create(path).with_context(|| format!("create {}", path.display()))?))
}

/// The mean length of a synthetic line with its newline, from one rank of 10,000 lines.
fn bytes_per_line() -> f64 {
    let lines = rank_lines(&Shape::new(16, 10_000), 0);
    lines.iter().map(|l| l.bytes.len() + 1).sum::<usize>() as f64 / lines.len() as f64
}
