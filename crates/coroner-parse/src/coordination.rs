//! A distributed runtime's coordination service (XLA/TSL, used by JAX and TensorFlow) naming the
//! task it gave up on: `/job:jax_worker/replica:0/task:37 has been set to ERROR in coordination
//! service: UNAVAILABLE: Task ... heartbeat timeout`, or a task that came back as a new process
//! (`/job:jax_worker/replica:0/task:1 unexpectedly tried to connect with a different
//! incarnation. It has likely restarted.`: its previous process died). The task is the process
//! index (JAX's `process_index`, the rank); the line is written by another process, which only
//! saw it go. A task whose heartbeats stopped is named on the lines after the service's
//! `The following tasks are unhealthy (stopped sending heartbeats):`.

use coroner_model::{EventKind, PeerRef, Rank, COORDINATION_TRANSPORT};
use std::sync::LazyLock;

/// What the coordination service says after the task's name when the task's process went away.
const WENT_AWAY: [&str; 2] = [" has been set to ERROR in coordination service", " unexpectedly tried to connect with a different incarnation"];

/// The header of the coordination service's list of tasks whose heartbeats stopped; the task
/// names follow, one per line.
const UNHEALTHY: &str = "tasks are unhealthy (stopped sending heartbeats):";

/// The task the coordination service set to ERROR, or saw restarted, as a peer that went away.
pub fn lost_task(msg: &str) -> Option<EventKind> {
    let at = WENT_AWAY.iter().filter_map(|p| msg.find(p)).min()?;
    task_number(&msg[..at]).map(went_away)
}

/// The tasks of the coordination service's unhealthy list (`The following tasks are unhealthy
/// (stopped sending heartbeats):` then `/job:jax_worker/replica:0/task:3` on the next lines): the
/// list runs while lines hold task names only.
#[derive(Debug, Clone, Default)]
pub struct UnhealthyTasks {
    listing: bool,
}

/// The header, searched for on every line: compiled once.
static UNHEALTHY_FINDER: LazyLock<memchr::memmem::Finder<'static>> = LazyLock::new(|| memchr::memmem::Finder::new(UNHEALTHY));

impl UnhealthyTasks {
    pub fn observe(&mut self, text: &str, out: &mut Vec<EventKind>) {
        if let Some(at) = UNHEALTHY_FINDER.find(text.as_bytes()) {
            self.listing = true;
            listed(&text[at + UNHEALTHY.len()..], out);
        } else if self.listing {
            self.listing = listed(text, out);
        }
    }
}

/// The tasks a line of the list names; false when it holds anything else (the list ended).
fn listed(text: &str, out: &mut Vec<EventKind>) -> bool {
    let names: Vec<&str> = text.split(|c: char| c.is_whitespace() || c == ',').filter(|t| !t.is_empty()).collect();
    let tasks: Vec<u32> = names.iter().filter(|t| t.starts_with("/job:")).filter_map(|t| task_number(t)).collect();
    if tasks.len() != names.len() {
        return false;
    }
    out.extend(tasks.into_iter().map(went_away));
    true
}

/// The task index at the end of `.../task:N`.
fn task_number(name: &str) -> Option<u32> {
    let task = name.rsplit_once("/task:")?.1;
    if task.is_empty() || task.len() > 7 || !task.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    task.parse().ok()
}

fn went_away(task: u32) -> EventKind {
    EventKind::ConnectionClosed { peer: Some(PeerRef::Rank(Rank(task))), transport: COORDINATION_TRANSPORT.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_task_set_to_error_is_named() {
        let m = "/job:jax_worker/replica:0/task:37 has been set to ERROR in coordination service: UNAVAILABLE: Task /job:jax_worker/replica:0/task:37 heartbeat timeout.";
        assert_eq!(lost_task(m), Some(EventKind::ConnectionClosed { peer: Some(PeerRef::Rank(Rank(37))), transport: "coordination".into() }));
        let restarted = "ABORTED: /job:jax_worker/replica:0/task:1 unexpectedly tried to connect with a different incarnation. It has likely restarted.";
        assert_eq!(lost_task(restarted), Some(EventKind::ConnectionClosed { peer: Some(PeerRef::Rank(Rank(1))), transport: "coordination".to_string() }));
        assert_eq!(lost_task("Barrier timed out. Timed out task names: /job:jax_worker/replica:0/task:1"), None);
        assert_eq!(lost_task("/job:jax_worker/replica:0/task:x has been set to ERROR in coordination service"), None);
    }

    /// The unhealthy list names its tasks on the lines after its header, until a line that is
    /// not a task name; a task name elsewhere names no one.
    #[test]
    fn the_unhealthy_tasks_listed_after_the_header_are_named() {
        let mut list = UnhealthyTasks::default();
        let mut out = Vec::new();
        for line in [
            "F0926 17:26:32.075587  157988 client.h:77] Terminating process because the JAX distributed service detected fatal errors. absl::Status: UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats):",
            "   /job:jax_worker/replica:0/task:3",
            "/job:jax_worker/replica:0/task:12",
            "The tasks have crashed. Check the task logs for an earlier error.",
            "/job:jax_worker/replica:0/task:5",
        ] {
            list.observe(line, &mut out);
        }
        assert_eq!(out, vec![went_away(3), went_away(12)]);
        out.clear();
        UnhealthyTasks::default().observe("/job:jax_worker/replica:0/task:5", &mut out);
        list.observe("The following tasks are unhealthy (stopped sending heartbeats): /job:w/replica:0/task:7, /job:w/replica:0/task:8", &mut out);
        assert_eq!(out, vec![went_away(7), went_away(8)]);
    }
}
