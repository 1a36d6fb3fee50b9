//! What a long load run is doing, while it runs: one line on stderr every few seconds (agents
//! connected and ready, sessions opened, errors, lines acknowledged, the server's memory), so a
//! run of 16,384 agents that stalls shows where it stalls instead of printing nothing for minutes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// Counters every simulated agent updates.
#[derive(Debug, Default)]
pub struct Progress {
    /// Connections made (each reconnect counts).
    pub connects: AtomicU64,
    /// Sessions opened (each reopen counts).
    pub sessions: AtomicU64,
    /// Sessions that ended in an error (then the agent backs off and reconnects).
    pub errors: AtomicU64,
    /// Lines acknowledged over all agents.
    pub acked: AtomicU64,
    last_error: Mutex<Option<String>>,
    /// Errors by kind (the message with its numbers blanked), for the final figures.
    kinds: Mutex<HashMap<String, u64>>,
}

impl Progress {
    pub fn failed(&self, error: &str) {
        self.errors.fetch_add(1, Relaxed);
        if let Ok(mut last) = self.last_error.lock() {
            *last = Some(error.to_owned());
        }
        if let Ok(mut kinds) = self.kinds.lock() {
            *kinds.entry(kind_of(error)).or_default() += 1;
        }
    }

    /// The most frequent kinds of error the agents met (and recovered from, or not), most first.
    pub fn error_kinds(&self, most: usize) -> Vec<(String, u64)> {
        let mut kinds: Vec<(String, u64)> = self.kinds.lock().map(|k| k.iter().map(|(k, n)| (k.clone(), *n)).collect()).unwrap_or_default();
        kinds.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        kinds.truncate(most);
        kinds
    }

    fn take_last_error(&self) -> Option<String> {
        self.last_error.lock().ok().and_then(|mut e| e.take())
    }
}

/// An error's kind: its message with every run of digits as `N` (batch ids, ranks, durations).
fn kind_of(error: &str) -> String {
    let mut kind = String::with_capacity(error.len());
    for c in error.chars() {
        if c.is_ascii_digit() {
            if !kind.ends_with('N') {
                kind.push('N');
            }
        } else {
            kind.push(c);
        }
    }
    kind
}

/// What the reporter reads besides the agents' counters.
pub struct Sources {
    pub progress: Arc<Progress>,
    /// Agents past the starting gate's count (connected, session and stream open).
    pub ready: Arc<AtomicU64>,
    pub agents: u32,
    pub total_lines: u64,
    /// The server's resident memory now, MB.
    pub rss_mb: Box<dyn Fn() -> f64 + Send>,
}

/// Prints a progress line every `every` until the returned handle is aborted.
pub fn report(sources: Sources, every: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let began = Instant::now();
        let mut tick = tokio::time::interval_at(began + every, every);
        loop {
            tick.tick().await;
            let p = &sources.progress;
            let mut line = format!(
                "coroner-bench load: {:>6.1} s  ready {}/{}  connects {}  sessions {}  errors {}  acked {}/{}  server {:.0} MB",
                began.elapsed().as_secs_f64(),
                sources.ready.load(Relaxed),
                sources.agents,
                p.connects.load(Relaxed),
                p.sessions.load(Relaxed),
                p.errors.load(Relaxed),
                p.acked.load(Relaxed),
                sources.total_lines,
                (sources.rss_mb)(),
            );
            if let Some(e) = p.take_last_error() {
                line.push_str("  last error: ");
                line.push_str(&e);
            }
            eprintln!("{line}");
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_counted_by_kind_whatever_their_numbers() {
        let p = Progress::default();
        p.failed("report the exit: no answer in 10s");
        p.failed("acks out of order: got batch 7, expected 6");
        p.failed("report the exit: no answer in 12s");
        assert_eq!(p.errors.load(Relaxed), 3);
        assert_eq!(p.error_kinds(5), vec![("report the exit: no answer in Ns".to_string(), 2), ("acks out of order: got batch N, expected N".to_string(), 1)]);
    }
}
