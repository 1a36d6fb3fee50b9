//! `coroner`: the command line. `analyze` works offline, in process, with the same pipeline the
//! server runs; the other commands talk to a coronerd over gRPC.

mod analyze;
mod import;
mod remote;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "coroner", version, about = "Which rank failed first, how, and why: post-mortem log correlation for distributed training")]
struct Cli {
    /// The coronerd gRPC address.
    #[arg(long, global = true, env = "CORONER_SERVER", default_value = "http://127.0.0.1:7070")]
    server: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Analyze logs offline: a capture bundle folder, per-rank log files, or one combined log.
    Analyze {
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// The job id to put in the report (default: the first path's name).
        #[arg(long)]
        job: Option<String>,
        /// A rules file tried before the shipped rules.
        #[arg(long, env = "CORONER_RULES")]
        rules: Option<PathBuf>,
    },
    /// Send a bundle or log files to coronerd as job ID.
    Import {
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        #[arg(long)]
        job: String,
    },
    /// Print a job's report from coronerd.
    Report {
        job: String,
        #[arg(long)]
        json: bool,
    },
    /// List the jobs coronerd knows.
    Jobs {
        #[arg(long)]
        json: bool,
    },
    /// Search a job's lines (tantivy query syntax).
    Search {
        job: String,
        query: String,
        #[arg(long)]
        rank: Option<u32>,
        #[arg(long, default_value_t = 100)]
        limit: u32,
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Analyze { paths, json, job, rules } => analyze::run(&paths, json, job, rules.as_deref()),
        Command::Import { paths, job } => runtime().and_then(|rt| rt.block_on(import::run(&cli.server, &paths, &job))),
        Command::Report { job, json } => runtime().and_then(|rt| rt.block_on(remote::report(&cli.server, &job, json))),
        Command::Jobs { json } => runtime().and_then(|rt| rt.block_on(remote::jobs(&cli.server, json))),
        Command::Search { job, query, rank, limit, json } => {
            runtime().and_then(|rt| rt.block_on(remote::search(&cli.server, &job, &query, rank, limit, json)))
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("coroner: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?)
}
