//! How a rank's process ended, as the agent (or a launcher's table) saw it.

use crate::{Nanos, Rank};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessEnd {
    pub rank: Rank,
    /// The exit code when the process exited normally.
    pub exit_code: Option<i32>,
    /// The signal that ended it, when one did.
    pub signal: Option<i32>,
    /// When the agent saw it end, on the agent host's clock; unknown for bundles without times.
    pub at_ns: Option<Nanos>,
}

/// The coarse reading of a process end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessEndCause {
    Success,
    ExitCode(i32),
    Signal(i32),
    Unknown,
}

impl ProcessEnd {
    pub fn cause(&self) -> ProcessEndCause {
        match (self.signal, self.exit_code) {
            (Some(sig), _) => ProcessEndCause::Signal(sig),
            (None, Some(0)) => ProcessEndCause::Success,
            // Python's subprocess and torchrun report a signal death as a negative code.
            (None, Some(code)) if code < 0 => ProcessEndCause::Signal(-code),
            // A shell reports a signal death as 128+N.
            (None, Some(code)) if (129..=159).contains(&code) => ProcessEndCause::Signal(code - 128),
            (None, Some(code)) => ProcessEndCause::ExitCode(code),
            (None, None) => ProcessEndCause::Unknown,
        }
    }

    pub fn succeeded(&self) -> bool {
        self.cause() == ProcessEndCause::Success
    }
}

/// The conventional name of a POSIX signal number on Linux; `signal` for one it does not know
/// ([`signal_label`] says which).
pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        5 => "SIGTRAP",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        10 => "SIGUSR1",
        11 => "SIGSEGV",
        12 => "SIGUSR2",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        24 => "SIGXCPU",
        25 => "SIGXFSZ",
        31 => "SIGSYS",
        _ => "signal",
    }
}

/// A signal's name, or `signal <n>` for a number without one.
pub fn signal_label(sig: i32) -> String {
    match signal_name(sig) {
        "signal" => format!("signal {sig}"),
        name => name.to_string(),
    }
}

/// The number of a POSIX signal from its conventional name (`SIGKILL`, or `KILL`), the inverse of
/// [`signal_name`]; `None` for a name it does not know.
pub fn signal_number(name: &str) -> Option<i32> {
    let name = name.trim();
    let bare = name.strip_prefix("SIG").unwrap_or(name);
    (1..=64).find(|&n| signal_name(n).strip_prefix("SIG") == Some(bare))
}

impl ProcessEndCause {
    pub fn describe(self) -> String {
        match self {
            ProcessEndCause::Success => "exited 0".to_string(),
            ProcessEndCause::ExitCode(c) => format!("exited {c}"),
            ProcessEndCause::Signal(s) => format!("killed by {} ({s})", signal_name(s)),
            ProcessEndCause::Unknown => "end unknown".to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end(exit_code: Option<i32>, signal: Option<i32>) -> ProcessEnd {
        ProcessEnd { rank: Rank(0), exit_code, signal, at_ns: None }
    }

    #[test]
    fn reads_every_convention_for_a_signal_death() {
        assert_eq!(end(None, Some(9)).cause(), ProcessEndCause::Signal(9));
        assert_eq!(end(Some(-15), None).cause(), ProcessEndCause::Signal(15));
        assert_eq!(end(Some(139), None).cause(), ProcessEndCause::Signal(11));
        assert_eq!(end(Some(1), None).cause(), ProcessEndCause::ExitCode(1));
        assert!(end(Some(0), None).succeeded());
    }

    #[test]
    fn signal_names_read_back_to_their_numbers() {
        for n in [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 31] {
            assert_eq!(signal_number(signal_name(n)), Some(n));
        }
        assert_eq!((signal_label(7), signal_label(40)), ("SIGBUS".to_string(), "signal 40".to_string()));
        assert_eq!(signal_number("KILL"), Some(9));
        assert_eq!(signal_number("SIGWHAT"), None);
        assert_eq!(signal_number("signal"), None);
    }
}
