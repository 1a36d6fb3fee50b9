//! Rank prefixes that launchers put in front of a worker's lines.
//!
//! torchrun `--tee` writes `[default3]:` (role name and *local* rank), PyTorch's own exception
//! handler writes `[rank3]:` (global rank), `srun --label` writes `3: `, and Horovod/Open MPI's
//! `--tag-output` writes `[1,3]<stderr>:`. Byte-level, no regex: this runs on the agent's hot path.

/// What the leading prefixes of a line say about its owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RankPrefix {
    /// `[rankN]:` or a Horovod/MPI tag: a global rank.
    pub global_rank: Option<u32>,
    /// `[<role>N]:` from torchrun: a local rank on the node.
    pub local_rank: Option<u32>,
    /// `N: ` from `srun --label`: the Slurm task id, which is the global rank under srun.
    pub task_id: Option<u32>,
    /// How many bytes of prefix precede the line's own text.
    pub len: usize,
}

impl RankPrefix {
    /// The line without its prefixes.
    pub fn rest<'a>(&self, line: &'a [u8]) -> &'a [u8] {
        &line[self.len..]
    }
}

/// Reads every leading rank prefix of `line`, in any order and nesting
/// (`[default1]:[rank1]: Traceback` carries both).
pub fn split_rank_prefix(line: &[u8]) -> RankPrefix {
    let mut p = RankPrefix::default();
    loop {
        let rest = &line[p.len..];
        if let Some((kind, value, used)) = bracket_prefix(rest) {
            match kind {
                BracketKind::Rank => p.global_rank = p.global_rank.or(Some(value)),
                BracketKind::Role => p.local_rank = p.local_rank.or(Some(value)),
                BracketKind::Mpi => p.global_rank = p.global_rank.or(Some(value)),
            }
            p.len += used;
            continue;
        }
        if p.len == 0 {
            if let Some((value, used)) = srun_label(rest) {
                p.task_id = Some(value);
                p.len += used;
                continue;
            }
        }
        return p;
    }
}

enum BracketKind {
    Rank,
    Role,
    Mpi,
}

/// `[rank12]:`, `[default3]:`, `[trainer0]:`, `[1,3]<stderr>:`; one optional space after the colon
/// is *not* consumed, so the line's own text keeps its indentation.
fn bracket_prefix(s: &[u8]) -> Option<(BracketKind, u32, usize)> {
    if s.first() != Some(&b'[') {
        return None;
    }
    let close = memchr::memchr(b']', &s[..s.len().min(40)])?;
    let inner = &s[1..close];
    // Horovod / Open MPI: [jobid,rank]<stdout>: or [jobid,rank]<stderr>:
    if let Some(comma) = inner.iter().position(|&b| b == b',') {
        let rank = parse_u32(&inner[comma + 1..])?;
        parse_u32(&inner[..comma])?;
        let after = &s[close + 1..];
        for tag in [&b"<stdout>:"[..], &b"<stderr>:"[..]] {
            if after.starts_with(tag) {
                return Some((BracketKind::Mpi, rank, close + 1 + tag.len()));
            }
        }
        return None;
    }
    if s.get(close + 1) != Some(&b':') {
        return None;
    }
    let digits_start = inner.iter().position(|b| b.is_ascii_digit())?;
    let (name, digits) = inner.split_at(digits_start);
    let value = parse_u32(digits)?;
    if name.is_empty() || !name.iter().all(|b| b.is_ascii_alphabetic() || *b == b'_') {
        return None;
    }
    let kind = if name == b"rank" { BracketKind::Rank } else { BracketKind::Role };
    Some((kind, value, close + 2))
}

/// `srun --label`: `12: text`. Only digits, then `: `.
fn srun_label(s: &[u8]) -> Option<(u32, usize)> {
    let digits = s.iter().take(7).take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || s.get(digits) != Some(&b':') || s.get(digits + 1) != Some(&b' ') {
        return None;
    }
    Some((parse_u32(&s[..digits])?, digits + 2))
}

fn parse_u32(d: &[u8]) -> Option<u32> {
    if d.is_empty() || d.len() > 9 || !d.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(d.iter().fold(0u32, |acc, b| acc * 10 + u32::from(b - b'0')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torchrun_tee_with_pytorch_rank_prefix() {
        let line = b"[default1]:[rank1]: Traceback (most recent call last):";
        let p = split_rank_prefix(line);
        assert_eq!((p.local_rank, p.global_rank), (Some(1), Some(1)));
        assert_eq!(p.rest(line), b" Traceback (most recent call last):");
    }

    #[test]
    fn glog_brackets_are_not_rank_prefixes() {
        let line = b"[rank0]:[E1130 08:59:11.424298747 ProcessGroupNCCL.cpp:689] [Rank 0] Watchdog";
        let p = split_rank_prefix(line);
        assert_eq!(p.global_rank, Some(0));
        assert!(p.rest(line).starts_with(b"[E1130"));
        assert_eq!(split_rank_prefix(b"[W1130 08:58:47.665 Utils.hpp:137] x").len, 0);
    }

    #[test]
    fn srun_label_and_mpi_tags() {
        let p = split_rank_prefix(b"12: step 4");
        assert_eq!((p.task_id, p.len), (Some(12), 4));
        let p = split_rank_prefix(b"[1,3]<stderr>:Traceback");
        assert_eq!((p.global_rank, p.len), (Some(3), 14));
        // A Python logging time is not a label.
        assert_eq!(split_rank_prefix(b"2026-11-30 08:58:51,398 INFO").len, 0);
        assert_eq!(split_rank_prefix(b"08:58:51 x").len, 0);
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        for line in [&b"["[..], b"[]", b"[rank]:", b"[rank99999999999]:", b"[1,]<stdout>:", b"1:"] {
            let p = split_rank_prefix(line);
            assert!(p.len <= line.len());
        }
    }
}
