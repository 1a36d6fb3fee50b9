//! glog-style headers: the C++ side of PyTorch, torchrun's Python logging, TensorFlow, Horovod.
//!
//! Shapes accepted (the rank prefix is already stripped):
//! `[E1130 08:59:11.424298747 ProcessGroupNCCL.cpp:689] body` (PyTorch >= 2.2; its month is not
//! zero-padded: `[E421 ...]` is April 21, so the date is three or four digits),
//! `[E ProcessGroupNCCL.cpp:828] body` (older PyTorch),
//! `E1130 09:03:42.336000 3148 torch/distributed/elastic/multiprocessing/api.py:986] body` (torchrun, glog),
//! `2026-11-30 08:58:51.123456: E tensorflow/core/kernels/x.cc:123] body` (TensorFlow),
//! `[2026-11-30 08:58:51.123456: W /tmp/horovod/common/stall_inspector.cc:107] body` (Horovod).

/// A parsed glog header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Glog<'a> {
    /// `I`, `W`, `E` or `F`.
    pub level: u8,
    /// `ProcessGroupNCCL.cpp:689`, `torch/distributed/run.py:851`.
    pub file: &'a str,
    /// The message after `] `.
    pub body: &'a str,
}

fn is_level(c: u8) -> bool {
    matches!(c, b'I' | b'W' | b'E' | b'F')
}

/// Reads a glog header at the start of `s`.
pub fn parse(s: &str) -> Option<Glog<'_>> {
    let b = s.as_bytes();
    let first = *b.first()?;
    if !(first == b'[' || is_level(first) || first.is_ascii_digit()) {
        return None;
    }
    let lim = b.len().min(400);
    let close = memchr::memchr(b']', &b[..lim])?;
    let open = usize::from(first == b'[');
    let header = s.get(open..close)?;
    let after = s.get(close + 1..)?;
    let body = after.strip_prefix(' ').unwrap_or(after);
    let mut toks = header.split_ascii_whitespace();
    let t0 = toks.next()?.as_bytes();
    // `E0405` (MMDD; PyTorch's C++ logging drops the month's zero: `E421`), glog 0.7's
    // `F20250821` (YYYYMMDD), or the level alone.
    let level = if is_level(t0[0]) && (t0.len() == 1 || (matches!(t0.len(), 4 | 5 | 9) && t0[1..].iter().all(u8::is_ascii_digit))) {
        t0[0]
    } else if t0.len() == 10 && t0[4] == b'-' && t0[7] == b'-' && t0[0].is_ascii_digit() {
        // TensorFlow / Horovod: `date time: L file`
        let t1 = toks.next()?;
        if !t1.ends_with(':') {
            return None;
        }
        let l = toks.next()?.as_bytes();
        if l.len() != 1 || !is_level(l[0]) {
            return None;
        }
        l[0]
    } else {
        return None;
    };
    let file = toks.last()?;
    // The file token ends in `:<line>`.
    let colon = file.rfind(':')?;
    if colon + 1 >= file.len() || !file[colon + 1..].bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    Some(Glog { level, file, body })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::type_complexity)]
    fn shapes() {
        let cases: &[(&str, Option<(u8, &str, &str)>)] = &[
            ("[E1130 08:59:11.424298747 ProcessGroupNCCL.cpp:689] [Rank 0] Watchdog", Some((b'E', "ProcessGroupNCCL.cpp:689", "[Rank 0] Watchdog"))),
            ("[E ProcessGroupNCCL.cpp:828] [Rank 1] Watchdog caught", Some((b'E', "ProcessGroupNCCL.cpp:828", "[Rank 1] Watchdog caught"))),
            // January to September: PyTorch does not pad the month.
            (
                "[E421 02:05:38.764490322 ProcessGroupGloo.cpp:143] Gloo connectFullMesh failed",
                Some((b'E', "ProcessGroupGloo.cpp:143", "Gloo connectFullMesh failed")),
            ),
            ("[W210 02:06:33.347835395 ProcessGroupNCCL.cpp:1595] x", Some((b'W', "ProcessGroupNCCL.cpp:1595", "x"))),
            ("E0421 02:05:38.764490 12 foo.cc:1] glog pads it", Some((b'E', "foo.cc:1", "glog pads it"))),
            ("[E42 02:05:38 foo.cc:1] two digits is no date", None),
            (
                "E1130 09:03:42.336000 3148 torch/distributed/elastic/multiprocessing/api.py:986] failed (exitcode: 1)",
                Some((b'E', "torch/distributed/elastic/multiprocessing/api.py:986", "failed (exitcode: 1)")),
            ),
            ("W1130 09:03:29.350000 3148 torch/distributed/run.py:851] ", Some((b'W', "torch/distributed/run.py:851", ""))),
            (
                "2026-11-30 08:58:51.123456: E tensorflow/core/common_runtime/x.cc:123] Aborting RingReduce",
                Some((b'E', "tensorflow/core/common_runtime/x.cc:123", "Aborting RingReduce")),
            ),
            (
                "[2026-11-30 08:58:51.123456: W /tmp/horovod/common/stall_inspector.cc:107] One or more",
                Some((b'W', "/tmp/horovod/common/stall_inspector.cc:107", "One or more")),
            ),
            ("2026-11-30 08:58:51,398 INFO [rank0] train: step 4", None),
            ("[rank0] x", None),
            ("E.g. this] that", None),
            ("", None),
        ];
        for (line, want) in cases {
            let got = parse(line).map(|g| (g.level, g.file, g.body));
            assert_eq!(got, *want, "{line}");
        }
    }
}
