//! What an `OpenSession` may carry: the strings an agent names itself with are shown in reports,
//! pages and terminals and kept in memory for the job's life, so they are bounded and plain.
//!
//! Rules ([`check_opening`]):
//! 1. the host, agent instance and launcher are at most `max` bytes each;
//! 2. they hold no control characters (an escape sequence in a host name reaches terminals);
//! 3. at most [`MAX_LIST`] versions and notes, each at most [`MAX_ITEM`] bytes (the command's
//!    words are not kept, so a long command line is never a reason to refuse a training job's agent).

use coroner_proto::v1::OpenSessionRequest;

/// Versions and notes one session may send: an agent sends a handful.
pub const MAX_LIST: usize = 64;
/// Bytes of one version or note (a note is cut to 1,000 for the report anyway).
pub const MAX_ITEM: usize = 4096;

/// Why an opening is refused, for the caller; `None` when it may open.
pub fn check_opening(r: &OpenSessionRequest, max: usize) -> Option<String> {
    for (what, value) in [("host", &r.host), ("agent instance", &r.agent_instance), ("launcher", &r.launcher)] {
        if value.len() > max {
            return Some(format!("the {what} is {} bytes, more than the {max} this server takes (--max-string-bytes)", value.len()));
        }
        if value.chars().any(char::is_control) {
            return Some(format!("the {what} {:?} holds control characters", value.chars().take(80).collect::<String>()));
        }
    }
    let lists = [
        ("versions", r.versions.len(), r.versions.iter().map(|(k, v)| k.len() + v.len()).max()),
        ("notes", r.notes.len(), r.notes.iter().map(String::len).max()),
    ];
    for (what, n, longest) in lists {
        if n > MAX_LIST {
            return Some(format!("{n} {what}, more than the {MAX_LIST} a session may send"));
        }
        if longest.unwrap_or(0) > MAX_ITEM {
            return Some(format!("one of the {what} is over {MAX_ITEM} bytes"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opening() -> OpenSessionRequest {
        OpenSessionRequest { job_id: "j".into(), host: "node-a".into(), agent_instance: "a-1".into(), launcher: "torchrun".into(), ..Default::default() }
    }

    #[test]
    fn rule_1_long_names_are_refused() {
        assert_eq!(check_opening(&opening(), 256), None);
        let long = OpenSessionRequest { host: "h".repeat(257), ..opening() };
        assert!(check_opening(&long, 256).is_some_and(|m| m.contains("host") && m.contains("257 bytes")));
        let long = OpenSessionRequest { agent_instance: "a".repeat(50 << 20), ..opening() };
        assert!(check_opening(&long, 256).is_some_and(|m| m.contains("agent instance")));
    }

    #[test]
    fn rule_2_control_characters_are_refused() {
        let evil = OpenSessionRequest { host: "node\x1b[2J".into(), ..opening() };
        assert!(check_opening(&evil, 256).is_some_and(|m| m.contains("control characters")));
        let evil = OpenSessionRequest { launcher: "x\u{9b}y".into(), ..opening() };
        assert!(check_opening(&evil, 256).is_some());
    }

    #[test]
    fn rule_3_lists_are_bounded() {
        let many = OpenSessionRequest { notes: vec!["n".into(); MAX_LIST + 1], ..opening() };
        assert!(check_opening(&many, 256).is_some_and(|m| m.contains("notes")));
        let big = OpenSessionRequest { versions: [("torch".to_string(), "v".repeat(MAX_ITEM + 1))].into(), ..opening() };
        assert!(check_opening(&big, 256).is_some_and(|m| m.contains("versions")));
        // A long command line is no reason to refuse: it is not kept.
        let long_command = OpenSessionRequest { command: vec!["--flag".into(); 1000], ..opening() };
        assert_eq!(check_opening(&long_command, 256), None);
        let versions = OpenSessionRequest { versions: [("torch".to_string(), "2.5".to_string())].into(), ..opening() };
        assert_eq!(check_opening(&versions, 256), None);
    }
}
