//! The LogQL coroner answers, parsed. Pure.
//!
//! ```text
//! query    := selector filter*  |  constant
//! selector := '{' matcher (',' matcher)* ','? '}'
//! matcher  := label ('=' | '!=' | '=~' | '!~') string        label: job, rank, host, stream
//! filter   := ('|=' | '!=' | '|~' | '!~') string
//! string   := "..." (Go escapes) | `...` (raw)
//! constant := 'vector(' number ')' ('+' 'vector(' number ')')*
//! ```
//!
//! A label matcher's regex matches the whole value (as Loki's); a line filter's regex matches
//! anywhere in the line. The constant form is what Grafana's Loki datasource sends to test a
//! connection (`vector(1)+vector(1)`). Everything else of LogQL (parsers such as `| json`,
//! `line_format`, metric queries such as `count_over_time`) is refused with a message that says
//! what is answered. Bounds: [`MAX_QUERY_BYTES`], [`MAX_MATCHERS`], [`MAX_FILTERS`], and regexes
//! compiled within [`REGEX_SIZE_LIMIT`], so a query costs microseconds to refuse.

use regex::{Regex, RegexBuilder};

/// The longest query parsed.
pub const MAX_QUERY_BYTES: usize = 4096;
/// The most label matchers in a selector.
pub const MAX_MATCHERS: usize = 8;
/// The most line filters after a selector.
pub const MAX_FILTERS: usize = 16;
/// What one compiled regex may take (the `regex` crate's size limit; its matching is linear).
pub const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// The labels a coroner line has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Label {
    Job,
    Rank,
    Host,
    Stream,
}

impl Label {
    /// Every label, in the order Loki lists them (by name).
    pub const ALL: [Label; 4] = [Label::Host, Label::Job, Label::Rank, Label::Stream];

    pub fn name(self) -> &'static str {
        match self {
            Label::Job => "job",
            Label::Rank => "rank",
            Label::Host => "host",
            Label::Stream => "stream",
        }
    }

    pub fn parse(name: &str) -> Option<Label> {
        Label::ALL.into_iter().find(|l| l.name() == name)
    }
}

/// How a matcher compares a label's value.
#[derive(Debug, Clone)]
pub enum Compare {
    Eq(String),
    Ne(String),
    /// Anchored: the whole value must match.
    Re(Regex),
    NotRe(Regex),
}

impl Compare {
    pub fn matches(&self, value: &str) -> bool {
        match self {
            Compare::Eq(v) => value == v,
            Compare::Ne(v) => value != v,
            Compare::Re(r) => r.is_match(value),
            Compare::NotRe(r) => !r.is_match(value),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Matcher {
    pub label: Label,
    pub compare: Compare,
}

/// A line filter.
#[derive(Debug, Clone)]
pub enum LineFilter {
    Contains(String),
    NotContains(String),
    Matches(Regex),
    NotMatches(Regex),
}

impl LineFilter {
    pub fn keeps(&self, line: &str) -> bool {
        match self {
            LineFilter::Contains(s) => line.contains(s.as_str()),
            LineFilter::NotContains(s) => !line.contains(s.as_str()),
            LineFilter::Matches(r) => r.is_match(line),
            LineFilter::NotMatches(r) => !r.is_match(line),
        }
    }
}

/// A log query: which streams, then which of their lines.
#[derive(Debug, Clone)]
pub struct LogQuery {
    pub matchers: Vec<Matcher>,
    pub filters: Vec<LineFilter>,
}

impl LogQuery {
    /// The matchers on `label`.
    pub fn on(&self, label: Label) -> impl Iterator<Item = &Compare> {
        self.matchers.iter().filter(move |m| m.label == label).map(|m| &m.compare)
    }

    /// The value an `=` matcher on `label` fixes, if any.
    pub fn fixed(&self, label: Label) -> Option<&str> {
        self.on(label).find_map(|c| match c {
            Compare::Eq(v) => Some(v.as_str()),
            _ => None,
        })
    }

    /// Whether a stream with these label values is selected.
    pub fn selects(&self, label: Label, value: &str) -> bool {
        self.on(label).all(|c| c.matches(value))
    }
}

#[derive(Debug, Clone)]
pub enum Query {
    Logs(LogQuery),
    /// A constant vector (the sum of `vector(n)` terms).
    Constant(f64),
}

/// Why a query was refused, in Loki's words ("parse error at line 1, col N: ...").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(pub String);

const ANSWERED: &str = "coroner answers stream selectors on job, rank, host and stream ({job=\"...\", rank=\"3\"}) with line filters |= != |~ !~, \
     and vector(n) constants";

struct Parser<'a> {
    text: &'a str,
    pos: usize,
}

pub fn parse(text: &str) -> Result<Query, ParseError> {
    if text.len() > MAX_QUERY_BYTES {
        return Err(ParseError(format!("the query is {} bytes, over the {MAX_QUERY_BYTES} coroner parses", text.len())));
    }
    let mut p = Parser { text, pos: 0 };
    p.skip_space();
    let query = if p.rest().starts_with('{') { Query::Logs(p.log_query()?) } else { p.constant()? };
    p.skip_space();
    if !p.rest().is_empty() {
        return Err(p.error(&format!("unexpected {:?}; {ANSWERED}", p.rest().chars().take(16).collect::<String>())));
    }
    Ok(query)
}

impl Parser<'_> {
    fn rest(&self) -> &str {
        &self.text[self.pos..]
    }

    fn error(&self, what: &str) -> ParseError {
        let col = self.text[..self.pos].chars().count() + 1;
        ParseError(format!("parse error at line 1, col {col}: {what}"))
    }

    fn skip_space(&mut self) {
        let trimmed = self.rest().trim_start();
        self.pos = self.text.len() - trimmed.len();
    }

    fn eat(&mut self, token: &str) -> bool {
        self.skip_space();
        if self.rest().starts_with(token) {
            self.pos += token.len();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, token: &str) -> Result<(), ParseError> {
        if self.eat(token) {
            Ok(())
        } else {
            Err(self.error(&format!("expected {token:?}")))
        }
    }

    fn identifier(&mut self) -> Result<&str, ParseError> {
        self.skip_space();
        let len = self.rest().find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.')).unwrap_or(self.rest().len());
        if len == 0 {
            return Err(self.error("expected a label name"));
        }
        let start = self.pos;
        self.pos += len;
        Ok(&self.text[start..self.pos])
    }

    fn log_query(&mut self) -> Result<LogQuery, ParseError> {
        self.expect("{")?;
        let mut matchers = Vec::new();
        while !self.eat("}") {
            if matchers.len() == MAX_MATCHERS {
                return Err(self.error(&format!("more than {MAX_MATCHERS} label matchers")));
            }
            matchers.push(self.matcher()?);
            if !self.eat(",") {
                self.expect("}")?;
                break;
            }
        }
        if matchers.is_empty() {
            return Err(self.error("a stream selector needs at least one label matcher, e.g. {job=\"my-job\"}"));
        }
        let mut filters = Vec::new();
        loop {
            self.skip_space();
            let op = ["|=", "!=", "|~", "!~"].into_iter().find(|op| self.rest().starts_with(op));
            let Some(op) = op else {
                if self.rest().starts_with('|') {
                    return Err(self.error(&format!("{:?} is not supported; {ANSWERED}", self.rest().chars().take(16).collect::<String>())));
                }
                break;
            };
            if filters.len() == MAX_FILTERS {
                return Err(self.error(&format!("more than {MAX_FILTERS} line filters")));
            }
            self.pos += op.len();
            let value = self.string()?;
            filters.push(match op {
                "|=" => LineFilter::Contains(value),
                "!=" => LineFilter::NotContains(value),
                "|~" => LineFilter::Matches(self.regex(&value, false)?),
                _ => LineFilter::NotMatches(self.regex(&value, false)?),
            });
        }
        Ok(LogQuery { matchers, filters })
    }

    fn matcher(&mut self) -> Result<Matcher, ParseError> {
        let name = self.identifier()?.to_string();
        let label =
            Label::parse(&name).ok_or_else(|| self.error(&format!("unknown label {name:?}: coroner's lines have the labels job, rank, host and stream")))?;
        self.skip_space();
        let op = ["=~", "!~", "!=", "="].into_iter().find(|op| self.rest().starts_with(op)).ok_or_else(|| self.error("expected =, !=, =~ or !~"))?;
        self.pos += op.len();
        let value = self.string()?;
        let compare = match op {
            "=" => Compare::Eq(value),
            "!=" => Compare::Ne(value),
            "=~" => Compare::Re(self.regex(&value, true)?),
            _ => Compare::NotRe(self.regex(&value, true)?),
        };
        Ok(Matcher { label, compare })
    }

    fn regex(&self, pattern: &str, anchored: bool) -> Result<Regex, ParseError> {
        let full = if anchored { format!("^(?:{pattern})$") } else { pattern.to_string() };
        RegexBuilder::new(&full)
            .size_limit(REGEX_SIZE_LIMIT)
            .dfa_size_limit(REGEX_SIZE_LIMIT)
            .build()
            .map_err(|e| self.error(&format!("bad regex {pattern:?}: {e}")))
    }

    /// A double-quoted string with Go's escapes, or a backquoted raw one.
    fn string(&mut self) -> Result<String, ParseError> {
        self.skip_space();
        let mut chars = self.rest().char_indices();
        let Some((_, quote @ ('"' | '`'))) = chars.next() else {
            return Err(self.error("expected a quoted string"));
        };
        let mut out = String::new();
        while let Some((i, c)) = chars.next() {
            if c == quote {
                self.pos += i + 1;
                return Ok(out);
            }
            if c != '\\' || quote == '`' {
                out.push(c);
                continue;
            }
            let escaped = match chars.next().map(|(_, e)| e) {
                Some('n') => '\n',
                Some('t') => '\t',
                Some('r') => '\r',
                Some(e @ ('\\' | '"' | '\'')) => e,
                Some('u') => {
                    let hex: String = chars.by_ref().take(4).map(|(_, h)| h).collect();
                    u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32).ok_or_else(|| self.error(&format!("bad escape \\u{hex}")))?
                }
                other => return Err(self.error(&format!("unknown escape \\{}", other.map(String::from).unwrap_or_default()))),
            };
            out.push(escaped);
        }
        Err(self.error("unterminated string"))
    }

    fn constant(&mut self) -> Result<Query, ParseError> {
        let mut sum = 0.0;
        loop {
            if !self.eat("vector") {
                return Err(self.error(&format!("expected a stream selector such as {{job=\"my-job\"}}; {ANSWERED}")));
            }
            self.expect("(")?;
            self.skip_space();
            let len = self.rest().find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '-' | '+' | 'e' | 'E'))).unwrap_or(self.rest().len());
            let n: f64 = self.rest()[..len].parse().map_err(|_| self.error("expected a number"))?;
            self.pos += len;
            self.expect(")")?;
            sum += n;
            if !self.eat("+") {
                return Ok(Query::Constant(sum));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logs(q: &str) -> LogQuery {
        match parse(q) {
            Ok(Query::Logs(l)) => l,
            other => panic!("{q}: {other:?}"),
        }
    }

    fn refused(q: &str) -> String {
        match parse(q) {
            Err(ParseError(m)) => m,
            Ok(other) => panic!("{q} was accepted: {other:?}"),
        }
    }

    #[test]
    fn a_selector_with_every_label_and_operator() {
        let q = logs(r#"{job="llm-7", rank=~"1|2", host!="node3", stream!~"std(out|err)x"}"#);
        assert_eq!(q.fixed(Label::Job), Some("llm-7"));
        assert!(q.selects(Label::Rank, "2") && !q.selects(Label::Rank, "12"), "=~ matches the whole value");
        assert!(q.selects(Label::Host, "node4") && !q.selects(Label::Host, "node3"));
        assert!(q.selects(Label::Stream, "stderr"));
        assert!(q.filters.is_empty());
    }

    #[test]
    fn line_filters_in_order_with_both_string_forms() {
        let q = logs(r#"{job="j"} |= "NCCL WARN" != `timeout` |~ "rank \\d+" !~ "(?i)retry""#);
        assert_eq!(q.filters.len(), 4);
        let keeps = |line: &str| q.filters.iter().all(|f| f.keeps(line));
        assert!(keeps("NCCL WARN on rank 3"));
        assert!(!keeps("NCCL WARN timeout on rank 3"));
        assert!(!keeps("NCCL WARN on rank x"));
        assert!(!keeps("NCCL WARN on rank 3, RETRY"));
    }

    #[test]
    fn escapes_follow_go() {
        let q = logs(r#"{job="j"} |= "a \"quoted\" \\ word\t\u00e9""#);
        assert!(q.filters[0].keeps("say a \"quoted\" \\ word\té!"));
    }

    #[test]
    fn grafanas_connection_test_is_a_constant() {
        assert!(matches!(parse("vector(1)+vector(1)"), Ok(Query::Constant(v)) if v == 2.0));
        assert!(matches!(parse(" vector(2.5) "), Ok(Query::Constant(v)) if v == 2.5));
    }

    #[test]
    fn what_is_not_answered_is_refused_with_where_and_what_is() {
        let m = refused(r#"{job="j"} | json"#);
        assert!(m.starts_with("parse error at line 1, col 11:") && m.contains("|= != |~ !~"), "{m}");
        let m = refused(r#"sum(count_over_time({job="j"}[1m]))"#);
        assert!(m.contains("stream selector"), "{m}");
        assert!(refused(r#"{pod="x"}"#).contains("unknown label \"pod\""));
        assert!(refused("{}").contains("at least one label matcher"));
        assert!(refused(r#"{job="j"} |~ "(""#).contains("bad regex"));
        assert!(refused(r#"{job="j"} |= "open"#).contains("unterminated"));
        assert!(refused(r#"{job="j"} |= "\q""#).contains("unknown escape"));
    }

    #[test]
    fn bounds_hold_before_any_work() {
        assert!(refused(&format!(r#"{{job="{}"}}"#, "x".repeat(MAX_QUERY_BYTES))).contains("bytes"));
        let many = (0..=MAX_FILTERS).map(|_| r#"|= "a""#).collect::<Vec<_>>().join(" ");
        assert!(refused(&format!(r#"{{job="j"}} {many}"#)).contains("line filters"));
        // A regex whose compiled form is over the size limit.
        assert!(refused(r#"{job="j"} |~ `\w{1000}\w{1000}\w{1000}`"#).contains("bad regex"));
    }
}
