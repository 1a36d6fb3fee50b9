//! A line's severity, read cheaply from its head: the one rule behind the agent's queue (which
//! keeps errors and warnings when it must drop lines) and the index's severity field (a search
//! filter). The typed events carry the real meaning; this only sorts lines.
//!
//! The rule, on the first [`HEAD`] bytes of the line:
//!
//! 1. A logger's own level decides: a glog severity at the start, once `[...]:` rank prefixes
//!    and a `[` are skipped (`E1130 08:59:11.123 ...`, `[rank0]:[E1130 ...`): `E` and `F` are
//!    errors, `W` a warning; NCCL's `NCCL WARN` is a warning and `NCCL INFO` info (`NCCL INFO
//!    Failed to initialize NET plugin IB` is routine).
//! 2. Else one of [`ERROR_WORDS`] anywhere in the head, in any case (`ERROR`, `RuntimeError`,
//!    `Traceback`, `CUDA out of memory`): an error.
//! 3. Else one of [`WARNING_WORDS`] (`WARN`, `UserWarning`, `NCCL WARN`): a warning.
//! 4. Else info.

use aho_corasick::{AhoCorasick, MatchKind};
use std::sync::LazyLock;

/// How much of a line is read: a word further in does not make it an error (and a 1 MiB line
/// costs what a short one does).
pub const HEAD: usize = 256;

/// Words that make a line an error, matched in any case.
pub const ERROR_WORDS: &[&str] =
    &["error", "traceback", "fatal", "exception", "critical", "panic", "abort", "fail", "killed", "segmentation fault", "out of memory"];
/// Words that make a line a warning, matched in any case.
pub const WARNING_WORDS: &[&str] = &["warn"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    Info,
    Warning,
    Error,
}

impl Severity {
    /// The name the index stores and searches filter on.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

/// The severity of `line` (see the module's rule).
pub fn severity(line: &[u8]) -> Severity {
    // Built once: building a searcher per line costs more than the search.
    static WORDS: LazyLock<AhoCorasick> = LazyLock::new(|| {
        AhoCorasick::builder()
            .ascii_case_insensitive(true)
            .match_kind(MatchKind::LeftmostFirst)
            .build(ERROR_WORDS.iter().chain(WARNING_WORDS))
            .expect("fixed patterns build")
    });
    let head = &line[..line.len().min(HEAD)];
    if let Some(s) = glog_severity(head).or_else(|| nccl_severity(head)) {
        return s;
    }
    let mut found = Severity::Info;
    for m in WORDS.find_iter(head) {
        if m.pattern().as_usize() < ERROR_WORDS.len() {
            return Severity::Error;
        }
        found = Severity::Warning;
    }
    found
}

/// Whether `line` is an error or a warning.
pub fn is_important(line: &[u8]) -> bool {
    severity(line) != Severity::Info
}

/// NCCL's debug lines: `host:pid:tid [dev] NCCL INFO ...` or `... NCCL WARN ...`.
fn nccl_severity(head: &[u8]) -> Option<Severity> {
    let at = memchr::memmem::find(head, b" NCCL ")? + 6;
    match head.get(at..at + 4)? {
        b"INFO" => Some(Severity::Info),
        b"WARN" => Some(Severity::Warning),
        _ => None,
    }
}

/// `E`, `W` or `F` followed by the month and day at the start of the line (four digits in glog,
/// three in PyTorch's own C++ header for January to September: `[E421 02:05:38 ...`), then a
/// space, once `[...]:` prefixes and a `[` are skipped.
fn glog_severity(head: &[u8]) -> Option<Severity> {
    let mut rest = head;
    while rest.first() == Some(&b'[') {
        match memchr::memchr(b']', rest) {
            Some(end) if rest.get(end + 1) == Some(&b':') => rest = &rest[end + 2..],
            _ => {
                rest = &rest[1..];
                break;
            }
        }
    }
    match rest {
        [level @ (b'E' | b'W' | b'F'), date @ ..] if is_month_day(date) => Some(if *level == b'W' { Severity::Warning } else { Severity::Error }),
        _ => None,
    }
}

/// Three or four digits then a space: `1130 ` or `421 `.
fn is_month_day(date: &[u8]) -> bool {
    let digits = date.iter().take_while(|c| c.is_ascii_digit()).count();
    matches!(digits, 3 | 4) && date.get(digits) == Some(&b' ')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_of_every_usual_shape() {
        for l in [
            "ERROR: something broke",
            "2026-11-30 08:58:51,398 ERROR [rank0] train: bad",
            "E1130 08:59:11.123456 1234 ProcessGroupNCCL.cpp:1] Watchdog caught collective operation timeout",
            "[rank0]:[E1130 08:59:11 x.cpp:1] boom",
            "[rank4]:[E421 02:05:38.764490322 ProcessGroupGloo.cpp:143] Gloo connectFullMesh failed",
            "F1130 08:59:11.1 x.cpp:1] check failed",
            "Traceback (most recent call last):",
            "RuntimeError: CUDA error: an illegal memory access was encountered",
            "torch.OutOfMemoryError: CUDA out of memory.",
            "Fatal Python error: Segmentation fault",
            "CRITICAL: disk",
            "srun: error: node1: task 3: Killed",
        ] {
            assert_eq!(severity(l.as_bytes()), Severity::Error, "{l}");
        }
    }

    #[test]
    fn warnings_of_every_usual_shape() {
        for l in [
            "/opt/x.py:3: UserWarning: deprecated",
            "warning: low disk",
            "node1:123:456 [0] NCCL WARN Call to ibv_create_qp failed",
            "[default3]:W1130 08:59:11.1 x.cpp:1] slow",
        ] {
            assert_eq!(severity(l.as_bytes()), Severity::Warning, "{l}");
        }
        // A logger's warning that reports an error is a warning: the header decides.
        assert_eq!(severity(b"W1130 08:59:11.1 x.cpp:1] retrying after error"), Severity::Warning);
    }

    #[test]
    fn routine_lines_are_info() {
        for l in [
            "step 10 loss 1.0",
            "Epoch 3: 100%|##########| 50/50",
            "[rank0]:[I1130 08:59:11 x.cpp:1] init",
            "Every 10 steps",
            "[Epoch 3] done",
            "vm:1144:1144 [1] NCCL INFO Failed to initialize NET plugin IB",
        ] {
            assert_eq!(severity(l.as_bytes()), Severity::Info, "{l}");
            assert!(!is_important(l.as_bytes()));
        }
    }

    #[test]
    fn only_the_head_of_a_line_is_read() {
        let mut late = vec![b'x'; HEAD];
        late.extend_from_slice(b"Error");
        assert_eq!(severity(&late), Severity::Info);
        assert_eq!(severity(&late[HEAD - 10..]), Severity::Error);
        assert_eq!(severity(b""), Severity::Info);
    }
}
