//! Schedulers and orchestrators on the processes they ran or stopped: Slurm (`srun: error: node12:
//! task 3: Killed`, `slurmstepd: error: *** JOB 1234 ... CANCELLED ...`, srun's clean-up kills)
//! and Kubernetes (`kubectl describe`, `kubectl get pods`, events, an operator's pod exits).

use crate::launcher::split_code;
use crate::util::inum_after;
use coroner_model::{EventKind, LauncherFailure, Rank};

/// What Kubernetes says about a pod it stopped (`kubectl describe`, `kubectl get pods`, events):
/// `Reason:         Evicted`, `Reason:       OOMKilled`, `The node was low on resource: memory.`,
/// a pods table row with status `Evicted` or `OOMKilled`, `Exit Code:    137`. One
/// `SchedulerEnd` per line that says so.
pub fn kubernetes(t: &str) -> Option<EventKind> {
    let tt = t.trim();
    let field = |key: &str| tt.strip_prefix(key).map(str::trim);
    let said = match field("Reason:") {
        Some("Evicted") | Some("OOMKilled") | Some("Preempted") | Some("DeadlineExceeded") => true,
        _ => {
            tt.contains("The node was low on resource")
                || field("Exit Code:").is_some_and(|c| c == "137" || c == "143")
                || tt.split_whitespace().nth(2).is_some_and(|status| status == "Evicted" || status == "OOMKilled")
                    && tt.split_whitespace().nth(1).is_some_and(|ready| ready.contains('/'))
        }
    };
    if said {
        return Some(EventKind::SchedulerEnd { message: format!("kubernetes: {tt}") });
    }
    operator_pod_exit(tt)
}

/// A training operator's event that a pod's container ended with a non-zero code (Kubeflow's
/// `Error pod pytorch-simple-worker-0 container pytorch exitCode: 1 terminated message: ...`,
/// `Pod: kubeflow.pytorch-simple-worker-0 exited with code 1`): the worker failed on its own.
/// 137 and 143 (SIGKILL, SIGTERM from outside) are how Kubernetes stops a pod, read as such.
fn operator_pod_exit(t: &str) -> Option<EventKind> {
    let (pod, code) = if let Some(at) = t.find("Error pod ") {
        let r = &t[at + "Error pod ".len()..];
        let pod = r.split_whitespace().next()?;
        (pod, inum_after(r, "exitCode:")?)
    } else {
        let at = t.find("Pod: ")?;
        let r = &t[at + "Pod: ".len()..];
        let pod = r.split_whitespace().next()?;
        (pod, inum_after(r, " exited with code")?)
    };
    match code {
        0 => None,
        137 | 143 => Some(EventKind::SchedulerEnd { message: format!("kubernetes: pod {pod} exited with code {code}") }),
        _ => Some(EventKind::ErrorLine { message: format!("kubernetes: pod {pod}'s container exited with code {code}") }),
    }
}

/// srun's report of how its tasks ended: `srun: error: node7: task 1: Segmentation fault (core
/// dumped)`, `srun: error: n1: tasks 8-13,15: Exited with exit code 1`, `... task 0: Killed`.
/// Under srun the task id is the global rank. One event per task named.
pub fn srun_task_ends(t: &str) -> Vec<EventKind> {
    let Some(rest) = t.strip_prefix("srun: error: ") else { return Vec::new() };
    let mut parts = rest.splitn(3, ": ");
    let (Some(_node), Some(tasks), Some(what)) = (parts.next(), parts.next(), parts.next()) else { return Vec::new() };
    let Some(list) = tasks.strip_prefix("tasks ").or_else(|| tasks.strip_prefix("task ")) else { return Vec::new() };
    let what = what.trim();
    let (exit_code, signal) = if let Some(code) = what.strip_prefix("Exited with exit code ") {
        split_code(code.trim().parse().ok())
    } else {
        // `Out Of Memory`: the step's cgroup OOM killer (SIGKILL).
        let signal = [
            ("Segmentation fault", 11),
            ("Bus error", 7),
            ("Illegal instruction", 4),
            ("Floating point exception", 8),
            ("Aborted", 6),
            ("Killed", 9),
            ("Out Of Memory", 9),
            ("Terminated", 15),
        ]
        .iter()
        .find(|(name, _)| what.starts_with(name))
        .map(|(_, n)| *n);
        if signal.is_none() {
            return Vec::new();
        }
        (None, signal)
    };
    let mut ranks = Vec::new();
    for item in list.split(',') {
        let (a, b) = item.split_once('-').unwrap_or((item, item));
        let (Ok(a), Ok(b)) = (a.trim().parse::<u32>(), b.trim().parse::<u32>()) else { return Vec::new() };
        if b < a || b - a > 4096 {
            return Vec::new();
        }
        ranks.extend(a..=b);
    }
    ranks.into_iter().map(|r| EventKind::LauncherWorkerFailed(LauncherFailure::of_rank(Rank(r), exit_code, signal))).collect()
}

/// srun cleaning up after a task failed on its own: once a task exited with an error code (or
/// died of a signal of its own) and srun then stopped the step (`srun: launch/slurm:
/// _step_signal: Terminating StepId=...`, `srun: Job step aborted`, the step's CANCELLED banner),
/// the tasks it then reports `Killed` or `Terminated` were killed by srun itself: signals a
/// launcher sent, never a cause.
#[derive(Debug, Default, Clone)]
pub struct SrunCleanup {
    bad_exit: bool,
    stopping: bool,
}

impl SrunCleanup {
    /// Reads one line and the task ends srun reported on it; returns them, the clean-up's kills
    /// turned into [`EventKind::LauncherSignal`].
    pub fn observe(&mut self, t: &str, ends: Vec<EventKind>) -> Vec<EventKind> {
        let stops = t.contains("_step_signal: Terminating StepId")
            || t.starts_with("srun: Job step aborted")
            || t.starts_with("srun: forcing job termination")
            || (t.starts_with("slurmstepd") && t.contains("*** STEP ") && t.contains("CANCELLED"));
        if self.bad_exit && stops {
            self.stopping = true;
        }
        ends.into_iter()
            .map(|k| match k {
                EventKind::LauncherWorkerFailed(f) if self.stopping && matches!(f.signal, Some(9 | 15)) => {
                    EventKind::LauncherSignal { pid: f.pid, signal: if f.signal == Some(9) { "SIGKILL".into() } else { "SIGTERM".into() } }
                }
                EventKind::LauncherWorkerFailed(f) => {
                    if f.exit_code.is_some_and(|c| c > 0) || f.signal.is_some_and(|s| s != 9 && s != 15) {
                        self.bad_exit = true;
                    }
                    EventKind::LauncherWorkerFailed(f)
                }
                other => other,
            })
            .collect()
    }
}

/// Slurm's own lines; `None` when the line is not one.
pub fn slurm(t: &str) -> Option<EventKind> {
    let is_srun = t.starts_with("srun: error:")
        || t.starts_with("srun: Job step aborted")
        || t.starts_with("srun: forcing job termination")
        || t.starts_with("srun: Force Terminated");
    // `slurmstepd: error:`, or `slurmstepd-<host>: error:` as newer Slurm names it.
    let stepd = t.starts_with("slurmstepd") && t.split_once(": error:").is_some_and(|(head, _)| !head.contains(' '));
    let is_stepd = stepd && t.contains("***");
    let banner = (t.starts_with("*** JOB ") || t.starts_with("*** STEP ")) && t.contains("CANCELLED");
    if stepd && (t.contains("oom_kill event") || t.contains("oom-kill event")) {
        return Some(EventKind::OomKill { pid: None, process: None });
    }
    (is_srun || is_stepd || banner).then(|| EventKind::SchedulerEnd { message: t.trim().to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn srun_names_each_task_and_how_it_ended() {
        let ends = |t: &str| -> Vec<(Option<u32>, Option<i32>, Option<i32>)> {
            srun_task_ends(t)
                .into_iter()
                .map(|k| match k {
                    EventKind::LauncherWorkerFailed(f) => (f.global_rank.map(|r| r.0), f.exit_code, f.signal),
                    _ => panic!("{k:?}"),
                })
                .collect()
        };
        assert_eq!(ends("srun: error: nid04277: task 1: Segmentation fault (core dumped)"), vec![(Some(1), None, Some(11))]);
        assert_eq!(
            ends("srun: error: slurm-job-compute-0-1: tasks 8-10,15: Exited with exit code 1"),
            vec![(Some(8), Some(1), None), (Some(9), Some(1), None), (Some(10), Some(1), None), (Some(15), Some(1), None)]
        );
        assert_eq!(ends("srun: error: n1: task 0: Killed"), vec![(Some(0), None, Some(9))]);
        assert!(ends("srun: error: Unable to create step for job 1234: Job/step already completing").is_empty());
        assert!(ends("srun: error: n1: task 0: something else").is_empty());
    }

    #[test]
    fn kubernetes_says_it_stopped_a_pod() {
        for t in [
            "Reason:         Evicted",
            "Message:        The node was low on resource: memory.",
            "      Reason:       OOMKilled",
            "      Exit Code:    137",
            "trainer-master-0-9st9r           0/1       Evicted   0          19h",
        ] {
            assert!(matches!(kubernetes(t), Some(EventKind::SchedulerEnd { .. })), "{t}");
        }
        for t in ["Reason:         Completed", "trainer-0   1/1   Running   0   9h", "Exit Code:    0", "evicted the cache"] {
            assert!(kubernetes(t).is_none(), "{t}");
        }
        // The training operator's events of a pod's exit.
        let ev = "1.708507856644096e+09\tDEBUG\tevents\tError pod pytorch-simple-worker-0 container pytorch exitCode: 1 terminated message: \t{\"type\": \"Warning\"}";
        assert!(matches!(kubernetes(ev), Some(EventKind::ErrorLine { message }) if message.contains("pytorch-simple-worker-0") && message.ends_with("code 1")));
        let ev = "1.7085078566441019e+09\tDEBUG\tevents\tPod: kubeflow.pytorch-simple-worker-0 exited with code 137\t{}";
        assert!(matches!(kubernetes(ev), Some(EventKind::SchedulerEnd { .. })));
        assert!(kubernetes("Pod: kubeflow.pytorch-simple-master-0 exited with code 0").is_none());
    }

    #[test]
    fn srun_kills_after_a_tasks_own_exit_are_its_clean_up() {
        let mut c = SrunCleanup::default();
        let mut run = |t: &str| c.observe(t, srun_task_ends(t));
        assert!(matches!(run("srun: error: n3: task 6: Exited with exit code 2").as_slice(), [EventKind::LauncherWorkerFailed(_)]));
        assert!(run("srun: launch/slurm: _step_signal: Terminating StepId=77.0").is_empty());
        let killed = run("srun: error: n4: tasks 0-1: Killed");
        assert_eq!(killed.len(), 2);
        assert!(killed.iter().all(|k| matches!(k, EventKind::LauncherSignal { signal, .. } if signal == "SIGKILL")));
        // Without a task's own failure first, a step's kills stay the tasks' ends (a cancel, a limit).
        let mut c = SrunCleanup::default();
        assert!(c.observe("slurmstepd: error: *** STEP 9.0 ON n1 CANCELLED AT 2024-01-01T00:00:00 ***", Vec::new()).is_empty());
        let t = "srun: error: n1: task 0: Killed";
        assert!(matches!(c.observe(t, srun_task_ends(t)).as_slice(), [EventKind::LauncherWorkerFailed(_)]));
    }

    #[test]
    fn slurm_lines() {
        assert!(matches!(slurm("srun: error: node12: task 3: Killed"), Some(EventKind::SchedulerEnd { .. })));
        assert!(matches!(
            slurm("slurmstepd: error: *** JOB 1234 ON node12 CANCELLED AT 2026-11-30T08:59:11 DUE TO TIME LIMIT ***"),
            Some(EventKind::SchedulerEnd { .. })
        ));
        assert!(matches!(slurm("slurmstepd: error: *** STEP 1234.0 ON node12 CANCELLED AT 2026-11-30T08:59:11 ***"), Some(EventKind::SchedulerEnd { .. })));
        assert!(matches!(
            slurm("slurmstepd: error: Detected 1 oom_kill event in StepId=1234.0. Some of the step tasks have been OOM Killed."),
            Some(EventKind::OomKill { .. })
        ));
        assert!(slurm("srun: launching job").is_none());
    }
}
