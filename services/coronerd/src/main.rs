//! `coronerd`: runs the coroner service until SIGINT or SIGTERM, then shuts down in order
//! (stop accepting, commit what was acknowledged, close the store).

use clap::Parser;
use coronerd::config::Config;

/// Every batch allocates and frees many small buffers on many threads (decode, documents,
/// parsing, reports); glibc's malloc spent ~15% of the server's CPU on it under 16,384 agents,
/// and returned pages the next commit faulted in again.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How long the process waits, once the server stopped, for blocking work still running (a
/// search stops at its next budget check; this is the bound should one not).
const BLOCKING_GRACE: std::time::Duration = std::time::Duration::from_secs(5);
/// Threads for blocking work (searches, index commits and closes, snapshot hashing): tokio's
/// default of 512 let a burst of closing writers (1,000 OTLP job ids with `--max-open-jobs 16`)
/// grow the process by hundreds of threads. Searches are already bounded by `--max-searches`;
/// the rest queues here rather than costing the host threads. No blocking task waits on another.
const MAX_BLOCKING_THREADS: usize = 128;

fn main() -> std::process::ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread().max_blocking_threads(MAX_BLOCKING_THREADS).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("coronerd: start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let code = runtime.block_on(serve());
    // Dropping a runtime waits for every blocking task without end: bound it.
    runtime.shutdown_timeout(BLOCKING_GRACE);
    code
}

async fn serve() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("CORONER_LOG").unwrap_or_else(|_| "info,tantivy=warn".into()))
        .with_writer(std::io::stderr)
        .init();
    let config = Config::parse();
    // One descriptor per connected agent: a 16,384-rank job needs more than the usual 1,024.
    match coronerd::fd_limit::raise_open_file_limit() {
        Ok(l) if l.now < 20_000 => tracing::warn!(open_files = l.now, "the open-file limit allows fewer than 20,000 agents' connections; raise `ulimit -Hn`"),
        Ok(l) => tracing::debug!(before = l.before, now = l.now, "open-file limit raised to the hard limit"),
        Err(e) => tracing::warn!(error = %e, "could not raise the open-file limit; agents past it will be refused"),
    }
    let shutdown = tokio_util::sync::CancellationToken::new();
    let signal = shutdown.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        signal.cancel();
    });
    match coronerd::run(config, shutdown).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("coronerd: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
