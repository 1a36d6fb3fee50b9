//! Rank prefixes that launchers put in front of a worker's lines.
//!
//! torchrun `--tee` writes `[default3]:` (role name and *local* rank), PyTorch's own exception
//! handler writes `[rank3]:` (global rank), `srun --label` writes `3: `, and Horovod/Open MPI's
//! `--tag-output` writes `[1,3]<stderr>:`. Byte-level, no regex: this runs on the agent's hot path.

/// What the leading prefixes of a line say about its owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RankPrefix {
    /// `(RayTrainWorker pid=43515)`, `(VllmWorkerProcess pid=1775)`: a process named by its pid
    /// (Ray and vLLM actors), its rank unknown unless the prefix or a later one says it.
    pub pid: Option<u32>,
    /// `[rankN]:` or a Horovod/MPI tag: a global rank.
    pub global_rank: Option<u32>,
    /// `[<role>N]:` from torchrun: a local rank on the node.
    pub local_rank: Option<u32>,
    /// `N: ` from `srun --label`: the Slurm task id, which is the global rank under srun.
    pub task_id: Option<u32>,
    /// How many bytes of prefix precede the line's own text.
    pub len: usize,
}

impl RankPrefix {
    /// The line without its prefixes.
    pub fn rest<'a>(&self, line: &'a [u8]) -> &'a [u8] {
        &line[self.len..]
    }
}

/// Reads every leading rank prefix of `line`, in any order and nesting
/// (`[default1]:[rank1]: Traceback` carries both).
pub fn split_rank_prefix(line: &[u8]) -> RankPrefix {
    let mut p = RankPrefix::default();
    loop {
        let rest = &line[p.len..];
        if let Some(used) = wrapper(rest, p.len == 0) {
            p.len += used;
            continue;
        }
        if let Some((pid, rank, used)) = actor(rest) {
            p.pid = p.pid.or(Some(pid));
            p.global_rank = p.global_rank.or(rank);
            p.len += used;
            continue;
        }
        if let Some((value, used)) = rank_field(rest) {
            p.global_rank = p.global_rank.or(Some(value));
            p.len += used;
            continue;
        }
        if let Some((kind, value, used)) = bracket_prefix(rest) {
            match kind {
                BracketKind::Rank => p.global_rank = p.global_rank.or(Some(value)),
                BracketKind::Role => p.local_rank = p.local_rank.or(Some(value)),
                BracketKind::Mpi => p.global_rank = p.global_rank.or(Some(value)),
            }
            p.len += used;
            continue;
        }
        if p.len == 0 {
            if let Some((value, used)) = srun_label(rest) {
                p.task_id = Some(value);
                p.len += used;
                continue;
            }
        }
        return p;
    }
}

/// Bytes that wrap a line without saying whose it is, skipped so that what follows is read:
/// ANSI colour codes (vLLM), a container runtime's RFC 3339 stamp
/// (`2025-04-06T07:55:21.108632509Z `), docker compose's service column (`vllm-1  | `),
/// Determined's `<info>    [2021-12-07 10:43:05] 087c0ee7 || `, a log viewer's line number
/// (`[80746] `), a NeMo-Run role (`i.pretrain/0 `, `nemo.collections.llm.api.finetune/0 `), and
/// quoting marks (`> `, a comment's `# ` before a printed time). All but ANSI codes only at the
/// very start of the line.
fn wrapper(s: &[u8], at_start: bool) -> Option<usize> {
    if s.starts_with(b"\x1b[") {
        let end = s.iter().skip(2).take(16).position(|b| b.is_ascii_alphabetic())? + 3;
        return Some(end + usize::from(s.get(end) == Some(&b' ') && !at_start));
    }
    // Determined's empty container field before a task's rank: `[] [rank=0] ...`.
    if s.starts_with(b"[] [rank=") {
        return Some(3);
    }
    if !at_start {
        return None;
    }
    // A terminal's echo of Ctrl-C before what was printed next: `^CWARNING:torch...`.
    if s.starts_with(b"^C") && s.len() > 2 {
        return Some(2);
    }
    // A reply quoting a log e-mail style: `> ` (or a bare `>` on an empty quoted line).
    if s.first() == Some(&b'>') && s.get(1).is_none_or(|b| *b == b' ') {
        return Some(s.len().min(2));
    }
    // A log pasted into code as comments, `# ` before each line: skipped only when a printed
    // time or a glog header follows (`# 2023-02-24 15:02:52.048815: E ...`, `# E0405 18:39:10...`),
    // so that a commented line of prose or code stays what it is.
    if let Some(rest) = s.strip_prefix(b"# ") {
        let glog = rest.len() > 5 && matches!(rest[0], b'I' | b'W' | b'E' | b'F') && rest[1..5].iter().all(u8::is_ascii_digit);
        if rest.first().is_some_and(u8::is_ascii_digit) || glog {
            return Some(2);
        }
    }
    // A tool that captured a child's streams and prints each line under the stream's name
    // (`accelerate test`, test runners): `stderr: ` / `stdout: `.
    for tag in [&b"stderr: "[..], b"stdout: "] {
        if s.starts_with(tag) {
            return Some(tag.len());
        }
    }
    if let Some(used) = task_runner_stamp(s) {
        return Some(used);
    }
    if let Some(used) = runner_level_stamp(s) {
        return Some(used);
    }
    if let Some(used) = ctime_before_tag(s) {
        return Some(used);
    }
    // RFC 3339 with a zone: `2025-04-06T07:55:21.108632509Z ` (a colon after it too:
    // `2019-06-02T16:13:44.884Z: [1,12]<stdout>:`).
    if s.len() > 21 && s[4] == b'-' && s[7] == b'-' && s[10] == b'T' && s[..4].iter().all(u8::is_ascii_digit) {
        let sp = s.iter().take(40).position(|b| *b == b' ')?;
        let stamp = s[..sp].strip_suffix(b":").unwrap_or(&s[..sp]);
        if stamp.ends_with(b"Z") || stamp[19..].contains(&b'+') {
            return Some(sp + 1);
        }
    }
    // A log console's columns (CloudWatch, exported): `  | 2024-11-28T07:42:14.532Z | text`.
    let cols = s.iter().take_while(|b| **b == b' ').count();
    if let Some(r) = s[cols..].strip_prefix(b"| ") {
        if let Some(end) = memchr::memmem::find(&r[..r.len().min(48)], b" | ") {
            let stamp = &r[..end];
            if stamp.len() >= 19 && stamp[4] == b'-' && stamp[10] == b'T' && stamp[..4].iter().all(u8::is_ascii_digit) {
                return Some(cols + 2 + end + 3);
            }
        }
    }
    // Determined: `<info>    [2021-12-07 10:43:05] 087c0ee7 || `.
    if s.first() == Some(&b'<') {
        let bars = memchr::memmem::find(&s[..s.len().min(80)], b" || ")?;
        let head = &s[..bars];
        if head.contains(&b'>') && head.contains(&b'[') {
            return Some(bars + 4);
        }
        return None;
    }
    // A report quoting a log behind a bar: `        | [rank0]: FileNotFoundError: ...`.
    let lead = s.iter().take(16).take_while(|b| **b == b' ').count();
    if lead >= 2 && s.get(lead) == Some(&b'|') && s.get(lead + 1) == Some(&b' ') && s.get(lead + 2).is_some_and(|b| *b != b' ' && *b != b'|') {
        return Some(lead + 2);
    }
    // A log viewer's line number: `[80746] ` (digits only, then a space).
    if s.first() == Some(&b'[') {
        let n = s[1..].iter().take(10).take_while(|b| b.is_ascii_digit()).count();
        if n > 0 && s.get(1 + n) == Some(&b']') && s.get(2 + n) == Some(&b' ') {
            return Some(n + 3);
        }
        return None;
    }
    let word = s.iter().take(64).take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'/')).count();
    if word == 0 {
        return None;
    }
    // grep over several files: `LOG1.0.txt:` or `rank3.log:120:` before each line.
    if s.get(word) == Some(&b':') {
        let name = &s[..word];
        let is_log = [&b".txt"[..], b".log", b".out", b".err"].iter().any(|ext| name.ends_with(ext));
        if is_log {
            let mut used = word + 1;
            let n = s[used..].iter().take(10).take_while(|b| b.is_ascii_digit()).count();
            if n > 0 && s.get(used + n) == Some(&b':') {
                used += n + 1;
            }
            return Some(used);
        }
    }
    // docker compose: `vllm-1  | ` (the service name, padded, then `| `).
    let pad = s[word..].iter().take_while(|b| **b == b' ').count();
    if pad >= 1 && s.get(word + pad) == Some(&b'|') && s.get(word + pad + 1) == Some(&b' ') && s[..word].contains(&b'-') {
        return Some(word + pad + 2);
    }
    // NeMo-Run: `role/0 ` (a dotted or plain role name, a slash, the replica index).
    let w = &s[..word];
    if let Some(slash) = w.iter().rposition(|b| *b == b'/') {
        let idx = &w[slash + 1..];
        if slash > 0 && !idx.is_empty() && idx.iter().all(u8::is_ascii_digit) && !w[..slash].contains(&b'/') && s.get(word) == Some(&b' ') {
            return Some(word + 1);
        }
    }
    None
}

/// A GUI runner's stamp and level before each line of the child's output (Pinokio, web UIs that
/// tail a training run): `[2024-09-09 19:22:14] [INFO] `, also with its time cut by the viewer
/// (`39] [INFO] `). The level is the runner's, not the line's: an error line under `[INFO]` is
/// still an error.
fn runner_level_stamp(s: &[u8]) -> Option<usize> {
    let open = usize::from(s.first() == Some(&b'['));
    let stamp = s[open..].iter().take(32).take_while(|b| b.is_ascii_digit() || matches!(b, b'-' | b':' | b' ' | b'.' | b',')).count();
    if stamp < 2 || !s[open..open + stamp].iter().any(u8::is_ascii_digit) {
        return None;
    }
    let rest = s.get(open + stamp..)?.strip_prefix(b"] [")?;
    let level = rest.iter().take(9).take_while(|b| b.is_ascii_uppercase()).count();
    if !matches!(&rest[..level], b"INFO" | b"WARN" | b"WARNING" | b"ERROR" | b"DEBUG" | b"CRITICAL") {
        return None;
    }
    let after = rest[level..].strip_prefix(b"] ")?;
    // DeepSpeed's own records have the same head and go on with the logger's location
    // (`[launch.py:434:sigkill_handler]`): those are read whole.
    if after.first() == Some(&b'[') {
        return None;
    }
    Some(open + stamp + 3 + level + 2)
}

/// A workflow runner's stamp before each line of a task's output (Metaflow):
/// `2023-04-29 06:01:12.977 [177/train/578 (pid 28936)] [09c561ee-a44c-...] ` - a date and time,
/// the task's `run/step/task (pid N)` in brackets, then optionally an id in brackets.
fn task_runner_stamp(s: &[u8]) -> Option<usize> {
    let date = s.get(..11)?;
    if !(date[..4].iter().all(u8::is_ascii_digit) && date[4] == b'-' && date[7] == b'-' && date[10] == b' ') {
        return None;
    }
    let open = 11 + s.get(11..40)?.iter().position(|b| *b == b'[')?;
    let time = &s[11..open];
    if time.len() < 9 || !time.ends_with(b" ") || time[2] != b':' || !time[..time.len() - 1].iter().all(|b| b.is_ascii_digit() || matches!(b, b':' | b'.')) {
        return None;
    }
    let close = open + memchr::memchr(b']', s.get(open..(open + 120).min(s.len()))?)?;
    let task = &s[open + 1..close];
    if !(task.ends_with(b")") && memchr::memmem::find(task, b" (pid ").is_some() && task.contains(&b'/')) {
        return None;
    }
    let mut used = close + 1;
    if s.get(used) == Some(&b' ') {
        used += 1;
    }
    if s.get(used) == Some(&b'[') {
        if let Some(end) = memchr::memchr(b']', &s[used..(used + 64).min(s.len())]) {
            let id = &s[used + 1..used + end];
            if !id.is_empty() && id.iter().all(|b| b.is_ascii_hexdigit() || *b == b'-') {
                used += end + 1 + usize::from(s.get(used + end + 1) == Some(&b' '));
            }
        }
    }
    Some(used)
}

/// `horovodrun --log-with-timestamp` puts a ctime stamp right before the rank tag:
/// `Fri Sep 11 07:07:20 2020[0]<stderr>:` (weekday, month, day, time, year, no separator).
fn ctime_before_tag(s: &[u8]) -> Option<usize> {
    let head = s.get(..24)?;
    let alpha = |r: std::ops::Range<usize>| head[r].iter().all(u8::is_ascii_alphabetic);
    let digit = |r: std::ops::Range<usize>| head[r].iter().all(u8::is_ascii_digit);
    let day_ok = (head[8] == b' ' || head[8].is_ascii_digit()) && head[9].is_ascii_digit();
    let shape = alpha(0..3) && head[3] == b' ' && alpha(4..7) && head[7] == b' ' && day_ok && head[10] == b' ';
    let time = digit(11..13) && head[13] == b':' && digit(14..16) && head[16] == b':' && digit(17..19) && head[19] == b' ' && digit(20..24);
    (shape && time && s.get(24) == Some(&b'[')).then_some(24)
}

/// A Ray or vLLM actor's prefix: `(RayTrainWorker pid=43515) `, `(MeshHostWorker pid=10615,
/// ip=10.32.10.64) `, `(VllmWorker rank=2 pid=825) `. Returns (pid, rank, bytes used).
fn actor(s: &[u8]) -> Option<(u32, Option<u32>, usize)> {
    if s.first() != Some(&b'(') {
        return None;
    }
    let close = memchr::memchr(b')', &s[..s.len().min(120)])?;
    let inner = std::str::from_utf8(&s[1..close]).ok()?;
    let (name, fields) = inner.split_once(' ')?;
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return None;
    }
    let field = |key: &str| fields.split([',', ' ']).find_map(|f| f.trim().strip_prefix(key).and_then(|v| parse_u32(v.as_bytes())));
    let pid = field("pid=")?;
    let used = close + 1 + usize::from(s.get(close + 1) == Some(&b' '));
    Some((pid, field("rank=").or_else(|| tensor_parallel_rank(name, fields)), used))
}

/// vLLM's worker names carry their tensor-parallel index: `(VllmWorker TP3 pid=408)`,
/// `(Worker_TP3_EP3 pid=406)`. With tensor parallelism alone it is the worker's rank; a data- or
/// pipeline-parallel index beside it (`Worker_DP1_TP3`) leaves the rank unknown (it depends on
/// the sizes), as does an expert index alone.
fn tensor_parallel_rank(name: &str, fields: &str) -> Option<u32> {
    let mut tp = None;
    for token in name.split('_').chain(fields.split([' ', ','])) {
        let index = |p: &str| token.strip_prefix(p).filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if index("DP").is_some() || index("PP").is_some() {
            return None;
        }
        if let Some(n) = index("TP") {
            tp = n.parse().ok();
        }
    }
    tp
}

enum BracketKind {
    Rank,
    Role,
    Mpi,
}

/// `[rank12]:`, `[default3]:`, `[trainer0]:`, `[1,3]<stderr>:`; one optional space after the colon
/// is *not* consumed, so the line's own text keeps its indentation.
fn bracket_prefix(s: &[u8]) -> Option<(BracketKind, u32, usize)> {
    if s.first() != Some(&b'[') {
        return None;
    }
    let close = memchr::memchr(b']', &s[..s.len().min(40)])?;
    let inner = &s[1..close];
    // Horovod / Open MPI: [jobid,rank]<stdout>: or [jobid,rank]<stderr>:
    if let Some(comma) = inner.iter().position(|&b| b == b',') {
        let rank = parse_u32(&inner[comma + 1..])?;
        parse_u32(&inner[..comma])?;
        let after = &s[close + 1..];
        for tag in [&b"<stdout>:"[..], &b"<stderr>:"[..]] {
            if after.starts_with(tag) {
                return Some((BracketKind::Mpi, rank, close + 1 + tag.len()));
            }
        }
        return None;
    }
    // Horovod's own launcher (`horovodrun --gloo`, elastic): `[3]<stderr>:`, the rank alone.
    if let Some(tag) = [&b"<stdout>:"[..], &b"<stderr>:"[..]].into_iter().find(|tag| s[close + 1..].starts_with(tag)) {
        return Some((BracketKind::Mpi, parse_u32(inner)?, close + 1 + tag.len()));
    }
    if s.get(close + 1) != Some(&b':') {
        return None;
    }
    let digits_start = inner.iter().position(|b| b.is_ascii_digit())?;
    let (name, digits) = inner.split_at(digits_start);
    let value = parse_u32(digits)?;
    if name.is_empty() || !name.iter().all(|b| b.is_ascii_alphabetic() || *b == b'_') {
        return None;
    }
    let kind = if name == b"rank" { BracketKind::Rank } else { BracketKind::Role };
    Some((kind, value, close + 2))
}

/// Determined's task log: `[rank=0] text`, the rank as a key and value.
fn rank_field(s: &[u8]) -> Option<(u32, usize)> {
    let r = s.strip_prefix(b"[rank=")?;
    let digits = r.iter().take(7).take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || r.get(digits) != Some(&b']') {
        return None;
    }
    let used = "[rank=".len() + digits + 1;
    Some((parse_u32(&r[..digits])?, used + usize::from(s.get(used) == Some(&b' '))))
}

/// `srun --label`: `12: text`. Only digits, then `: `.
fn srun_label(s: &[u8]) -> Option<(u32, usize)> {
    let digits = s.iter().take(7).take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || s.get(digits) != Some(&b':') || s.get(digits + 1) != Some(&b' ') {
        return None;
    }
    Some((parse_u32(&s[..digits])?, digits + 2))
}

fn parse_u32(d: &[u8]) -> Option<u32> {
    if d.is_empty() || d.len() > 9 || !d.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(d.iter().fold(0u32, |acc, b| acc * 10 + u32::from(b - b'0')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torchrun_tee_with_pytorch_rank_prefix() {
        let line = b"[default1]:[rank1]: Traceback (most recent call last):";
        let p = split_rank_prefix(line);
        assert_eq!((p.local_rank, p.global_rank), (Some(1), Some(1)));
        assert_eq!(p.rest(line), b" Traceback (most recent call last):");
    }

    #[test]
    fn glog_brackets_are_not_rank_prefixes() {
        let line = b"[rank0]:[E1130 08:59:11.424298747 ProcessGroupNCCL.cpp:689] [Rank 0] Watchdog";
        let p = split_rank_prefix(line);
        assert_eq!(p.global_rank, Some(0));
        assert!(p.rest(line).starts_with(b"[E1130"));
        assert_eq!(split_rank_prefix(b"[W1130 08:58:47.665 Utils.hpp:137] x").len, 0);
    }

    #[test]
    fn srun_label_and_mpi_tags() {
        let p = split_rank_prefix(b"12: step 4");
        assert_eq!((p.task_id, p.len), (Some(12), 4));
        let p = split_rank_prefix(b"[1,3]<stderr>:Traceback");
        assert_eq!((p.global_rank, p.len), (Some(3), 14));
        // horovodrun's gloo launcher: the rank alone, optionally after a ctime stamp.
        let p = split_rank_prefix(b"[12]<stdout>:Iter #1");
        assert_eq!((p.global_rank, p.len), (Some(12), 13));
        let line = b"Mon Mar  1 17:02:03 2021[2]<stderr>:bash: line 1: 41 Aborted  python train.py";
        let p = split_rank_prefix(line);
        assert_eq!(p.global_rank, Some(2));
        assert!(p.rest(line).starts_with(b"bash: line 1:"));
        assert_eq!(split_rank_prefix(b"[12]<not a tag>").len, 0);
        // A Python logging time is not a label.
        assert_eq!(split_rank_prefix(b"2026-11-30 08:58:51,398 INFO").len, 0);
        assert_eq!(split_rank_prefix(b"08:58:51 x").len, 0);
    }

    #[test]
    fn wrappers_and_actor_prefixes_are_seen_through() {
        let p = split_rank_prefix(b"(RayTrainWorker pid=43515) [rank1]: Traceback (most recent call last):");
        assert_eq!((p.pid, p.global_rank), (Some(43515), Some(1)));
        let line = b"(MeshHostWorker pid=10615, ip=10.32.10.64) Fatal Python error: Segmentation fault";
        let p = split_rank_prefix(line);
        assert_eq!((p.pid, p.global_rank), (Some(10615), None));
        assert_eq!(p.rest(line), b"Fatal Python error: Segmentation fault");
        let p = split_rank_prefix(b"(VllmWorker rank=2 pid=825) ERROR 10-25 13:08:43 [core.py:708] x");
        assert_eq!((p.pid, p.global_rank), (Some(825), Some(2)));
        for (line, rank) in [
            (&b"(VllmWorker TP3 pid=408) INFO 08-25 12:24:19 [multiproc_executor.py:520] x"[..], Some(3)),
            (b"(Worker_TP3_EP3 pid=406) ERROR 11-25 08:05:06 [multiproc_executor.py:815] x", Some(3)),
            (b"(Worker_DP1_TP3 pid=406) ERROR x", None),
            (b"(Worker_PP1_TP0 pid=406) ERROR x", None),
            (b"(EngineCore_0 pid=271) ERROR x", None),
        ] {
            let p = split_rank_prefix(line);
            assert_eq!((p.pid.is_some(), p.global_rank), (true, rank), "{}", String::from_utf8_lossy(line));
        }
        let line = b"vllm-1  | 2025-04-06T07:55:21.108632509Z INFO 04-06 00:55:21 [llm_engine.py:447] x";
        assert_eq!(split_rank_prefix(line).rest(line), b"2025-04-06T07:55:21.108632509Z INFO 04-06 00:55:21 [llm_engine.py:447] x");
        let line = b"2025-04-06T07:55:21.108632509Z INFO 04-06 00:55:21 [llm_engine.py:447] x";
        assert_eq!(split_rank_prefix(line).rest(line), b"INFO 04-06 00:55:21 [llm_engine.py:447] x");
        let line = b"2019-06-02T16:13:44.884Z: [1,12]<stdout>:host:815:864 [0] NCCL WARN x";
        assert_eq!(split_rank_prefix(line).global_rank, Some(12));
        let line = b"  | 2024-11-28T07:42:14.532Z | algo-1:17774:17862 [1] misc/socket.cc:717 NCCL WARN x";
        assert_eq!(split_rank_prefix(line).rest(line), b"algo-1:17774:17862 [1] misc/socket.cc:717 NCCL WARN x");
        let line = b"> [] [rank=0] RuntimeError: CUDA out of memory.";
        let p = split_rank_prefix(line);
        assert_eq!((p.global_rank, p.rest(line)), (Some(0), &b"RuntimeError: CUDA out of memory."[..]));
        let line = b"^CWARNING:torch.distributed.elastic.agent.server.api:Received 2 death signal, shutting down workers";
        assert_eq!(split_rank_prefix(line).rest(line), &line[2..]);
        assert_eq!(split_rank_prefix(b"^C").len, 0, "a bare echo stays a line");
        let line = b"<>        [2021-12-07 10:43:01] 087c0ee7 || RuntimeError: Horovod detected";
        assert_eq!(split_rank_prefix(line).rest(line), b"RuntimeError: Horovod detected");
        let line = b"[80746] [rank0]:[E321 02:07:08.1 ProcessGroupNCCL.cpp:1] x";
        let p = split_rank_prefix(line);
        assert_eq!((p.global_rank, p.rest(line)), (Some(0), &b"[E321 02:07:08.1 ProcessGroupNCCL.cpp:1] x"[..]));
        let line = b"        | [rank0]: FileNotFoundError: Caught FileNotFoundError in DataLoader worker process 2.";
        assert_eq!(split_rank_prefix(line).global_rank, Some(0));
        let line = b"LOG1.0.txt:learnfair062:32615:32615 [0] NCCL INFO Broadcast: opCount 0";
        assert_eq!(split_rank_prefix(line).rest(line), b"learnfair062:32615:32615 [0] NCCL INFO Broadcast: opCount 0");
        let line = b"rank3.log:120:[rank3]: boom";
        assert_eq!((split_rank_prefix(line).global_rank, split_rank_prefix(line).rest(line)), (Some(3), &b" boom"[..]));
        let line = b"i.pretrain/0 [default2]:[rank2]: RuntimeError: Rank 2";
        let p = split_rank_prefix(line);
        assert_eq!((p.local_rank, p.global_rank, p.rest(line)), (Some(2), Some(2), &b" RuntimeError: Rank 2"[..]));
        let line = b"\x1b[1;36m(VllmWorker rank=0 pid=13543)\x1b[0;0m INFO x";
        let p = split_rank_prefix(line);
        assert_eq!((p.global_rank, p.rest(line)), (Some(0), &b"INFO x"[..]));
        // An e-mail style quote, a captured child's stream name, a workflow runner's task stamp.
        let line = b"> [rank1]:[E131 16:15:16.707598872 ProcessGroupNCCL.cpp:1595] x";
        let p = split_rank_prefix(line);
        assert_eq!((p.global_rank, p.rest(line)), (Some(1), &b"[E131 16:15:16.707598872 ProcessGroupNCCL.cpp:1595] x"[..]));
        assert_eq!(split_rank_prefix(b">").len, 1);
        let line = b"# 2023-02-24 15:02:52.048815: E external/xla/pjrt/client.cc:2410] Execution of replica 0 failed";
        assert_eq!(split_rank_prefix(line).rest(line), b"2023-02-24 15:02:52.048815: E external/xla/pjrt/client.cc:2410] Execution of replica 0 failed");
        let line = b"# E0405 18:39:10.837983     387 coordination_service_agent.cc:455] Polled an error";
        assert_eq!(split_rank_prefix(line).rest(line), b"E0405 18:39:10.837983     387 coordination_service_agent.cc:455] Polled an error");
        let line = b"stderr: RuntimeError: NCCL error in: x";
        assert_eq!(split_rank_prefix(line).rest(line), b"RuntimeError: NCCL error in: x");
        let line = b"2023-04-29 06:01:12.977 [177/train/578 (pid 28936)] [09c561ee-a44c-4795-967c-7183a83b3160] OSError: [Errno 28] No space left on device";
        assert_eq!(split_rank_prefix(line).rest(line), b"OSError: [Errno 28] No space left on device");
        let line = b"2023-04-29 06:01:12.977 [177/train/578 (pid 28936)] Traceback (most recent call last):";
        assert_eq!(split_rank_prefix(line).rest(line), b"Traceback (most recent call last):");
        // Not wrappers: a fairseq table row, an exception, a path, a time.
        for line in [
            &b"| epoch 027 | loss 6.343"[..],
            b"RuntimeError: x",
            b"/usr/lib/python3/x.py:12: UserWarning",
            b"(most recent call last)",
            b"2026-11-30 08:58:51,398 INFO x",
            b">>> import torch",
            b">x",
            b"# Step 1 - Loss: 0.000104904",
            b"# Error handling below",
            b"2026-11-30 08:58:51.398 [rank0] step 4",
            b"2026-11-30 08:58:51.398 [train/1 (pid 3)x",
        ] {
            assert_eq!(split_rank_prefix(line).len, 0, "{}", String::from_utf8_lossy(line));
        }
    }

    #[test]
    fn a_gui_runners_stamp_and_level_are_skipped_even_when_the_viewer_cut_the_stamp() {
        let rest = |l: &'static [u8]| String::from_utf8_lossy(split_rank_prefix(l).rest(l)).into_owned();
        assert_eq!(rest(b"[2025-01-02 03:04:05] [INFO] Traceback (most recent call last):"), "Traceback (most recent call last):");
        assert_eq!(rest(b"07] [ERROR] RuntimeError: boom"), "RuntimeError: boom");
        // DeepSpeed's records and a logger's own stamp are the line itself.
        assert_eq!(split_rank_prefix(b"[2025-01-02 03:04:05,123] [ERROR] [launch.py:434:sigkill_handler] x").len, 0);
        assert_eq!(split_rank_prefix(b"[2025-01-02 03:04:05,123] torch.distributed.run: [WARNING] x").len, 0);
        assert_eq!(split_rank_prefix(b"[12] [rank3]: x").global_rank, Some(3));
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        for line in [&b"["[..], b"[]", b"[rank]:", b"[rank99999999999]:", b"[1,]<stdout>:", b"1:"] {
            let p = split_rank_prefix(line);
            assert!(p.len <= line.len());
        }
    }
}
