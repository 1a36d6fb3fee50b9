//! `coroner-agent`: wraps one rank of a training job (or one node's torchrun), passes its output
//! through unchanged, and ships every line, stamped and sequenced, to coronerd. When the server
//! is away it spools to disk; the training process is never slowed by the network.
//!
//! `coroner-agent run [OPTIONS] -- CMD ARGS...` exits with the child's status: its exit code, or
//! 128+N when signal N killed it, like a shell.

mod capture;
mod clock;
mod collect;
mod gpu_sampler;
mod heartbeat;
mod identity;
mod launcher;
mod queue;
mod replay;
mod shipper;
mod snapshots;
mod spool;
mod wire;

use anyhow::{Context, Result};
use capture::{now_ns, Sequencer};
use clap::{Args, Parser, Subcommand, ValueEnum};
use coroner_model::Stream;
use coroner_proto::v1;
use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Parser)]
#[command(name = "coroner-agent", version, about = "Captures a training rank's output and ships it to coronerd")]
#[command(args_override_self = true)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run CMD, pass its output through, and ship every line.
    Run(RunArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LauncherMode {
    /// A launcher agent when CMD is torchrun (or python -m torch.distributed.run/launch).
    Auto,
    /// Always one rank.
    None,
    /// Always a per-node launcher agent that files lines by their rank prefix.
    Torchrun,
}

#[derive(Args)]
struct RunArgs {
    /// Job id [default: from TORCHELASTIC_RUN_ID, SLURM_JOB_ID, OMPI_MCA_orte_job_id, PMIX_NAMESPACE].
    #[arg(long, env = "CORONER_JOB")]
    job: Option<String>,
    /// Global rank [default: from RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK].
    #[arg(long, env = "CORONER_RANK")]
    rank: Option<u32>,
    /// Local rank [default: from LOCAL_RANK, SLURM_LOCALID, OMPI_COMM_WORLD_LOCAL_RANK].
    #[arg(long, env = "CORONER_LOCAL_RANK")]
    local_rank: Option<u32>,
    /// World size [default: from WORLD_SIZE, SLURM_NTASKS, OMPI_COMM_WORLD_SIZE].
    #[arg(long, env = "CORONER_WORLD_SIZE")]
    world_size: Option<u32>,
    /// coronerd's gRPC address.
    #[arg(long, env = "CORONER_SERVER", default_value = "http://127.0.0.1:7070")]
    server: String,
    /// The write token coronerd was given, sent as `authorization: Bearer <token>` on every call.
    #[arg(long, env = "CORONER_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// A CA certificate (PEM) that an `https://` server's certificate chains to, besides the public roots.
    #[arg(long, env = "CORONER_TLS_CA")]
    tls_ca: Option<PathBuf>,
    /// Where to spool [default: $TMPDIR/coroner-spool].
    #[arg(long, env = "CORONER_SPOOL_DIR")]
    spool_dir: Option<PathBuf>,
    /// The most bytes this agent's spool file may hold. When it is full, lines are held in memory
    /// (a few MiB) until the server acknowledges them; past that, routine lines are dropped before
    /// errors and warnings, and the count of dropped lines is reported with the process end.
    #[arg(long, env = "CORONER_SPOOL_MAX_BYTES", default_value = "1073741824")]
    spool_max_bytes: u64,
    #[arg(long, env = "CORONER_LAUNCHER", value_enum, default_value = "auto")]
    launcher: LauncherMode,
    /// Global rank of this node's local rank 0 [default: from torchrun's --node-rank × --nproc-per-node, else 0].
    #[arg(long, env = "CORONER_NODE_RANK_BASE")]
    node_rank_base: Option<u32>,
    /// Seconds to wait after the child exits for every line to be acknowledged.
    #[arg(long, env = "CORONER_FLUSH_TIMEOUT", default_value = "10", value_parser = parse_seconds)]
    flush_timeout: Duration,
    /// Folder the crash hook writes into (passed to the child as CORONER_SNAPSHOT_DIR) and the
    /// agent watches for snapshots [default: <spool>/<job>/<rank>/snapshots].
    #[arg(long)]
    snapshot_dir: Option<PathBuf>,
    /// Ship at most this many bytes of one snapshot (a core can be gigabytes); its metadata is always sent.
    #[arg(long, env = "CORONER_SNAPSHOT_CAP_BYTES", default_value = "536870912")]
    snapshot_cap_bytes: u64,
    /// Do not switch on the flight recorder, watch for snapshots or collect GPU and kernel state on failure.
    #[arg(long, env = "CORONER_NO_SNAPSHOTS", value_parser = clap::builder::FalseyValueParser::new(), num_args = 0, default_missing_value = "true")]
    no_snapshots: bool,
    /// Seconds between GPU memory samples (`nvidia-smi --query-gpu`), shipped as lines so the
    /// report can show memory climbing before an OOM; 0 turns sampling off.
    #[arg(long, env = "CORONER_GPU_SAMPLE_SECS", default_value = "10", value_parser = parse_seconds)]
    gpu_sample_secs: Duration,
    /// Print errors only.
    #[arg(long, env = "CORONER_QUIET", value_parser = clap::builder::FalseyValueParser::new(), num_args = 0, default_missing_value = "true")]
    quiet: bool,
    /// The command to run.
    #[arg(last = true, required = true, num_args = 1.., value_name = "CMD")]
    command: Vec<OsString>,
}

fn parse_seconds(s: &str) -> Result<Duration, String> {
    let secs: f64 = s.parse().map_err(|e| format!("{e}"))?;
    Duration::try_from_secs_f64(secs).map_err(|e| e.to_string())
}

/// The agent's exit code for the child's status: the code, or 128+signal like a shell.
pub fn exit_code_of(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => 128 + sig,
        (None, None) => 1,
    }
}

fn main() {
    let cli = Cli::parse();
    let Cmd::Run(args) = cli.command;
    init_tracing(args.quiet);
    // A bad token must not stop the training job: the server refuses, the spool keeps the lines.
    if let Err(e) = coroner_proto::auth::set_token(args.token.as_deref()) {
        tracing::error!("--token / CORONER_TOKEN: {e}; shipping without a token");
    }
    if let Err(e) = coroner_proto::auth::set_tls_ca(args.tls_ca.as_deref()) {
        tracing::error!("--tls-ca / CORONER_TLS_CA: {e}; trusting the public roots only");
    }
    let code = match run(args) {
        Ok(code) => code,
        Err(e) => {
            tracing::error!("{e:#}");
            2
        }
    };
    std::process::exit(code);
}

fn init_tracing(quiet: bool) {
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

fn run(args: RunArgs) -> Result<i32> {
    let host = identity::hostname();
    let explicit = identity::Explicit {
        job: args.job.clone(),
        rank: args.rank,
        local_rank: args.local_rank,
        world_size: args.world_size,
    };
    let id = identity::resolve(&explicit, |k| std::env::var(k).ok(), &host)?;
    let is_launcher = match args.launcher {
        LauncherMode::Torchrun => true,
        LauncherMode::None => false,
        LauncherMode::Auto => launcher::is_torchrun(&args.command),
    };
    let node_rank_base = if is_launcher {
        args.node_rank_base.or_else(|| launcher::node_rank_base_from_args(&args.command, |k| std::env::var(k).ok()))
    } else {
        None
    };
    let session_rank = if is_launcher { None } else { id.rank.map(|r| r.0) };
    let pid = std::process::id();
    let instance = format!("{host}-{pid}-{:x}", now_ns()).replace(|c: char| !c.is_ascii_alphanumeric() && c != '-', "_");
    let session = v1::OpenSessionRequest {
        job_id: id.job.to_string(),
        rank: session_rank,
        local_rank: if is_launcher { None } else { id.local_rank },
        world_size: id.world_size,
        host: host.clone(),
        pid,
        launcher: if is_launcher { "torchrun".into() } else { id.launcher.into() },
        versions: Default::default(),
        agent_instance: instance.clone(),
        command: args.command.iter().map(|a| a.to_string_lossy().into_owned()).collect(),
        node_rank_base,
        seq_offset: None,
        seq_lanes: true,
    };

    // The spool: <dir>/<job>/<rank-R | node-HOST>/<instance>.spool.
    let spool_root = args.spool_dir.clone().unwrap_or_else(|| std::env::temp_dir().join("coroner-spool"));
    let key = match session_rank {
        Some(r) => format!("rank-{r}"),
        None => format!("node-{}", host.replace(|c: char| !c.is_ascii_alphanumeric() && c != '-' && c != '.', "_")),
    };
    let key_dir = spool_root.join(id.job.as_str()).join(key);
    let snapshot_dir = args.snapshot_dir.clone().unwrap_or_else(|| key_dir.join("snapshots"));
    let (spool, orphans) = open_spool(&key_dir, &snapshot_dir, &instance, &session, args.spool_max_bytes);
    let fr_dir = key_dir.join("fr");
    if !args.no_snapshots {
        if let Err(e) = std::fs::create_dir_all(&fr_dir) {
            tracing::warn!("create {}: {e}; flight recorder dumps go to PyTorch's default place", fr_dir.display());
        }
    }

    // One thread runs the shipper, the snapshot watcher and the clock probes: the agent sits
    // beside a training process and should cost it as little CPU as possible. The pipes have
    // their own threads, so the child never waits on this one.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().context("start the runtime")?;
    let code = rt.block_on(async {
        let queue = Arc::new(queue::LineQueue::new(QUEUE_LINES, QUEUE_BYTES));
        let (finish_tx, finish_rx) = tokio::sync::mpsc::channel(1);
        let mut shipper = shipper::Shipper::new(shipper::Config::new(args.server.clone()), session, queue.clone(), spool, orphans);
        let connections = shipper.watch_connections();
        let shipper = tokio::spawn(shipper.run(finish_rx));
        let (snap_tx, snap_rx) = tokio::sync::mpsc::channel(16);
        let watcher = (!args.no_snapshots).then(|| {
            let settings = snapshots::Settings {
                watched: vec![
                    snapshots::Watched { dir: snapshot_dir.clone(), folder: "snapshots".into() },
                    snapshots::Watched { dir: fr_dir.clone(), folder: "flight_recorder".into() },
                ],
                cap: args.snapshot_cap_bytes,
                rank: session_rank,
            };
            tokio::spawn(snapshots::run(settings, connections, snap_rx))
        });
        let started = std::time::SystemTime::now();

        let mut sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).context("handle SIGINT")?;
        let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).context("handle SIGTERM")?;

        let mut cmd = Command::new(&args.command[0]);
        cmd.args(&args.command[1..]).stdin(Stdio::inherit()).stdout(Stdio::piped()).stderr(Stdio::piped());
        cmd.env("CORONER_JOB", id.job.as_str()).env("CORONER_SNAPSHOT_DIR", &snapshot_dir);
        if let Some(r) = session_rank {
            cmd.env("CORONER_RANK", r.to_string());
        }
        for var in ["PYTHONUNBUFFERED", "PYTHONFAULTHANDLER"] {
            if std::env::var_os(var).is_none() {
                cmd.env(var, "1");
            }
        }
        if !args.no_snapshots {
            cmd.envs(collect::child_env(&fr_dir, |k| std::env::var(k).ok()));
        }
        // PyTorch's flight recorder dump pipe, for a stack dump while the rank hangs (heartbeat.rs).
        let pipe_prefix = match std::env::var("TORCH_NCCL_DEBUG_INFO_PIPE_FILE") {
            Ok(p) => Some(p),
            Err(_) if !args.no_snapshots && std::fs::create_dir_all(key_dir.join("frpipe")).is_ok() => {
                let p = key_dir.join("frpipe").join("nccl_trace_rank_").display().to_string();
                cmd.env("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", &p);
                Some(p)
            }
            Err(_) => None,
        };
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                tracing::error!("run {}: {e}", args.command[0].to_string_lossy());
                return Ok(if e.kind() == std::io::ErrorKind::NotFound { 127 } else { 126 });
            }
        };
        let child_pid = child.id() as libc::pid_t;
        let beat = session_rank.map(|rank| {
            tokio::spawn(heartbeat::run(heartbeat::Settings {
                server: args.server.clone(),
                job: id.job.to_string(),
                rank,
                pid: child.id(),
                snapshot_dir: snapshot_dir.clone(),
                fr_pipe: pipe_prefix.as_ref().map(|p| PathBuf::from(format!("{p}{rank}.pipe"))),
            }))
        });
        let filer = is_launcher.then(|| launcher::RankFiler::new(node_rank_base.unwrap_or(0)));
        let sequencer = Arc::new(Mutex::new(Sequencer::new(filer, queue.clone())));
        let gpu_sampler = (!args.gpu_sample_secs.is_zero()).then(|| {
            let s = sequencer.clone();
            let local_rank = if is_launcher { None } else { id.local_rank };
            let visible = gpu_sampler::devices_to_sample(std::env::var("CUDA_VISIBLE_DEVICES").ok().as_deref(), local_rank);
            gpu_sampler::Sampler::start(args.gpu_sample_secs, PathBuf::from("nvidia-smi"), visible, move |lines| {
                if let Ok(mut s) = s.lock() {
                    s.accept_all(Stream::File, lines);
                }
            })
        });
        let mut pumps = Vec::new();
        if let Some(out) = child.stdout.take() {
            let s = sequencer.clone();
            pumps.push(std::thread::spawn(move || capture::pump(out, std::io::stdout(), Stream::Stdout, s)));
        }
        if let Some(err) = child.stderr.take() {
            let s = sequencer.clone();
            pumps.push(std::thread::spawn(move || capture::pump(err, std::io::stderr(), Stream::Stderr, s)));
        }

        let mut wait = tokio::task::spawn_blocking(move || child.wait());
        let status = loop {
            tokio::select! {
                s = &mut wait => break s.context("wait for the child")?.context("wait for the child")?,
                _ = sigint.recv() => forward(child_pid, libc::SIGINT),
                _ = sigterm.recv() => forward(child_pid, libc::SIGTERM),
            }
        };
        let at_ns = now_ns();
        if let Some(g) = gpu_sampler {
            tokio::task::spawn_blocking(move || g.stop());
        }
        if let Some(b) = &beat {
            b.abort();
        }
        let code = exit_code_of(status);
        let deadline = tokio::time::Instant::now() + args.flush_timeout;
        // On failure: GPU and kernel state, and core files, gathered while the pipes drain.
        let gather = (watcher.is_some() && code != 0).then(|| {
            let (dir, tx) = (snapshot_dir.clone(), snap_tx.clone());
            let prefix = session_rank.map(|r| format!("rank{r}.")).unwrap_or_default();
            tokio::spawn(async move {
                collect::on_failure(&dir, &prefix, COLLECT_LIMIT).await;
                let pattern = std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap_or_default();
                let cwd = std::env::current_dir().unwrap_or_default();
                if let Some((dir, prefix)) = collect::core_location(&pattern, &cwd) {
                    for path in collect::cores_since(&dir, &prefix, started) {
                        let _ = tx.send(snapshots::Msg::File { path, folder: "core".into() }).await;
                    }
                }
            })
        });

        // Drain the pipes (a grandchild may still hold them open: not past the deadline).
        while !pumps.iter().all(|p| p.is_finished()) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let exit = v1::ProcessExit {
            session_id: String::new(),
            rank: session_rank,
            exit_code: status.code(),
            signal: status.signal(),
            at_ns,
            dropped_lines: 0,
        };
        let _ = finish_tx.send(shipper::Finish { exit, deadline }).await;
        if let Some(g) = gather {
            let _ = tokio::time::timeout(COLLECT_LIMIT + Duration::from_millis(500), g).await;
        }
        let snap_deadline = deadline.max(tokio::time::Instant::now() + Duration::from_secs(1));
        let _ = snap_tx.send(snapshots::Msg::Finish { deadline: snap_deadline }).await;
        match tokio::time::timeout_at(deadline + Duration::from_secs(1), shipper).await {
            Ok(Ok(summary)) => report(&summary),
            _ => tracing::warn!("gave up flushing after {:?}", args.flush_timeout),
        }
        if let Some(w) = watcher {
            match tokio::time::timeout_at(snap_deadline + Duration::from_secs(1), w).await {
                Ok(Ok(s)) => {
                    for f in &s.failed {
                        tracing::warn!("snapshot {f}");
                    }
                }
                _ => tracing::warn!("gave up shipping snapshots"),
            }
        }
        Ok::<i32, anyhow::Error>(code)
    })?;
    // Pipe threads still blocked on a grandchild's pipe must not hold the exit.
    rt.shutdown_timeout(Duration::from_millis(50));
    Ok(code)
}

/// The in-memory queue between the pipes and the shipper, which spools it as fast as the disk
/// takes it: what a burst may hold before a pipe thread waits for room (see `queue.rs`).
const QUEUE_LINES: usize = 32 * 1024;
const QUEUE_BYTES: usize = 4 << 20;

/// How long each failure-time collector (nvidia-smi, dmesg) may take.
const COLLECT_LIMIT: Duration = Duration::from_secs(5);

fn forward(pid: libc::pid_t, sig: libc::c_int) {
    // SAFETY: kill(2) with our child's pid; a failure (already gone) is harmless.
    unsafe {
        libc::kill(pid, sig);
    }
}

fn open_spool(
    key_dir: &Path,
    snapshot_dir: &Path,
    instance: &str,
    session: &v1::OpenSessionRequest,
    max_bytes: u64,
) -> (Option<spool::SpoolWriter>, Vec<(PathBuf, std::fs::File)>) {
    if let Err(e) = std::fs::create_dir_all(key_dir).and_then(|_| std::fs::create_dir_all(snapshot_dir)) {
        tracing::warn!("create the spool folder {}: {e}; lines will be held in memory only", key_dir.display());
        return (None, Vec::new());
    }
    let path = key_dir.join(format!("{instance}.spool"));
    let writer = match spool::SpoolWriter::create(&path, session, max_bytes) {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::warn!("create the spool {}: {e}; lines will be held in memory only", path.display());
            None
        }
    };
    let orphans = spool::orphans(key_dir, &path);
    (writer, orphans)
}

fn report(s: &shipper::Summary) {
    if s.dropped > 0 {
        tracing::warn!("dropped {} lines (the spool was full, or the disk slower than the output; routine lines went before errors and warnings)", s.dropped);
    }
    if s.unacked_lines > 0 || !s.exit_reported {
        match &s.spool_kept {
            Some(p) => tracing::warn!(
                "{} lines not acknowledged by the server; kept in {}",
                s.unacked_lines,
                p.display()
            ),
            None => tracing::error!("{} lines not delivered and not spooled", s.unacked_lines),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_status_maps_like_a_shell() {
        assert_eq!(exit_code_of(ExitStatus::from_raw(0)), 0);
        assert_eq!(exit_code_of(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code_of(ExitStatus::from_raw(9)), 137);
        assert_eq!(exit_code_of(ExitStatus::from_raw(15)), 143);
        // Killed by SIGSEGV with a core dump (0x80 flag).
        assert_eq!(exit_code_of(ExitStatus::from_raw(11 | 0x80)), 139);
    }

    #[test]
    fn cli_takes_the_command_after_double_dash() {
        let cli = Cli::try_parse_from(["coroner-agent", "run", "--job", "j", "--flush-timeout", "1.5", "--", "sh", "-c", "x --y"]).unwrap();
        let Cmd::Run(a) = cli.command;
        assert_eq!(a.command, vec!["sh", "-c", "x --y"]);
        assert_eq!(a.flush_timeout, Duration::from_millis(1500));
        assert!(!a.quiet);
    }
}
