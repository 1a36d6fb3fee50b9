//! A log pasted from a terminal that hard-wrapped it: every line that reached the terminal's
//! width was cut there and went on at the start of the next line, mid-word (`... ProcessGroupNCCL'`
//! / `s watchdog got stuck for 480 seconds ...`), so no parser sees a record whole.
//!
//! The width shows in the log itself: most of its lines are exactly that many characters long,
//! none is longer (a terminal cannot print past its last column), and what follows a full line
//! mostly goes on with it rather than opening a record of its own (a line of one template printed
//! again and again has one length too, but each of its lines is followed by the next record's
//! head, or by the same template's next line). Such a log's lines of exactly that width are read
//! joined with the line after them; a full-width line that ends in blanks (a short line the
//! terminal padded) or in a box's border (a rich panel's row) is whole, and stays as it is.

use coroner_model::{LogLine, MAX_LINE_BYTES};

/// The narrowest width taken for a terminal's (a narrower common length is a table or a banner).
const MIN_WIDTH: usize = 40;
/// The widest line length counted; a longer line rules out a wrap of the widths counted.
const MAX_WIDTH: usize = 512;
/// How many first characters of two lines, the same, make the second the same template's next
/// line rather than the first one's continuation.
const HEAD: usize = 8;

/// How many lines of a log have each length, for [`Widths::wrap_width`].
#[derive(Debug, Clone, Default)]
pub struct Widths {
    /// Per length: lines that long.
    counts: Vec<u32>,
    /// Per length: lines that long (not padded) with a line after them, and how many of those
    /// next lines do not open a record.
    followed: Vec<u32>,
    continued: Vec<u32>,
    longest: usize,
    lines: u32,
    /// The previous line's length and first characters, unless it was padded with blanks.
    prev: Option<(usize, String)>,
}

impl Widths {
    /// One non-blank line.
    pub fn see(&mut self, text: &str) {
        let text = text.trim_end_matches('\r');
        let n = text.chars().count();
        self.longest = self.longest.max(n);
        self.lines = self.lines.saturating_add(1);
        let head: String = text.chars().take(HEAD).collect();
        if let Some((p, prev_head)) = self.prev.take().filter(|(p, _)| *p <= MAX_WIDTH) {
            bump(&mut self.followed, p);
            if !opens_a_record(text) && head != prev_head {
                bump(&mut self.continued, p);
            }
        }
        if n <= MAX_WIDTH {
            bump(&mut self.counts, n);
        }
        self.prev = (!ends_whole(text)).then_some((n, head));
    }

    /// The width the log was hard-wrapped at: the longest line's length, when at least half the
    /// lines (and four or more) are that long and at least two thirds of the lines after them
    /// (and three or more) go on with them.
    pub fn wrap_width(&self) -> Option<usize> {
        let w = self.longest;
        let at = |v: &Vec<u32>| v.get(w).copied().unwrap_or(0);
        let (full, followed, continued) = (at(&self.counts), at(&self.followed), at(&self.continued));
        (w >= MIN_WIDTH && full >= 4 && full * 2 >= self.lines && continued >= 3 && continued * 3 >= followed * 2).then_some(w)
    }
}

fn bump(v: &mut Vec<u32>, at: usize) {
    if v.len() <= at {
        v.resize(at + 1, 0);
    }
    v[at] = v[at].saturating_add(1);
}

/// Whether a line starts the way a log record does: a bracketed tag or prefix (`[rank0]:`,
/// `[E1130 ...`), a date or a number, a glog header (`E1130 09:03:42...`), a traceback's head.
fn opens_a_record(text: &str) -> bool {
    let b = text.as_bytes();
    match b.first() {
        None => false,
        Some(b'[') => true,
        Some(c) if c.is_ascii_digit() => true,
        Some(b'I' | b'W' | b'E' | b'F') => b.len() > 5 && b[1..5].iter().all(u8::is_ascii_digit),
        Some(_) => text.starts_with("Traceback"),
    }
}

/// Joins a hard-wrapped log's pieces back into its lines, one line in at a time.
#[derive(Debug)]
pub(crate) struct Rejoin {
    width: usize,
    pending: Option<LogLine>,
}

impl Rejoin {
    pub(crate) fn new(width: usize) -> Rejoin {
        Rejoin { width, pending: None }
    }

    /// The next line of the log; gives back a whole line when one is complete (the first piece's
    /// rank, stream, number and time stand for the joined line).
    pub(crate) fn push(&mut self, line: LogLine) -> Option<LogLine> {
        let cut = self.is_cut(&line.bytes);
        match self.pending.take() {
            Some(mut head) => {
                head.bytes.extend_from_slice(&line.bytes);
                if cut && head.bytes.len() < MAX_LINE_BYTES {
                    self.pending = Some(head);
                    None
                } else {
                    Some(head)
                }
            }
            None if cut => {
                self.pending = Some(line);
                None
            }
            None => Some(line),
        }
    }

    /// The end of the log: the last piece, if one was waiting.
    pub(crate) fn flush(&mut self) -> Option<LogLine> {
        self.pending.take()
    }

    fn is_cut(&self, bytes: &[u8]) -> bool {
        let text = String::from_utf8_lossy(bytes);
        let text = text.trim_end_matches('\r');
        !ends_whole(text) && text.chars().count() == self.width
    }
}

/// Whether a full-width line ends as a whole line does: padded with blanks, or closed by a box's
/// right border.
fn ends_whole(text: &str) -> bool {
    text.ends_with("  ") || text.ends_with(['│', '┃', '║', '|', '╮', '╯'])
}

#[cfg(test)]
mod tests {
    use super::*;
    use coroner_model::Stream;

    fn widths(lines: &[&str]) -> Option<usize> {
        let mut w = Widths::default();
        lines.iter().for_each(|l| w.see(l));
        w.wrap_width()
    }

    fn line(seq: u64, t: &str) -> LogLine {
        LogLine { rank: None, stream: Stream::File, seq, capture_ns: 0, bytes: t.as_bytes().to_vec() }
    }

    const W: &str = "abcdefghijabcdefghijabcdefghijabcdefghij"; // 40 columns

    #[test]
    fn a_log_whose_lines_mostly_fill_one_width_and_never_pass_it_was_wrapped_there() {
        let pieces = [
            "the first record of this log was cut at ",
            "forty columns by the terminal that shows",
            " it, and went on here where another piec",
            "e of it begins, up to its very last word",
        ];
        assert!(pieces.iter().all(|p| p.len() == 40));
        assert_eq!(widths(&[pieces[0], pieces[1], pieces[2], pieces[3], "s."]), Some(40));
        // A line past that width, too few full lines, or a narrow table: not a terminal's wrap.
        assert_eq!(widths(&[pieces[0], pieces[1], pieces[2], pieces[3], &format!("{W}x")]), None);
        assert_eq!(widths(&[pieces[0], pieces[1], pieces[2], "a", "b", "c", "d"]), None);
        assert_eq!(widths(&["0123456789"; 8]), None);
        // One template printed again and again: every full line is followed by a record's head.
        let record = "[E ProcessGroupNCCL.cpp:566] [Rank 3] Watchdog caught a collective timeout.";
        assert_eq!(widths(&[record, record, record, record, record, "Traceback (most recent call last):"]), None);
        let progress = "  iteration 201/ 1000 | consumed samples: 3216 | loss: 3.1e+00 |";
        assert_eq!(widths(&[progress, progress, progress, progress, progress]), None);
    }

    #[test]
    fn pieces_cut_at_the_width_join_the_line_after_them_and_padded_lines_stay() {
        let mut r = Rejoin::new(40);
        let first = "[E1 x.cpp:1] the watchdog of ProcessGrou".to_string();
        assert_eq!(first.len(), 40);
        assert!(r.push(line(0, &first)).is_none());
        let second = "pNCCL got stuck for 480 seconds and was ";
        assert_eq!(second.len(), 40);
        assert!(r.push(line(1, second)).is_none());
        let joined = r.push(line(2, "terminated")).expect("a whole line");
        assert_eq!(joined.text(), format!("{first}{second}terminated"));
        assert_eq!(joined.seq, 0);
        let padded = format!("{:<40}", "a short line the terminal padded");
        assert_eq!(r.push(line(3, &padded)).map(|l| l.seq), Some(3));
        let row = format!("│ {:<37}│", "a rich panel's row");
        assert_eq!(row.chars().count(), 40);
        assert_eq!(r.push(line(5, &row)).map(|l| l.seq), Some(5));
        assert!(r.push(line(4, W)).is_none());
        assert_eq!(r.flush().map(|l| l.seq), Some(4));
    }
}
