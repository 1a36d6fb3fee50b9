//! The snapshot readers (`coroner_snapshot`): flight recorder and raw pickles, `torch.save` zips,
//! `nvidia-smi -q -x` XML, memory summaries, stack dumps, ELF core notes and kernel logs. The
//! first byte picks the reader (`coroner_fuzz::SNAPSHOT_KINDS`), the rest is the file.
//!
//! Checked: no panic and bounded memory (libFuzzer's -rss_limit_mb); `facts` never fails and says
//! why a file is unreadable; it agrees with the reader it dispatches to; a file cut by a size cap
//! says so; progress rows come only from a readable flight recorder dump and each names a group
//! once; results are deterministic.

#![no_main]

use coroner_fuzz::SNAPSHOT_KINDS;
use coroner_snapshot::{facts, flight_recorder, highlights, pickle};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, bytes)) = data.split_first() else { return };
    let kind = SNAPSHOT_KINDS[usize::from(pick) % SNAPSHOT_KINDS.len()];
    if kind == "pickle" {
        match pickle::parse(bytes) {
            Ok(v) => {
                let (nodes, depth) = measure(&v, 0);
                // pickle.rs: MAX_NODES and MAX_DEPTH.
                assert!(nodes <= 5_000_000, "{nodes} values");
                assert!(depth <= 201, "nested {depth} deep");
                assert_eq!(pickle::parse(bytes).map(|v| measure(&v, 0)), Ok((nodes, depth)));
            }
            Err(e) => assert_eq!(pickle::parse(bytes).err(), Some(e)),
        }
        return;
    }
    let name = match kind {
        "flight_recorder" => "nccl_trace_rank_0",
        "state_dict" => "rank0.state_dict.pt",
        "nvidia_smi" => "nvidia-smi-q.xml",
        "memory_summary" => "rank0.memory_summary.txt",
        "stack" => "rank0.stack.txt",
        "core" => "core.1234",
        "kernel_log" => "dmesg-tail.txt",
        _ => "dump.bin",
    };
    let size = bytes.len() as u64;
    let f = facts(kind, name, bytes, size);
    let direct = highlights(kind, name, bytes);
    match &direct {
        Ok(h) => assert_eq!(&f.highlights, h, "facts and highlights disagree"),
        Err(e) => assert_eq!(f.highlights, vec![format!("unreadable: {e}")]),
    }
    if !f.fr_progress.is_empty() {
        assert_eq!(kind, "flight_recorder");
        let fr = flight_recorder::parse(bytes).expect("progress from a dump that does not read");
        assert_eq!(fr.progress(), f.fr_progress);
        let mut groups: Vec<_> = f.fr_progress.iter().map(|p| &p.pg).collect();
        groups.dedup();
        assert_eq!(groups.len(), f.fr_progress.len(), "a process group twice: {:?}", f.fr_progress);
    }
    if !f.hardware.is_empty() {
        assert!(matches!(kind, "kernel_log" | "nvidia_smi"), "hardware lines from a {kind}");
    }
    assert_eq!(format!("{:?}", facts(kind, name, bytes, size)), format!("{f:?}"), "facts are not deterministic");

    // The same bytes as the first part of a larger file (a size cap cut it).
    let cut = facts(kind, name, bytes, size + 1);
    assert_eq!(cut.highlights.last(), Some(&format!("only the first {size} of {} bytes were kept (size cap)", size + 1)));
});

/// How many values a decoded pickle holds, and how deep it nests.
fn measure(v: &pickle::Value, depth: usize) -> (usize, usize) {
    use pickle::Value::*;
    let children: Vec<&pickle::Value> = match v {
        List(x) | Tuple(x) | Set(x) => x.iter().collect(),
        Dict(pairs) => pairs.iter().flat_map(|(k, v)| [k, v]).collect(),
        Call(c, args) => std::iter::once(c.as_ref()).chain(args.iter()).collect(),
        Build(o, s) => vec![o.as_ref(), s.as_ref()],
        PersId(p) => vec![p.as_ref()],
        _ => Vec::new(),
    };
    children.into_iter().fold((1, depth), |(n, d), c| {
        let (cn, cd) = measure(c, depth + 1);
        (n + cn, d.max(cd))
    })
}
