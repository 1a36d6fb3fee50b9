//! A Loki-compatible read API subset, so Grafana reads coroner's lines with its built-in Loki
//! datasource (no plugin): LogQL stream selectors with line filters (`logql.rs`, pure), the
//! words an index search can narrow them by (`narrow.rs`, pure), their lines from the jobs'
//! indexes (`select.rs`), and Loki's JSON (`response.rs`, pure). The HTTP handlers are
//! `http/loki.rs`; what is answered and how to point Grafana here: docs/GRAFANA.md.

pub mod logql;
pub mod narrow;
pub mod response;
pub mod select;
