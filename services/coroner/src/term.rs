//! Terminal safety: text from a server or a log (lines, host names, snapshot names and kinds,
//! error messages) is shown with its control characters made visible, never sent raw to the
//! terminal, where an escape sequence could change the title, clear the screen, plant an OSC 8
//! link or reorder what is shown (bidi overrides). `--raw` passes bytes through unchanged.
//!
//! Made visible ([`visible`]): C0 controls but newline and tab (`\x1b`), DEL (`\x7f`), C1 controls
//! (`\u{9b}`), and the Unicode format characters that reorder or hide text: bidi embeddings,
//! overrides and isolates (`\u{202e}`), zero-width spaces and joiners, the BOM. JSON output gets
//! the same characters as JSON escapes (`\u009b`), so it stays valid JSON.
//!
//! Every CLI output path goes through [`out`]/[`err`] (the `say!`, `say_part!` and `say_err!` macros); the
//! timeline's own colours are added after its text is made visible.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};

static RAW: AtomicBool = AtomicBool::new(false);

/// `--raw`: pass what the server sent through unchanged.
pub fn set_raw(raw: bool) {
    RAW.store(raw, Ordering::Relaxed);
}

fn is_raw() -> bool {
    RAW.load(Ordering::Relaxed)
}

/// Whether `c` must not reach a terminal as it is (newline and tab may).
pub fn is_unsafe(c: char) -> bool {
    match c {
        '\n' | '\t' => false,
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' => true,
        // Zero-width and direction marks, bidi embeddings/overrides, isolates, the BOM.
        '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{2069}' | '\u{feff}' => true,
        _ => false,
    }
}

/// `s` with its unsafe characters as Rust-style escapes: `\x1b`, `\u{202e}`.
pub fn visible(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_unsafe) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if !is_unsafe(c) {
            out.push(c);
        } else if (c as u32) < 0x80 {
            let _ = write!(out, "\\x{:02x}", c as u32);
        } else {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
    }
    Cow::Owned(out)
}

/// JSON text with the unsafe characters serde_json leaves raw (C1, DEL, format characters) as
/// `\uXXXX` escapes. They can only stand inside JSON strings, so the result is the same JSON.
pub fn visible_json(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_unsafe) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if is_unsafe(c) && c != '\n' {
            let _ = write!(out, "\\u{:04x}", c as u32);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Writes text from the server or a log to standard output, made visible unless `--raw`.
pub fn out(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = if is_raw() { stdout.write_all(text.as_bytes()) } else { stdout.write_all(visible(text).as_bytes()) };
}

/// JSON to standard output (one document and a newline), escaped unless `--raw`.
pub fn out_json(json: &str) {
    let mut stdout = std::io::stdout().lock();
    let json = if is_raw() { Cow::Borrowed(json) } else { visible_json(json) };
    let _ = stdout.write_all(json.as_bytes());
    let _ = stdout.write_all(b"\n");
}

/// Text this program made itself (the timeline's colours), its parts already made visible.
pub fn out_trusted(text: &str) {
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

/// Writes a message to standard error, made visible unless `--raw` (server errors quote input).
pub fn err(text: &str) {
    let mut stderr = std::io::stderr().lock();
    let _ = if is_raw() { stderr.write_all(text.as_bytes()) } else { stderr.write_all(visible(text).as_bytes()) };
}

/// `println!` for text that may hold a server's or a log's bytes.
#[macro_export]
macro_rules! say {
    () => { $crate::term::out("\n") };
    ($($arg:tt)*) => { $crate::term::out(&format!("{}\n", format_args!($($arg)*))) };
}

/// `print!` for text that may hold a server's or a log's bytes.
#[macro_export]
macro_rules! say_part {
    ($($arg:tt)*) => { $crate::term::out(&format!($($arg)*)) };
}

/// `eprintln!` for text that may hold a server's or a log's bytes.
#[macro_export]
macro_rules! say_err {
    ($($arg:tt)*) => { $crate::term::err(&format!("{}\n", format_args!($($arg)*))) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_and_reordering_characters_are_made_visible() {
        let attacks = [
            ("\x1b]0;pwned\x07", "\\x1b]0;pwned\\x07"),
            ("\x1b[2J\x1b[H", "\\x1b[2J\\x1b[H"),
            ("\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\", "\\x1b]8;;http://evil\\x1b\\link\\x1b]8;;\\x1b\\"),
            ("abc\u{202e}gpj.exe", "abc\\u{202e}gpj.exe"),
            ("\u{9b}31m", "\\u{9b}31m"),
            ("a\rb\x08c\x7f", "a\\x0db\\x08c\\x7f"),
            ("zero\u{200b}width\u{2066}iso\u{feff}", "zero\\u{200b}width\\u{2066}iso\\u{feff}"),
        ];
        for (raw, shown) in attacks {
            assert_eq!(visible(raw), shown, "{raw:?}");
            assert!(!visible(raw).chars().any(is_unsafe));
        }
    }

    #[test]
    fn ordinary_text_newlines_and_tabs_pass_unchanged() {
        for s in ["step 10 loss 1.5\n", "a\tb", "rank 3 on node-α: 段错误", ""] {
            assert!(matches!(visible(s), Cow::Borrowed(_)), "{s:?}");
        }
    }

    #[test]
    fn json_keeps_its_meaning_and_loses_its_raw_controls() {
        let value = serde_json::json!({"line": "a\u{9b}b\u{202e}c\x1bd", "host": "h"});
        let text = serde_json::to_string_pretty(&value).expect("json");
        let safe = visible_json(&text);
        assert!(!safe.chars().any(|c| is_unsafe(c) && c != '\n'), "{safe}");
        let back: serde_json::Value = serde_json::from_str(&safe).expect("still JSON");
        assert_eq!(back, value);
    }
}
