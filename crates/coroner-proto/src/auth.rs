//! The client side of coronerd's bearer tokens: one token per process (the agent's and the
//! CLI's `--token` / `CORONER_TOKEN`), sent as `authorization: Bearer <token>` on every call
//! of every channel opened through [`channel`].

use std::sync::OnceLock;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;

/// A channel whose calls carry the process's token (when it has one).
pub type Channel = InterceptedService<tonic::transport::Channel, Bearer>;

static TOKEN: OnceLock<Option<MetadataValue<Ascii>>> = OnceLock::new();

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
