//! The parse budget: what a query may cost before tantivy's grammar sees it.
//!
//! tantivy's query grammar backtracks on groups: every level of parentheses doubles its work
//! (measured: depth 10 parses in 1.5 ms, 14 in 26 ms, 18 in 0.5 s, 22 in 5 s; 100 levels, a
//! 205-byte query, never finishes). So a query is scanned once, in linear time, before it is
//! parsed, and refused when it is too long, nested too deep or has too many clauses. The scan is
//! conservative: it counts every unescaped `(` as a group, inside a phrase too, so it never lets
//! through what the grammar would nest deeper.
//!
//! Rules ([`check_query`]):
//! 1. at most `max_bytes` bytes;
//! 2. groups nested at most `max_depth` deep;
//! 3. at most `max_clauses` clauses (terms, phrases and groups; operators do not count).

/// The parse budget of one query. The defaults are generous for people and tight for the grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryLimits {
    pub max_bytes: usize,
    pub max_depth: usize,
    pub max_clauses: usize,
}

impl Default for QueryLimits {
    fn default() -> Self {
        QueryLimits {
            // A long hand-written query is a few hundred bytes; 4 KiB leaves room for generated ones.
            max_bytes: 4096,
            // Depth 8 parses in under 1 ms (each level doubles the grammar's work).
            max_depth: 8,
            // 64 terms ANDed over a 1M-line job run in ~0.3 s; 1,000 took 6 s.
            max_clauses: 64,
        }
    }
}

/// Which rule a query broke, and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct QueryRefused {
    /// The limit's name, for metrics: `query_bytes`, `query_depth` or `query_clauses`.
    pub limit: &'static str,
    pub message: String,
}

/// Checks `query` against `limits` in one pass over its bytes.
pub fn check_query(query: &str, limits: &QueryLimits) -> Result<(), QueryRefused> {
    if query.len() > limits.max_bytes {
        return Err(QueryRefused {
            limit: "query_bytes",
            message: format!(
                "the query is {} bytes, more than the {} this server takes; shorten it or filter with rank, host, stream or time instead",
                query.len(),
                limits.max_bytes
            ),
        });
    }
    let (mut depth, mut deepest, mut clauses) = (0usize, 0usize, 0usize);
    let (mut in_word, mut in_phrase, mut escaped) = (false, false, false);
    for b in query.bytes() {
        if escaped {
            escaped = false;
            continue;
        }
        match b {
            b'\\' => escaped = true,
            b'"' => {
                if !in_phrase {
                    clauses += 1;
                }
                in_phrase = !in_phrase;
                in_word = false;
            }
            b'(' => {
                depth += 1;
                deepest = deepest.max(depth);
                clauses += 1;
                in_word = false;
            }
            b')' => {
                depth = depth.saturating_sub(1);
                in_word = false;
            }
            _ if in_phrase => {}
            b if b.is_ascii_whitespace() => in_word = false,
            _ => {
                if !in_word {
                    in_word = true;
                    clauses += 1;
                }
            }
        }
    }
    if deepest > limits.max_depth {
        return Err(QueryRefused {
            limit: "query_depth",
            message: format!("the query nests parentheses {deepest} deep, more than the {} this server takes; flatten it", limits.max_depth),
        });
    }
    // Operators are words too: count them out of the clauses.
    let operators = query.split(|c: char| c.is_ascii_whitespace() || c == '(' || c == ')').filter(|w| matches!(*w, "AND" | "OR" | "NOT" | "TO" | "IN")).count();
    let clauses = clauses.saturating_sub(operators);
    if clauses > limits.max_clauses {
        return Err(QueryRefused {
            limit: "query_clauses",
            message: format!("the query has {clauses} clauses, more than the {} this server takes; search for fewer terms at once", limits.max_clauses),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> QueryLimits {
        QueryLimits { max_bytes: 100, max_depth: 3, max_clauses: 5 }
    }

    #[test]
    fn rule_1_a_query_longer_than_max_bytes_is_refused() {
        let e = check_query(&"a".repeat(101), &limits()).unwrap_err();
        assert_eq!(e.limit, "query_bytes");
        assert!(e.message.contains("101 bytes") && e.message.contains("100"), "{e}");
        assert!(check_query(&"a".repeat(100), &limits()).is_ok());
    }

    #[test]
    fn rule_2_groups_nested_deeper_than_max_depth_are_refused() {
        assert!(check_query("(((a)))", &limits()).is_ok());
        let e = check_query("((((a))))", &limits()).unwrap_err();
        assert_eq!(e.limit, "query_depth");
        assert!(e.message.contains("4 deep"), "{e}");
        // Unclosed, inside a phrase, or after a field: still counted.
        assert_eq!(check_query("((((a", &limits()).unwrap_err().limit, "query_depth");
        assert_eq!(check_query("\"((((\"", &limits()).unwrap_err().limit, "query_depth");
        assert_eq!(check_query("text:(+(-((a))))", &limits()).unwrap_err().limit, "query_depth");
        // Escaped parentheses are characters of a word, not groups; siblings do not add up.
        assert!(check_query(r"\(\(\(\(a", &limits()).is_ok());
        assert!(check_query("(a) (b)", &limits()).is_ok());
        // The red team's 205-byte query.
        let attack = format!("{}foo{}", "(".repeat(100), ")".repeat(100));
        let e = check_query(&attack, &QueryLimits::default()).unwrap_err();
        assert_eq!(e.limit, "query_depth");
    }

    #[test]
    fn rule_3_more_clauses_than_max_clauses_are_refused() {
        assert!(check_query("a AND b OR c NOT d e", &limits()).is_ok());
        assert!(check_query("\"a long phrase of many words\" b", &limits()).is_ok());
        let e = check_query("a b c d e f", &limits()).unwrap_err();
        assert_eq!(e.limit, "query_clauses");
        assert!(e.message.contains("6 clauses"), "{e}");
        let e = check_query(&vec!["foo"; 1000].join(" AND "), &QueryLimits { max_bytes: 1 << 20, ..QueryLimits::default() }).unwrap_err();
        assert_eq!(e.limit, "query_clauses");
        // Groups count, so empty groups cannot stand in for terms.
        assert_eq!(check_query("() () () () () ()", &limits()).unwrap_err().limit, "query_clauses");
    }

    #[test]
    fn ordinary_queries_pass_the_defaults() {
        for q in ["", "NCCL WARN", "\"collective operation timeout\"", "launcher OR watchdog", "SeqNum=11 AND -loss", "(a OR b) AND (c OR d)"] {
            assert!(check_query(q, &QueryLimits::default()).is_ok(), "{q}");
        }
    }
}
