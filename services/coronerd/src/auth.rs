//! Bearer tokens, one for writing and one for reading, per deployment.
//!
//! - gRPC: [`Guarded`] wraps a whole service. Ingest, Liveness (heartbeats), OTLP logs and Admin
//!   (deleting jobs) need the **write** token; Query needs the **read** token (the write token
//!   reads too). Health
//!   checks stay open. The token arrives as `authorization: Bearer <token>` metadata. A query
//!   proxied to the job's owner keeps the caller's headers, so the owner checks the same token.
//! - HTTP: [`http_guard`] requires the write token on OTLP/HTTP's `POST /v1/logs` (from the
//!   `Authorization` header only), and the read (or write) token on everything else but
//!   `/healthz` and `/assets/*`, from `Authorization: Bearer <token>`, a `coroner_token` cookie, or `?token=` in
//!   the address; a page opened with a valid `?token=` sets the cookie, so a browser needs the
//!   token in its address once.
//!
//! Each requirement holds only when its token is configured; `crate::config` refuses to bind
//! beyond loopback without both (unless told `--insecure-no-auth`). Tokens are compared as
//! SHA-256 digests in constant time, so neither their bytes nor their length leak through timing.

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::future::Either;
use sha2::{Digest, Sha256};
use std::convert::Infallible;
use std::future::Ready;
use std::sync::Arc;
use std::task::{Context, Poll};
use tonic::body::Body;
use tonic::codegen::http;
use tonic::server::NamedService;

/// OTLP/HTTP's logs endpoint: the one HTTP path that writes.
pub const OTLP_LOGS_PATH: &str = "/v1/logs";

/// The cookie a browser keeps the token in after opening a page with `?token=`.
const COOKIE: &str = "coroner_token";

/// What a call needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    Read,
    Write,
}

/// The deployment's tokens, kept as digests.
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    write: Option<[u8; 32]>,
    read: Option<[u8; 32]>,
    /// The HTTP port is TLS: the token cookie is `Secure`.
    secure_cookie: bool,
}

/// Headers every HTTP answer carries: pages hold logs and tokens, so nothing caches them, no
/// other site frames them, and the browser runs only this server's own script and styles.
pub const SECURITY_HEADERS: [(&str, &str); 5] = [
    ("cache-control", "no-store"),
    ("content-security-policy", "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"),
    ("x-frame-options", "DENY"),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
];

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

fn same(a: &[u8; 32], b: &[u8; 32]) -> bool {
    std::hint::black_box(a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y))) == 0
}

impl Tokens {
    pub fn new(write: Option<&str>, read: Option<&str>) -> Tokens {
        Tokens { write: write.map(digest), read: read.map(digest), secure_cookie: false }
    }

    /// Marks the token cookie `Secure` (the HTTP port serves TLS).
    pub fn with_secure_cookie(mut self, secure: bool) -> Tokens {
        self.secure_cookie = secure;
        self
    }

    /// Whether any call needs a token at all.
    pub fn enforced(&self) -> bool {
        self.write.is_some() || self.read.is_some()
    }

    /// `Ok` when `presented` may make a call that needs `need`; otherwise the reason, for the caller.
    pub fn check(&self, need: Need, presented: Option<&str>) -> Result<(), String> {
        let required = match need {
            Need::Write => self.write.is_some(),
            Need::Read => self.read.is_some(),
        };
        if !required {
            return Ok(());
        }
        let what = match need {
            Need::Write => "the write token",
            Need::Read => "the read token (or the write token)",
        };
        let Some(p) = presented else {
            return Err(format!(
                "this coroner server needs {what}: send `authorization: Bearer <token>` (coroner and coroner-agent: --token or CORONER_TOKEN)"
            ));
        };
        let p = digest(p);
        // Both comparisons always run, so timing does not tell which token matched.
        let is_write = self.write.as_ref().is_some_and(|w| same(w, &p));
        let is_read = self.read.as_ref().is_some_and(|r| same(r, &p));
        let ok = match need {
            Need::Write => is_write,
            Need::Read => is_write | is_read,
        };
        if ok {
            Ok(())
        } else if need == Need::Write && is_read {
            Err("the read token cannot write: agents and imports need the write token".into())
        } else {
            Err(format!("the token sent is not valid here: this call needs {what}"))
        }
    }
}

/// The token in an `authorization: Bearer <token>` header, if any.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, token) = v.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// A gRPC service that answers `UNAUTHENTICATED` unless the call carries a token good for `need`.
#[derive(Clone)]
pub struct Guarded<S> {
    inner: S,
    tokens: Arc<Tokens>,
    need: Need,
}

impl<S> Guarded<S> {
    pub fn new(inner: S, tokens: Arc<Tokens>, need: Need) -> Self {
        Guarded { inner, tokens, need }
    }
}

impl<S: NamedService> NamedService for Guarded<S> {
    const NAME: &'static str = S::NAME;
}

type Resp = http::Response<Body>;

impl<S> tonic::codegen::Service<http::Request<Body>> for Guarded<S>
where
    S: tonic::codegen::Service<http::Request<Body>, Response = Resp, Error = Infallible>,
{
    type Response = Resp;
    type Error = Infallible;
    type Future = Either<Ready<Result<Resp, Infallible>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        match self.tokens.check(self.need, bearer(req.headers())) {
            Ok(()) => Either::Right(self.inner.call(req)),
            Err(why) => Either::Left(std::future::ready(Ok(tonic::Status::unauthenticated(why).into_http()))),
        }
    }
}

/// The HTTP side: the read token on everything but health and static assets, and the security
/// headers on every answer.
pub async fn http_guard(State(tokens): State<Arc<Tokens>>, req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let mut response = guarded(&tokens, req, next).await;
    for (name, value) in SECURITY_HEADERS {
        response.headers_mut().insert(name, HeaderValue::from_static(value));
    }
    response
}

async fn guarded(tokens: &Tokens, req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let path = req.uri().path();
    if !tokens.enforced() || path == "/healthz" || path.starts_with("/assets/") {
        return next.run(req).await;
    }
    // OTLP/HTTP writes: the write token, and only from the header (as OTLP/gRPC takes it).
    if path == OTLP_LOGS_PATH {
        if let Err(why) = tokens.check(Need::Write, bearer(req.headers())) {
            return (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, "Bearer")], format!("{why}\n")).into_response();
        }
        return next.run(req).await;
    }
    let from_query = query_token(req.uri().query());
    let presented = bearer(req.headers()).map(str::to_string).or_else(|| cookie(req.headers())).or_else(|| from_query.clone());
    if let Err(why) = tokens.check(Need::Read, presented.as_deref()) {
        let why = format!("{why}; in a browser, open the page once with ?token=<token>\n");
        return (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, "Bearer")], why).into_response();
    }
    let mut response = next.run(req).await;
    // A page opened with ?token= remembers it, so its script's requests carry it.
    if let Some(t) = from_query.filter(|t| Some(t) == presented.as_ref()) {
        let secure = if tokens.secure_cookie { "; Secure" } else { "" };
        if let Ok(v) = HeaderValue::from_str(&format!("{COOKIE}={t}; Path=/; HttpOnly; SameSite=Strict{secure}")) {
            response.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    response
}

fn query_token(query: Option<&str>) -> Option<String> {
    query?.split('&').find_map(|kv| kv.strip_prefix("token=")).filter(|t| !t.is_empty()).map(str::to_string)
}

fn cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|kv| kv.trim().strip_prefix(COOKIE).and_then(|rest| rest.strip_prefix('=')))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_tokens_means_open() {
        let t = Tokens::new(None, None);
        assert!(!t.enforced());
        assert!(t.check(Need::Write, None).is_ok());
        assert!(t.check(Need::Read, Some("anything")).is_ok());
    }

    #[test]
    fn write_token_writes_and_reads_read_token_only_reads() {
        let t = Tokens::new(Some("w-secret"), Some("r-secret"));
        assert!(t.check(Need::Write, Some("w-secret")).is_ok());
        assert!(t.check(Need::Read, Some("w-secret")).is_ok());
        assert!(t.check(Need::Read, Some("r-secret")).is_ok());
        let e = t.check(Need::Write, Some("r-secret")).unwrap_err();
        assert!(e.contains("read token cannot write"), "{e}");
        let e = t.check(Need::Write, None).unwrap_err();
        assert!(e.contains("CORONER_TOKEN"), "{e}");
        assert!(t.check(Need::Read, Some("w-secre")).is_err());
        assert!(t.check(Need::Read, Some("")).is_err());
    }

    #[test]
    fn only_configured_requirements_hold() {
        let t = Tokens::new(Some("w"), None);
        assert!(t.check(Need::Read, None).is_ok());
        assert!(t.check(Need::Write, None).is_err());
    }

    #[tokio::test]
    async fn the_token_cookie_is_secure_under_tls_and_every_answer_has_the_security_headers() {
        use axum::routing::get;
        use tower_util_oneshot::call;
        for tls in [false, true] {
            let tokens = Arc::new(Tokens::new(Some("w"), Some("r")).with_secure_cookie(tls));
            let app = axum::Router::new().route("/", get(|| async { "page" })).layer(axum::middleware::from_fn_with_state(tokens, http_guard));
            let resp = call(app.clone(), "/?token=r").await;
            let cookie = resp.headers().get(header::SET_COOKIE).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
            assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"), "{cookie}");
            assert_eq!(cookie.contains("; Secure"), tls, "{cookie}");
            for resp in [resp, call(app, "/").await] {
                for (name, value) in SECURITY_HEADERS {
                    assert_eq!(resp.headers().get(name).and_then(|v| v.to_str().ok()), Some(value), "{name}");
                }
            }
        }
    }

    /// One request through a router, without a server.
    mod tower_util_oneshot {
        pub async fn call(app: axum::Router, uri: &str) -> axum::response::Response {
            use tower_service::Service;
            let req = axum::http::Request::builder().uri(uri).body(axum::body::Body::empty()).expect("request");
            let mut app = app;
            match app.call(req).await {
                Ok(r) => r,
                Err(e) => match e {},
            }
        }
    }

    #[test]
    fn tokens_are_found_in_header_cookie_and_query() {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer  abc "));
        assert_eq!(bearer(&h), Some("abc"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic abc"));
        assert_eq!(bearer(&h), None);
        h.insert(header::COOKIE, HeaderValue::from_static("a=1; coroner_token=xyz; b=2"));
        assert_eq!(cookie(&h).as_deref(), Some("xyz"));
        assert_eq!(query_token(Some("q=1&token=t0k")).as_deref(), Some("t0k"));
        assert_eq!(query_token(Some("q=1&token=")), None);
        assert_eq!(query_token(None), None);
    }
}
