//! What one `coroner-agent run` will do, decided once from its flags and environment: who it
//! speaks for, where it spools, what the child's environment gains and loses, and every setting
//! the shipper process needs. The supervisor makes the plan and hands it to the shipper as the
//! first record of the feed (`feed.rs`), so both processes act on the same decisions.
//!
//! Nothing here can fail: the agent must run the command whatever its settings say. A value that
//! does not parse becomes its default, a missing identity a made-up one, and each such decision a
//! warning (printed on stderr, and sent to the report with the session).

use crate::identity;
use crate::launcher;
use crate::RunArgs;
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

/// The spool's default size limit (1 GiB).
pub const DEFAULT_SPOOL_MAX_BYTES: u64 = 1 << 30;
/// A snapshot's default upload cap (512 MiB).
pub const DEFAULT_SNAPSHOT_CAP_BYTES: u64 = 512 << 20;
/// How long the agent waits for acknowledgements after the child exits, by default.
pub const DEFAULT_LINGER: Duration = Duration::from_secs(2);
/// GPU memory sampling interval, by default.
pub const DEFAULT_GPU_SAMPLE: Duration = Duration::from_secs(10);

/// Environment variables that hold secrets of the agent's and never reach the child.
const SECRET_VARS: &[&str] = &["CORONER_TOKEN", "CORONER_WRITE_TOKEN", "CORONER_READ_TOKEN"];

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Plan {
    pub job: String,
    /// The rank this agent speaks for; `None` for a per-node launcher agent (and for a rank that
    /// nothing names in a job of several processes: its lines are then filed by their prefixes).
    pub rank: Option<u32>,
    pub local_rank: Option<u32>,
    pub world_size: Option<u32>,
    pub host: String,
    /// `torchrun` for a launcher agent, else what the environment reveals (`slurm`, `none`, ...).
    pub launcher: String,
    pub is_launcher: bool,
    pub node_rank_base: Option<u32>,
    /// The job's attempt this run belongs to, when the environment counts restarts
    /// (`identity::restart_count`): 0 for the first start.
    #[serde(default)]
    pub attempt: Option<u32>,
    pub command: Vec<String>,
    /// This agent instance (host, pid, start): names its spool file and its lane of numbers.
    pub instance: String,
    pub server: String,
    pub token: Option<String>,
    pub tls_ca: Option<PathBuf>,
    /// `<spool>/<job>/<rank-R | node-HOST>`: this rank's spool files and snapshot folders.
    pub key_dir: PathBuf,
    pub spool_max_bytes: u64,
    pub snapshots: bool,
    pub snapshot_dir: PathBuf,
    pub fr_dir: PathBuf,
    /// PyTorch's flight recorder dump pipe prefix, when the agent set or found one.
    pub fr_pipe_prefix: Option<String>,
    pub snapshot_cap_bytes: u64,
    pub gpu_sample_ms: u64,
    pub cuda_visible_devices: Option<String>,
    pub linger_ms: u64,
    pub quiet: bool,
    /// When the agent started, ns since the epoch (cores newer than this are the child's).
    pub started_ns: i64,
    /// The child's pid, once it runs.
    pub child_pid: u32,
    /// The agent's own problems, for the report (each was printed on stderr too).
    pub notes: Vec<String>,
}

impl Plan {
    /// Decides everything from the flags and the environment. The warnings are also in `notes`.
    /// `gethostname` is the machine's own name; `--host`, `CORONER_HOST` or `SLURMD_NODENAME`
    /// replace it (`identity::host_name`).
    pub fn resolve(args: &RunArgs, env: impl Fn(&str) -> Option<String>, gethostname: &str, pid: u32, started_ns: i64) -> Plan {
        let mut notes = Vec::new();
        let host = &identity::host_name(args.host.as_deref(), &env, gethostname);
        let id = identify(args, &env, host, pid, started_ns, &mut notes);
        let attempt = attempt(&env, id.job.as_str(), &mut notes);
        let command: Vec<OsString> = args.command.clone();
        let is_launcher = launcher_mode(args.launcher.as_deref(), &command, &mut notes);
        let node_rank_base = if is_launcher {
            number(args.node_rank_base.as_deref(), "--node-rank-base / CORONER_NODE_RANK_BASE", &mut notes)
                .or_else(|| launcher::node_rank_base_from_args(&command, &env))
        } else {
            None
        };
        let rank = own_rank(is_launcher, &id, &mut notes);
        let key_dir = key_dir(args.spool_dir.as_deref(), id.job.as_str(), rank, host);
        let snapshot_dir = args.snapshot_dir.clone().unwrap_or_else(|| key_dir.join("snapshots"));
        let fr_dir = key_dir.join("fr");
        let linger = args
            .linger
            .clone()
            .or_else(|| env("CORONER_FLUSH_TIMEOUT"))
            .and_then(|v| duration(&v, "--linger / CORONER_LINGER", &mut notes))
            .unwrap_or(DEFAULT_LINGER);
        let gpu_sample =
            args.gpu_sample_secs.as_deref().and_then(|v| duration(v, "--gpu-sample-secs / CORONER_GPU_SAMPLE_SECS", &mut notes)).unwrap_or(DEFAULT_GPU_SAMPLE);
        let spool_max_bytes =
            args.spool_max_bytes.as_deref().and_then(|v| size(v, "--spool-max-bytes / CORONER_SPOOL_MAX_BYTES", &mut notes)).unwrap_or(DEFAULT_SPOOL_MAX_BYTES);
        let snapshot_cap_bytes = args
            .snapshot_cap_bytes
            .as_deref()
            .and_then(|v| size(v, "--snapshot-cap-bytes / CORONER_SNAPSHOT_CAP_BYTES", &mut notes))
            .unwrap_or(DEFAULT_SNAPSHOT_CAP_BYTES);

        Plan {
            job: id.job.to_string(),
            rank,
            local_rank: if is_launcher { None } else { id.local_rank },
            world_size: id.world_size,
            host: host.to_string(),
            launcher: if is_launcher { "torchrun".into() } else { id.launcher.into() },
            is_launcher,
            node_rank_base,
            attempt,
            command: command.iter().map(|a| a.to_string_lossy().into_owned()).collect(),
            instance: safe_name(&format!("{host}-{pid}-{started_ns:x}")),
            server: args.to.server.clone(),
            token: args.to.token.clone().filter(|t| !t.is_empty()),
            tls_ca: args.to.tls_ca.clone(),
            key_dir,
            spool_max_bytes,
            snapshots: !args.no_snapshots,
            snapshot_dir,
            fr_dir,
            fr_pipe_prefix: None,
            snapshot_cap_bytes,
            gpu_sample_ms: u64::try_from(gpu_sample.as_millis()).unwrap_or(u64::MAX),
            cuda_visible_devices: env("CUDA_VISIBLE_DEVICES"),
            linger_ms: u64::try_from(linger.as_millis()).unwrap_or(u64::MAX),
            quiet: args.quiet,
            started_ns,
            child_pid: 0,
            notes,
        }
    }

    pub fn linger(&self) -> Duration {
        Duration::from_millis(self.linger_ms)
    }

    /// What the child's environment gains and loses: its identity, where the crash hook writes,
    /// unbuffered Python with faulthandler (unless the user chose otherwise), the flight recorder
    /// settings, and never the agent's token.
    pub fn child_env(&self, env: impl Fn(&str) -> Option<String>, all_names: impl Iterator<Item = String>) -> ChildEnv {
        let mut set = vec![("CORONER_JOB".to_string(), self.job.clone()), ("CORONER_SNAPSHOT_DIR".to_string(), self.snapshot_dir.display().to_string())];
        if let Some(r) = self.rank {
            set.push(("CORONER_RANK".into(), r.to_string()));
        }
        for var in ["PYTHONUNBUFFERED", "PYTHONFAULTHANDLER"] {
            if env(var).is_none() {
                set.push((var.into(), "1".into()));
            }
        }
        if self.snapshots {
            set.extend(crate::collect::child_env(&self.fr_dir, &env));
        }
        if let Some(p) = &self.fr_pipe_prefix {
            if env("TORCH_NCCL_DEBUG_INFO_PIPE_FILE").is_none() {
                set.push(("TORCH_NCCL_DEBUG_INFO_PIPE_FILE".into(), p.clone()));
            }
        }
        let remove = all_names.filter(|name| is_secret(name)).collect();
        ChildEnv { set, remove }
    }
}

/// Changes to the child's environment.
#[derive(Debug, Default, PartialEq)]
pub struct ChildEnv {
    pub set: Vec<(String, String)>,
    pub remove: Vec<String>,
}

/// Whether an environment variable holds one of coroner's secrets (a token the child must not
/// see: a script that prints its environment would put it in the logs that read users search).
pub fn is_secret(name: &str) -> bool {
    SECRET_VARS.contains(&name) || (name.starts_with("CORONER_") && (name.contains("TOKEN") || name.contains("SECRET")))
}

fn number(value: Option<&str>, what: &str, notes: &mut Vec<String>) -> Option<u32> {
    let v = value?.trim();
    if v.is_empty() {
        return None;
    }
    match v.parse() {
        Ok(n) => Some(n),
        Err(_) => {
            notes.push(format!("{what} {v:?} is not a number; ignored"));
            None
        }
    }
}

/// Who this agent speaks for: the flags first, then the launcher's environment, else made up.
fn identify(args: &RunArgs, env: &impl Fn(&str) -> Option<String>, host: &str, pid: u32, started_ns: i64, notes: &mut Vec<String>) -> identity::Identity {
    let explicit = identity::Explicit {
        job: args.job.clone(),
        rank: number(args.rank.as_deref(), "--rank / CORONER_RANK", notes),
        local_rank: number(args.local_rank.as_deref(), "--local-rank / CORONER_LOCAL_RANK", notes),
        world_size: number(args.world_size.as_deref(), "--world-size / CORONER_WORLD_SIZE", notes),
    };
    let (id, warnings) = identity::resolve(&explicit, env, host, &stamp(started_ns), pid);
    notes.extend(warnings);
    id
}

/// A job the launcher restarted (a Slurm requeue, a torchrun restart, a JobSet restart) keeps its
/// job id, so every attempt's lines share one job; the session says which attempt this is
/// (`OpenSessionRequest.attempt`), and a note says which variable counted it.
fn attempt(env: &impl Fn(&str) -> Option<String>, job: &str, notes: &mut Vec<String>) -> Option<u32> {
    let (var, n) = identity::restart_count(env, notes)?;
    if n > 0 {
        notes.push(format!("this is restart {n} of job {job} ({var}={n}): attempt {n}, which the report tells apart from the earlier ones"));
    }
    Some(n)
}

/// Whether the agent speaks for a whole node's launcher (`--launcher auto|none|torchrun`).
fn launcher_mode(flag: Option<&str>, command: &[OsString], notes: &mut Vec<String>) -> bool {
    match flag.map(str::trim) {
        None | Some("") | Some("auto") => launcher::is_node_launcher(command),
        Some("none") => false,
        Some("torchrun") => true,
        Some(other) => {
            notes.push(format!("--launcher / CORONER_LAUNCHER {other:?} is not auto, none or torchrun; using auto"));
            launcher::is_node_launcher(command)
        }
    }
}

/// The rank of the session. A process that nothing names a rank: in a one-process job it is
/// rank 0; in a larger job its lines are filed by their own prefixes (a per-node session).
fn own_rank(is_launcher: bool, id: &identity::Identity, notes: &mut Vec<String>) -> Option<u32> {
    match (is_launcher, id.rank) {
        (true, _) => None,
        (false, Some(r)) => Some(r.0),
        (false, None) if id.world_size.unwrap_or(1) <= 1 => Some(0),
        (false, None) => {
            notes.push(format!(
                "no rank (none of --rank, RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK) in a job of {} \
                 processes; lines are filed by their rank prefixes",
                id.world_size.unwrap_or(0)
            ));
            None
        }
    }
}

/// `<spool>/<job>/<rank-R | node-HOST>`.
fn key_dir(spool_dir: Option<&std::path::Path>, job: &str, rank: Option<u32>, host: &str) -> PathBuf {
    let spool_root = spool_dir.map_or_else(|| std::env::temp_dir().join("coroner-spool"), std::path::Path::to_path_buf);
    let key = match rank {
        Some(r) => format!("rank-{r}"),
        None => format!("node-{}", safe_name(host)),
    };
    spool_root.join(job).join(key)
}

fn duration(v: &str, what: &str, notes: &mut Vec<String>) -> Option<Duration> {
    match coroner_model::parse_duration(v) {
        Ok(d) => Some(d),
        Err(e) => {
            notes.push(format!("{what}: {e}; using the default"));
            None
        }
    }
}

/// A size in bytes: a number, or one with a unit (`64MiB`, `1 GB`); the one syntax of every flag.
pub use coroner_model::parse_size;

fn size(v: &str, what: &str, notes: &mut Vec<String>) -> Option<u64> {
    match parse_size(v) {
        Ok(n) => Some(n),
        Err(e) => {
            notes.push(format!("{what} {v:?} is not a size ({e}); using the default"));
            None
        }
    }
}

/// A name safe for a file and a job id: letters, digits, `-`, `.` and `_`.
fn safe_name(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '_' }).collect()
}

/// `YYYYmmddTHHMMSS` in UTC.
fn stamp(ns: i64) -> String {
    chrono::DateTime::from_timestamp(ns.div_euclid(1_000_000_000), 0).map(|t| t.format("%Y%m%dT%H%M%S").to_string()).unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use clap::Parser;
    use std::collections::HashMap;

    /// A plan as a plain run in a torchrun worker's environment would make.
    pub(crate) fn a_plan() -> Plan {
        let a = args(&["coroner-agent", "run", "--", "python", "train.py"]);
        Plan::resolve(&a, env_of(&[("TORCHELASTIC_RUN_ID", "r1"), ("RANK", "3"), ("WORLD_SIZE", "8")]), "vm", 7, NS)
    }

    fn args(argv: &[&str]) -> RunArgs {
        let cli = crate::Cli::try_parse_from(argv).unwrap();
        match cli.command {
            crate::Cmd::Run(a) => a,
            _ => panic!("not run"),
        }
    }

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| map.get(k).cloned()
    }

    const NS: i64 = 1_796_136_931_000_000_000; // 2026-12-01T14:55:31Z

    #[test]
    fn no_environment_at_all_still_gives_a_plan_for_one_process() {
        let a = args(&["coroner-agent", "run", "--", "python", "train.py"]);
        let p = Plan::resolve(&a, env_of(&[]), "vm", 7, NS);
        assert_eq!(p.job, "vm-none-20261201T145531-7");
        assert_eq!(p.rank, Some(0));
        assert!(!p.is_launcher);
        assert_eq!(p.notes.len(), 1, "{:?}", p.notes);
        assert!(p.notes[0].contains("no job id"));
    }

    #[test]
    fn settings_that_do_not_parse_fall_back_to_defaults_and_are_said() {
        let a = args(&[
            "coroner-agent",
            "run",
            "--job",
            "j",
            "--rank",
            "abc",
            "--spool-max-bytes",
            "lots",
            "--linger",
            "soon",
            "--launcher",
            "mpi",
            "--",
            "python",
            "t.py",
        ]);
        let p = Plan::resolve(&a, env_of(&[("RANK", "3"), ("WORLD_SIZE", "8")]), "vm", 7, NS);
        assert_eq!(p.rank, Some(3), "a bad --rank falls back to the launcher's variables");
        assert_eq!(p.spool_max_bytes, DEFAULT_SPOOL_MAX_BYTES);
        assert_eq!(p.linger(), DEFAULT_LINGER);
        assert_eq!(p.notes.len(), 4, "{:?}", p.notes);
    }

    #[test]
    fn sizes_and_durations_take_units() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("64MiB").unwrap(), 64 << 20);
        let a = args(&["coroner-agent", "run", "--job", "j", "--flush-timeout", "1", "--", "x"]);
        assert_eq!(Plan::resolve(&a, env_of(&[]), "vm", 7, NS).linger(), Duration::from_secs(1), "--flush-timeout is --linger's old name");
    }

    #[test]
    fn a_rank_nothing_names_in_a_larger_job_is_filed_by_prefix() {
        let a = args(&["coroner-agent", "run", "--job", "j", "--", "python", "t.py"]);
        let p = Plan::resolve(&a, env_of(&[("WORLD_SIZE", "4")]), "vm", 7, NS);
        assert_eq!(p.rank, None);
        assert!(p.notes[0].contains("no rank"), "{:?}", p.notes);
    }

    #[test]
    fn a_slurm_task_speaks_for_its_step_rank_and_node() {
        let a = args(&["coroner-agent", "run", "--", "python", "train.py"]);
        let slurm = [
            ("SLURM_JOB_ID", "4242"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_PROCID", "5"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_NODEID", "2"),
            ("SLURMD_NODENAME", "gpu-a17"),
        ];
        let p = Plan::resolve(&a, env_of(&slurm), "gpu-a17.cluster.example", 7, NS);
        assert_eq!((p.job.as_str(), p.rank, p.local_rank, p.world_size), ("4242_0", Some(5), Some(1), Some(8)));
        assert_eq!((p.host.as_str(), p.launcher.as_str()), ("gpu-a17", "slurm"));
        assert!(p.key_dir.ends_with("4242_0/rank-5"), "{}", p.key_dir.display());
        assert!(p.notes.is_empty(), "a first run says nothing: {:?}", p.notes);
    }

    #[test]
    fn a_requeued_slurm_job_says_which_restart_it_is() {
        let a = args(&["coroner-agent", "run", "--", "python", "train.py"]);
        let env = [("SLURM_JOB_ID", "4242"), ("SLURM_STEP_ID", "0"), ("SLURM_PROCID", "1"), ("SLURM_NTASKS", "2"), ("SLURM_RESTART_COUNT", "2")];
        let p = Plan::resolve(&a, env_of(&env), "n1", 7, NS);
        assert_eq!(p.job, "4242_0", "a requeued job keeps its id: the attempts are one job");
        assert_eq!(p.notes.len(), 1, "{:?}", p.notes);
        assert!(p.notes[0].contains("restart 2 of job 4242_0") && p.notes[0].contains("SLURM_RESTART_COUNT=2"), "{:?}", p.notes);
        let first = [("SLURM_JOB_ID", "4242"), ("SLURM_PROCID", "1"), ("SLURM_NTASKS", "2"), ("SLURM_RESTART_COUNT", "0")];
        assert!(Plan::resolve(&a, env_of(&first), "n1", 7, NS).notes.is_empty());
    }

    #[test]
    fn a_pod_reports_the_node_it_runs_on() {
        // What the example PyTorchJob sets: the job from a pod label, the node from spec.nodeName
        // (`CORONER_HOST`, which clap reads into --host); the operator sets RANK (the pod's node
        // rank), WORLD_SIZE and PET_* for torchrun.
        let a = args(&["coroner-agent", "run", "--host", "gke-pool-a-7f3c", "--", "torchrun", "train.py"]);
        let env = [("CORONER_JOB", "llm-pretrain"), ("RANK", "1"), ("WORLD_SIZE", "4"), ("PET_NODE_RANK", "1"), ("PET_NPROC_PER_NODE", "2")];
        let p = Plan::resolve(&a, env_of(&env), "llm-pretrain-worker-0", 7, NS);
        assert_eq!(p.job, "llm-pretrain");
        assert!(p.is_launcher, "torchrun in the pod: one agent for the node");
        assert_eq!((p.rank, p.node_rank_base, p.world_size), (None, Some(2), Some(4)));
        assert_eq!(p.host, "gke-pool-a-7f3c", "the node, not the pod's name");
        assert!(p.key_dir.ends_with("llm-pretrain/node-gke-pool-a-7f3c"), "{}", p.key_dir.display());
    }

    #[test]
    fn the_child_never_sees_the_agents_token() {
        let a = args(&["coroner-agent", "run", "--job", "j", "--rank", "1", "--", "python", "t.py"]);
        let p = Plan::resolve(&a, env_of(&[]), "vm", 7, NS);
        let names = ["CORONER_TOKEN", "CORONER_SERVER", "CORONER_READ_TOKEN", "CORONER_MY_SECRET", "HOME"].map(String::from);
        let e = p.child_env(env_of(&[("PYTHONUNBUFFERED", "0")]), names.into_iter());
        assert_eq!(e.remove, vec!["CORONER_TOKEN", "CORONER_READ_TOKEN", "CORONER_MY_SECRET"]);
        assert!(e.set.contains(&("CORONER_RANK".into(), "1".into())));
        assert!(!e.set.iter().any(|(k, _)| k == "PYTHONUNBUFFERED"), "the user's own choice stays");
    }
}
