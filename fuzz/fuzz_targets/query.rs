//! The search query path: `coroner_index::check_query` (the parse budget) and, for a query it
//! lets through, tantivy's grammar and the query built from it, run on an empty index.
//!
//! Input: the query's bytes (lossy UTF-8).
//! Checked: no panic; a refused query names one of the three limits and says what to do; a query
//! over the byte limit is always refused; an accepted query parses (or is a bad query) within
//! libFuzzer's per-input timeout: the budget exists because the grammar is exponential in the
//! nesting it refuses, so a timeout here is a hole in the budget.

#![no_main]

use coroner_index::{check_query, IndexError, JobIndex, QueryLimits, SearchRequest};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fn index() -> &'static JobIndex {
    static INDEX: OnceLock<(tempfile::TempDir, JobIndex)> = OnceLock::new();
    &INDEX
        .get_or_init(|| {
            let dir = tempfile::tempdir().expect("tempdir");
            let index = JobIndex::open_or_create(dir.path()).expect("an empty index");
            (dir, index)
        })
        .1
}

fuzz_target!(|data: &[u8]| {
    let query = String::from_utf8_lossy(data).into_owned();
    let limits = QueryLimits::default();
    match check_query(&query, &limits) {
        Err(refused) => {
            assert!(matches!(refused.limit, "query_bytes" | "query_depth" | "query_clauses"), "{refused:?}");
            assert!(refused.message.contains("this server takes"), "{refused:?}");
        }
        Ok(()) => {
            assert!(query.len() <= limits.max_bytes);
            let request = SearchRequest { query: query.clone(), limit: 10, ..Default::default() };
            match index().search(&request) {
                Ok(page) => assert_eq!(page.total, 0, "an empty index matched"),
                Err(IndexError::BadQuery(_)) => {}
                Err(e) => panic!("an accepted query failed otherwise: {e}"),
            }
            match index().count_by_rank(&query) {
                Ok(counts) => assert!(counts.is_empty()),
                Err(IndexError::BadQuery(_)) => {}
                Err(e) => panic!("an accepted query failed to count: {e}"),
            }
        }
    }
});
