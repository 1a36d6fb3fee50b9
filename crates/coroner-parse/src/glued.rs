//! Lines that hold several records: a progress bar redrawn with `\r`, or another record glued
//! to the end of a bar because the bar never printed its newline (`…132.44s/it][2023-06-07
//! 22:16:00,018] [INFO] …`, `…13.82it/s]Killed`, `…consumed_samples=2.56e+7][E ProcessGroupNCCL…`).
//! Each record is read on its own; a line without either is one segment.

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
