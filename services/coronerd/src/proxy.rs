//! Queries about a job another instance owns are proxied to the owner, so any instance answers
//! any query with the owner's current state (its report is never older than what it
//! acknowledged, which a copy read from shared storage could not promise).
//!
//! [`OwnerProxy`] wraps a gRPC service (Query, Liveness): it keeps the request's bytes, lets the
//! local service answer, and when that answer is a redirect (`FAILED_PRECONDITION` carrying
//! `coroner-owner`, from [`crate::error::ServiceError::Elsewhere`]) sends the same bytes to the
//! owner and returns the owner's response, streamed. A proxied request is marked so that it is
//! never proxied twice (two instances that disagree about the owner answer with the redirect).

use crate::error::OWNER_KEY;
use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tonic::body::Body;
use tonic::codegen::http;
use tonic::server::NamedService;
use tonic::transport::Channel;

/// Marks a request one instance forwarded to another.
const PROXIED: &str = "coroner-proxied";
/// The largest request body kept for forwarding (queries are small).
const MAX_REQUEST: usize = 4 << 20;

/// Channels to the other instances, by address, opened on first use.
#[derive(Clone, Default)]
pub struct Peers {
    channels: Arc<Mutex<HashMap<String, Channel>>>,
    /// Whom `https://` peers may chain to (`--tls-ca`). No token: a forwarded request carries its caller's.
    auth: coroner_proto::auth::ClientAuth,
}

impl Peers {
    pub fn new(auth: coroner_proto::auth::ClientAuth) -> Peers {
        Peers { channels: Arc::default(), auth }
    }

    fn channel(&self, address: &str) -> Result<Channel, String> {
        let mut map = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = map.get(address) {
            return Ok(c.clone());
        }
        let endpoint = self.auth.endpoint(address).map_err(|e| format!("owner address: {e}"))?;
        let channel = endpoint.connect_timeout(std::time::Duration::from_secs(2)).connect_lazy();
        map.insert(address.to_string(), channel.clone());
        Ok(channel)
    }
}

#[derive(Clone)]
pub struct OwnerProxy<S> {
    inner: S,
    peers: Peers,
}

impl<S> OwnerProxy<S> {
    pub fn new(inner: S, peers: Peers) -> Self {
        OwnerProxy { inner, peers }
    }
}

impl<S: NamedService> NamedService for OwnerProxy<S> {
    const NAME: &'static str = S::NAME;
}

type Resp = http::Response<Body>;

impl<S> tonic::codegen::Service<http::Request<Body>> for OwnerProxy<S>
where
    S: tonic::codegen::Service<http::Request<Body>, Response = Resp, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Resp;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Resp, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        // The clone that was made ready is the one that answers locally.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let peers = self.peers.clone();
        Box::pin(async move {
            if req.headers().contains_key(PROXIED) {
                return inner.call(req).await;
            }
            let (parts, body) = req.into_parts();
            let bytes = match axum::body::to_bytes(axum::body::Body::new(body), MAX_REQUEST).await {
                Ok(b) => b,
                Err(e) => return Ok(tonic::Status::invalid_argument(format!("read the request: {e}")).into_http()),
            };
            let local = rebuild(&parts, bytes.clone());
            let answer = inner.call(local).await?;
            let Some(owner) = answer.headers().get(OWNER_KEY).and_then(|v| v.to_str().ok()).map(str::to_string) else {
                return Ok(answer);
            };
            let mut forwarded = rebuild(&parts, bytes);
            forwarded.headers_mut().insert(PROXIED, http::HeaderValue::from_static("1"));
            Ok(forward(&peers, &owner, forwarded)
                .await
                .unwrap_or_else(|e| tonic::Status::unavailable(format!("the job's owner at {owner} did not answer ({e}); retry")).into_http()))
        })
    }
}

fn rebuild(parts: &http::request::Parts, bytes: axum::body::Bytes) -> http::Request<Body> {
    let mut req = http::Request::new(Body::new(axum::body::Body::from(bytes)));
    *req.method_mut() = parts.method.clone();
    *req.uri_mut() = parts.uri.clone();
    *req.version_mut() = parts.version;
    *req.headers_mut() = parts.headers.clone();
    req
}

async fn forward(peers: &Peers, owner: &str, mut req: http::Request<Body>) -> Result<Resp, String> {
    let mut channel = peers.channel(owner)?;
    // The channel sets scheme and authority from its endpoint; keep only the path.
    let path = req.uri().path_and_query().map(|p| p.as_str().to_string()).unwrap_or_default();
    *req.uri_mut() = path.parse().map_err(|e| format!("request path {path:?}: {e}"))?;
    std::future::poll_fn(|cx| tonic::codegen::Service::poll_ready(&mut channel, cx)).await.map_err(|e| e.to_string())?;
    tonic::codegen::Service::call(&mut channel, req).await.map_err(|e| e.to_string())
}
