//! Which live-tail lines a watcher asked for: ranks (a list of numbers and ranges, `0,3,8-15`),
//! a host, a stream and a text (case-insensitive substring). Pure.

use crate::error::ServiceError;
use coroner_model::Stream;

/// The most rank ranges one filter lists.
pub const MAX_RANK_RANGES: usize = 64;
/// The longest text filter, in bytes.
pub const MAX_TEXT: usize = 1024;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TailFilter {
    /// Inclusive ranges; empty: every rank (and lines no rank owns).
    pub ranks: Vec<(u32, u32)>,
    pub host: Option<String>,
    pub stream: Option<Stream>,
    /// Lowercased.
    pub text: Option<String>,
}

fn nonempty(s: Option<&str>) -> Option<&str> {
    s.map(str::trim).filter(|s| !s.is_empty())
}

/// `0,3,8-15` as inclusive ranges, or the reason it is not one.
pub fn parse_ranks(s: &str) -> Result<Vec<(u32, u32)>, ServiceError> {
    let bad = |part: &str, why: &str| ServiceError::InvalidArgument(format!("rank {part:?}: {why}; use numbers and ranges such as 0,3,8-15"));
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let a: u32 = a.trim().parse().map_err(|_| bad(part, "not a rank"))?;
        let b: u32 = b.trim().parse().map_err(|_| bad(part, "not a rank"))?;
        if a > b {
            return Err(bad(part, "the range ends before it starts"));
        }
        out.push((a, b));
    }
    if out.len() > MAX_RANK_RANGES {
        return Err(ServiceError::InvalidArgument(format!("{} rank ranges: at most {MAX_RANK_RANGES}", out.len())));
    }
    Ok(out)
}

impl TailFilter {
    pub fn parse(ranks: Option<&str>, host: Option<&str>, stream: Option<&str>, text: Option<&str>) -> Result<TailFilter, ServiceError> {
        let stream = match nonempty(stream) {
            None => None,
            Some(s) => Some(Stream::parse(s).ok_or_else(|| ServiceError::InvalidArgument(format!("stream {s:?}: use stdout, stderr or file")))?),
        };
        let text = nonempty(text).map(str::to_lowercase);
        if text.as_ref().is_some_and(|t| t.len() > MAX_TEXT) {
            return Err(ServiceError::InvalidArgument(format!("the text filter is over {MAX_TEXT} bytes")));
        }
        Ok(TailFilter { ranks: nonempty(ranks).map(parse_ranks).transpose()?.unwrap_or_default(), host: nonempty(host).map(str::to_string), stream, text })
    }

    pub fn passes(&self, rank: Option<u32>, host: &str, stream: Stream, bytes: &[u8]) -> bool {
        let rank_ok = self.ranks.is_empty() || rank.is_some_and(|r| self.ranks.iter().any(|(a, b)| (*a..=*b).contains(&r)));
        rank_ok
            && self.host.as_deref().is_none_or(|h| h == host)
            && self.stream.is_none_or(|s| s == stream)
            && self.text.as_deref().is_none_or(|t| String::from_utf8_lossy(bytes).to_lowercase().contains(t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_are_numbers_and_ranges() {
        assert_eq!(parse_ranks("0, 3,8-15").ok(), Some(vec![(0, 0), (3, 3), (8, 15)]));
        for bad in ["x", "5-2", "1-", "-1"] {
            assert!(parse_ranks(bad).is_err(), "{bad}");
        }
        assert!(parse_ranks(&vec!["1"; MAX_RANK_RANGES + 1].join(",")).is_err());
    }

    #[test]
    fn every_filter_that_is_set_must_hold() {
        let f = TailFilter::parse(Some("2-3"), Some("node-b"), Some("stderr"), Some("NCCL")).expect("a filter");
        assert!(f.passes(Some(3), "node-b", Stream::Stderr, b"nccl WARN x"));
        assert!(!f.passes(Some(4), "node-b", Stream::Stderr, b"NCCL WARN x"));
        assert!(!f.passes(None, "node-b", Stream::Stderr, b"NCCL WARN x"));
        assert!(!f.passes(Some(3), "node-a", Stream::Stderr, b"NCCL WARN x"));
        assert!(!f.passes(Some(3), "node-b", Stream::Stdout, b"NCCL WARN x"));
        assert!(!f.passes(Some(3), "node-b", Stream::Stderr, b"step 3"));
        assert!(TailFilter::default().passes(None, "", Stream::Stdout, b""));
        assert!(TailFilter::parse(None, None, Some("stdin"), None).is_err());
    }
}
