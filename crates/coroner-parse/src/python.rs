//! Python's multi-line output: tracebacks (one event per traceback, chained exceptions resolved
//! to the one raised last), faulthandler dumps (`Fatal Python error: ...` and the periodic
//! `Timeout (0:00:25)!`), `warnings` output with its indented forward trace, and the C++ runtime's
//! `Exception raised from ...` / `frame #N:` blocks and `terminate called after throwing`.
//!
//! Frame lists are outermost call first in every event (faulthandler prints innermost first;
//! its frames are reversed). For a faulthandler dump the frames are the `Current thread`'s when
//! it is marked and has Python frames, else those of the last thread listed that has any (the
//! main thread comes last in CPython's listing).

use crate::block::{Ctx, Origin, Step};
use crate::c10d;
use crate::glog;
use crate::util::{clip, parse_frame};
use coroner_model::{Event, EventKind, Frame};

const MAX_FRAMES: usize = 256;
const MAX_MSG_LINES: usize = 64;
const MAX_MSG_BYTES: usize = 16 * 1024;
const MAX_BLOCK_LINES: u32 = 20_000;

/// Lines that continue an unprefixed exception message even though they are not indented.
const CONT_STARTS: [&str; 10] = [
    "Search for `",
    "CUDA kernel errors might",
    "For debugging consider",
    "Compile with `TORCH_USE_CUDA_DSA`",
    "Device-side assertion",
    "Last error:",
    "nccl",
    "Missing key(s)",
    "Unexpected key(s)",
    "size mismatch for",
];

/// `Type: message` / `Type` of an exception's final line.
pub(crate) fn exc_header(t: &str) -> Option<(&str, &str)> {
    let b = t.as_bytes();
    let first = *b.first()?;
    if !(first.is_ascii_alphabetic() || first == b'_') {
        return None;
    }
    let mut n = b.iter().take(256).take_while(|c| c.is_ascii_alphanumeric() || **c == b'_' || **c == b'.').count();
    // Ray re-raises a task's exception as `RayTaskError(OutOfMemoryError): ray::f() (pid=...)`:
    // the cause's type in parentheses is part of the type.
    if b.get(n) == Some(&b'(') {
        let cause = b[n + 1..].iter().take(128).take_while(|c| c.is_ascii_alphanumeric() || **c == b'_' || **c == b'.').count();
        if cause > 0 && b.get(n + 1 + cause) == Some(&b')') && b.get(n + 2 + cause) == Some(&b':') {
            n += cause + 2;
        }
    }
    let ty = &t[..n];
    if ty.ends_with('.') {
        return None;
    }
    let r = &t[n..];
    if r.trim_end().is_empty() {
        return Some((ty, ""));
    }
    let m = r.strip_prefix(':')?;
    // `host:431:2239 [1] ...` (NCCL), `file.py:12:` (a location) are not `Type: message`.
    if m.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    Some((ty, m.strip_prefix(' ').unwrap_or(m)))
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

fn starts_with_date(t: &str) -> bool {
    let b = t.as_bytes();
    b.len() >= 10 && b[..4].iter().all(u8::is_ascii_digit) && b[4] == b'-' && b[7] == b'-'
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TbState {
    Frames,
    AfterFinal,
    AfterBlank,
    Chained,
}

/// A traceback being read.
#[derive(Debug, Clone)]
pub(crate) struct Traceback {
    origin: Origin,
    prefixed: bool,
    frames: Vec<Frame>,
    exc_type: Option<String>,
    message: String,
    msg_lines: usize,
    final_text: String,
    state: TbState,
    last_was_last_error: bool,
    lines: u32,
    /// Started at a frame, its head cut: only its exception line makes it an event.
    headless: bool,
    /// Printed under Python's `Exception ignored in: ...` (a destructor, an exit callback, a
    /// thread's cleanup): the interpreter swallowed it and the process went on.
    pub(crate) ignored: bool,
}

impl Traceback {
    /// The head line, alone or with the first frame glued after it by a console that folds each
    /// record onto one line (`Traceback (most recent call last): File "x.py", line 9, in <module>`).
    pub(crate) fn start(ctx: &Ctx<'_>) -> Option<Self> {
        let rest = ctx.text.trim_end().strip_prefix("Traceback (most recent call last):")?;
        let first = if rest.is_empty() { None } else { Some(parse_frame(rest)?) };
        Some(Traceback {
            origin: ctx.origin(),
            prefixed: ctx.prefixed,
            frames: first.into_iter().collect(),
            exc_type: None,
            message: String::new(),
            msg_lines: 0,
            final_text: String::new(),
            state: TbState::Frames,
            last_was_last_error: false,
            lines: 0,
            headless: false,
            ignored: false,
        })
    }

    /// A traceback pasted without its `Traceback (most recent call last):` line: it starts at a
    /// frame line (`  File "x.py", line 3, in f`).
    pub(crate) fn start_headless(ctx: &Ctx<'_>) -> Option<Self> {
        let frame = parse_frame(ctx.text)?;
        let mut t = Traceback {
            origin: ctx.origin(),
            prefixed: ctx.prefixed,
            frames: Vec::new(),
            exc_type: None,
            message: String::new(),
            msg_lines: 0,
            final_text: String::new(),
            state: TbState::Frames,
            last_was_last_error: false,
            lines: 0,
            headless: true,
            ignored: false,
        };
        t.frames.push(frame);
        Some(t)
    }

    fn is_continuation(&self, t: &str) -> bool {
        if t.trim().is_empty()
            || t.starts_with("Traceback (most recent call last)")
            || t.starts_with("Exception raised from ")
            || t.starts_with("frame #")
            || t.starts_with("Fatal Python error")
            || t.starts_with("During handling of the above exception")
            || t.starts_with("The above exception was the direct cause")
            || parse_frame(t).is_some()
        {
            return false;
        }
        if self.prefixed {
            // A logging record (a launcher's `ERROR:torch.distributed.elastic...: failed`) is
            // never part of an exception's message.
            return glog::parse(t).is_none() && !starts_with_date(t) && crate::pylog::pylog(t).is_none();
        }
        let b0 = t.as_bytes()[0];
        b0 == b' ' || b0 == b'\t' || self.last_was_last_error || CONT_STARTS.iter().any(|p| t.starts_with(p))
    }

    pub(crate) fn feed(&mut self, ctx: &Ctx<'_>) -> Step {
        self.lines += 1;
        if self.lines > MAX_BLOCK_LINES {
            return Step::EndNotConsumed;
        }
        let t = ctx.text;
        match self.state {
            TbState::Frames => {
                if let Some(f) = parse_frame(t) {
                    if self.frames.len() >= MAX_FRAMES {
                        self.frames.remove(0);
                    }
                    self.frames.push(f);
                    return Step::Consumed;
                }
                if t.trim().is_empty() || t.starts_with(' ') || t.starts_with('\t') {
                    return Step::Consumed;
                }
                if crate::nccl::split(t).is_some() {
                    // Another thread's or process's NCCL line cut into the traceback.
                    return Step::Consumed;
                }
                match exc_header(t) {
                    Some((ty, msg)) => {
                        self.exc_type = Some(ty.to_string());
                        self.message = clip(msg, MAX_MSG_BYTES).to_string();
                        self.msg_lines = 1;
                        self.final_text = clip(t, MAX_MSG_BYTES).to_string();
                        self.last_was_last_error = msg.trim() == "Last error:";
                        self.state = TbState::AfterFinal;
                        Step::Consumed
                    }
                    None => Step::EndNotConsumed,
                }
            }
            TbState::AfterFinal => {
                if t.trim().is_empty() {
                    self.state = TbState::AfterBlank;
                    return Step::Consumed;
                }
                if self.is_continuation(t) {
                    if self.msg_lines < MAX_MSG_LINES && self.message.len() < MAX_MSG_BYTES {
                        self.message.push('\n');
                        self.message.push_str(clip(t, MAX_MSG_BYTES));
                        self.msg_lines += 1;
                    }
                    self.last_was_last_error = t.trim() == "Last error:";
                    return Step::Consumed;
                }
                if t.starts_with("During handling of the above exception") || t.starts_with("The above exception was the direct cause") {
                    self.state = TbState::Chained;
                    return Step::Consumed;
                }
                Step::EndNotConsumed
            }
            TbState::AfterBlank => {
                if t.starts_with("During handling of the above exception") || t.starts_with("The above exception was the direct cause") {
                    self.state = TbState::Chained;
                    return Step::Consumed;
                }
                if t.trim().is_empty() {
                    return Step::EndConsumed;
                }
                Step::EndNotConsumed
            }
            TbState::Chained => {
                if t.trim().is_empty() {
                    return Step::Consumed;
                }
                if t.trim_end() == "Traceback (most recent call last):" {
                    self.frames.clear();
                    self.state = TbState::Frames;
                    return Step::Consumed;
                }
                Step::EndNotConsumed
            }
        }
    }

    pub(crate) fn finish(self, out: &mut Vec<Event>, diags: &mut Vec<crate::ParseDiagnostic>) {
        let Some(exc_type) = self.exc_type else {
            diags.push(crate::ParseDiagnostic { seq: self.origin.line.seq, message: "traceback ended before its exception line".into() });
            // A traceback is printed only for an error: cut before its last line (a paste, a
            // process killed mid-print), it still says the process failed.
            if !self.frames.is_empty() && !self.headless && !self.ignored {
                let last = self.frames.last().map(|f| format!("{} ({})", f.function, f.file)).unwrap_or_default();
                // Cut inside a launcher's own code (torchrun's, `torch.distributed.launch`'s,
                // DeepSpeed's): the launcher raising its report of a worker that failed. A worker's
                // traceback can pass through launcher code (elastic's `@record` wrapper) but does
                // not end there.
                let launchers = self.frames.last().is_some_and(|f| crate::launcher::is_launcher_code(&f.file));
                let whose = if launchers { "the launcher's own traceback (its report of a failed worker)" } else { "a traceback" };
                out.push(self.origin.event(
                    EventKind::ErrorLine { message: format!("{whose} cut before its exception line, last frame {last}") },
                    "Traceback (most recent call last):".to_string(),
                ));
            }
            return;
        };
        // multiprocessing's resource tracker is a helper process of its own: a traceback only
        // through it (`KeyError: '/psm_...'` for shared memory unregistered twice) is its
        // bookkeeping at shutdown, not the program failing.
        let tracker = !self.frames.is_empty() && self.frames.iter().all(|f| f.file.ends_with("multiprocessing/resource_tracker.py"))
            // Likewise a queue's feeder thread (`_feed` in multiprocessing/queues.py) whose pipe's
            // reader left: Python prints it and the process goes on (`BrokenPipeError`).
            || self.frames.first().is_some_and(|f| f.function == "_feed") && self.frames.iter().all(|f| f.file.contains("multiprocessing/"));
        if self.ignored || tracker {
            let what = format!("{exc_type}: {}", first_line(&self.message));
            let whose = if tracker {
                "multiprocessing's helper (its resource tracker, a queue's feeder thread) failed its own clean-up; the program is not stopped by it"
            } else {
                "an exception Python ignored (raised in a destructor or an exit callback; the process went on)"
            };
            out.push(self.origin.event(EventKind::Warning { message: format!("{whose}: {what}") }, self.final_text.clone()));
            return;
        }
        let mut specific = Vec::new();
        c10d::specific(&self.message, &mut specific);
        // The monitor's report of who never reached a monitored barrier, raised as an exception
        // (`RuntimeError: [Rank 0]: Ranks 6 failed to pass monitoredBarrier in 180000 ms`): the
        // ranks it names stalled; the rank that raised it only watched.
        if let Some(crate::barrier::Barrier::Stall(k)) = crate::barrier::read(&self.message) {
            specific.push(k);
        }
        // Raised inside `load_state_dict`: whatever its words (an old PyTorch's `inconsistent
        // tensor size`, a caught-and-rethrown error), the checkpoint did not fit the model.
        if self.frames.iter().any(|f| matches!(f.function.as_str(), "load_state_dict" | "_load_from_state_dict")) {
            let what = format!("{exc_type}: {}", first_line(&self.message));
            specific.push(EventKind::ErrorLine { message: format!("raised while loading a state_dict into the model (load_state_dict): {what}") });
        }
        out.push(self.origin.event(EventKind::Exception { exc_type, message: self.message, frames: self.frames }, self.final_text.clone()));
        for k in specific {
            out.push(self.origin.event(k, self.final_text.clone()));
        }
    }
}

/// A faulthandler dump being read.
#[derive(Debug, Clone)]
pub(crate) struct FaultDump {
    origin: Origin,
    text: String,
    /// `None`: a `Timeout (h:mm:ss)!` periodic dump.
    what: Option<String>,
    threads: Vec<(bool, Vec<Frame>)>,
    lines: u32,
}

impl FaultDump {
    pub(crate) fn start(ctx: &Ctx<'_>) -> Option<Self> {
        let t = ctx.text;
        let what = if let Some(w) = t.strip_prefix("Fatal Python error: ") {
            Some(w.trim().to_string())
        } else if t.starts_with("Timeout (") && t.trim_end().ends_with(")!") {
            None
        } else {
            return None;
        };
        Some(FaultDump { origin: ctx.origin(), text: t.to_string(), what, threads: Vec::new(), lines: 0 })
    }

    pub(crate) fn feed(&mut self, ctx: &Ctx<'_>) -> Step {
        self.lines += 1;
        if self.lines > MAX_BLOCK_LINES {
            return Step::EndNotConsumed;
        }
        let t = ctx.text;
        let tt = t.trim();
        if tt.is_empty() || t.starts_with("Python runtime state:") {
            return Step::Consumed;
        }
        if t.starts_with("Thread 0x") || t.starts_with("Current thread 0x") || t.starts_with("Stack (most recent call first)") {
            let current = t.starts_with("Current thread") || t.starts_with("Stack (");
            if self.threads.len() < 1024 {
                self.threads.push((current, Vec::new()));
            }
            return Step::Consumed;
        }
        if let Some(f) = parse_frame(t) {
            if self.threads.is_empty() {
                self.threads.push((false, Vec::new()));
            }
            if let Some((_, frames)) = self.threads.last_mut() {
                if frames.len() < MAX_FRAMES {
                    frames.push(f);
                }
            }
            return Step::Consumed;
        }
        if (t.starts_with(' ') && (tt.starts_with('<') || tt == "...")) || tt == "<no Python frame>" {
            return Step::Consumed;
        }
        if t.starts_with("Extension modules:") {
            return Step::EndConsumed;
        }
        Step::EndNotConsumed
    }

    pub(crate) fn finish(self, out: &mut Vec<Event>) {
        let pick = self.threads.iter().find(|(cur, f)| *cur && !f.is_empty()).or_else(|| self.threads.iter().rev().find(|(_, f)| !f.is_empty()));
        let mut frames = pick.map(|(_, f)| f.clone()).unwrap_or_default();
        frames.reverse();
        let kind = match self.what {
            Some(what) => EventKind::FatalSignal { what, frames },
            None => EventKind::StackDump { frames },
        };
        out.push(self.origin.event(kind, self.text));
    }
}

/// `Exception raised from X at file:line (most recent call first):` and its `frame #N:` lines:
/// swallowed (the error line before it carries the meaning).
#[derive(Debug, Clone)]
pub(crate) struct CppFrames {
    lines: u32,
}

impl CppFrames {
    pub(crate) fn start(ctx: &Ctx<'_>) -> Option<Self> {
        ctx.text.starts_with("Exception raised from ").then_some(CppFrames { lines: 0 })
    }

    pub(crate) fn feed(&mut self, ctx: &Ctx<'_>) -> Step {
        self.lines += 1;
        if self.lines > MAX_BLOCK_LINES {
            return Step::EndNotConsumed;
        }
        if ctx.text.starts_with("frame #") {
            Step::Consumed
        } else if ctx.text.trim().is_empty() {
            Step::EndConsumed
        } else {
            Step::EndNotConsumed
        }
    }
}

/// `path.py:869: UserWarning: message` and the indented lines after it (a forward trace under
/// anomaly mode, or the source line of `warnings.warn`).
#[derive(Debug, Clone)]
pub(crate) struct PyWarning {
    lines: u32,
}

impl PyWarning {
    /// Returns the block and the warning's message (`UserWarning: ...`).
    pub(crate) fn start(ctx: &Ctx<'_>) -> Option<(Self, String)> {
        let t = ctx.text;
        // The first token is `path.py:N:`.
        let sp = memchr::memchr(b' ', &t.as_bytes()[..t.len().min(1024)])?;
        let head = &t[..sp];
        if !head.ends_with(':') {
            return None;
        }
        let stem = head[..head.len() - 1].trim_end_matches(|c: char| c.is_ascii_digit());
        if !stem.ends_with(".py:") {
            return None;
        }
        let r = &t[stem.len()..];
        let n = r.bytes().take_while(u8::is_ascii_digit).count();
        let r = r[n..].strip_prefix(": ")?;
        let (ty, _) = exc_header(r)?;
        if n == 0 || !ty.ends_with("Warning") {
            return None;
        }
        Some((PyWarning { lines: 0 }, r.to_string()))
    }

    pub(crate) fn feed(&mut self, ctx: &Ctx<'_>) -> Step {
        self.lines += 1;
        let t = ctx.text;
        if self.lines <= 512 && (t.starts_with(' ') || t.starts_with('\t')) && !t.trim().is_empty() {
            Step::Consumed
        } else {
            Step::EndNotConsumed
        }
    }
}

/// What a `terminate` line's event adds when the watchdog had just announced the abort.
const WATCHDOGS_ABORT: &str = "(the watchdog taking the process down)";

/// `terminate called after throwing an instance of 'T'` then `  what():  message`.
#[derive(Debug, Clone)]
pub(crate) struct Terminate {
    origin: Origin,
    text: String,
    exc_type: String,
    /// Thrown right after ProcessGroupNCCL's watchdog said it takes the process down.
    pub(crate) watchdogs: bool,
}

impl Terminate {
    pub(crate) fn start(ctx: &Ctx<'_>) -> Option<Self> {
        let r = ctx.text.strip_prefix("terminate called after throwing an instance of ")?;
        let exc_type = r.trim().trim_matches('\'').to_string();
        Some(Terminate { origin: ctx.origin(), text: ctx.text.to_string(), exc_type, watchdogs: false })
    }

    /// Emits on the `what():` line (consumed) or on any other line (not consumed).
    pub(crate) fn feed(&mut self, ctx: &Ctx<'_>, out: &mut Vec<Event>) -> Step {
        if let Some(msg) = ctx.text.trim_start().strip_prefix("what():") {
            let msg = msg.trim();
            let mut kinds = vec![EventKind::ErrorLine { message: format!("{}: {msg}", self.exc_type) }];
            c10d::specific(msg, &mut kinds);
            for k in kinds {
                out.push(self.origin.event(k, ctx.text.to_string()));
            }
            return Step::EndConsumed;
        }
        self.flush(out);
        Step::EndNotConsumed
    }

    pub(crate) fn flush(&self, out: &mut Vec<Event>) {
        let message = if self.watchdogs { format!("{} {WATCHDOGS_ABORT}", self.text) } else { self.text.clone() };
        out.push(self.origin.event(EventKind::ErrorLine { message }, self.text.clone()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exception_headers() {
        assert_eq!(exc_header("torch.OutOfMemoryError: CUDA out of memory."), Some(("torch.OutOfMemoryError", "CUDA out of memory.")));
        assert_eq!(exc_header("KeyboardInterrupt"), Some(("KeyboardInterrupt", "")));
        assert_eq!(
            exc_header("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: "),
            Some(("torch.distributed.elastic.multiprocessing.errors.ChildFailedError", ""))
        );
        assert_eq!(exc_header("[E1130 08:59:11.4 x.cpp:1] y"), None);
        assert_eq!(exc_header("During handling of the above exception"), None);
        assert_eq!(exc_header("XXX:431:2239 [1] include/topo.h:27 NCCL WARN x"), None);
        assert_eq!(exc_header("RuntimeError:CUDA out of memory."), Some(("RuntimeError", "CUDA out of memory.")));
        // Ray's wrapper names the task's own exception type in parentheses.
        assert_eq!(
            exc_header("ray.exceptions.RayTaskError(OutOfMemoryError): ray::Runner.run() (pid=104449, ip=10.130.71.7)"),
            Some(("ray.exceptions.RayTaskError(OutOfMemoryError)", "ray::Runner.run() (pid=104449, ip=10.130.71.7)"))
        );
        // A call on a line of its own is not an exception.
        assert_eq!(exc_header("main(args)"), None);
    }
}
