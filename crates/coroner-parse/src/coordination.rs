//! A distributed runtime's coordination service (XLA/TSL, used by JAX and TensorFlow) naming the
//! task it gave up on: `/job:jax_worker/replica:0/task:37 has been set to ERROR in coordination
//! service: UNAVAILABLE: Task ... heartbeat timeout`, or a task that came back as a new process
//! (`/job:jax_worker/replica:0/task:1 unexpectedly tried to connect with a different
//! incarnation. It has likely restarted.`: its previous process died). The task is the process
//! index (JAX's `process_index`, the rank); the line is written by another process, which only
//! saw it go.

use coroner_model::{EventKind, PeerRef, Rank};

/// What the coordination service says after the task's name when the task's process went away.
const WENT_AWAY: [&str; 2] = [" has been set to ERROR in coordination service", " unexpectedly tried to connect with a different incarnation"];

/// The task the coordination service set to ERROR, or saw restarted, as a peer that went away.
pub fn lost_task(msg: &str) -> Option<EventKind> {
    let at = WENT_AWAY.iter().filter_map(|p| msg.find(p)).min()?;
    let head = &msg[..at];
    let task = head.rsplit_once("/task:")?.1;
    if task.is_empty() || task.len() > 7 || !task.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n = task.parse::<u32>().ok()?;
    Some(EventKind::ConnectionClosed { peer: Some(PeerRef::Rank(Rank(n))), transport: "coordination".to_string() })
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
}
