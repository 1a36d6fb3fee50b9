//! coronerd as a library, so tests can start the real server on ephemeral ports.
//!
//! [`run`] opens the store, serves gRPC (ingest, query, OTLP logs, health, reflection) and HTTP
//! (the web pages, their JSON API and `/metrics`) until the shutdown token fires, then stops accepting, lets in-flight commits
//! finish, and closes.

mod alert_metrics;
mod arrivals;
pub mod auth;
pub mod config;
mod deletion;
pub mod error;
pub mod fd_limit;
mod grpc;
mod http;
mod incidents;
mod job;
mod jobs;
pub mod limits;
mod listen;
mod loki;
pub mod metrics;

pub mod notify;
mod otlp;
mod ownership;
mod proxy;
mod refusal;
mod retention;
mod searches;
pub mod snapshots;
mod tls;
mod views;
mod writers;

use anyhow::Context;
use grpc::{admin, ingest, liveness, query};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

pub use config::Config;

/// The addresses a running server actually bound (ports may have been 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Bound {
    pub grpc: SocketAddr,
    pub http: SocketAddr,
}

impl Bound {
    /// Writes the addresses to `path` (`--ready-file`) through a temporary file renamed into
    /// place, so a reader sees the whole file or none.
    pub fn write_ready_file(&self, path: &std::path::Path) -> anyhow::Result<()> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let json = serde_json::to_vec(self).context("encode the bound addresses")?;
        std::fs::write(&tmp, json).with_context(|| format!("write the ready file {} (--ready-file)", std::path::Path::new(&tmp).display()))?;
        std::fs::rename(&tmp, path).with_context(|| format!("move the ready file into place at {} (--ready-file)", path.display()))
    }

    /// The addresses a server wrote to `path` (`--ready-file`); `None` until it has.
    pub fn read_ready_file(path: &std::path::Path) -> anyhow::Result<Option<Bound>> {
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).with_context(|| format!("read the ready file {}: not coronerd's JSON", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("read the ready file {}", path.display())),
        }
    }
}

/// Runs the server until `shutdown` is cancelled.
pub async fn run(config: Config, shutdown: CancellationToken) -> anyhow::Result<()> {
    let (server, _bound) = start(config, shutdown.clone()).await?;
    server.await
}

/// Starts the server and returns once it listens: a future that runs it to the end, and its addresses.
pub async fn start(config: Config, shutdown: CancellationToken) -> anyhow::Result<(impl std::future::Future<Output = anyhow::Result<()>>, Bound)> {
    let grpc_tls = config.grpc_tls()?;
    let http_tls = match (&config.tls_cert, &config.tls_key) {
        (Some(cert), Some(key)) => Some(tls::server_config(cert, key)?),
        _ => None,
    };
    let tokens = Arc::new(config.tokens()?.with_secure_cookie(http_tls.is_some()));
    // Proxied queries to other instances trust this CA for their https:// addresses.
    let peer_auth = coroner_proto::auth::ClientAuth::default().with_tls_ca(config.tls_ca.as_deref()).map_err(|e| anyhow::anyhow!("{e} (--tls-ca)"))?;
    let notify = notify::Settings::resolve(&config.notify, &notify::System)?;
    std::fs::create_dir_all(&config.data_dir).with_context(|| format!("create the data dir {}", config.data_dir.display()))?;
    let rules = load_rules(&config)?;
    let store = coroner_store::connect(&config.database_url()).await.with_context(|| format!("open the metadata store {}", redact(&config.database_url())))?;

    let grpc_listener = listen::bind(config.grpc_addr).with_context(|| format!("bind the gRPC address {} (in use? set --grpc-addr)", config.grpc_addr))?;
    let http_listener = listen::bind(config.http_addr).with_context(|| format!("bind the HTTP address {} (in use? set --http-addr)", config.http_addr))?;
    let bound = Bound { grpc: grpc_listener.local_addr()?, http: http_listener.local_addr()? };
    let me = config.instance(bound.grpc, bound.http);
    tracing::info!(grpc = %bound.grpc, http = %bound.http, data_dir = %config.data_dir.display(), instance = %me.claimant.owner, tokens = tokens.enforced(), "coronerd listening");

    let metrics = Arc::new(metrics::Metrics::default());
    // The notifier outlives the front: it stops after the last commits, so their reports' events are claimed.
    let notify_stop = CancellationToken::new();
    let (notifier, notifying) = notify::start(notify, store.clone(), metrics.clone(), me.claimant.http_address.clone(), notify_stop.clone());
    let parts = Parts::new(&config, store, rules, me, metrics, notifier, &shutdown)?;
    retention::spawn(parts.deleter.clone(), parts.snapshots.clone(), retention::Policy::from_config(&config), shutdown.clone());
    // Queries and heartbeats about a job another instance owns go to the owner.
    let peers = proxy::Peers::new(peer_auth);
    let grpc = grpc_server(&parts, peers, grpc_tls, tokens.clone(), grpc_listener, shutdown.clone()).await?;
    let app = http::router(http::Services {
        jobs: parts.jobs.clone(),
        metrics: parts.metrics.clone(),
        snapshots: parts.snapshots.clone(),
        searches: parts.searches.clone(),
        otlp: parts.otlp.clone(),
    })
    .layer(axum::middleware::from_fn_with_state(tokens, auth::http_guard));
    let (header_timeout, http_shutdown) = (config.limits.http_header_timeout, shutdown.clone());
    let http: std::pin::Pin<Box<dyn std::future::Future<Output = std::io::Result<()>> + Send>> = match http_tls {
        None => Box::pin(http::serve::serve(http_listener, app, header_timeout, http_shutdown)),
        Some(tls) => Box::pin(http::serve::serve(tls::TlsListener::new(http_listener, tls)?, app, header_timeout, http_shutdown)),
    };
    if let Some(path) = &config.ready_file {
        bound.write_ready_file(path)?;
    }
    let jobs = parts.jobs;
    let server = async move {
        let (g, h) = tokio::join!(grpc, http);
        g.context("gRPC server")?;
        h.context("HTTP server")?;
        // The front is closed; flush the back: every acknowledged batch is committed already,
        // finish the commits in flight and write final reports.
        jobs.shutdown().await;
        // The notifier claims what the last reports raised; deliveries it could not finish
        // stay pending in the store and resume at the next start.
        notify_stop.cancel();
        if tokio::time::timeout(std::time::Duration::from_secs(5), notifying).await.is_err() {
            tracing::warn!("the notifier did not stop within 5 s; its pending deliveries resume at the next start");
        }
        tracing::info!("coronerd stopped");
        Ok(())
    };
    Ok((server, bound))
}

/// What the services of one server share, built from its configuration (no process globals:
/// two servers in one process keep their own).
struct Parts {
    jobs: Arc<jobs::Jobs>,
    metrics: Arc<metrics::Metrics>,
    snapshots: Arc<snapshots::SnapshotStore>,
    searches: Arc<searches::Searches>,
    budget: Arc<ingest::IngestBudget>,
    limits: Arc<limits::LimitsConfig>,

    /// OTLP logs, over gRPC and HTTP alike.
    otlp: Arc<otlp::OtlpReceiver>,
    /// Deletes jobs (`coroner delete`, retention by size) and the contents only they named.
    deleter: deletion::Deleter,
}

impl Parts {
    fn new(
        config: &Config,
        store: Arc<dyn coroner_store::Metastore>,
        rules: coroner_analysis::RuleSet,
        me: ownership::Instance,
        metrics: Arc<metrics::Metrics>,
        notifier: notify::Notifier,
        shutdown: &CancellationToken,
    ) -> anyhow::Result<Parts> {
        let limits = Arc::new(config.limits.clone());
        let shared = job::Shared {
            data_dir: config.data_dir.clone(),
            store,
            rules: Arc::new(rules),
            metrics: metrics.clone(),
            writers: Arc::new(writers::Writers::new(limits.max_open_jobs, metrics.clone())),
            limits: limits.clone(),
            live: live_config(config),
            notifier,
        };
        let jobs = Arc::new(jobs::Jobs::new(shared, shutdown.clone(), me));
        let snapshots = Arc::new(snapshots::SnapshotStore::new(
            config.data_dir.join("snapshots"),
            config.snapshot_cap_bytes,
            snapshots::disk::Quotas::from(&config.limits),
            metrics.clone(),
        )?);
        let budget = Arc::new(
            ingest::IngestBudget::new(config.ingest_buffer_mb.saturating_mul(1 << 20), metrics.clone())
                .with_shares(config.limits.ingest_stream_share, config.limits.ingest_job_share),
        );
        let searches = searches::Searches::new(&config.limits, metrics.clone(), shutdown.clone());
        let contents = snapshots::gc::Contents { store: jobs.store().clone(), snapshots: snapshots.clone(), metrics: metrics.clone() };
        let deleter = deletion::Deleter { jobs: jobs.clone(), contents };
        let otlp = Arc::new(otlp::OtlpReceiver::new(jobs.clone(), metrics.clone(), limits.max_string_bytes));
        Ok(Parts { jobs, metrics, snapshots, searches, budget, limits, otlp, deleter })
    }
}

/// When a running job's silent rank is suspected of hanging (`--hang-step-multiple`, `--hang-floor`).
fn live_config(config: &Config) -> coroner_analysis::live::LiveConfig {
    let floor_ns = i64::try_from(config.hang_floor.as_nanos()).unwrap_or(i64::MAX);
    coroner_analysis::live::LiveConfig { step_multiple: config.hang_step_multiple, floor_ns, ..Default::default() }
}

/// The gRPC server: Ingest, Query, Liveness, Admin and OTLP logs behind their tokens (queries,
/// heartbeats and deletions of a job another instance owns go to the owner), health and reflection.
async fn grpc_server(
    parts: &Parts,
    peers: proxy::Peers,
    tls: Option<tonic::transport::ServerTlsConfig>,
    tokens: Arc<auth::Tokens>,
    listener: tokio::net::TcpListener,
    shutdown: CancellationToken,
) -> anyhow::Result<impl std::future::Future<Output = Result<(), tonic::transport::Error>>> {
    let ingest = ingest::IngestService::new(parts.jobs.clone(), parts.snapshots.clone(), parts.metrics.clone(), parts.budget.clone(), parts.limits.clone());
    let query = query::QueryService::new(parts.jobs.clone(), parts.snapshots.clone(), parts.searches.clone());
    let liveness = liveness::LivenessService::new(parts.jobs.clone());

    let otlp = grpc::otlp::OtlpLogs::new(parts.otlp.clone());
    let admin = admin::AdminService::new(parts.deleter.clone());
    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    health_reporter.set_serving::<coroner_proto::v1::ingest_server::IngestServer<ingest::IngestService>>().await;
    health_reporter.set_serving::<coroner_proto::v1::query_server::QueryServer<query::QueryService>>().await;
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(coroner_proto::FILE_DESCRIPTOR_SET)
        .build_v1()
        .context("build the reflection service")?;
    let mut builder = grpc_builder();
    if let Some(tls) = tls {
        builder = builder.tls_config(tls).context("the gRPC TLS certificate and key (--tls-cert, --tls-key)")?;
    }
    let ingest = ingest::Prepaid::new(coroner_proto::v1::ingest_server::IngestServer::new(ingest).max_decoding_message_size(64 << 20), parts.budget.clone());
    let query = proxy::OwnerProxy::new(coroner_proto::v1::query_server::QueryServer::new(query), peers.clone());
    let liveness = proxy::OwnerProxy::new(coroner_proto::v1::liveness_server::LivenessServer::new(liveness), peers.clone());
    let admin = proxy::OwnerProxy::new(coroner_proto::v1::admin_server::AdminServer::new(admin), peers);
    let otlp = grpc::otlp::LogsServiceServer::new(otlp).max_decoding_message_size(64 << 20);
    Ok(builder
        .add_service(health_service)
        .add_service(reflection)
        .add_service(auth::Guarded::new(ingest, tokens.clone(), auth::Need::Write))
        .add_service(auth::Guarded::new(query, tokens.clone(), auth::Need::Read))
        .add_service(auth::Guarded::new(liveness, tokens.clone(), auth::Need::Write))
        .add_service(auth::Guarded::new(admin, tokens.clone(), auth::Need::Write))
        .add_service(auth::Guarded::new(otlp, tokens, auth::Need::Write))
        .serve_with_incoming_shutdown(tokio_stream::wrappers::TcpListenerStream::new(listener), async move { shutdown.cancelled().await }))
}

/// The HTTP/2 flow-control window of one stream the server receives on: the most bytes of a log
/// stream held outside the ingest budget (`coroner_ingest_stream_window_bytes`).
pub const STREAM_WINDOW: u32 = 64 << 10;

/// The transport's settings: keepalives and flow-control windows.
fn grpc_builder() -> tonic::transport::Server {
    // Pings find agents whose network died without closing the connection (a host that lost
    // power, a partition), so their streams and reserved batches are released.
    tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(std::time::Duration::from_secs(20)))
        .http2_keepalive_timeout(Some(std::time::Duration::from_secs(20)))
        .tcp_keepalive(Some(std::time::Duration::from_secs(60)))
        // What one connection may have sent and the server not yet read (not yet reserved from
        // the ingest budget, `grpc/ingest/prepaid.rs`): with the budget spent, each agent's
        // connection holds at most this much. hyper's default is 1 MiB per stream, 16 GiB for
        // 16,384 waiting agents; 256 KiB was still 4 GiB. 64 KiB per stream (the whole of a
        // rank's start-up burst, 200 NCCL lines) still carries 64 MB/s per stream at a 1 ms
        // round trip, and a connection carries its log stream and a snapshot upload at once.
        .initial_stream_window_size(Some(STREAM_WINDOW))
        .initial_connection_window_size(Some(2 * STREAM_WINDOW))
}

fn load_rules(config: &Config) -> anyhow::Result<coroner_analysis::RuleSet> {
    match &config.rules {
        None => Ok(coroner_analysis::RuleSet::builtin()),
        Some(p) => {
            let text = std::fs::read_to_string(p).with_context(|| format!("read rules file {}", p.display()))?;
            let user = coroner_analysis::RuleSet::parse(&text).with_context(|| format!("load rules file {}", p.display()))?;
            Ok(coroner_analysis::RuleSet::with_overrides(user))
        }
    }
}

/// A database URL without its password, for messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://***{}", &url[..s], &url[at..]),
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::Bound;

    #[test]
    fn the_ready_file_reads_back_what_was_bound_and_is_none_until_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("ready.json");
        assert_eq!(Bound::read_ready_file(&path).expect("no file yet is no error"), None);
        let bound = Bound { grpc: "127.0.0.1:40123".parse().expect("address"), http: "[::1]:40124".parse().expect("address") };
        bound.write_ready_file(&path).expect("write");
        assert_eq!(Bound::read_ready_file(&path).expect("read"), Some(bound));
        assert!(!dir.path().join("ready.json.tmp").exists(), "the temporary file was renamed into place");
    }

    #[test]
    fn a_ready_file_that_is_not_coronerds_names_itself() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("ready.json");
        std::fs::write(&path, "grpc=1").expect("write");
        let err = format!("{:#}", Bound::read_ready_file(&path).expect_err("not JSON"));
        assert!(err.contains("ready.json"), "{err}");
    }
}
