//! The grep baseline: the first error-looking line of the input, classified by keywords. This is
//! the script a person writes in ten minutes; coroner must beat it by a wide margin. It lives in
//! the harness only and is never used by the product.

use crate::score::Got;
use regex::Regex;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

static ERRORISH: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b\w*(error|exception)\b[:\s]|traceback \(most recent|\bkilled\b|segmentation fault|core dumped|nccl warn|\bxid\b|watchdog caught|timed? ?out|cancelled|oomkilled|\bfatal\b|\bnan\b|overflow!").expect("static regex")
});

/// (class, keywords): the first whose regex matches the error line wins.
static CLASSES: LazyLock<Vec<(&'static str, Regex)>> = LazyLock::new(|| {
    [
        ("gpu_hardware", r"(?i)xid|ecc|fallen off the bus"),
        ("cuda_oom", r"(?i)out of memory|\boom\b|resource.?exhausted"),
        ("nan_inf", r"(?i)\bnan\b|\binf\b|overflow"),
        ("collective_mismatch", r"(?i)mismatch between collectives|mismatched collective"),
        ("hang", r"(?i)watchdog|timed? ?out|timeout|stalled"),
        ("checkpoint_mismatch", r"(?i)state_dict|checkpoint|size mismatch for"),
        ("shape_mismatch", r"(?i)shape|size of tensor|dimension"),
        ("tokenizer_mismatch", r"(?i)index out of range|vocab|token"),
        ("dataloader", r"(?i)dataloader|bus error|shared memory"),
        ("bus_error", r"(?i)sigbus|signal 7\b"),
        ("segfault", r"(?i)segmentation fault|sigsegv|signal 11"),
        ("killed", r"(?i)killed|sigkill|cancelled|signal 9|sigterm"),
        ("nccl_error", r"(?i)nccl|connection|socket|network"),
    ]
    .into_iter()
    .map(|(c, r)| (c, Regex::new(r).expect("static regex")))
    .collect()
});

static RANK: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"(?i)\[rank\s*(\d+)\]|^\s*(\d+): ").expect("static regex"));

fn files(p: &Path, out: &mut Vec<PathBuf>) {
    if p.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(p).map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect()).unwrap_or_default();
        entries.sort();
        for e in entries {
            files(&e, out);
        }
    } else {
        out.push(p.to_path_buf());
    }
}

/// The baseline's verdict on the input.
pub fn run(paths: &[PathBuf]) -> Got {
    let mut all = Vec::new();
    for p in paths {
        files(p, &mut all);
    }
    let text: String = all.iter().filter_map(|f| std::fs::read(f).ok()).map(|b| String::from_utf8_lossy(&b).into_owned()).collect::<Vec<_>>().join("\n");
    let Some(line) = text.lines().find(|l| ERRORISH.is_match(l)) else {
        return Got { verdict: "succeeded".into(), class: None, rank: None, no_failure_found: false, summary: String::new() };
    };
    let class = CLASSES.iter().find(|(_, re)| re.is_match(line)).map(|(c, _)| *c).unwrap_or("python_exception");
    let rank = RANK.captures(line).and_then(|c| c.get(1).or(c.get(2))).and_then(|m| m.as_str().parse().ok());
    Got { verdict: "failed".into(), class: Some(class.into()), rank, no_failure_found: false, summary: line.chars().take(200).collect() }
}
