//! What a multi-line block reader (a traceback, a launcher's failure table, ...) is handed for one
//! line, and what it answers: the interface between `RankParser` (`parser.rs`) and the readers
//! it drives.

use crate::time::printed_time;
use coroner_model::{Event, EventKind, LineRef, Nanos, Rank};

/// Where an event comes from: the first line of its block.
#[derive(Debug, Clone)]
pub(crate) struct Origin {
    pub rank: Option<Rank>,
    pub line: LineRef,
    pub capture_ns: Nanos,
    pub printed_ns: Option<Nanos>,
}

impl Origin {
    pub(crate) fn event(&self, kind: EventKind, text: String) -> Event {
        Event { rank: self.rank, line: self.line, capture_ns: self.capture_ns, printed_ns: self.printed_ns, kind, text }
    }
}

/// One line, prefix stripped.
pub(crate) struct Ctx<'a> {
    pub rank: Option<Rank>,
    pub line: LineRef,
    pub capture_ns: Nanos,
    pub text: &'a str,
    pub prefixed: bool,
}

impl Ctx<'_> {
    pub(crate) fn origin(&self) -> Origin {
        Origin { rank: self.rank, line: self.line, capture_ns: self.capture_ns, printed_ns: printed_time(self.text, self.capture_ns) }
    }
}

/// What a block did with a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// The line belongs to the block, which stays open.
    Consumed,
    /// The line belongs to the block, which is complete.
    EndConsumed,
    /// The line does not belong; the block is complete and the line is read on its own.
    EndNotConsumed,
}
