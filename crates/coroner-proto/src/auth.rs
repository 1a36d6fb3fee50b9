//! The client side of coronerd's bearer tokens and TLS, as a value: a [`ClientAuth`] holds the
//! token (the agent's and the CLI's `--token` / `CORONER_TOKEN`) and the CA an `https://`
//! server's certificate may chain to besides the public roots (`--tls-ca` / `CORONER_TLS_CA`).
//! Each caller builds one from its own flags and opens its channels through it: the token goes
//! as `authorization: Bearer <token>` on every call of every channel [`ClientAuth::channel`]
//! wraps, and [`ClientAuth::endpoint`] speaks TLS to `https://` servers. Nothing is kept per
//! process, so two clients with different tokens or CAs (two servers in one test) live side by side.

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;

/// A channel whose calls carry its [`ClientAuth`]'s token (when it has one).
pub type Channel = InterceptedService<tonic::transport::Channel, Bearer>;

/// How a client proves itself to coronerd and whom it trusts: a token and a CA, both optional.
/// The default has neither (plain `http://` or public roots, no `authorization`).
#[derive(Clone, Default)]
pub struct ClientAuth {
    token: Option<MetadataValue<Ascii>>,
    tls_ca: Option<tonic::transport::Certificate>,
}

impl std::fmt::Debug for ClientAuth {
    /// Never prints the token itself.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientAuth").field("token", &self.token.as_ref().map(|_| "<set>")).field("tls_ca", &self.tls_ca.is_some()).finish()
    }
}

impl ClientAuth {
    /// From the flags: `token` (an empty or blank token is none) and `tls_ca`, a PEM file read now.
    pub fn new(token: Option<&str>, tls_ca: Option<&std::path::Path>) -> Result<ClientAuth, String> {
        ClientAuth::default().with_token(token)?.with_tls_ca(tls_ca)
    }

    /// The same, sending `token` (an empty or blank token is none).
    pub fn with_token(mut self, token: Option<&str>) -> Result<ClientAuth, String> {
        self.token = match token.map(str::trim).filter(|t| !t.is_empty()) {
            None => None,
            Some(t) => Some(
                format!("Bearer {t}")
                    .parse::<MetadataValue<Ascii>>()
                    .map_err(|_| "the token has characters outside printable ASCII; use the token coronerd was given".to_string())?,
            ),
        };
        Ok(self)
    }

    /// The same, trusting the CA in the PEM file `path` for `https://` servers (none: public roots only).
    pub fn with_tls_ca(mut self, path: Option<&std::path::Path>) -> Result<ClientAuth, String> {
        self.tls_ca = match path {
            None => None,
            Some(p) => {
                let pem = std::fs::read(p).map_err(|e| format!("read the TLS CA file {}: {e}", p.display()))?;
                Some(tonic::transport::Certificate::from_pem(pem))
            }
        };
        Ok(self)
    }

    /// Whether calls carry a token.
    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }

    /// An endpoint for `server` (`http://` plain, `https://` TLS trusting this CA and the public roots).
    pub fn endpoint(&self, server: &str) -> Result<tonic::transport::Endpoint, String> {
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
        if let Some(ca) = &self.tls_ca {
            tls = tls.ca_certificate(ca.clone());
        }
        endpoint.tls_config(tls).map_err(|e| format!("TLS for {server}: {e}"))
    }

    /// Wraps a transport channel so that its calls carry this token.
    pub fn channel(&self, inner: tonic::transport::Channel) -> Channel {
        InterceptedService::new(inner, Bearer { token: self.token.clone() })
    }
}

/// Adds `authorization` to each call, when there is a token.
#[derive(Clone, Default)]
pub struct Bearer {
    token: Option<MetadataValue<Ascii>>,
}

impl Interceptor for Bearer {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.token {
            request.metadata_mut().insert("authorization", v.clone());
        }
        Ok(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(auth: &ClientAuth) -> Option<String> {
        let mut bearer = Bearer { token: auth.token.clone() };
        let request = bearer.call(tonic::Request::new(())).expect("the interceptor never refuses");
        request.metadata().get("authorization").map(|v| v.to_str().expect("ascii").to_string())
    }

    #[test]
    fn two_clients_in_one_process_send_their_own_tokens() {
        let a = ClientAuth::new(Some("token-a"), None).expect("a");
        let b = ClientAuth::new(Some(" token-b \n"), None).expect("b");
        assert_eq!(header(&a).as_deref(), Some("Bearer token-a"));
        assert_eq!(header(&b).as_deref(), Some("Bearer token-b"));
        assert_eq!(header(&ClientAuth::default()), None);
    }

    #[test]
    fn a_blank_token_is_none_and_one_with_control_characters_is_refused() {
        assert!(!ClientAuth::new(Some("  "), None).expect("blank").has_token());
        let err = ClientAuth::new(Some("to\u{1}k"), None).expect_err("a control character");
        assert!(err.contains("printable ASCII"), "{err}");
    }

    #[test]
    fn a_missing_ca_file_names_the_file() {
        let err = ClientAuth::new(None, Some(std::path::Path::new("/nonexistent/ca.pem"))).expect_err("no such file");
        assert!(err.contains("/nonexistent/ca.pem"), "{err}");
    }

    #[test]
    fn the_debug_form_hides_the_token() {
        let a = ClientAuth::new(Some("secret-token"), None).expect("a");
        assert!(!format!("{a:?}").contains("secret-token"));
    }
}
