//! Which index words a line filter implies. Pure.
//!
//! A `|= "text"` filter is an exact, case-sensitive substring test, which the index cannot
//! answer (it holds lowercased words). But a word of the text that has a separator on both
//! sides *within the text* is a whole word of every line that contains the text, so the index
//! can narrow the lines to those holding all such words, and the filter then decides. The first
//! and last words may be parts of longer words in a line (`"OutOfMem"` in `OutOfMemoryError`)
//! and narrow nothing. The words are the index tokenizer's: runs of ASCII letters and digits,
//! lowercased, at most [`MAX_WORD_BYTES`] long (tantivy's default tokenizer drops longer ones;
//! non-ASCII words are left to the filter).

/// The longest word the index keeps (tantivy's default `RemoveLongFilter`).
pub const MAX_WORD_BYTES: usize = 40;

/// The words every line containing `text` holds as whole words, lowercased, each once.
pub fn whole_words(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if !bytes[i].is_ascii_alphanumeric() {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_alphanumeric() {
            i += 1;
        }
        // Bounded on both sides inside the text, by a separator that is itself ASCII (a
        // non-ASCII letter next to it would join the word in the tokenizer's eyes).
        let bounded = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii() && !b.is_ascii_alphanumeric());
        let whole = start > 0 && bounded(bytes.get(start - 1)) && bounded(bytes.get(i));
        let word = text[start..i].to_ascii_lowercase();
        if whole && word.len() <= MAX_WORD_BYTES && !out.contains(&word) {
            out.push(word);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_only_words_with_a_separator_on_both_sides_narrow() {
        assert_eq!(whole_words("CUDA out of memory"), vec!["out", "of"]);
        assert_eq!(whole_words(" NCCL WARN "), vec!["nccl", "warn"]);
        assert!(whole_words("OutOfMem").is_empty());
        assert!(whole_words("").is_empty());
    }

    #[test]
    fn rule_a_word_next_to_a_non_ascii_letter_is_not_whole() {
        assert_eq!(whole_words("é rank 3 "), vec!["rank", "3"]);
        assert!(whole_words(" naïve ").is_empty());
    }

    #[test]
    fn rule_words_longer_than_the_index_keeps_do_not_narrow() {
        let long = "x".repeat(MAX_WORD_BYTES + 1);
        assert_eq!(whole_words(&format!(" {long} ok ")), vec!["ok"]);
    }

    #[test]
    fn every_narrowing_word_is_in_every_line_that_contains_the_text() {
        let text = " rank 3 failed: ";
        let line = "[E] Rank 3 failed: watchdog";
        assert!(line.to_ascii_lowercase().contains(&text.to_ascii_lowercase()));
        let tokens: Vec<String> = line.split(|c: char| !c.is_ascii_alphanumeric()).map(str::to_ascii_lowercase).collect();
        for w in whole_words(text) {
            assert!(tokens.contains(&w), "{w}");
        }
    }
}
