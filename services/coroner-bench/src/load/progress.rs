//! What a long load run is doing, while it runs: one line on stderr every few seconds (agents
//! connected and ready, sessions opened, errors, lines acknowledged, the server's memory), so a
//! run of 16,384 agents that stalls shows where it stalls instead of printing nothing for minutes.

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
}

impl Progress {
    pub fn failed(&self, error: &str) {
        self.errors.fetch_add(1, Relaxed);
        if let Ok(mut last) = self.last_error.lock() {
            *last = Some(error.to_owned());
        }
    }

    fn take_last_error(&self) -> Option<String> {
        self.last_error.lock().ok().and_then(|mut e| e.take())
    }
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
