//! One plain log into the sink in bounded memory, whatever its size: read twice, line by line
//! ([`LineReader`]), never whole.
//!
//! 1. The first pass finds what the lines need before the first of them can be given: whether the
//!    file is text (its first 8 KiB), its first printed time (lines before it take it) and, for
//!    a log no file name owns, how its lines are filed ([`LogSurvey`]: a kernel log, the rank its
//!    lines name). A log whose rank is known stops at its first printed time.
//! 2. The second pass stamps each line with its time ([`Stamper`]) and gives it to the sink at
//!    once. What a pass holds is one line and the reader's buffer.

use crate::line_reader::LineReader;
use crate::logfile::{looks_like_text, printed_time_of, Stamper};
use crate::{LoadSummary, Sink};
use coroner_model::{Nanos, Rank, Stream};
use coroner_pipeline::LogSurvey;
use std::io::{self, Read};

/// How many bytes of a file's start decide whether it is text.
const HEAD_BYTES: u64 = 8192;

/// Opens the log from its start; called once per pass.
pub(crate) type Open<'a> = &'a dyn Fn() -> io::Result<Box<dyn Read>>;

/// What the first pass found.
#[derive(Debug)]
enum FirstPass {
    Empty,
    NotText,
    Text { first_time: Option<Nanos>, survey: Option<LogSurvey> },
}

/// Whose lines a plain log holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    /// One rank's (its file name or place says so).
    Rank(Rank),
    /// A launcher's: each line is filed by its prefix ([`Sink::line`] without a rank).
    Launcher,
    /// Nobody says: the log is filed by what its lines show ([`Sink::begin_log`]).
    Unknown,
}

/// Reads the log `name` (opened by `open`) into the sink as `owner`'s. Problems become warnings.
pub(crate) fn load_plain_log(name: &str, open: Open<'_>, owner: Owner, stream: Stream, fallback_ns: Nanos, sink: &mut dyn Sink, summary: &mut LoadSummary) {
    let rank = match owner {
        Owner::Rank(r) => Some(r),
        Owner::Launcher | Owner::Unknown => None,
    };
    let (first_time, survey) = match first_pass(open, owner == Owner::Unknown, fallback_ns) {
        Ok(FirstPass::Text { first_time, survey }) => (first_time, survey),
        Ok(FirstPass::Empty) => return summary.warnings.push(format!("{name} is empty")),
        Ok(FirstPass::NotText) => return summary.warnings.push(format!("skipped {name}: not a text log")),
        Err(e) => return summary.warnings.push(format!("skipped {name}: {e}")),
    };
    if first_time.is_none() {
        summary.warnings.push(format!(
            "{name}: no line carries a time of its own, so its times in the report are when the file was last written (or read), not when it happened"
        ));
    }
    let input = match open() {
        Ok(r) => r,
        Err(e) => return summary.warnings.push(format!("skipped {name}: {e}")),
    };
    if let Some(survey) = &survey {
        sink.begin_log(name, survey);
    }
    let mut lines = LineReader::new(input);
    let mut stamper = Stamper::new(rank, stream, fallback_ns, first_time);
    let mut counted = 0;
    loop {
        match lines.next_line() {
            Ok(Some(bytes)) => {
                let line = stamper.stamp(bytes);
                summary.lines += 1;
                if survey.is_some() {
                    sink.log_line(line);
                } else {
                    sink.line(line);
                }
                if lines.consumed() - counted >= crate::progress::STEP_BYTES {
                    summary.read(lines.consumed() - counted, sink);
                    counted = lines.consumed();
                }
            }
            Ok(None) => break,
            Err(e) => {
                summary.warnings.push(format!("{name}: reading stopped after {} bytes ({e}); the lines before are kept", lines.consumed()));
                break;
            }
        }
    }
    summary.read(lines.consumed() - counted, sink);
    if survey.is_some() {
        sink.end_log();
    }
    if lines.cut_lines() > 0 {
        summary.warnings.push(format!(
            "{name}: cut {} of its lines to {} bytes, the longest line kept (each cut line ends with \"[coroner: truncated N bytes]\")",
            lines.cut_lines(),
            crate::MAX_LINE_BYTES
        ));
    }
}

/// The first pass: stops at the first printed time unless the log's filing needs every line.
fn first_pass(open: Open<'_>, survey_all: bool, fallback_ns: Nanos) -> io::Result<FirstPass> {
    let mut input = open()?;
    let mut head = Vec::with_capacity(HEAD_BYTES as usize);
    (&mut input).take(HEAD_BYTES).read_to_end(&mut head)?;
    if head.is_empty() {
        return Ok(FirstPass::Empty);
    }
    if !looks_like_text(&head) {
        return Ok(FirstPass::NotText);
    }
    let mut lines = LineReader::new(io::Cursor::new(head).chain(input));
    let mut survey = survey_all.then(LogSurvey::default);
    let mut first_time = None;
    while let Some(line) = lines.next_line()? {
        if first_time.is_none() {
            first_time = printed_time_of(&line, fallback_ns);
        }
        match &mut survey {
            Some(s) => s.see(&line),
            None if first_time.is_some() => break,
            None => {}
        }
    }
    Ok(FirstPass::Text { first_time, survey })
}
