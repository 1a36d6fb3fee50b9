//! Page tokens, the one paging convention of the Query service's lists (docs/API.md): a request
//! carries `page_size` and `page_token`, an answer `next_page_token`, empty on the last page.
//!
//! A token is opaque to clients: hex of a small JSON document holding a version, the list it came
//! from, the request's filters and the sort key of the last item served (keyset paging: an item
//! added or removed between two pages never shifts the others). It is validated on the way in: a
//! token that was not made here, made by another list, or sent with other filters is refused with
//! INVALID_ARGUMENT and says what to do. It holds no secret and grants nothing: it only says where
//! to continue.

use crate::error::ServiceError;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// Items per page when the request says 0.
pub const DEFAULT_PAGE_SIZE: u32 = 100;
/// The most items per page; larger requests are lowered to it (every answer stays bounded).
pub const MAX_PAGE_SIZE: u32 = 1000;
/// The format of the token; a token of another version is refused.
const VERSION: u32 = 1;
/// Tokens are small (filters and one sort key); anything longer was not made here.
const MAX_TOKEN_CHARS: usize = 8 << 10;

/// The page size a request gets.
pub fn page_size(requested: u32) -> u32 {
    if requested == 0 {
        DEFAULT_PAGE_SIZE
    } else {
        requested.min(MAX_PAGE_SIZE)
    }
}

#[derive(Serialize, Deserialize)]
struct Token<F, K> {
    v: u32,
    list: String,
    filters: F,
    after: K,
}

/// The token that continues `list` (with these `filters`) after the item whose sort key is `after`.
pub fn encode<F: Serialize, K: Serialize>(list: &str, filters: &F, after: &K) -> Result<String, ServiceError> {
    let token = Token { v: VERSION, list: list.to_string(), filters, after };
    let json = serde_json::to_vec(&token).map_err(|e| ServiceError::Internal(format!("encode a page token of {list}: {e}")))?;
    Ok(hex::encode(json))
}

/// Where a request continues: `None` for the first page (an empty token), the last served item's
/// sort key otherwise.
pub fn decode<F, K>(token: &str, list: &str, filters: &F) -> Result<Option<K>, ServiceError>
where
    F: Serialize + DeserializeOwned + PartialEq,
    K: DeserializeOwned,
{
    if token.is_empty() {
        return Ok(None);
    }
    let refuse = |why: &str| {
        ServiceError::InvalidArgument(format!("bad page_token: {why}; pass the next_page_token of the previous answer unchanged, with the same filters"))
    };
    if token.len() > MAX_TOKEN_CHARS {
        return Err(refuse("longer than any token this server makes"));
    }
    let bytes = hex::decode(token).map_err(|_| refuse("not a token this server made"))?;
    let head: Token<serde_json::Value, serde_json::Value> = serde_json::from_slice(&bytes).map_err(|_| refuse("not a token this server made"))?;
    if head.v != VERSION {
        return Err(refuse(&format!("token format {} is not {VERSION} (made by another coronerd version?)", head.v)));
    }
    if head.list != list {
        return Err(refuse(&format!("a token of {}, not of {list}", head.list)));
    }
    let same_filters = serde_json::from_value::<F>(head.filters).is_ok_and(|f| &f == filters);
    if !same_filters {
        return Err(refuse("the filters differ from the first page's"));
    }
    let after = serde_json::from_value::<K>(head.after).map_err(|_| refuse("not a token this server made"))?;
    Ok(Some(after))
}

/// One page of `items` in the order of `key`: those after `after`, at most `size`, and the key
/// to continue after when more follow. For lists computed whole (snapshots, suspects); the jobs
/// list pages in SQL.
pub fn page_of<T, K: Ord>(mut items: Vec<T>, key: impl Fn(&T) -> K, after: Option<&K>, size: u32) -> (Vec<T>, Option<K>) {
    items.sort_by_key(|t| key(t));
    let start = after.map_or(0, |a| items.partition_point(|t| key(t) <= *a));
    let mut page: Vec<T> = items.drain(start..).collect();
    let size = size as usize;
    let more = page.len() > size;
    page.truncate(size);
    let next = if more { page.last().map(&key) } else { None };
    (page, next)
}

/// A sort key for a score that is to be listed highest first: an integer whose order is the
/// reverse of `f64::total_cmp`'s (exact for every value, so a key survives the token unchanged).
pub fn descending(score: f64) -> i64 {
    // The bits of an f64 as an i64 order like `total_cmp` once the negative ones have their
    // magnitude bits flipped (what `f64::total_cmp` itself does); `!` then reverses the order.
    let bits = score.to_bits() as i64;
    !(bits ^ ((((bits >> 63) as u64) >> 1) as i64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize, Deserialize, PartialEq, Debug)]
    struct Filters {
        verdict: String,
    }

    fn failed() -> Filters {
        Filters { verdict: "failed".into() }
    }

    #[test]
    fn a_token_round_trips_with_the_same_list_and_filters() {
        let token = encode("jobs", &failed(), &(42i64, "job-7".to_string())).expect("encode");
        let after: Option<(i64, String)> = decode(&token, "jobs", &failed()).expect("decode");
        assert_eq!(after, Some((42, "job-7".to_string())));
        assert_eq!(decode::<_, (i64, String)>("", "jobs", &failed()).expect("first page"), None);
    }

    #[test]
    fn a_token_of_other_filters_another_list_or_nowhere_is_refused_with_what_to_do() {
        let token = encode("jobs", &failed(), &(42i64, "job-7".to_string())).expect("encode");
        let other = Filters { verdict: "succeeded".into() };
        for (t, list, filters, why) in [
            (token.as_str(), "jobs", &other, "the filters differ"),
            (token.as_str(), "suspects", &failed(), "a token of jobs"),
            ("zz", "jobs", &failed(), "not a token this server made"),
            ("7b7d", "jobs", &failed(), "not a token this server made"),
        ] {
            let Err(ServiceError::InvalidArgument(m)) = decode::<_, (i64, String)>(t, list, filters) else { panic!("{t:?} accepted") };
            assert!(m.contains(why) && m.contains("next_page_token"), "{m}");
        }
        let huge = "a".repeat(MAX_TOKEN_CHARS + 2);
        assert!(decode::<_, (i64, String)>(&huge, "jobs", &failed()).is_err());
        let wrong_key = encode("jobs", &failed(), &"not a pair").expect("encode");
        assert!(decode::<_, (i64, String)>(&wrong_key, "jobs", &failed()).is_err());
    }

    #[test]
    fn pages_visit_every_item_once_in_order_even_when_items_come_and_go() {
        let items: Vec<u32> = (0..10).rev().collect();
        let mut seen = Vec::new();
        let mut after = None;
        loop {
            let (page, next) = page_of(items.clone(), |x| *x, after.as_ref(), 3);
            assert!(page.len() <= 3);
            seen.extend(page);
            match next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        assert_eq!(seen, (0..10).collect::<Vec<_>>());
        // An item removed before the next page does not shift it.
        let (_, next) = page_of(items.clone(), |x| *x, None, 3);
        let fewer: Vec<u32> = items.into_iter().filter(|x| *x != 1).collect();
        assert_eq!(page_of(fewer, |x| *x, next.as_ref(), 3).0, [3, 4, 5]);
        assert_eq!(page_of(vec![1, 2], |x| *x, None, 2), (vec![1, 2], None), "no token when nothing follows");
    }

    #[test]
    fn descending_scores_sort_highest_first() {
        let mut scores = [0.5, 3.0, 0.0, 12.25, -1.0, 2.0];
        scores.sort_by_key(|s| descending(*s));
        assert_eq!(scores, [12.25, 3.0, 2.0, 0.5, 0.0, -1.0]);
    }
}
