//! Lines that hold several records: a progress bar redrawn with `\r`, or another record glued
//! to the end of a bar because the bar never printed its newline (`…132.44s/it][2023-06-07
//! 22:16:00,018] [INFO] …`, `…13.82it/s]Killed`, `…consumed_samples=2.56e+7][E ProcessGroupNCCL…`).
//! Each record is read on its own; a line without either is one segment.

/// A line that holds a whole multi-line record escaped: a JSON log record (TGI's
/// `--json-output`: `{"timestamp":..,"level":"ERROR","fields":{"message":"Traceback ...\n  File ..."}}`,
/// also cut mid-record by a paste), whose message is read with its level in front (`ERROR: ...`),
/// or any line carrying a traceback as escaped text (`\n` between its lines). `None` for an
/// ordinary line.
pub fn expand(line: &str) -> Option<String> {
    let t = line.trim();
    if t.starts_with('{') && t.ends_with('}') {
        if let Ok(serde_json::Value::Object(o)) = serde_json::from_str::<serde_json::Value>(t) {
            let message = o.get("fields").and_then(|f| f.get("message")).or_else(|| o.get("message")).or_else(|| o.get("msg"))?;
            let message = message.as_str()?;
            let level = o.get("level").and_then(|l| l.as_str()).unwrap_or("INFO").to_ascii_uppercase();
            return Some(format!("{level}: {message}"));
        }
    }
    // No backslash: nothing escaped in it.
    memchr::memchr(b'\\', t.as_bytes())?;
    let escaped_lines = t.matches("\\n").count();
    if escaped_lines >= 2 && (t.contains("File \\\"") || t.contains("Traceback (most recent call last)") || t.contains("Error: ")) {
        return Some(t.replace("\\n", "\n").replace("\\\"", "\"").replace("\\\\", "\\"));
    }
    None
}

/// The records of one line, in order (never empty; blank pieces are dropped unless all are).
pub fn segments(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for piece in line.split('\r') {
        let mut rest = piece;
        while let Some(end) = bar_end(rest) {
            let (bar, after) = rest.split_at(end);
            if !bar.trim().is_empty() {
                out.push(bar);
            }
            rest = after;
        }
        if !rest.trim().is_empty() {
            out.push(rest);
        }
    }
    if out.is_empty() {
        out.push(line);
    }
    out
}

/// Where a progress bar's closing `]` ends, when more text follows it on the same line.
fn bar_end(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    // tqdm: `[00:40<2:39:27,  2.51it/s]`, `[13:58:09<86:18:35, 132.44s/it]`, `[00:00<?, ?it/s]`,
    // Lightning/NeMo: `[00:30<00:00, v_num=0, loss=1.2]`: a `[` + time + `<`, up to its `]`.
    let mut from = 0;
    while let Some(i) = s[from..].find('[') {
        let open = from + i;
        let digits = b[open + 1..].iter().take_while(|c| c.is_ascii_digit() || **c == b':').count();
        if digits >= 4 && b.get(open + 1 + digits) == Some(&b'<') {
            let close = open + s[open..].find(']')?;
            let after = close + 1;
            return (after < s.len() && !s[after..].trim().is_empty()).then_some(after);
        }
        from = open + 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaped_multi_line_records_are_expanded() {
        let json = r#"{"timestamp":"2023-07-06T19:16:30Z","level":"ERROR","fields":{"message":"Shard 0 failed:\nTraceback (most recent call last):\n  File \"x.py\", line 1, in <module>\nRuntimeError: weight w does not exist\n"},"target":"text_generation_launcher"}"#;
        let x = expand(json).expect("a JSON record");
        assert!(x.starts_with("ERROR: Shard 0 failed:\nTraceback (most recent call last):\n  File \"x.py\""), "{x}");
        assert!(x.contains("\nRuntimeError: weight w does not exist"));
        let cut = r#"init__\n  File \"/a/b.py\", line 3, in f\n    g()\n\nRuntimeError: boom\n\n"},"target":"t"}"#;
        assert!(expand(cut).expect("escaped").contains("\nRuntimeError: boom\n"));
        assert!(expand(r#"{"loss": 0.5, "step": 3}"#).is_none());
        assert!(expand("plain \\n text").is_none());
    }

    #[test]
    fn records_glued_to_progress_bars_are_split() {
        assert_eq!(
            segments(" 14%|█▍        | 378/2724 [13:58:09<86:18:35, 132.44s/it][2023-06-07 22:16:00,018] [INFO] OVERFLOW!"),
            vec![" 14%|█▍        | 378/2724 [13:58:09<86:18:35, 132.44s/it]", "[2023-06-07 22:16:00,018] [INFO] OVERFLOW!"]
        );
        assert_eq!(segments("100%|██| 5/5 [00:01<00:00,  3.82it/s]Killed"), vec!["100%|██| 5/5 [00:01<00:00,  3.82it/s]", "Killed"]);
        assert_eq!(segments("Epoch 0:  3%| | 3/100 [00:30<16:10, v_num=0, consumed_samples=2.56e+7][E ProcessGroupNCCL.cpp:458] x").len(), 2);
        assert_eq!(segments("a\rb\r"), vec!["a", "b"]);
        assert_eq!(segments("plain line [rank0] x"), vec!["plain line [rank0] x"]);
        assert_eq!(segments("  0%|  | 0/10 [00:00<?, ?it/s]"), vec!["  0%|  | 0/10 [00:00<?, ?it/s]"]);
        assert_eq!(segments(""), vec![""]);
    }
}
