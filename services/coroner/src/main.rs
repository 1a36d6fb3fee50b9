//! `coroner`: the command line. `analyze` works offline, in process, with the same pipeline the
//! server runs; the other commands talk to a coronerd over gRPC.

mod analyze;
mod delete;
mod fr;
mod import;
mod outcome;
mod progress_bar;
mod remote;
mod search;
mod snapshot;
mod suspects;
mod term;
mod timeline;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "coroner",
    version,
    about = "Which rank failed first, how, and why: post-mortem log correlation for distributed training",
    after_help = outcome::EXIT_CODES
)]
struct Cli {
    /// The coronerd gRPC address.
    #[arg(long, global = true, env = "CORONER_SERVER", default_value = "http://127.0.0.1:7070")]
    server: String,
    /// The token coronerd was given (`--read-token` for queries, `--write-token` for `import`),
    /// sent as `authorization: Bearer <token>`.
    #[arg(long, global = true, env = "CORONER_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// A CA certificate (PEM) that an `https://` server's certificate chains to, besides the public roots.
    #[arg(long, global = true, env = "CORONER_TLS_CA")]
    tls_ca: Option<PathBuf>,
    /// Print log lines, host names and messages exactly as received, control characters and
    /// escape sequences included (by default they are shown as `\x1b`, never sent raw to the terminal).
    #[arg(long, global = true)]
    raw: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Analyze logs offline: a capture bundle folder, per-rank log files, one combined log, a
    /// single log of any shape (a pod log, a pasted traceback, `dmesg`), a folder mixing these,
    /// or `-` for standard input.
    #[command(after_help = outcome::EXIT_CODES)]
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
        /// Link earlier failures like this one from a metastore: coronerd's database URL
        /// (sqlite:/var/lib/coroner/coroner.db, postgres://...). Read only.
        #[arg(long)]
        history: Option<String>,
    },
    /// Analyze a folder of flight recorder dumps alone (`nccl_trace_rank_<R>` or any
    /// `<prefix><rank>`, pickle or JSON), as `torchfrtrace DIR` would: every collective matched
    /// across ranks, the divergent rank with the rule that named it, and what the dumps cannot say.
    Fr {
        dir: PathBuf,
        /// Print the analysis as JSON (the report's `flight_recorder` section).
        #[arg(long)]
        json: bool,
    },
    /// Send a bundle or log files to coronerd as job ID.
    Import {
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        #[arg(long)]
        job: String,
        /// The host every rank ran on (default: `import`).
        #[arg(long)]
        host: Option<String>,
        /// Per-rank hosts: RANK=HOST or FIRST-LAST=HOST, comma-separated or repeated (0-3=node-a,4-7=node-b).
        #[arg(long)]
        host_map: Vec<String>,
    },
    /// Print a job's report from coronerd.
    #[command(after_help = outcome::EXIT_CODES)]
    Report {
        job: String,
        #[arg(long)]
        json: bool,
    },
    /// Delete a job from coronerd: its lines, report and snapshots (the write token). Asks first
    /// unless --yes; exits 0 when deleted, 1 when not confirmed, 2 on an error.
    Delete {
        job: String,
        /// Delete without asking.
        #[arg(long, short = 'y')]
        yes: bool,
        /// Delete it even while it is running (agents still shipping would create it again).
        #[arg(long)]
        force: bool,
    },
    /// List the jobs coronerd knows.
    Jobs {
        #[arg(long)]
        json: bool,
    },
    /// Search a job's lines (tantivy query syntax); times are on the job's aligned clock.
    #[command(after_help = outcome::EXIT_CODES)]
    Search {
        job: String,
        query: String,
        #[arg(long)]
        rank: Option<u32>,
        /// Only lines captured on this host.
        #[arg(long)]
        host: Option<String>,
        /// stdout, stderr or file.
        #[arg(long)]
        stream: Option<String>,
        /// Only lines the analysis read as this event class (watchdog_timeout, exception, nccl_warn, ...).
        #[arg(long)]
        kind: Option<String>,
        /// Aligned time, RFC 3339 (2024-05-01T12:00:00Z).
        #[arg(long)]
        since: Option<String>,
        #[arg(long)]
        until: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: u32,
        /// Continue after a previous page (the cursor it printed).
        #[arg(long, conflicts_with = "follow")]
        cursor: Option<String>,
        /// Also print N lines before and after each hit on its rank and stream (at most 50),
        /// grep's way: `-` after a context line's stream, `:` after a hit's, `--` between groups.
        #[arg(long, short = 'C', default_value_t = 0)]
        context: u32,
        /// Print the newest page, then every new hit until the job ends (exit status: its
        /// verdict's, as `report`) or Ctrl-C.
        #[arg(long, short = 'f', conflicts_with = "until")]
        follow: bool,
        /// Print JSON: {hits: [{rank, time, host, stream, seq, line, context}], total, next_cursor};
        /// with --follow one hit object per line.
        #[arg(long)]
        json: bool,
    },
    /// How many lines match a query on each rank ("which ranks printed NCCL WARN").
    Count {
        job: String,
        #[arg(default_value = "")]
        query: String,
        #[arg(long)]
        json: bool,
    },
    /// The job's timeline as swimlanes in the terminal: ranks (or hosts) against aligned time.
    Timeline {
        job: String,
        /// Columns for the time axis.
        #[arg(long)]
        width: Option<usize>,
        /// One lane per host instead of per rank (automatic for large jobs).
        #[arg(long)]
        by_host: bool,
        #[arg(long)]
        json: bool,
    },
    /// Print the job's verdict now and on every change, until the server goes away.
    #[command(after_help = outcome::EXIT_CODES)]
    Watch {
        job: String,
        /// One JSON object per update.
        #[arg(long)]
        json: bool,
        /// Stop at the first verdict that is not `running` (the job failed or ended) and exit
        /// with its code.
        #[arg(long)]
        until_done: bool,
    },
    /// Hosts and GPUs whose root-cause failures across jobs stand out (drain candidates), with the evidence.
    Suspects {
        /// Only failures since this time: an RFC 3339 time or how long ago (7d, 24h, 90m).
        #[arg(long)]
        since: Option<String>,
        /// Also list hosts and GPUs with failures that are not flagged.
        #[arg(long)]
        all: bool,
        #[arg(long)]
        json: bool,
    },
    /// A job's snapshots: list them, or download one by its sha256.
    Snapshot {
        #[command(subcommand)]
        command: SnapshotCommand,
    },
}

#[derive(Subcommand)]
enum SnapshotCommand {
    /// List the job's snapshots.
    List {
        job: String,
        #[arg(long)]
        json: bool,
    },
    /// Download one snapshot's stored bytes.
    Get {
        job: String,
        sha256: String,
        #[arg(short, long)]
        output: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    term::set_raw(cli.raw);
    let auth = match coroner_proto::auth::ClientAuth::default().with_token(cli.token.as_deref()) {
        Ok(auth) => auth,
        Err(e) => {
            crate::say_err!("coroner: --token: {e}");
            return ExitCode::from(2);
        }
    };
    let auth = match auth.with_tls_ca(cli.tls_ca.as_deref()) {
        Ok(auth) => auth,
        Err(e) => {
            crate::say_err!("coroner: --tls-ca: {e}");
            return ExitCode::from(2);
        }
    };
    let server = remote::Server { url: cli.server, auth };
    let result = match cli.command {
        Command::Analyze { paths, json, job, rules, history } => analyze::run(&paths, json, job, rules.as_deref(), history.as_deref()),
        Command::Fr { dir, json } => fr::run(&dir, json),
        Command::Import { paths, job, host, host_map } => {
            import::Hosts::parse(host, &host_map).and_then(|hosts| runtime().and_then(|rt| rt.block_on(import::run(&server, &paths, &job, &hosts))))
        }
        Command::Suspects { since, all, json } => runtime().and_then(|rt| rt.block_on(suspects::run(&server, since.as_deref(), all, json))),
        Command::Report { job, json } => runtime().and_then(|rt| rt.block_on(remote::report(&server, &job, json))),
        Command::Delete { job, yes, force } => runtime().and_then(|rt| rt.block_on(delete::run(&server, &job, yes, force))),
        Command::Jobs { json } => runtime().and_then(|rt| rt.block_on(remote::jobs(&server, json))),
        Command::Search { job, query, rank, host, stream, kind, since, until, limit, cursor, context, follow, json } => {
            let args = search::SearchArgs { query, rank, host, stream, kind, since, until, limit, cursor, context, follow, json };
            runtime().and_then(|rt| rt.block_on(search::search(&server, &job, args)))
        }
        Command::Count { job, query, json } => runtime().and_then(|rt| rt.block_on(remote::count(&server, &job, &query, json))),
        Command::Timeline { job, width, by_host, json } => runtime().and_then(|rt| rt.block_on(timeline::run(&server, &job, width, by_host, json))),
        Command::Watch { job, json, until_done } => runtime().and_then(|rt| rt.block_on(remote::watch(&server, &job, json, until_done))),
        Command::Snapshot { command: SnapshotCommand::List { job, json } } => runtime().and_then(|rt| rt.block_on(snapshot::list(&server, &job, json))),
        Command::Snapshot { command: SnapshotCommand::Get { job, sha256, output } } => {
            runtime().and_then(|rt| rt.block_on(snapshot::get(&server, &job, &sha256, &output)))
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            crate::say_err!("coroner: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?)
}
