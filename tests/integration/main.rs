//! coroner's integration tests, compiled into one binary.

mod agent_fail_safe;
mod auth;
mod bad_input;
mod compose;
mod end_to_end;
mod golden;
mod hardware;
mod incidents;
mod live;
mod otlp_metrics;
mod query_api;
mod red_team;
mod ring;
mod served;
mod skewed_clocks;
mod slurm;
mod snapshots;
mod storage;
mod takeover;
mod tls;
mod web;
