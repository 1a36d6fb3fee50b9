//! The generic webhook's signature: HMAC-SHA256, keyed with the sink's shared secret, over
//! `<timestamp>.<body>`, where the timestamp (Unix seconds, also sent in its own header) lets a
//! receiver refuse a replayed request: recompute the HMAC over the timestamp header, a dot and the
//! raw body, compare in constant time, and reject a timestamp more than a few minutes old.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The header holding the signing time, Unix seconds.
pub const TIMESTAMP_HEADER: &str = "x-coroner-timestamp";
/// The header holding `sha256=<hex HMAC>`.
pub const SIGNATURE_HEADER: &str = "x-coroner-signature";

/// A shared secret; its `Debug` shows its length only, so it never reaches a log.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: String) -> Secret {
        Secret(s)
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

/// The value of [`SIGNATURE_HEADER`] for `body` signed at `timestamp`.
pub fn signature(secret: &Secret, timestamp: i64, body: &[u8]) -> String {
    // HMAC takes a key of any length; `new_from_slice` cannot fail for it.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret.0.as_bytes()).expect("HMAC accepts keys of any length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_matches_a_known_hmac_sha256() {
        // Reference value: `printf '1700000000.{}' | openssl dgst -sha256 -hmac s3cret`.
        let s = signature(&Secret::new("s3cret".into()), 1_700_000_000, b"{}");
        assert_eq!(s, "sha256=97926816e98fbb41ccb1673225ff29a2f35369099990e1b1561651e7bd097ebf");
    }

    #[test]
    fn the_timestamp_and_the_body_are_both_signed() {
        let key = Secret::new("k".into());
        let s = signature(&key, 10, b"body");
        assert_ne!(s, signature(&key, 11, b"body"));
        assert_ne!(s, signature(&key, 10, b"bodY"));
        assert_ne!(s, signature(&Secret::new("other".into()), 10, b"body"));
    }

    #[test]
    fn a_secret_never_prints() {
        assert_eq!(format!("{:?}", Secret::new("hunter2".into())), "Secret(7 bytes)");
    }
}
