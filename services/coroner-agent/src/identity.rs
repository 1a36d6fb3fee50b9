//! Who this agent speaks for: the job, the rank, the host, read from the launcher's environment.
//!
//! Explicit flags (or `CORONER_*` variables, which clap reads into the same flags) win; then the
//! variables that torchrun, Slurm, Open MPI and PMIx set for each task. Everything here takes the
//! environment as a lookup function so tests can pass a map instead of mutating the process env.

use coroner_model::{HostId, JobId, Rank};

/// What the user passed explicitly; `None` means "read the launcher's environment".
#[derive(Debug, Clone, Default)]
pub struct Explicit {
    pub job: Option<String>,
    pub rank: Option<u32>,
    pub local_rank: Option<u32>,
    pub world_size: Option<u32>,
}

/// The resolved identity of this agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub job: JobId,
    pub rank: Option<Rank>,
    pub local_rank: Option<u32>,
    pub world_size: Option<u32>,
    pub host: HostId,
    /// The launcher the environment reveals: `torchrun`, `slurm`, `mpirun` or `none`.
    pub launcher: &'static str,
}

const RANK_VARS: &[&str] = &["RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"];
const LOCAL_RANK_VARS: &[&str] = &["LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"];
const WORLD_SIZE_VARS: &[&str] = &["WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE"];

/// Resolves the identity from explicit values and an environment lookup. Never fails: the agent
/// must run the command whatever its environment says, so a missing job id becomes one made up
/// from the host, the launcher and the start time (`started` is `YYYYmmddTHHMMSS`), a value that
/// is not a number is ignored, and each such decision comes back as a warning for stderr and the
/// report.
pub fn resolve(explicit: &Explicit, env: impl Fn(&str) -> Option<String>, host: &str, started: &str, pid: u32) -> (Identity, Vec<String>) {
    let mut warnings = Vec::new();
    let launcher = launcher_from_env(&env);
    let made_up = || made_up_job(host, launcher, started, pid);
    let job = match explicit.job.clone().or_else(|| job_from_env(&env)) {
        Some(text) => match JobId::parse(&text) {
            Ok(job) => job,
            Err(e) => {
                let job = made_up();
                warnings.push(format!("the job id {text:?} cannot be used ({e}); shipping as job {job}"));
                job
            }
        },
        None => {
            let job = made_up();
            warnings.push(format!(
                "no job id (none of --job, CORONER_JOB, TORCHELASTIC_RUN_ID, SLURM_JOB_ID, OMPI_MCA_orte_job_id, \
                 PMIX_NAMESPACE is set); shipping as job {job}"
            ));
            job
        }
    };
    let rank = explicit.rank.or_else(|| first_u32(&env, RANK_VARS, &mut warnings));
    let local_rank = explicit.local_rank.or_else(|| first_u32(&env, LOCAL_RANK_VARS, &mut warnings));
    let world_size = explicit.world_size.or_else(|| first_u32(&env, WORLD_SIZE_VARS, &mut warnings));
    let identity = Identity { job, rank: rank.map(Rank), local_rank, world_size, host: HostId(host.to_string()), launcher };
    (identity, warnings)
}

/// The job id an agent uses when nothing names one: where and when it started, findable with
/// `coroner jobs` (`<host>-<launcher>-<start>-<pid>`, in the job-id alphabet).
fn made_up_job(host: &str, launcher: &str, started: &str, pid: u32) -> JobId {
    let host: String = sanitize(host).chars().take(64).collect();
    let text = format!("{host}-{launcher}-{started}-{pid}");
    JobId::parse(&text).unwrap_or_else(|_| JobId::parse(&format!("agent-{started}-{pid}")).expect("digits and letters are a valid job id"))
}

fn non_empty(env: &impl Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    env(name).map(|v| v.trim().to_string()).filter(|v| !v.is_empty())
}

/// The job id a launcher gives its tasks. Characters outside the job-id alphabet (PMIx
/// namespaces may hold '@' or '/') become '_'.
fn job_from_env(env: &impl Fn(&str) -> Option<String>) -> Option<String> {
    if let Some(job) = non_empty(env, "CORONER_JOB") {
        return Some(job);
    }
    if let Some(id) = non_empty(env, "TORCHELASTIC_RUN_ID") {
        return Some(sanitize(&id));
    }
    if let Some(id) = non_empty(env, "SLURM_JOB_ID") {
        return Some(match non_empty(env, "SLURM_STEP_ID") {
            Some(step) => sanitize(&format!("{id}_{step}")),
            None => sanitize(&id),
        });
    }
    ["OMPI_MCA_orte_job_id", "PMIX_NAMESPACE"].iter().find_map(|name| non_empty(env, name)).map(|id| sanitize(&id))
}

fn sanitize(id: &str) -> String {
    let s: String = id.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':') { c } else { '_' }).collect();
    s.trim_start_matches('.').to_string()
}

/// The first of `names` that is set, as a number; a value that is not one is ignored (and said).
fn first_u32(env: &impl Fn(&str) -> Option<String>, names: &[&str], warnings: &mut Vec<String>) -> Option<u32> {
    for name in names {
        if let Some(v) = non_empty(env, name) {
            match v.parse::<u32>() {
                Ok(n) => return Some(n),
                Err(_) => warnings.push(format!("{name}={v:?} is not a number; ignored")),
            }
        }
    }
    None
}

fn launcher_from_env(env: &impl Fn(&str) -> Option<String>) -> &'static str {
    if non_empty(env, "TORCHELASTIC_RUN_ID").is_some() {
        "torchrun"
    } else if non_empty(env, "SLURM_JOB_ID").is_some() {
        "slurm"
    } else if non_empty(env, "OMPI_COMM_WORLD_RANK").is_some() || non_empty(env, "PMIX_RANK").is_some() {
        "mpirun"
    } else {
        "none"
    }
}

/// The host name the agent reports: `--host`/`CORONER_HOST` first, then Slurm's name for the
/// node (`SLURMD_NODENAME`, the name `scontrol` drains, which `hostname` may spell otherwise),
/// else `gethostname`. In a Kubernetes pod gethostname is the pod's name, which is new for every
/// job and names no machine: the manifests set `CORONER_HOST` from the pod's `spec.nodeName`.
pub fn host_name(explicit: Option<&str>, env: impl Fn(&str) -> Option<String>, gethostname: &str) -> String {
    explicit
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(str::to_string)
        .or_else(|| non_empty(&env, "SLURMD_NODENAME"))
        .unwrap_or_else(|| gethostname.to_string())
}

/// Variables that count how often the launcher restarted the job, the first set wins:
/// `CORONER_ATTEMPT` (set it from a JobSet pod's `jobset.sigs.k8s.io/restart-attempt` label),
/// Slurm's `SLURM_RESTART_COUNT` (requeues), torchrun's `TORCHELASTIC_RESTART_COUNT` (a worker's
/// own environment).
const RESTART_VARS: &[&str] = &["CORONER_ATTEMPT", "SLURM_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT"];

/// Which restart of the job this is, when the launcher says: `(variable, count)`, count 0 being
/// the first run. A value that is not a number is ignored and said.
pub fn restart_count(env: impl Fn(&str) -> Option<String>, warnings: &mut Vec<String>) -> Option<(&'static str, u32)> {
    for name in RESTART_VARS {
        if let Some(v) = non_empty(&env, name) {
            match v.parse::<u32>() {
                Ok(n) => return Some((name, n)),
                Err(_) => warnings.push(format!("{name}={v:?} is not a number; ignored")),
            }
        }
    }
    None
}

/// This host's name, from gethostname(2).
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that many bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "unknown".to_string();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    const T: &str = "20261201T145531";

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn torchrun_worker_environment() {
        let env = env_of(&[("TORCHELASTIC_RUN_ID", "run42"), ("RANK", "5"), ("LOCAL_RANK", "1"), ("WORLD_SIZE", "8")]);
        let id = resolve(&Explicit::default(), env, "node7", T, 1).0;
        assert_eq!(id.job.as_str(), "run42");
        assert_eq!(id.rank, Some(Rank(5)));
        assert_eq!((id.local_rank, id.world_size), (Some(1), Some(8)));
        assert_eq!(id.host, HostId("node7".into()));
        assert_eq!(id.launcher, "torchrun");
    }

    #[test]
    fn slurm_task_with_step() {
        let env = env_of(&[("SLURM_JOB_ID", "1234"), ("SLURM_STEP_ID", "0"), ("SLURM_PROCID", "3"), ("SLURM_LOCALID", "3"), ("SLURM_NTASKS", "16")]);
        let id = resolve(&Explicit::default(), env, "h", T, 1).0;
        assert_eq!(id.job.as_str(), "1234_0");
        assert_eq!((id.rank, id.local_rank, id.world_size), (Some(Rank(3)), Some(3), Some(16)));
        assert_eq!(id.launcher, "slurm");
    }

    #[test]
    fn slurm_node_name_is_the_host_unless_one_is_given() {
        let env = env_of(&[("SLURMD_NODENAME", "gpu-a17"), ("SLURM_NODEID", "3")]);
        assert_eq!(host_name(None, &env, "gpu-a17.cluster.example"), "gpu-a17", "Slurm's own name for the node, the one scontrol drains");
        assert_eq!(host_name(Some("node-x"), &env, "h"), "node-x", "--host / CORONER_HOST wins");
        assert_eq!(host_name(Some("  "), env_of(&[]), "h"), "h", "an empty --host is no host");
        assert_eq!(host_name(None, env_of(&[]), "trainer-worker-0"), "trainer-worker-0");
    }

    #[test]
    fn restart_counts_from_slurm_torchrun_or_coroner() {
        let mut w = Vec::new();
        assert_eq!(restart_count(env_of(&[("SLURM_RESTART_COUNT", "2")]), &mut w), Some(("SLURM_RESTART_COUNT", 2)));
        assert_eq!(restart_count(env_of(&[("TORCHELASTIC_RESTART_COUNT", "0")]), &mut w), Some(("TORCHELASTIC_RESTART_COUNT", 0)));
        let both = env_of(&[("CORONER_ATTEMPT", "1"), ("SLURM_RESTART_COUNT", "4")]);
        assert_eq!(restart_count(both, &mut w), Some(("CORONER_ATTEMPT", 1)), "the explicit variable wins");
        assert_eq!(restart_count(env_of(&[]), &mut w), None);
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(
            restart_count(env_of(&[("SLURM_RESTART_COUNT", "x"), ("TORCHELASTIC_RESTART_COUNT", "1")]), &mut w),
            Some(("TORCHELASTIC_RESTART_COUNT", 1))
        );
        assert_eq!(w, vec!["SLURM_RESTART_COUNT=\"x\" is not a number; ignored".to_string()]);
    }

    #[test]
    fn open_mpi_and_pmix() {
        let env = env_of(&[("PMIX_NAMESPACE", "prterun-host-1234@1"), ("OMPI_COMM_WORLD_RANK", "2"), ("OMPI_COMM_WORLD_SIZE", "4")]);
        let id = resolve(&Explicit::default(), env, "h", T, 1).0;
        assert_eq!(id.job.as_str(), "prterun-host-1234_1");
        assert_eq!((id.rank, id.world_size), (Some(Rank(2)), Some(4)));
        assert_eq!(id.launcher, "mpirun");
    }

    #[test]
    fn explicit_values_win_over_the_environment() {
        let env = env_of(&[("SLURM_JOB_ID", "1"), ("SLURM_PROCID", "3"), ("CORONER_JOB", "env-job")]);
        let explicit = Explicit { job: Some("mine".into()), rank: Some(0), ..Default::default() };
        let id = resolve(&explicit, env, "h", T, 1).0;
        assert_eq!((id.job.as_str(), id.rank), ("mine", Some(Rank(0))));
        let id = resolve(&Explicit::default(), env_of(&[("CORONER_JOB", "env-job")]), "h", T, 1).0;
        assert_eq!((id.job.as_str(), id.rank), ("env-job", None));
    }

    #[test]
    fn no_job_anywhere_makes_one_from_host_launcher_and_start() {
        let (id, warnings) = resolve(&Explicit::default(), env_of(&[("RANK", "0")]), "gpu-node/7", T, 42);
        assert_eq!(id.job.as_str(), "gpu-node_7-none-20261201T145531-42");
        assert_eq!(id.rank, Some(Rank(0)));
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("no job id") && warnings[0].contains(id.job.as_str()), "{warnings:?}");
    }

    #[test]
    fn a_job_id_outside_the_alphabet_is_replaced_and_said() {
        let explicit = Explicit { job: Some("my job/1".into()), ..Default::default() };
        let (id, warnings) = resolve(&explicit, env_of(&[]), "h", T, 1);
        assert_eq!(id.job.as_str(), "h-none-20261201T145531-1");
        assert!(warnings[0].contains("my job/1"), "{warnings:?}");
    }

    #[test]
    fn a_rank_that_is_not_a_number_is_ignored_and_said() {
        let (id, warnings) = resolve(&Explicit::default(), env_of(&[("CORONER_JOB", "j"), ("RANK", "x"), ("SLURM_PROCID", "4")]), "h", T, 1);
        assert_eq!(id.rank, Some(Rank(4)), "the next variable that holds a number is used");
        assert_eq!(warnings, vec!["RANK=\"x\" is not a number; ignored".to_string()]);
        let (id, _) = resolve(&Explicit::default(), env_of(&[("CORONER_JOB", "j"), ("RANK", "abc")]), "h", T, 1);
        assert_eq!(id.rank, None);
    }
}
