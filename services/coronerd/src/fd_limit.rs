//! The open-file limit: one descriptor per connected agent, so a job of 16,384 ranks with one
//! agent each needs about 16,500 in the process that owns it (and as many in a load generator
//! that plays those agents). Many hosts start processes with a soft limit of 1,024 and a hard
//! limit far higher; [`raise_open_file_limit`] lifts the soft limit to the hard one at start.
//! Raising the hard limit itself needs privilege: `ulimit -Hn`, `LimitNOFILE=` in a systemd
//! unit, or `--ulimit nofile=...` for a container (docs/LOAD.md).

/// What the limit was and what it is now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFileLimit {
    pub before: u64,
    pub now: u64,
    /// The hard limit: the most this process can raise itself to.
    pub hard: u64,
}

/// Raises this process's soft `RLIMIT_NOFILE` to its hard limit. Errors say which call failed.
pub fn raise_open_file_limit() -> std::io::Result<OpenFileLimit> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes one rlimit into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(std::io::Error::other(format!("getrlimit(RLIMIT_NOFILE): {}", std::io::Error::last_os_error())));
    }
    let before = lim.rlim_cur;
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit { rlim_cur: lim.rlim_max, rlim_max: lim.rlim_max };
        // SAFETY: setrlimit reads one rlimit from a struct we own.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
            return Err(std::io::Error::other(format!("setrlimit(RLIMIT_NOFILE, {}): {}", lim.rlim_max, std::io::Error::last_os_error())));
        }
        lim = raised;
    }
    Ok(OpenFileLimit { before, now: lim.rlim_cur, hard: lim.rlim_max })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_ends_at_the_hard_limit() {
        let l = raise_open_file_limit().expect("raise the open-file limit");
        assert_eq!(l.now, l.hard);
        assert!(l.now >= l.before);
        // A second call finds nothing left to raise.
        let again = raise_open_file_limit().expect("raise again");
        assert_eq!((again.before, again.now), (l.hard, l.hard));
    }
}
