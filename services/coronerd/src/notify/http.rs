//! The one HTTP client the notifier posts with: hyper-util's pooled client over rustls with the
//! Mozilla roots (no native TLS), HTTP/1.1, each request bounded by the retry policy's timeout.

use super::format::Request;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use std::time::Duration;

/// How much of a refusal's body goes into the delivery log.
const ERROR_BODY_BYTES: usize = 300;

/// What one attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The receiver answered with this status (and the start of its body when it was not 2xx).
    Status(u16, String),
    /// No answer: connection refused, TLS failure, timeout.
    NoAnswer(String),
}

#[derive(Clone)]
pub struct Poster {
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl Poster {
    pub fn new() -> Poster {
        // Ring is the provider the rest of coronerd's rustls uses; no process-wide default is set.
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())
            .map(|b| b.https_or_http().enable_http1().build())
            .unwrap_or_else(|_| hyper_rustls::HttpsConnectorBuilder::new().with_webpki_roots().https_or_http().enable_http1().build());
        Poster { client: Client::builder(hyper_util::rt::TokioExecutor::new()).build(https) }
    }

    /// POSTs the request as JSON to `url`.
    pub async fn post(&self, url: &hyper::Uri, request: &Request, timeout: Duration) -> Answer {
        let mut builder =
            hyper::Request::post(url.clone()).header(hyper::header::CONTENT_TYPE, "application/json").header(hyper::header::USER_AGENT, user_agent());
        for (name, value) in &request.headers {
            builder = builder.header(*name, value);
        }
        let req = match builder.body(Full::new(Bytes::from(request.body.clone()))) {
            Ok(r) => r,
            Err(e) => return Answer::NoAnswer(format!("cannot build the request: {e}")),
        };
        let exchange = async {
            let resp = self.client.request(req).await.map_err(|e| describe(&e))?;
            let status = resp.status().as_u16();
            if resp.status().is_success() {
                return Ok(Answer::Status(status, String::new()));
            }
            let body = resp.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            let text = String::from_utf8_lossy(&body[..body.len().min(ERROR_BODY_BYTES)]).trim().to_string();
            Ok(Answer::Status(status, text))
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => Answer::NoAnswer(e),
            Err(_) => Answer::NoAnswer(format!("no answer within {timeout:?} (retry.timeout)")),
        }
    }
}

fn user_agent() -> String {
    format!("coronerd/{}", env!("CARGO_PKG_VERSION"))
}

/// The error and its causes on one line (hyper's own message is only "client error (Connect)").
fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        source = cause.source();
    }
    s
}
