//! A Python logging record's head: its level and where its message starts, in the shapes the
//! logging module, rich, vLLM and PyTorch's elastic agent print. Read by the parser (records at
//! ERROR and above are failure lines) and by the traceback reader (a record ends a message).

/// A Python logging record's level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Debug,
    Info,
    Warning,
    Error,
}

fn level_of(w: &str) -> Option<Level> {
    Some(match w {
        "DEBUG" => Level::Debug,
        "INFO" => Level::Info,
        "WARNING" | "WARN" => Level::Warning,
        // `ERR`: Ray's command-line logger (`ray job submit`: `... ERR cli.py:72 -- Job '...' failed`).
        "ERROR" | "ERR" | "CRITICAL" | "FATAL" => Level::Error,
        _ => return None,
    })
}

/// A Python logging record: `2026-11-30 08:58:51,398 ERROR [rank1] train: msg`,
/// `[2026-11-30 08:58:51,398][ERROR] msg`, `2026-11-30 08:58:51,398 - name - ERROR - msg`,
/// `ERROR:root:msg`. Returns the level and the message after the level.
pub fn pylog(t: &str) -> Option<(Level, &str)> {
    let b = t.as_bytes();
    let first = *b.first()?;
    if first.is_ascii_uppercase() {
        // `LEVEL:logger:message`
        if let Some(colon) = t.get(..12).and_then(|h| h.find(':')).or_else(|| t.find(':').filter(|c| *c <= 8)) {
            if let Some(lvl) = level_of(&t[..colon]) {
                let r = &t[colon + 1..];
                let msg = match r.find(':') {
                    Some(c) if !r[..c].contains(' ') => &r[c + 1..],
                    _ => r,
                };
                return Some((lvl, msg));
            }
        }
        return level_word_record(t);
    }
    if first == b' ' {
        // rich's console handler (accelerate, NeMo): ` ERROR    message    api.py:673`, its
        // time column left blank when the second has not changed (`           ERROR    ...`).
        return rich_record(t.trim_start_matches(' '));
    }
    if first == b'[' {
        // rich with its time column: `[05:04:49] ERROR    message`, `[07/19/23 05:04:49] ...`.
        if let Some(close) = t.get(..24).and_then(|h| h.find("] ")) {
            if t[1..close].bytes().all(|c| c.is_ascii_digit() || matches!(c, b':' | b'/' | b' ' | b'-' | b'.')) && t[1..close].contains(':') {
                if let Some(r) = rich_record(&t[close + 2..]) {
                    return Some(r);
                }
            }
        }
    }
    if first.is_ascii_lowercase() {
        // `logger.name: [LEVEL] message`: PyTorch's elastic format with its leading
        // `[timestamp] ` cut off (`torch.distributed.elastic.multiprocessing.api: [ERROR] failed ...`).
        let at = t.get(..t.len().min(96))?.find(": [")?;
        if !t[..at].bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'.') {
            return None;
        }
        let r = &t[at + 3..];
        let close = r.find("] ")?;
        return level_of(&r[..close]).map(|lvl| (lvl, &r[close + 2..]));
    }
    let date_at = usize::from(first == b'[');
    let d = b.get(date_at..date_at + 10)?;
    if !(d[..4].iter().all(u8::is_ascii_digit) && d[4] == b'-' && d[7] == b'-') {
        return None;
    }
    let head_end = t.len().min(date_at + 96);
    let mut i = date_at + 10;
    while i < head_end {
        let c = b[i];
        if c.is_ascii_uppercase() && !b[i - 1].is_ascii_alphanumeric() {
            let n = b[i..head_end].iter().take_while(|c| c.is_ascii_uppercase()).count();
            let after = b.get(i + n).copied();
            if !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_') {
                if let Some(lvl) = t.get(i..i + n).and_then(level_of) {
                    let msg = t[i + n..].trim_start_matches([' ', ']', '-', ':', '|']);
                    return Some((lvl, msg));
                }
            }
            i += n.max(1);
        } else {
            i += 1;
        }
    }
    None
}

/// rich's record after its time column: the level padded to 8 columns and a space, then the
/// message (`ERROR    message    api.py:673`).
fn rich_record(r: &str) -> Option<(Level, &str)> {
    let word = r.split(' ').next()?;
    let pad = r[word.len()..].bytes().take_while(|c| *c == b' ').count();
    level_word_record(r).filter(|_| word.len() + pad >= 9)
}

/// A record that starts with its level word and a space: rich's `ERROR    message    api.py:673`
/// (the trailing location dropped), vLLM's `ERROR 09-23 10:49:22 file.py:226] message`.
fn level_word_record(t: &str) -> Option<(Level, &str)> {
    let (word, rest) = t.split_once(' ')?;
    let lvl = level_of(word)?;
    let mut msg = rest.trim_start();
    // vLLM: `MM-DD HH:MM:SS [file.py:N] message` or `MM-DD HH:MM:SS file.py:N] message`.
    let mb = msg.as_bytes();
    if mb.len() > 15 && mb[2] == b'-' && mb[5] == b' ' && mb[8] == b':' && mb[..2].iter().all(u8::is_ascii_digit) {
        if let Some(close) = msg.find("] ").filter(|c| *c < 80) {
            msg = &msg[close + 2..];
        }
    }
    // rich: a location `file.py:123` at the end, after a run of spaces.
    if let Some((body, loc)) = msg.trim_end().rsplit_once("  ") {
        let loc = loc.trim();
        let is_loc = loc.rsplit_once(':').is_some_and(|(f, n)| f.ends_with(".py") && !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()));
        if is_loc {
            msg = body.trim_end();
        }
    }
    Some((lvl, msg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logging_records() {
        let cases: &[(&str, Option<(Level, &str)>)] = &[
            ("2026-11-30 08:58:43,160 ERROR [rank1] train: uncaught RuntimeError: boom", Some((Level::Error, "[rank1] train: uncaught RuntimeError: boom"))),
            ("2026-11-30 08:58:51,398 INFO [rank0] train: step 4 loss 1.45", Some((Level::Info, "[rank0] train: step 4 loss 1.45"))),
            ("[2026-11-30 08:58:51,398][CRITICAL] disk full", Some((Level::Error, "disk full"))),
            ("2026-11-30 08:58:51,398 - trainer - ERROR - loss is nan", Some((Level::Error, "loss is nan"))),
            ("2026-11-30 08:58:51,398 - trainer - WARNING - slow", Some((Level::Warning, "slow"))),
            ("ERROR:root:something broke", Some((Level::Error, "something broke"))),
            ("ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1)", Some((Level::Error, "failed (exitcode: 1)"))),
            (
                " ERROR    failed (exitcode: -9) local_rank: 5 (pid: 22) of  api.py:673",
                Some((Level::Error, "failed (exitcode: -9) local_rank: 5 (pid: 22) of")),
            ),
            (" WARNING  Sending process 14 closing signal SIGTERM         api.py:699", Some((Level::Warning, "Sending process 14 closing signal SIGTERM"))),
            (
                "ERROR 09-23 10:49:22 multiproc_worker_utils.py:226] Exception in worker VllmWorkerProcess while processing method",
                Some((Level::Error, "Exception in worker VllmWorkerProcess while processing method")),
            ),
            ("INFO 04-06 00:55:21 [llm_engine.py:447] init engine", Some((Level::Info, "init engine"))),
            (
                "torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -9) local_rank: 0 (pid: 14447) of binary:",
                Some((Level::Error, "failed (exitcode: -9) local_rank: 0 (pid: 14447) of binary:")),
            ),
            (
                "torch.distributed.run: [WARNING] master_addr is only used for static rdzv_backend",
                Some((Level::Warning, "master_addr is only used for static rdzv_backend")),
            ),
            (
                "           ERROR    failed (exitcode: -6) local_rank: 1 (pid: 137165) of binary: python",
                Some((Level::Error, "failed (exitcode: -6) local_rank: 1 (pid: 137165) of binary: python")),
            ),
            (
                "[05:04:49] WARNING  Sending process 137164 closing signal SIGTERM      api.py:699",
                Some((Level::Warning, "Sending process 137164 closing signal SIGTERM")),
            ),
            ("[07/19/23 05:04:49] ERROR    failed (exitcode: 1) local_rank: 0", Some((Level::Error, "failed (exitcode: 1) local_rank: 0"))),
            ("[05:04:49] ERROR is not padded", None),
            ("[12/40] ERROR    x", None),
            (
                "2025-04-24 18:57:03,337 ERR cli.py:72 -- Job 'raysubmit_LKFSP4hfiq2xPuz6' failed",
                Some((Level::Error, "cli.py:72 -- Job 'raysubmit_LKFSP4hfiq2xPuz6' failed")),
            ),
            ("epoch 3: [12/40] loss 0.1", None),
            ("RuntimeError: x", None),
            ("   INFO is not a record", None),
            ("2026-11-30 08:58:51,398 Something Else", None),
        ];
        for (t, want) in cases {
            assert_eq!(pylog(t), *want, "{t}");
        }
    }
}
