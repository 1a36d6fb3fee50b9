//! Lines that say which rank printed them, for a log no session, file name or launcher prefix
//! owns (one `train.log` from the field). A line's self-description is weaker than a prefix (it
//! is text), so it is read only from the places where a process names *itself*:
//!
//! - c10d's own tag at the start of its message: `[Rank 3] Watchdog caught ...`,
//!   `[PG ID 0 PG GUID 0(default_pg) Rank 3] ...`, `[PG 0 Rank 3] ...`, after a glog header or
//!   `what():`;
//! - a rank tag at the start of a line or in a logging record's header: `[Rank 3] step=40`
//!   (DeepSpeed's `log_dist`), `[RANK 3]`, `[rank: 3]` (Lightning), `... INFO [rank3] train:`;
//! - frameworks' own first-person phrasings: `OVERFLOW! Rank 3 Skipping step` (DeepSpeed),
//!   `Rank 3, node x, device 3, iteration 7: Unexpected result nan` and `Rank 3: found NaN`
//!   (Megatron);
//! - the environment as scripts print it: `RANK=3`, `process_index=3`, `Process index: 3`;
//! - inference servers' record headers naming their tensor-parallel rank, when it is the only
//!   parallel dimension named: SGLang `[2025-02-21 22:59:28 TP3] ...`.
//!
//! Text that names *another* rank (`from rank 0`, `Rank 1 is running collective`, `ranks: 0, 1`)
//! is never read here.

use crate::util::leading_u64;

const HEAD: usize = 256;

/// The rank a line says it was printed by, if it says so in one of the places above.
pub fn self_described(text: &str) -> Option<u32> {
    let t = crate::util::clip(text, 1024).trim_start();
    let rank = leading_tag(t)
        .or_else(|| after_header(t).and_then(leading_tag))
        .or_else(|| t.strip_prefix("what():").and_then(|r| leading_tag(r.trim_start())))
        .or_else(|| record_tag(t))
        .or_else(|| composer_header(t))
        .or_else(|| worker_tag(t))
        .or_else(|| first_person(t))
        .or_else(|| environment(t))
        .or_else(|| tensor_parallel_header(t))?;
    u32::try_from(rank).ok().filter(|r| *r < coroner_model::MAX_WORLD_SIZE)
}

/// `[2025-02-21 22:59:28 TP3] ...`: a bracketed header ending in the tensor-parallel rank, with
/// no other parallel dimension (`DP1 TP3` names a rank of a data-parallel replica: not a global
/// rank).
fn tensor_parallel_header(t: &str) -> Option<u64> {
    let r = t.strip_prefix('[')?;
    let close = r.find(']').filter(|c| *c <= 48)?;
    let mut words = r[..close].split(' ').rev();
    let tp = words.next()?.strip_prefix("TP")?;
    if !tp.bytes().all(|b| b.is_ascii_digit()) || tp.is_empty() {
        return None;
    }
    let others = words.any(|w| w.len() >= 3 && w[..2].bytes().all(|b| b.is_ascii_uppercase()) && w[2..].bytes().all(|b| b.is_ascii_digit()));
    (!others).then(|| leading_u64(tp)).flatten()
}

/// `[Rank 3]`, `[RANK 3]`, `[rank3]`, `[rank: 3]`, `[PG ... Rank 3]` at the start.
fn leading_tag(t: &str) -> Option<u64> {
    let r = t.strip_prefix('[')?;
    let close = r.find(']').filter(|c| *c <= 64)?;
    let inner = &r[..close];
    // `[PG ... Rank 3]`: the number after the last ` Rank `; a bare `[0]` (a table row) is no rank.
    let pg_rank = inner.strip_prefix("PG ").map(|pg| pg.rsplit_once(" Rank ").map_or("", |(_, n)| n));
    let words = pg_rank.unwrap_or(inner);
    let n = if pg_rank.is_some() {
        if words.is_empty() || !words.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        words
    } else {
        let lower = words.to_ascii_lowercase();
        let rest = lower.strip_prefix("rank")?;
        let digits = rest.trim_start_matches([' ', ':']);
        return (digits.bytes().all(|b| b.is_ascii_digit()) && !digits.is_empty()).then(|| leading_u64(digits)).flatten();
    };
    leading_u64(n)
}

/// The rest of a line after a glog header (`[E ProcessGroupNCCL.cpp:587] `,
/// `E1130 09:03:42.336000 3148 file.cpp:12] `).
fn after_header(t: &str) -> Option<&str> {
    let g = crate::glog::parse(t)?;
    Some(g.body.trim_start())
}

/// `[rank3]` / `[Rank 3]` / `[RANK 3]` in the first words of a logging record
/// (`2026-11-30 08:58:51,398 INFO [rank3] train: ...`, `[2026-05-19 10:10:29] [RANK 1] ...`).
fn record_tag(t: &str) -> Option<u64> {
    let b = t.as_bytes();
    let starts_dated = b.len() > 10 && (b[0].is_ascii_digit() || (b[0] == b'[' && b[1].is_ascii_digit()));
    if !starts_dated {
        return None;
    }
    let head = crate::util::clip(t, HEAD);
    let mut from = 0;
    while let Some(i) = head[from..].find('[') {
        let at = from + i;
        if let Some(r) = leading_tag(&head[at..]).filter(|_| head[at..].len() > 5 && head[at + 1..].to_ascii_lowercase().starts_with("rank")) {
            return Some(r);
        }
        // Only the header: stop at the first `: ` after a level word, where the message starts.
        from = at + 1;
    }
    None
}

/// A launcher's worker tag after a record's time: `2023-02-17 22:40:24,365 (worker_7) : ...`.
fn worker_tag(t: &str) -> Option<u64> {
    if !t.as_bytes().first()?.is_ascii_digit() {
        return None;
    }
    let head = crate::util::clip(t, 64);
    let r = &head[head.find(" (worker")? + " (worker".len()..];
    let r = r.strip_prefix(['_', '-']).unwrap_or(r);
    let n = leading_u64(r)?;
    r[r.bytes().take_while(u8::is_ascii_digit).count()..].starts_with(')').then_some(n)
}

/// Composer's console record header (llm-foundry and MosaicML examples set it up):
/// `2023-04-24 16:03:12,379: rank0[1003409][MainThread]: DEBUG: composer.utils.dist: ...`, the
/// global rank then the process id and the thread's name.
fn composer_header(t: &str) -> Option<u64> {
    if !t.as_bytes().first()?.is_ascii_digit() {
        return None;
    }
    let head = crate::util::clip(t, 64);
    let r = &head[head.find(": rank")? + ": rank".len()..];
    let n = leading_u64(r)?;
    let pid = r[r.bytes().take_while(u8::is_ascii_digit).count()..].strip_prefix('[')?;
    let digits = pid.bytes().take_while(u8::is_ascii_digit).count();
    (digits > 0 && pid[digits..].starts_with("][")).then_some(n)
}

/// Frameworks that print their own rank in a failure or overflow message.
fn first_person(t: &str) -> Option<u64> {
    if let Some(at) = t.find("OVERFLOW! Rank ") {
        return leading_u64(&t[at + "OVERFLOW! Rank ".len()..]);
    }
    // Megatron's rerun state machine: `Unexpected result nan on rank 3 at iteration #3`.
    if let Some(at) = t.find("Unexpected result ") {
        let r = &t[at..];
        if let Some(on) = r.find(" on rank ") {
            let n = leading_u64(&r[on + " on rank ".len()..])?;
            return r[on..].contains(" at iteration").then_some(n);
        }
    }
    // Megatron: `RuntimeError: Rank 2, node n, device 2, iteration 9: Unexpected result nan`,
    // `AssertionError: Rank 3: found NaN in local grad norm`, and the same through Python's
    // logging header (`ERROR:megatron.core.rerun_state_machine:Rank 3, node n, ...`).
    let msg = match t.split_once("Error: ") {
        Some((_, msg)) => msg,
        None => crate::pylog::pylog(t).map(|(_, m)| m)?,
    };
    let r = msg.strip_prefix("Rank ")?;
    let n = leading_u64(r)?;
    let after = &r[r.bytes().take_while(u8::is_ascii_digit).count()..];
    (after.starts_with(", node") || after.starts_with(": ")).then_some(n)
}

/// `RANK=3` (not `LOCAL_RANK=3`), `process_index=3`, `Process index: 3`.
fn environment(t: &str) -> Option<u64> {
    let head = crate::util::clip(t, HEAD);
    for key in ["RANK=", "process_index=", "Process index: ", "process_index: "] {
        let mut from = 0;
        while let Some(i) = head[from..].find(key) {
            let at = from + i;
            let glued = at > 0 && (head.as_bytes()[at - 1].is_ascii_alphanumeric() || head.as_bytes()[at - 1] == b'_');
            if !glued {
                if let Some(n) = leading_u64(&head[at + key.len()..]) {
                    return Some(n);
                }
            }
            from = at + key.len();
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_inference_servers_tensor_parallel_header() {
        assert_eq!(self_described("[2025-02-21 22:59:28 TP3] Scheduler hit an exception: Traceback"), Some(3));
        assert_eq!(self_described("[2025-09-22 10:25:22 DP0 PP0 TP1] Scheduler hit an exception"), None);
        assert_eq!(self_described("[2025-02-21 22:59:28] TP3 is fine"), None);
    }

    #[test]
    fn a_process_naming_itself() {
        for (line, want) in [
            ("[E ProcessGroupNCCL.cpp:587] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(OpType=BROADCAST, Timeout(ms)=1800000) ran for 1808499 milliseconds before timing out.", 1),
            ("[E1229 10:00:01.000000000 ProcessGroupNCCL.cpp:616] [PG ID 0 PG GUID 0(default_pg) Rank 5] failure detected by watchdog at work sequence id: 80078", 5),
            ("[PG 0 Rank 2] Timeout at NCCL work: 7487, last enqueued NCCL work: 7487", 2),
            ("what():  [Rank 0] Watchdog caught collective operation timeout", 0),
            ("[Rank 3] step=40, skipped=2, lr=[5e-05], mom=[(0.9, 0.999)]", 3),
            ("[rank: 1] Seed set to 42", 1),
            ("2026-11-30 08:58:51,398 INFO [rank6] train: step 4 loss 1.45", 6),
            ("[2026-05-19 10:10:29,701] [RANK 1] [ERROR] out of patience", 1),
            ("[2023-06-07 22:16:00,018] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 4 Skipping step. Attempted loss scale: 1, reducing to 1", 4),
            ("RuntimeError: Rank 2, node gpu-7, device 2, iteration 11: Unexpected result nan (message='found NaN in local grad norm')", 2),
            ("AssertionError: Rank 3: found NaN in local grad norm in backwards pass.", 3),
            ("RANK=7 LOCAL_RANK=3 WORLD_SIZE=16", 7),
            ("Distributed environment: MULTI_GPU  Backend: nccl Num processes: 4 Process index: 2 Local process index: 2", 2),
            ("2023-04-24 16:03:12,379: rank3[1003409][MainThread]: DEBUG: composer.utils.dist: Initializing torch.dist", 3),
            ("2023-02-17 22:40:24,367 (worker_7) : Traceback (most recent call last):", 7),
            ("ERROR:megatron.core.rerun_state_machine:Unexpected result nan on rank 3 at iteration #3 invocation #2 (message='found NaN')", 3),
            ("ERROR:megatron.core.rerun_state_machine:Rank 3, node n1, device 3, iteration #3: First rerun", 3),
        ] {
            assert_eq!(self_described(line), Some(want), "{line}");
        }
    }

    #[test]
    fn text_about_other_ranks_is_not_a_self_description() {
        for line in [
            "[PG ID 0 PG GUID 0(default_pg) Rank 1] Received a dump signal due to a collective timeout from  rank 0",
            "RuntimeError: Detected mismatch between collectives on ranks. Rank 1 is running collective: CollectiveFingerPrint(...)",
            "LOCAL_RANK=3",
            "Stalled ranks: 0: [allreduce.x]",
            "Parameter indices which did not receive grad for rank 0: 1",
            "[E ProcessGroupNCCL.cpp:341] Some NCCL operations have failed or timed out.",
            "   [rank 5 of 8] loading",
            "[0]:",
            "[3] 12",
            "2026-11-30 08:58:51,398 INFO waiting for rank 3 to join",
            "2023-04-24 16:03:12,379: rank3 is slow [12] here",
            "2023-02-17 22:40:24,367 waiting for (worker_7 of 8) to join",
        ] {
            let got = self_described(line);
            // The first line's own tag is rank 1 (the receiver); the detector it names is not read.
            assert!(got.is_none() || (line.starts_with("[PG ID") && got == Some(1)), "{line}: {got:?}");
        }
    }
}
