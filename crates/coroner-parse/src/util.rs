//! Small byte-level helpers shared by the format parsers: numbers after a key, frame lines,
//! and a digit-masking template hash used to collapse runs of near-identical lines.

use coroner_model::Frame;

/// The unsigned integer right after the first occurrence of `key` (spaces skipped).
pub(crate) fn num_after(s: &str, key: &str) -> Option<u64> {
    let at = s.find(key)? + key.len();
    leading_u64(s[at..].trim_start())
}

/// The signed integer right after the first occurrence of `key`.
pub(crate) fn inum_after(s: &str, key: &str) -> Option<i64> {
    let at = s.find(key)? + key.len();
    leading_i64(s[at..].trim_start())
}

pub(crate) fn leading_u64(s: &str) -> Option<u64> {
    let n = s.bytes().take_while(u8::is_ascii_digit).count();
    if n == 0 || n > 19 {
        return None;
    }
    s[..n].parse().ok()
}

pub(crate) fn leading_i64(s: &str) -> Option<i64> {
    match s.strip_prefix('-') {
        Some(r) => leading_u64(r).and_then(|v| i64::try_from(v).ok()).map(|v| -v),
        None => leading_u64(s).and_then(|v| i64::try_from(v).ok()),
    }
}

/// A Python frame line: `File "x.py", line 12, in f` (traceback) or `File "x.py", line 12 in f`
/// (faulthandler); leading whitespace allowed.
pub(crate) fn parse_frame(line: &str) -> Option<Frame> {
    let t = line.trim_start();
    let r = t.strip_prefix("File \"")?;
    let q = r.find('"')?;
    let file = &r[..q];
    let r = r[q + 1..].strip_prefix(", line ")?;
    let n = r.bytes().take_while(u8::is_ascii_digit).count();
    let lineno = r[..n].parse::<u32>().ok();
    let r = &r[n..];
    let function = r.strip_prefix(", in ").or_else(|| r.strip_prefix(" in ")).unwrap_or("").trim_end();
    Some(Frame { file: file.to_string(), line: lineno, function: function.to_string() })
}

/// A hash of the line with every run of digits (and hex after `0x`) replaced by one marker:
/// `thread: [3,0,0]` and `thread: [4,0,0]` hash alike.
pub(crate) fn template_hash(s: &str) -> u64 {
    // FNV-1a: a keyed hash buys nothing here and SipHash per byte is slow.
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut mix = |c: u8| {
        h ^= u64::from(c);
        h = h.wrapping_mul(PRIME);
    };
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_digit() {
            if c == b'0' && matches!(b.get(i + 1), Some(b'x')) {
                i += 2;
                while i < b.len() && b[i].is_ascii_hexdigit() {
                    i += 1;
                }
            } else {
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
            }
            mix(0xff);
        } else {
            mix(c);
            i += 1;
        }
    }
    h
}

/// Cuts a string to at most `max` bytes on a char boundary.
pub(crate) fn clip(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_of_both_shapes() {
        let f = parse_frame("  File \"/opt/job/worker.py\", line 118, in <module>").unwrap();
        assert_eq!((f.file.as_str(), f.line, f.function.as_str()), ("/opt/job/worker.py", Some(118), "<module>"));
        let f = parse_frame("  File \"/opt/job/worker.py\", line 88 in main").unwrap();
        assert_eq!((f.line, f.function.as_str()), (Some(88), "main"));
        assert!(parse_frame("    main()").is_none());
    }

    #[test]
    fn numbers_and_templates() {
        assert_eq!(num_after("last enqueued work: 11, x", "last enqueued work:"), Some(11));
        assert_eq!(inum_after("exitcode  : -15 (pid", "exitcode  :"), Some(-15));
        assert_eq!(template_hash("thread: [3,0,0] x"), template_hash("thread: [17,0,0] x"));
        assert_ne!(template_hash("thread: [3,0,0] x"), template_hash("block: [3,0,0] x"));
        assert_eq!(clip("héllo", 2), "h");
    }
}
