//! coronerd's settings: flags, each also read from an environment variable, with defaults that
//! work on a laptop.

use clap::Parser;
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, Clone, Parser)]
#[command(name = "coronerd", version, about = "The coroner service: ingest, index, analyze, query")]
pub struct Config {
    /// Where indexes, snapshots and the embedded SQLite database live.
    #[arg(long, env = "CORONER_DATA_DIR", default_value = ".coroner-data")]
    pub data_dir: PathBuf,
    /// gRPC address for agents and queries.
    #[arg(long, env = "CORONER_GRPC_ADDR", default_value = "127.0.0.1:7070")]
    pub grpc_addr: SocketAddr,
    /// HTTP address for the web page and /metrics.
    #[arg(long, env = "CORONER_HTTP_ADDR", default_value = "127.0.0.1:7071")]
    pub http_addr: SocketAddr,
    /// The metadata database; default: SQLite in the data dir. PostgreSQL: postgres://...
    #[arg(long, env = "CORONER_DATABASE_URL")]
    pub database_url: Option<String>,
    /// MiB of received log batches held, over all agents, before log streams stop reading and
    /// agents wait (their spools keep the lines): the bound on ingest memory.
    #[arg(long, env = "CORONER_INGEST_BUFFER_MB", default_value_t = 256)]
    pub ingest_buffer_mb: u64,
    /// A rules file tried before the shipped rules.
    #[arg(long, env = "CORONER_RULES")]
    pub rules: Option<PathBuf>,
    /// Snapshot bytes kept per file; larger files keep their metadata and the first bytes.
    #[arg(long, env = "CORONER_SNAPSHOT_CAP_BYTES", default_value_t = 1 << 30)]
    pub snapshot_cap_bytes: u64,
    /// Delete jobs (index, sessions, report) last seen longer ago than this: `30d`, `12h`, `90m`,
    /// `45s`; `0` keeps them forever. Failure signatures outlive their jobs (`coroner suspects`).
    #[arg(long, env = "CORONER_RETENTION", default_value = "0", value_parser = coroner_model::parse_duration)]
    pub retention: std::time::Duration,
    /// Keep job indexes plus snapshots under this many bytes: `500GiB`, `2TB`, a number of bytes;
    /// `0` sets no bound. Past it, whole jobs are deleted, the least recently seen finished job
    /// first (never a running job, nor one another instance owns). --retention applies as well.
    #[arg(long, env = "CORONER_RETAIN_MAX_BYTES", default_value = "0", value_parser = coroner_model::parse_size)]
    pub retain_max_bytes: u64,
    /// How often retention checks ages and sizes (`1m`, `30s`); --retention also sweeps every
    /// quarter of itself when that is sooner.
    #[arg(long, env = "CORONER_RETENTION_INTERVAL", default_value = "1m", value_parser = coroner_model::parse_duration)]
    pub retention_interval: std::time::Duration,
    /// Suspect a hang when a rank is silent for this many of its median step times...
    #[arg(long, env = "CORONER_HANG_STEP_MULTIPLE", default_value_t = 10.0)]
    pub hang_step_multiple: f64,
    /// ...and never before this much silence (`5s`, `1m`; a bare number is seconds).
    #[arg(long, env = "CORONER_HANG_FLOOR", default_value = "5s", value_parser = coroner_model::parse_duration)]
    pub hang_floor: std::time::Duration,
    /// This instance's id among several sharing one PostgreSQL [default: `<host name>/<bound gRPC
    /// address>`: a restart on the same host and port is the same instance and takes its jobs
    /// back at once, instead of waiting out the leases of its own earlier, dead process].
    #[arg(long, env = "CORONER_INSTANCE_ID")]
    pub instance_id: Option<String>,
    /// The gRPC URL other instances send agents and queries to for the jobs this one owns
    /// [default: http://<the bound gRPC address>; set it when binding 0.0.0.0].
    #[arg(long, env = "CORONER_ADVERTISE_GRPC")]
    pub advertise_grpc: Option<String>,
    /// The HTTP URL web requests for this instance's jobs are redirected to [default: http://<the bound HTTP address>].
    #[arg(long, env = "CORONER_ADVERTISE_HTTP")]
    pub advertise_http: Option<String>,
    /// How long a job's ownership lasts without renewal (renewed every third of it): the time
    /// another instance waits before taking over the jobs of one that died (`10s`; a bare number
    /// is seconds).
    #[arg(long, env = "CORONER_LEASE_TTL", default_value = "10s", value_parser = coroner_model::parse_duration)]
    pub lease_ttl: std::time::Duration,
    /// The token agents, imports and OTLP senders must present (`authorization: Bearer <token>`)
    /// to write [default: none; required when binding beyond loopback].
    #[arg(long, env = "CORONER_WRITE_TOKEN", hide_env_values = true, conflicts_with = "write_token_file")]
    pub write_token: Option<String>,
    /// The token queries, the web pages and /metrics need (the write token reads too).
    #[arg(long, env = "CORONER_READ_TOKEN", hide_env_values = true, conflicts_with = "read_token_file")]
    pub read_token: Option<String>,
    /// A file holding the write token (surrounding whitespace ignored).
    #[arg(long, env = "CORONER_WRITE_TOKEN_FILE")]
    pub write_token_file: Option<PathBuf>,
    /// A file holding the read token (surrounding whitespace ignored).
    #[arg(long, env = "CORONER_READ_TOKEN_FILE")]
    pub read_token_file: Option<PathBuf>,
    /// Serve without tokens on a non-loopback address (anyone who reaches the port can write and read).
    #[arg(long, env = "CORONER_INSECURE_NO_AUTH")]
    pub insecure_no_auth: bool,
    /// Serve gRPC and HTTP over TLS with this certificate chain (PEM); needs --tls-key.
    #[arg(long, env = "CORONER_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, env = "CORONER_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// A CA certificate (PEM) that other instances' `https://` certificates chain to (for proxied queries).
    #[arg(long, env = "CORONER_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// Once both listeners are bound, write their addresses to this file (JSON: `{"grpc":
    /// "127.0.0.1:40123", "http": "127.0.0.1:40124"}`, written whole or not at all): how whoever
    /// started coronerd on port 0 (tests, the load bench) learns where it listens.
    #[arg(long, env = "CORONER_READY_FILE")]
    pub ready_file: Option<PathBuf>,
    /// What one client may cost: queries, jobs, disk, ingest (`limits.rs`, docs/SECURITY.md).
    #[command(flatten)]
    pub limits: crate::limits::LimitsConfig,
    /// Where notifications go: webhooks, Slack, Alertmanager (`notify/`, docs/NOTIFY.md).
    #[command(flatten)]
    pub notify: crate::notify::NotifyFlags,
}

fn token(what: &str, value: Option<&str>, file: Option<&std::path::Path>) -> anyhow::Result<Option<String>> {
    use anyhow::Context;
    let t = match (value, file) {
        (Some(v), _) => v.trim().to_string(),
        (None, Some(f)) => {
            check_token_file_mode(what, f)?;
            std::fs::read_to_string(f).with_context(|| format!("read the {what} token file {}", f.display()))?.trim().to_string()
        }
        (None, None) => return Ok(None),
    };
    anyhow::ensure!(!t.is_empty(), "the {what} token is empty; give a non-empty token or leave it unset");
    anyhow::ensure!(
        t.bytes().all(|b| b.is_ascii_graphic()),
        "the {what} token has spaces or characters outside printable ASCII; use letters, digits and punctuation"
    );
    Ok(Some(t))
}

/// A token file must be readable by its owner only: a token others on the host can read is a
/// token they hold (the write token forges jobs, and with them `coroner suspects`).
fn check_token_file_mode(what: &str, f: &std::path::Path) -> anyhow::Result<()> {
    check_secret_file_mode(&format!("{what} token"), f)
}

/// The same rule for every file holding a secret (tokens, webhook secrets): `what` names it.
pub(crate) fn check_secret_file_mode(what: &str, f: &std::path::Path) -> anyhow::Result<()> {
    use anyhow::Context;
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(f).with_context(|| format!("read the {what} file {}", f.display()))?.permissions().mode();
    anyhow::ensure!(
        mode & 0o077 == 0,
        "the {what} file {} can be read by group or others (mode {:o}); run `chmod 600 {}` (Kubernetes: defaultMode: 0400 on the secret volume)",
        f.display(),
        mode & 0o777,
        f.display()
    );
    Ok(())
}

impl Config {
    /// Defaults for tests: a data dir and ephemeral ports.
    pub fn for_tests(data_dir: PathBuf) -> Config {
        Config {
            data_dir,
            grpc_addr: "127.0.0.1:0".parse().expect("literal address"),
            http_addr: "127.0.0.1:0".parse().expect("literal address"),
            database_url: None,
            ingest_buffer_mb: 256,
            rules: None,
            snapshot_cap_bytes: 1 << 30,
            retention: std::time::Duration::ZERO,
            retain_max_bytes: 0,
            retention_interval: std::time::Duration::from_secs(60),
            hang_step_multiple: 10.0,
            hang_floor: std::time::Duration::from_secs(5),
            instance_id: None,
            advertise_grpc: None,
            advertise_http: None,
            lease_ttl: std::time::Duration::from_secs(10),
            write_token: None,
            read_token: None,
            write_token_file: None,
            read_token_file: None,
            insecure_no_auth: false,
            tls_cert: None,
            tls_key: None,
            tls_ca: None,
            ready_file: None,
            limits: crate::limits::LimitsConfig::default(),
            notify: crate::notify::NotifyFlags::default(),
        }
    }

    /// The gRPC server's TLS settings, when --tls-cert and --tls-key are given.
    pub fn grpc_tls(&self) -> anyhow::Result<Option<tonic::transport::ServerTlsConfig>> {
        use anyhow::Context;
        let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) else { return Ok(None) };
        let cert = std::fs::read(cert).with_context(|| format!("read the TLS certificate {}", cert.display()))?;
        let key = std::fs::read(key).with_context(|| format!("read the TLS key {}", key.display()))?;
        Ok(Some(tonic::transport::ServerTlsConfig::new().identity(tonic::transport::Identity::from_pem(cert, key))))
    }

    /// The tokens from their flags or files; refuses a non-loopback address without both
    /// unless `--insecure-no-auth`.
    pub fn tokens(&self) -> anyhow::Result<crate::auth::Tokens> {
        let write = token("write", self.write_token.as_deref(), self.write_token_file.as_deref())?;
        let read = token("read", self.read_token.as_deref(), self.read_token_file.as_deref())?;
        if !self.insecure_no_auth && (write.is_none() || read.is_none()) {
            for (what, addr) in [("--grpc-addr", self.grpc_addr), ("--http-addr", self.http_addr)] {
                if !addr.ip().is_loopback() {
                    anyhow::bail!(
                        "refusing to serve on {addr} ({what}) without tokens: anyone who reaches it could write and read. \
                         Pass --write-token and --read-token (or CORONER_WRITE_TOKEN / CORONER_READ_TOKEN, or the --*-token-file flags), \
                         bind 127.0.0.1, or accept the risk with --insecure-no-auth"
                    );
                }
            }
        }
        Ok(crate::auth::Tokens::new(write.as_deref(), read.as_deref()))
    }

    /// This instance as it claims job leases, once its listeners are bound.
    pub fn instance(&self, grpc: std::net::SocketAddr, http: std::net::SocketAddr) -> crate::ownership::Instance {
        crate::ownership::Instance {
            claimant: coroner_store::Claimant {
                owner: self.instance_id.clone().unwrap_or_else(|| default_instance_id(grpc)),
                grpc_address: self.advertise_grpc.clone().unwrap_or_else(|| format!("{}://{grpc}", if self.tls_cert.is_some() { "https" } else { "http" })),
                http_address: self.advertise_http.clone().unwrap_or_else(|| format!("{}://{http}", if self.tls_cert.is_some() { "https" } else { "http" })),
            },
            ttl: self.lease_ttl.max(std::time::Duration::from_millis(300)),
        }
    }

    pub fn database_url(&self) -> String {
        self.database_url.clone().unwrap_or_else(|| format!("sqlite://{}?mode=rwc", self.data_dir.join("coroner.db").display()))
    }
}

/// `<host name>/<gRPC address>`: no two live processes can hold it (the address is bound), and a
/// process restarted in its predecessor's place gets its predecessor's id. Without a readable host
/// name, a random id (a restart then waits for its old leases to expire).
fn default_instance_id(grpc: std::net::SocketAddr) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty());
    match host {
        Some(host) => format!("{host}/{grpc}"),
        None => uuid::Uuid::new_v4().to_string(),
    }
}
