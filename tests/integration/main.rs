//! coroner's integration tests, compiled into one binary.

mod agent_fail_safe;
mod api_conventions;
mod auth;
mod bad_input;
mod big_job;
mod cdp;
mod compose;
mod end_to_end;
mod golden;
mod hardware;
mod incidents;
mod live;
mod loki_api;
mod multinode;
mod notify;
mod otlp_http;
mod otlp_metrics;
mod postgres;
mod python_client;
mod query_api;
mod red_team;
mod ring;
mod search_context;
mod served;
mod skewed_clocks;
mod slurm;
mod snapshots;

mod storage;
mod store_lost;
mod takeover;
mod tls;
mod web;
mod web_live;
