//! The client side of coronerd's bearer tokens: one token per process (the agent's and the
//! CLI's `--token` / `CORONER_TOKEN`), sent as `authorization: Bearer <token>` on every call
//! of every channel opened through [`channel`]. [`endpoint`] speaks TLS to `https://` servers,
//! trusting the public roots and the CA set with [`set_tls_ca`] (`--tls-ca` / `CORONER_TLS_CA`).

use std::sync::OnceLock;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;

/// A channel whose calls carry the process's token (when it has one).
pub type Channel = InterceptedService<tonic::transport::Channel, Bearer>;

static TOKEN: OnceLock<Option<MetadataValue<Ascii>>> = OnceLock::new();
static TLS_CA: OnceLock<Option<tonic::transport::Certificate>> = OnceLock::new();

/// Sets the CA (a PEM file) that `https://` servers' certificates may chain to, besides the
/// public roots; once, before the first endpoint.
pub fn set_tls_ca(path: Option<&std::path::Path>) -> Result<(), String> {
    let ca = match path {
        None => None,
        Some(p) => {
            let pem = std::fs::read(p).map_err(|e| format!("read the TLS CA file {}: {e}", p.display()))?;
            Some(tonic::transport::Certificate::from_pem(pem))
        }
    };
    TLS_CA.set(ca).map_err(|_| "the TLS CA was already set".to_string())
}

/// An endpoint for `server` (`http://` plain, `https://` TLS).
pub fn endpoint(server: &str) -> Result<tonic::transport::Endpoint, String> {
    let endpoint = tonic::transport::Endpoint::from_shared(server.to_string())
        .map_err(|e| format!("server address {server:?}: {e}"))?
        // A server that vanished without closing the connection (power, partition) is noticed
        // within about 25 s instead of the minutes TCP takes: the agent then reconnects and resends.
        .http2_keep_alive_interval(std::time::Duration::from_secs(15))
        .keep_alive_timeout(std::time::Duration::from_secs(10))
        .keep_alive_while_idle(true)
        .tcp_keepalive(Some(std::time::Duration::from_secs(30)))
        .connect_timeout(std::time::Duration::from_secs(10));
    if !server.starts_with("https://") {
        return Ok(endpoint);
    }
    let mut tls = tonic::transport::ClientTlsConfig::new().with_webpki_roots();
    if let Some(Some(ca)) = TLS_CA.get() {
        tls = tls.ca_certificate(ca.clone());
    }
    endpoint.tls_config(tls).map_err(|e| format!("TLS for {server}: {e}"))
}

/// Sets the process's token, once, before the first channel is opened. An empty token is none.
pub fn set_token(token: Option<&str>) -> Result<(), String> {
    let value = match token.map(str::trim).filter(|t| !t.is_empty()) {
        None => None,
        Some(t) => Some(
            format!("Bearer {t}")
                .parse::<MetadataValue<Ascii>>()
                .map_err(|_| "the token has characters outside printable ASCII; use the token coronerd was given".to_string())?,
        ),
    };
    TOKEN.set(value).map_err(|_| "the token was already set".to_string())
}

/// Adds `authorization` to each call.
#[derive(Clone, Default)]
pub struct Bearer;

impl Interceptor for Bearer {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(Some(v)) = TOKEN.get() {
            request.metadata_mut().insert("authorization", v.clone());
        }
        Ok(request)
    }
}

/// Wraps a transport channel so that its calls carry the token.
pub fn channel(inner: tonic::transport::Channel) -> Channel {
    InterceptedService::new(inner, Bearer)
}
