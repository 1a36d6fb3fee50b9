//! torchrun's `ChildFailedError` failure table: `Failures:` / `Root Cause (first observed
//! failure):` sections of `[N]:` rows with `time`, `host`, `rank`, `exitcode`, `traceback` fields,
//! one event per row, also when a paste starts inside its first row.

use crate::block::{Ctx, Origin, Step};
use crate::launcher::split_code;
use crate::time::printed_time;
use crate::util::{leading_i64, leading_u64, num_after};
use coroner_model::{Event, EventKind, LauncherFailure, Nanos, Rank};

#[derive(Debug, Clone)]
struct Row {
    origin: Option<Origin>,
    text: String,
    printed: Option<Nanos>,
    f: LauncherFailure,
}

/// The `ChildFailedError` table: `Failures:` / `Root Cause (first observed failure):` sections of
/// `[N]:` rows with `time`, `host`, `rank`, `exitcode`, `traceback` fields. One event per row.
#[derive(Debug, Clone)]
pub(crate) struct FailureTable {
    in_root: bool,
    row: Option<Row>,
    lines: u32,
}

/// The table's time field, `2023-07-07_09:29:19` (date and time joined by an underscore).
fn is_table_time(v: &str) -> bool {
    let b = v.as_bytes();
    b.len() == 19
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'_',
            13 | 16 => *c == b':',
            _ => c.is_ascii_digit(),
        })
}

fn is_row_start(t: &str) -> bool {
    let t = t.trim();
    t.len() >= 4 && t.starts_with('[') && t.ends_with("]:") && t[1..t.len() - 2].bytes().all(|c| c.is_ascii_digit())
}

impl FailureTable {
    pub(crate) fn start(ctx: &Ctx<'_>) -> Option<Self> {
        let t = ctx.text.trim();
        if t == "Failures:" {
            Some(FailureTable { in_root: false, row: None, lines: 0 })
        } else if t == "Root Cause (first observed failure):" {
            Some(FailureTable { in_root: true, row: None, lines: 0 })
        } else {
            None
        }
    }

    /// A table whose head a paste cut off, so that it opens inside a row: the row's first field
    /// in torchrun's own form, `  time      : 2023-07-07_09:29:19`, starts a row of no known
    /// section (neither `Failures:` nor the root cause was seen).
    pub(crate) fn start_headless(ctx: &Ctx<'_>) -> Option<Self> {
        let t = ctx.text.trim();
        let val = t.strip_prefix("time")?.trim_start().strip_prefix(':')?.trim();
        if !is_table_time(val) {
            return None;
        }
        let row = Row {
            origin: Some(ctx.origin()),
            text: t.to_string(),
            printed: printed_time(val, ctx.capture_ns),
            f: LauncherFailure { global_rank: None, local_rank: None, exit_code: None, signal: None, pid: None, host: None, root_cause_row: false },
        };
        Some(FailureTable { in_root: false, row: Some(row), lines: 1 })
    }

    fn flush(&mut self, out: &mut Vec<Event>) {
        if let Some(row) = self.row.take() {
            if let Some(origin) = row.origin {
                let mut f = row.f;
                f.root_cause_row = self.in_root;
                let mut o = origin;
                o.printed_ns = row.printed.or(o.printed_ns);
                out.push(o.event(EventKind::LauncherWorkerFailed(f), row.text));
            }
        }
    }

    pub(crate) fn feed(&mut self, ctx: &Ctx<'_>, out: &mut Vec<Event>) -> Step {
        self.lines += 1;
        let t = ctx.text.trim();
        if self.lines > 10_000 {
            self.flush(out);
            return Step::EndNotConsumed;
        }
        if t == "Failures:" {
            self.flush(out);
            self.in_root = false;
            return Step::Consumed;
        }
        if t == "Root Cause (first observed failure):" {
            self.flush(out);
            self.in_root = true;
            return Step::Consumed;
        }
        if is_row_start(t) {
            self.flush(out);
            self.row = Some(Row {
                origin: Some(ctx.origin()),
                text: t.to_string(),
                printed: None,
                f: LauncherFailure { global_rank: None, local_rank: None, exit_code: None, signal: None, pid: None, host: None, root_cause_row: false },
            });
            return Step::Consumed;
        }
        if t == "<NO_OTHER_FAILURES>" || t.is_empty() {
            return Step::Consumed;
        }
        if t.starts_with("----") {
            self.flush(out);
            return Step::Consumed;
        }
        if t.starts_with("====") {
            self.flush(out);
            return if self.in_root { Step::EndConsumed } else { Step::Consumed };
        }
        if let (Some(row), Some(colon)) = (self.row.as_mut(), t.find(':')) {
            let key = t[..colon].trim();
            let val = t[colon + 1..].trim();
            match key {
                "time" => row.printed = printed_time(val, ctx.capture_ns),
                "host" => row.f.host = Some(val.to_string()),
                "rank" => {
                    row.f.global_rank = leading_u64(val).and_then(|v| u32::try_from(v).ok()).map(Rank);
                    row.f.local_rank = num_after(val, "local_rank:").and_then(|v| u32::try_from(v).ok());
                }
                "exitcode" => {
                    let code = leading_i64(val).and_then(|v| i32::try_from(v).ok());
                    let (exit_code, signal) = split_code(code);
                    row.f.exit_code = exit_code;
                    row.f.signal = row.f.signal.or(signal);
                    row.f.pid = num_after(val, "(pid:").and_then(|v| u32::try_from(v).ok());
                    row.text = t.to_string();
                }
                "traceback" => {
                    if let Some(s) = val.strip_prefix("Signal ").and_then(leading_i64) {
                        row.f.signal = i32::try_from(s).ok();
                        row.f.exit_code = None;
                    }
                }
                "error_file" => {}
                _ => {
                    self.flush(out);
                    return Step::EndNotConsumed;
                }
            }
            return Step::Consumed;
        }
        self.flush(out);
        Step::EndNotConsumed
    }

    pub(crate) fn finish(mut self, out: &mut Vec<Event>) {
        self.flush(out);
    }
}
