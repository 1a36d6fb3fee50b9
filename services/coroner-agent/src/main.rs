//! `coroner-agent`: wraps one rank of a training job (or one node's torchrun), passes its output
//! through unchanged, and ships every line, stamped and sequenced, to coronerd. When the server
//! is away it spools to disk; the training process is never slowed by the network, and never
//! stopped by the agent: whatever goes wrong with the agent, the command runs as if unwrapped.
//!
//! `coroner-agent run [OPTIONS] -- CMD ARGS...` exits with the child's status: its exit code, or
//! 128+N when signal N killed it, like a shell. It runs as two processes (`supervisor.rs`: the
//! child, the pass-through and the wait; `shipping.rs`: everything that talks to the world).
//! `coroner-agent ship --spool-dir DIR` sends what earlier agents left in their spools.

mod capture;
mod chunks;
mod clock;
mod collect;
mod connection;
mod feed;
mod gpu_sampler;
mod heartbeat;
mod identity;
mod launcher;
mod leftover;
mod outbox;
mod plan;
mod queue;
mod relay;
mod replay;
mod seq_base;
mod shipper;
mod shipping;
mod snapshot_upload;
mod snapshots;
mod spool;
mod supervisor;
mod wire;

use clap::{Args, Parser, Subcommand};
use std::ffi::OsString;
use std::path::PathBuf;

#[derive(Parser)]
#[command(name = "coroner-agent", version, about = "Captures a training rank's output and ships it to coronerd")]
#[command(args_override_self = true)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Cmd,
}

#[derive(Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once per process; boxing `RunArgs` buys nothing
pub(crate) enum Cmd {
    /// Run CMD, pass its output through, and ship every line.
    Run(RunArgs),
    /// Send the lines and process ends that earlier agents left in their spools (a Slurm epilog
    /// can run this); exits 0 when nothing is left, 1 when some spool could not be delivered.
    Ship(ShipArgs),
    /// The shipper process `run` starts (not for direct use).
    #[command(hide = true)]
    Shipper,
}

/// Settings that take numbers, sizes or durations are read as text and parsed by `plan.rs`: a
/// value that does not parse (in a flag or in the environment) becomes a warning and the
/// default, never a refusal to run the command.
#[derive(Args)]
pub(crate) struct RunArgs {
    /// Job id [default: from TORCHELASTIC_RUN_ID, SLURM_JOB_ID(_SLURM_STEP_ID), OMPI_MCA_orte_job_id,
    /// PMIX_NAMESPACE; else made up from the host, the launcher and the start time, and printed].
    #[arg(long, env = "CORONER_JOB")]
    pub(crate) job: Option<String>,
    /// Global rank [default: from RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK; 0 in a one-process job].
    #[arg(long, env = "CORONER_RANK")]
    pub(crate) rank: Option<String>,
    /// Local rank [default: from LOCAL_RANK, SLURM_LOCALID, OMPI_COMM_WORLD_LOCAL_RANK].
    #[arg(long, env = "CORONER_LOCAL_RANK")]
    pub(crate) local_rank: Option<String>,
    /// World size [default: from WORLD_SIZE, SLURM_NTASKS, OMPI_COMM_WORLD_SIZE].
    #[arg(long, env = "CORONER_WORLD_SIZE")]
    pub(crate) world_size: Option<String>,
    /// The host name to report, the machine `coroner suspects` would drain [default: SLURMD_NODENAME,
    /// else the hostname; in a Kubernetes pod, set it from the pod's spec.nodeName].
    #[arg(long, env = "CORONER_HOST")]
    pub(crate) host: Option<String>,
    #[command(flatten)]
    pub(crate) to: ServerArgs,
    /// Where to spool [default: $TMPDIR/coroner-spool].
    #[arg(long, env = "CORONER_SPOOL_DIR")]
    pub(crate) spool_dir: Option<PathBuf>,
    /// The most bytes this agent's spool file may hold (a number, or `64MiB`, `1GiB`) [default: 1GiB].
    /// When it is full, lines are held in memory (a few MiB) until the server acknowledges them;
    /// past that, routine lines are dropped before errors and warnings, and the count of dropped
    /// lines is reported with the process end.
    #[arg(long, env = "CORONER_SPOOL_MAX_BYTES")]
    pub(crate) spool_max_bytes: Option<String>,
    /// `auto` (a per-node launcher agent when CMD is torchrun, python -m torch.distributed.run/launch, accelerate launch or deepspeed),
    /// `none` (always one rank) or `torchrun` (always a per-node agent filing lines by rank prefix).
    #[arg(long, env = "CORONER_LAUNCHER")]
    pub(crate) launcher: Option<String>,
    /// Global rank of this node's local rank 0 [default: from torchrun's --node-rank × --nproc-per-node, else 0].
    #[arg(long, env = "CORONER_NODE_RANK_BASE")]
    pub(crate) node_rank_base: Option<String>,
    /// How long to wait after the child exits for the server to acknowledge what is left (`2s`,
    /// `500ms`, or seconds); the rest stays in the spool [default: 2s]. No wait at all when the
    /// server cannot be reached.
    #[arg(long, alias = "flush-timeout", env = "CORONER_LINGER")]
    pub(crate) linger: Option<String>,
    /// Folder the crash hook writes into (passed to the child as CORONER_SNAPSHOT_DIR) and the
    /// agent watches for snapshots [default: <spool>/<job>/<rank>/snapshots].
    #[arg(long)]
    pub(crate) snapshot_dir: Option<PathBuf>,
    /// Ship at most this many bytes of one snapshot (a core can be gigabytes); its metadata is always sent [default: 512MiB].
    #[arg(long, env = "CORONER_SNAPSHOT_CAP_BYTES")]
    pub(crate) snapshot_cap_bytes: Option<String>,
    /// Do not switch on the flight recorder, watch for snapshots or collect GPU and kernel state on failure.
    #[arg(long, env = "CORONER_NO_SNAPSHOTS", value_parser = clap::builder::FalseyValueParser::new(), num_args = 0, default_missing_value = "true")]
    pub(crate) no_snapshots: bool,
    /// Time between GPU memory samples (`nvidia-smi --query-gpu`), shipped as lines so the
    /// report can show memory climbing before an OOM; 0 turns sampling off [default: 10s].
    #[arg(long, env = "CORONER_GPU_SAMPLE_SECS")]
    pub(crate) gpu_sample_secs: Option<String>,
    /// Print errors only.
    #[arg(long, env = "CORONER_QUIET", value_parser = clap::builder::FalseyValueParser::new(), num_args = 0, default_missing_value = "true")]
    pub(crate) quiet: bool,
    /// The command to run.
    #[arg(last = true, required = true, num_args = 1.., value_name = "CMD")]
    pub(crate) command: Vec<OsString>,
}

/// Where the lines go, for `run` and `ship` alike.
#[derive(Args)]
pub(crate) struct ServerArgs {
    /// coronerd's gRPC address, or several separated by commas.
    #[arg(long, env = "CORONER_SERVER", default_value = "http://127.0.0.1:7070")]
    pub(crate) server: String,
    /// The write token coronerd was given, sent as `authorization: Bearer <token>` on every call
    /// (never passed on to the command `run` wraps).
    #[arg(long, env = "CORONER_TOKEN", hide_env_values = true)]
    pub(crate) token: Option<String>,
    /// A CA certificate (PEM) that an `https://` server's certificate chains to, besides the public roots.
    #[arg(long, env = "CORONER_TLS_CA")]
    pub(crate) tls_ca: Option<PathBuf>,
}

#[derive(Args)]
pub(crate) struct ShipArgs {
    /// The spool folder the agents used [default: $TMPDIR/coroner-spool].
    #[arg(long, env = "CORONER_SPOOL_DIR")]
    pub(crate) spool_dir: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) to: ServerArgs,
    /// Print errors only.
    #[arg(long)]
    pub(crate) quiet: bool,
}

fn main() {
    let argv: Vec<OsString> = std::env::args_os().collect();
    let cli = match Cli::try_parse_from(&argv) {
        Ok(cli) => cli,
        Err(e) => match command_to_run_anyway(&argv, &e) {
            Some(command) => {
                // The agent's own arguments are wrong; the job is not: run it without the agent.
                let first = e.to_string().lines().next().unwrap_or_default().trim_start_matches("error: ").to_string();
                eprintln!("coroner-agent: warning: {first}; running the command without coroner");
                std::process::exit(supervisor::run_unwrapped(&command));
            }
            None => e.exit(),
        },
    };
    let code = match cli.command {
        Cmd::Run(args) => {
            init_tracing(args.quiet);
            let plan = plan::Plan::resolve(&args, |k| std::env::var(k).ok(), &identity::hostname(), std::process::id(), coroner_model::now_ns());
            for note in &plan.notes {
                tracing::warn!("{note}");
            }
            supervisor::run(plan, &args.command)
        }
        Cmd::Ship(args) => {
            init_tracing(args.quiet);
            leftover::run(&args)
        }
        Cmd::Shipper => shipping::run(),
    };
    std::process::exit(code);
}

/// For `coroner-agent run ... -- CMD` whose options clap refused: CMD, to run unwrapped.
fn command_to_run_anyway(argv: &[OsString], e: &clap::Error) -> Option<Vec<OsString>> {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand) {
        return None;
    }
    if argv.get(1).map(|a| a.as_os_str()) != Some("run".as_ref()) {
        return None;
    }
    let dashes = argv.iter().position(|a| a == "--")?;
    let command = argv[dashes + 1..].to_vec();
    (!command.is_empty()).then_some(command)
}

pub(crate) fn init_tracing(quiet: bool) {
    use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, Writer};
    use tracing_subscriber::fmt::FmtContext;
    use tracing_subscriber::registry::LookupSpan;
    struct Compact;
    impl<S, N> FormatEvent<S, N> for Compact
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a>,
        N: for<'a> FormatFields<'a> + 'static,
    {
        fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut w: Writer<'_>, ev: &tracing::Event<'_>) -> std::fmt::Result {
            write!(w, "coroner-agent: ")?;
            match *ev.metadata().level() {
                tracing::Level::ERROR => write!(w, "error: ")?,
                tracing::Level::WARN => write!(w, "warning: ")?,
                _ => {}
            }
            ctx.format_fields(w.by_ref(), ev)?;
            writeln!(w)
        }
    }
    let default = if quiet { "error" } else { "info" };
    let filter = tracing_subscriber::EnvFilter::try_from_env("CORONER_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("{default},h2=warn,tower=warn,hyper=warn")));
    tracing_subscriber::fmt().with_writer(std::io::stderr).with_env_filter(filter).event_format(Compact).init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_takes_the_command_after_double_dash() {
        let cli = Cli::try_parse_from(["coroner-agent", "run", "--job", "j", "--linger", "1.5", "--", "sh", "-c", "x --y"]).unwrap();
        let Cmd::Run(a) = cli.command else { panic!("run") };
        assert_eq!(a.command, vec!["sh", "-c", "x --y"]);
        assert_eq!(a.linger.as_deref(), Some("1.5"));
        assert!(!a.quiet);
    }

    #[test]
    fn a_command_runs_even_when_the_agents_own_options_are_wrong() {
        let argv: Vec<OsString> = ["coroner-agent", "run", "--no-such-flag", "--", "python", "train.py"].map(OsString::from).to_vec();
        let e = Cli::try_parse_from(&argv).err().unwrap();
        assert_eq!(command_to_run_anyway(&argv, &e), Some(vec![OsString::from("python"), OsString::from("train.py")]));
        let argv: Vec<OsString> = ["coroner-agent", "run", "--no-such-flag"].map(OsString::from).to_vec();
        let e = Cli::try_parse_from(&argv).err().unwrap();
        assert_eq!(command_to_run_anyway(&argv, &e), None, "no command: a plain usage error");
    }
}
