//! Serving the HTTP port: axum's router on hyper with a timer, so a client that sends its
//! request headers slowly (a slowloris) is cut off after `--http-header-timeout` instead of
//! holding a connection and a task forever (axum's own `serve` sets no timer, and hyper enforces
//! no header timeout without one). Shutdown stops accepting, then lets requests in flight finish
//! for at most [`DRAIN`].

use axum::serve::Listener;
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How long requests in flight may finish once shutdown began.
const DRAIN: Duration = Duration::from_secs(10);

pub async fn serve<L: Listener>(mut listener: L, app: Router, header_timeout: Duration, shutdown: CancellationToken) -> std::io::Result<()> {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut builder = Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(header_timeout);
    builder.http2().timer(TokioTimer::new());
    loop {
        let (io, _) = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.cancelled() => break,
        };
        let service = TowerToHyperService::new(app.clone());
        let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), service).into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "HTTP connection ended");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN, graceful.shutdown()).await.is_err() {
        tracing::warn!("HTTP requests still running {} s after shutdown began; leaving them", DRAIN.as_secs());
    }
    Ok(())
}
