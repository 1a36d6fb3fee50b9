//! PyTorch c10d messages: ProcessGroupNCCL's watchdog, PG status, dump signals, heartbeat monitor,
//! collective mismatch (TORCH_DISTRIBUTED_DEBUG=DETAIL), desync reports, NCCL errors as c10d
//! reports them, TCPStore failures, and gloo transport errors.
//!
//! [`classify_body`] reads the message of a glog line; [`specific`] reads any failure message
//! (a traceback's final line, a logged error) for the events hidden inside it.

use crate::util::{leading_u64, num_after};
use aho_corasick::AhoCorasick;
use coroner_model::{CollectiveFingerprint, EventKind, PeerRef, PgId, Rank, SeqNo};
use std::sync::LazyLock;

/// Every literal [`specific`] looks for; a message with none of them is skipped in one pass.
static SPECIFIC: LazyLock<Option<AhoCorasick>> = LazyLock::new(|| {
    AhoCorasick::new([
        "Detected mismatch",
        "Watchdog caught",
        "Connection closed by peer",
        "Connection reset by peer",
        "Timed out waiting ",
        "NCCL",
        "nccl",
        "DistStoreError",
        "TCPStore",
        "[c10d]",
        "SocketImpl(",
    ])
    .ok()
});

/// What a glog-style c10d body means; `None` when it is not a c10d message this module knows.
pub fn classify_body(body: &str, out: &mut Vec<EventKind>) -> bool {
    let before = out.len();
    if body.contains("Watchdog caught collective operation timeout") {
        if let Some(k) = watchdog_timeout(body) {
            out.push(k);
        }
    } else if body.contains("Received a dump signal") {
        out.push(dump_signal(body));
    } else if body.contains("last enqueued") || body.contains("Timeout at NCCL work") || body.contains("detected by watchdog at work") {
        // The head names the status line even when a paste or a terminal cut it before its
        // `last enqueued ...` fields.
        out.push(pg_status(body));
    } else if body.contains("Terminating the process after attempting to dump debug info")
        || body.contains("we are taking the entire process down")
        // `Process group watchdog thread terminated with exception: ...` cut before its cause (a
        // terminal's wrap, a paste): the watchdog gave up, and why is not in the line.
        || (body.contains("watchdog thread terminat") && !body.contains("exception: "))
    {
        out.push(EventKind::WatchdogAbort { pg: pg_of(body) });
    } else if body.contains("watchdog got stuck for") || body.contains("Heartbeat monitor timed out") {
        out.push(EventKind::HeartbeatStuck { seconds: num_after(body, "got stuck for") });
    } else if is_desync_report(body) {
        out.push(EventKind::Warning { message: body.to_string() });
    } else if is_store_error(body) {
        out.push(EventKind::StoreError { message: body.to_string() });
    } else {
        specific(body, out);
    }
    out.len() > before
}

/// The specific events inside a failure message (collective mismatch, gloo peer loss and
/// timeouts, NCCL errors, store errors, watchdog timeouts raised as exceptions).
pub fn specific(msg: &str, out: &mut Vec<EventKind>) {
    if SPECIFIC.as_ref().is_some_and(|ac| !ac.is_match(msg)) {
        return;
    }
    if msg.contains("Detected mismatch between collectives") {
        if let Some(k) = mismatch(msg) {
            out.push(k);
        }
    }
    if msg.contains("Watchdog caught collective operation timeout") {
        if let Some(k) = watchdog_timeout(msg) {
            out.push(k);
        }
    }
    let transport = if msg.contains("gloo") { "gloo" } else { "tcp" };
    if let Some(at) = msg.find("Connection closed by peer") {
        out.push(EventKind::ConnectionClosed { peer: bracket_addr(&msg[at + "Connection closed by peer".len()..]), transport: transport.to_string() });
    } else if msg.contains("Connection reset by peer") && msg.contains("gloo") {
        let peer = msg.find("error ").and_then(|at| bracket_addr(&msg[at + 5..]));
        out.push(EventKind::ConnectionClosed { peer, transport: transport.to_string() });
    }
    if let Some(at) = msg.find("Timed out waiting ") {
        let r = &msg[at + "Timed out waiting ".len()..];
        let timeout_ms = leading_u64(r);
        let operation = r.find("ms for ").map(|i| r[i + 7..].split_whitespace().next().unwrap_or("").to_string()).unwrap_or_default();
        out.push(EventKind::TransportTimeout { transport: transport.to_string(), operation, timeout_ms });
    }
    if let Some(code) = nccl_error_code(msg) {
        out.push(EventKind::NcclError { code, message: msg.to_string() });
    }
    if msg.contains("DistStoreError") || is_store_error(msg) {
        out.push(EventKind::StoreError { message: msg.to_string() });
    }
}

/// `Some(code)` when the message reports an NCCL error (`code` may be unknown: `Some(None)`).
fn nccl_error_code(msg: &str) -> Option<Option<String>> {
    // `[Rank 3] found async exception when checking for NCCL errors: <reason>`: the check's own
    // words are no error; its reason is read.
    let msg = msg.split_once("checking for NCCL errors").map_or(msg, |(_, reason)| reason);
    // The program shut its process group down (`destroy_process_group`, an abort at exit):
    // ProcessGroupNCCL marks the communicators with that reason, and nothing failed.
    if msg.contains("set by ProcessGroupNCCL: Process Group shutdown") {
        return None;
    }
    const CODES: [&str; 6] = ["ncclRemoteError", "ncclSystemError", "ncclInternalError", "ncclUnhandledCudaError", "ncclInvalidUsage", "ncclInvalidArgument"];
    for c in CODES {
        if msg.contains(c) {
            return Some(Some(c.to_string()));
        }
    }
    // XLA: `NCCL operation ncclCommInitRank(&comm, nranks, id, rank) failed: unhandled cuda error`.
    let failed_call = msg.contains("NCCL operation nccl") && msg.contains("failed");
    if !(msg.contains("NCCL error") || msg.contains("NCCL communicator was aborted") || failed_call) {
        return None;
    }
    let code = if msg.contains("remote process exited or there was a network error") {
        Some("ncclRemoteError")
    } else if msg.contains("unhandled cuda error") {
        Some("ncclUnhandledCudaError")
    } else if msg.contains("unhandled system error") {
        Some("ncclSystemError")
    } else if msg.contains("internal error") {
        Some("ncclInternalError")
    } else if msg.contains("invalid usage") {
        Some("ncclInvalidUsage")
    } else {
        None
    };
    Some(code.map(str::to_string))
}

fn is_store_error(body: &str) -> bool {
    let store = body.contains("[c10d]") || body.contains("TCPStore") || body.contains("SocketImpl(");
    store
        && (body.contains("failed")
            || body.contains("Failed")
            || body.contains("Socket Timeout")
            || body.contains("Broken pipe")
            || body.contains("Connection reset")
            || body.contains("timed out"))
}

fn is_desync_report(body: &str) -> bool {
    body.contains("Desync debug report")
        || body.contains("lagging ranks")
        || body.contains("lagging/dead/mismatched ranks")
        || body.contains("is not joining")
        || body.contains("completed and is waiting for other ranks")
}

/// `[PG ID 0 PG GUID 0(default_pg) Rank 0]` or `[PG 1 Rank 15]` (older): the PG id.
pub fn pg_of(body: &str) -> Option<PgId> {
    let at = body.find("[PG ")?;
    let r = &body[at + 4..];
    let r = r.strip_prefix("ID ").unwrap_or(r);
    let n = r.bytes().take_while(u8::is_ascii_alphanumeric).count();
    if n == 0 {
        return None;
    }
    Some(PgId(r[..n].to_string()))
}

/// `WorkNCCL(SeqNum=11, OpType=ALLREDUCE, NumelIn=1153, NumelOut=1153, Timeout(ms)=20000) ran for
/// 20038 milliseconds`; before PyTorch 1.13 without `SeqNum`; cut anywhere (a terminal that
/// wrapped the line, a paste): the timeout is an event with what could be read.
fn watchdog_timeout(body: &str) -> Option<EventKind> {
    let at = body.find("WorkNCCL(").map_or(body.len(), |a| a + 9);
    let w = &body[at..];
    let end = w.find(" ran for").unwrap_or(w.len());
    let fields = &w[..end];
    let seq = num_after(fields, "SeqNum=").map(SeqNo);
    let op = fields
        .find("OpType=")
        .map(|i| {
            let r = &fields[i + 7..];
            let n = r.bytes().take_while(|c| c.is_ascii_alphanumeric() || *c == b'_').count();
            r[..n].to_string()
        })
        .unwrap_or_default();
    Some(EventKind::WatchdogTimeout {
        pg: pg_of(body),
        seq,
        op,
        numel_in: num_after(fields, "NumelIn="),
        numel_out: num_after(fields, "NumelOut="),
        timeout_ms: num_after(fields, "Timeout(ms)="),
        elapsed_ms: num_after(&w[end..], "ran for"),
    })
}

fn last_work(body: &str, what: &str) -> Option<SeqNo> {
    num_after(body, &format!("last {what} work:")).or_else(|| num_after(body, &format!("last {what} NCCL work:"))).map(SeqNo)
}

/// `failure detected by watchdog at work sequence id: 11 PG status: last enqueued work: 11, last completed work: 10`
/// and the older `Timeout at NCCL work: 57, last enqueued NCCL work: 57, last completed NCCL work: 56.`
fn pg_status(body: &str) -> EventKind {
    let failing = num_after(body, "at work sequence id:")
        .or_else(|| num_after(body, "Timeout at NCCL work:"))
        .or_else(|| num_after(body, "detected by watchdog at work:"))
        .map(SeqNo);
    EventKind::PgStatus {
        pg: pg_of(body),
        failing_seq: failing,
        last_enqueued: last_work(body, "enqueued"),
        last_started: last_work(body, "started"),
        last_completed: last_work(body, "completed"),
    }
}

/// `Received a dump signal due to a collective timeout from  rank 0 and ...` / `from this local rank`.
fn dump_signal(body: &str) -> EventKind {
    let detector = body.find("timeout from").and_then(|at| {
        let r = body[at + "timeout from".len()..].trim_start();
        r.strip_prefix("rank ").and_then(leading_u64).and_then(|v| u32::try_from(v).ok()).map(Rank)
    });
    EventKind::DumpSignal {
        pg: pg_of(body),
        detector,
        last_enqueued: last_work(body, "enqueued").or_else(|| num_after(body, "Last enqueued NCCL work:").map(SeqNo)),
        last_completed: last_work(body, "completed"),
    }
}

/// `[127.0.0.1]:49353` right after the marker (spaces allowed).
fn bracket_addr(r: &str) -> Option<PeerRef> {
    let r = r.trim_start();
    let r = r.strip_prefix('[')?;
    let close = r.find(']')?;
    let host = &r[..close];
    let port = r[close + 1..].strip_prefix(':').and_then(leading_u64);
    Some(PeerRef::Address(match port {
        Some(p) => format!("{host}:{p}"),
        None => host.to_string(),
    }))
}

/// `Rank 1 is running collective: CollectiveFingerPrint(...), but Rank 0 is running collective: CollectiveFingerPrint(...)`
fn mismatch(msg: &str) -> Option<EventKind> {
    let (this, rest) = fingerprint(msg)?;
    let (other, _) = fingerprint(rest)?;
    Some(EventKind::CollectiveMismatch { this, other })
}

fn fingerprint(s: &str) -> Option<(CollectiveFingerprint, &str)> {
    let running = s.find(" is running ")?;
    let at = s[..running].rfind("Rank ")?;
    let r = &s[at + 5..];
    let rank = leading_u64(r).and_then(|v| u32::try_from(v).ok())?;
    let fp = r.find("CollectiveFingerPrint(")?;
    let body_start = fp + "CollectiveFingerPrint(".len();
    let inner_end = balanced(&r[body_start..], b'(', b')')?;
    let inner = &r[body_start..body_start + inner_end];
    let rest = &r[body_start + inner_end..];
    let seq = num_after(inner, "SequenceNumber=").map(SeqNo);
    let op = inner
        .find("OpType=")
        .map(|i| {
            let t = &inner[i + 7..];
            let n = t.bytes().take_while(|c| c.is_ascii_alphanumeric() || *c == b'_').count();
            t[..n].to_string()
        })
        .unwrap_or_default();
    let shapes = field_list(inner, "TensorShape=");
    let dtypes = field_list(inner, "TensorDtypes=");
    Some((CollectiveFingerprint { rank: Rank(rank), seq, op, shapes, dtypes }, rest))
}

/// Byte offset of the closing delimiter matching an already-consumed opening one.
fn balanced(s: &str, open: u8, close: u8) -> Option<usize> {
    let mut depth = 1usize;
    for (i, c) in s.bytes().enumerate() {
        if c == open {
            depth += 1;
        } else if c == close {
            depth -= 1;
            if depth == 0 {
                return Some(i);
            }
        }
    }
    None
}

/// `TensorShape=[1024]` -> `["[1024]"]`; `TensorShape=[[2, 3], [4]]` -> `["[2, 3]", "[4]"]`;
/// `TensorDtypes=Float` -> `["Float"]`.
fn field_list(inner: &str, key: &str) -> Vec<String> {
    let Some(i) = inner.find(key) else { return Vec::new() };
    let v = &inner[i + key.len()..];
    if let Some(r) = v.strip_prefix('[') {
        let Some(end) = balanced(r, b'[', b']') else { return vec![v.to_string()] };
        let whole = &r[..end];
        if whole.trim_start().starts_with('[') {
            let mut items = Vec::new();
            let mut rest = whole;
            while let Some(o) = rest.find('[') {
                let Some(e) = balanced(&rest[o + 1..], b'[', b']') else { break };
                items.push(rest[o..o + e + 2].to_string());
                rest = &rest[o + e + 2..];
            }
            items
        } else if key == "TensorShape=" {
            vec![format!("[{whole}]")]
        } else {
            whole.split(',').map(|x| x.trim().to_string()).filter(|x| !x.is_empty()).collect()
        }
    } else {
        let n = v.find([',', ')']).unwrap_or(v.len());
        vec![v[..n].trim().to_string()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(body: &str) -> EventKind {
        let mut out = Vec::new();
        assert!(classify_body(body, &mut out), "{body}");
        out.remove(0)
    }

    #[test]
    fn watchdog_timeout_versions() {
        let k = one("[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=11, OpType=ALLREDUCE, NumelIn=1153, NumelOut=1153, Timeout(ms)=20000) ran for 20038 milliseconds before timing out.");
        assert_eq!(
            k,
            EventKind::WatchdogTimeout {
                pg: None,
                seq: Some(SeqNo(11)),
                op: "ALLREDUCE".into(),
                numel_in: Some(1153),
                numel_out: Some(1153),
                timeout_ms: Some(20000),
                elapsed_ms: Some(20038)
            }
        );
        // PyTorch 1.13 / 2.0: no sizes.
        let k = one("[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=57, OpType=_ALLGATHER_BASE, Timeout(ms)=1800000) ran for 1800593 milliseconds before timing out.");
        assert_eq!(
            k,
            EventKind::WatchdogTimeout {
                pg: None,
                seq: Some(SeqNo(57)),
                op: "_ALLGATHER_BASE".into(),
                numel_in: None,
                numel_out: None,
                timeout_ms: Some(1800000),
                elapsed_ms: Some(1800593)
            }
        );
        // PyTorch 1.x: no sequence number.
        let k = one("[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(OpType=BROADCAST, Timeout(ms)=1800000) ran for 1801177 milliseconds before timing out.");
        assert_eq!(
            k,
            EventKind::WatchdogTimeout {
                pg: None,
                seq: None,
                op: "BROADCAST".into(),
                numel_in: None,
                numel_out: None,
                timeout_ms: Some(1800000),
                elapsed_ms: Some(1801177)
            }
        );
        // Cut by a terminal's wrap: what is there.
        let k = one("[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(S");
        assert_eq!(
            k,
            EventKind::WatchdogTimeout { pg: None, seq: None, op: String::new(), numel_in: None, numel_out: None, timeout_ms: None, elapsed_ms: None }
        );
        // 2.2-ish with the PG in front.
        let k = one("[PG 1 Rank 15] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3, OpType=BROADCAST, NumelIn=10, NumelOut=10, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.");
        assert!(matches!(k, EventKind::WatchdogTimeout { pg: Some(PgId(ref p)), seq: Some(SeqNo(3)), .. } if p == "1"));
    }

    #[test]
    fn pg_status_versions() {
        let k = one("[PG ID 0 PG GUID 0(default_pg) Rank 0]  failure detected by watchdog at work sequence id: 11 PG status: last enqueued work: 11, last completed work: 10");
        assert_eq!(
            k,
            EventKind::PgStatus {
                pg: Some(PgId("0".into())),
                failing_seq: Some(SeqNo(11)),
                last_enqueued: Some(SeqNo(11)),
                last_started: None,
                last_completed: Some(SeqNo(10))
            }
        );
        let k = one("[PG 1 Rank 15] Timeout at NCCL work: 57, last enqueued NCCL work: 57, last completed NCCL work: 56.");
        assert_eq!(
            k,
            EventKind::PgStatus {
                pg: Some(PgId("1".into())),
                failing_seq: Some(SeqNo(57)),
                last_enqueued: Some(SeqNo(57)),
                last_started: None,
                last_completed: Some(SeqNo(56))
            }
        );
        let k =
            one("[Rank 3] Exception (either an error or timeout) detected by watchdog at work: 9, last enqueued NCCL work: 9, last completed NCCL work: 8.");
        assert!(matches!(k, EventKind::PgStatus { failing_seq: Some(SeqNo(9)), last_completed: Some(SeqNo(8)), .. }));
    }

    #[test]
    fn a_watchdog_status_cut_before_its_fields_is_still_the_status() {
        let k = one("[PG ID 1 PG GUID 3 Rank 5] Exception (either an error or timeout) detected by watchdog at work: 42, last enqu");
        assert!(matches!(k, EventKind::PgStatus { failing_seq: Some(SeqNo(42)), last_enqueued: None, last_completed: None, .. }), "{k:?}");
    }

    #[test]
    fn dump_signal_detector() {
        let k = one("[PG ID 0 PG GUID 0(default_pg) Rank 1] Received a dump signal due to a collective timeout from  rank 0 and we will try our best to dump the debug info. Last enqueued NCCL work: 10, last completed NCCL work: 10.This is most likely");
        assert_eq!(
            k,
            EventKind::DumpSignal { pg: Some(PgId("0".into())), detector: Some(Rank(0)), last_enqueued: Some(SeqNo(10)), last_completed: Some(SeqNo(10)) }
        );
        let k = one("[PG ID 0 PG GUID 0(default_pg) Rank 0] Received a dump signal due to a collective timeout from this local rank and we will try our best to dump the debug info. Last enqueued NCCL work: 11, last completed NCCL work: 10.");
        assert!(matches!(k, EventKind::DumpSignal { detector: None, last_enqueued: Some(SeqNo(11)), .. }));
    }

    #[test]
    fn aborts_heartbeat_store_desync() {
        assert!(matches!(one("[PG ID 0 PG GUID 0(default_pg) Rank 0] [PG ID 0 PG GUID 0(default_pg) Rank 0] Terminating the process after attempting to dump debug info, due to collective timeout or exception."), EventKind::WatchdogAbort { pg: Some(_) }));
        assert!(matches!(one("Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data. To avoid data inconsistency, we are taking the entire process down."), EventKind::WatchdogAbort { pg: None }));
        assert_eq!(one("[PG ID 0 PG GUID 0(default_pg) Rank 3] ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in monitoring enqueued collectives."), EventKind::HeartbeatStuck { seconds: Some(480) });
        assert!(matches!(one("[c10d] recvValue failed on SocketImpl(fd=52, addr=[localhost]:34408, remote=[localhost]:30111): Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown or crash?"), EventKind::StoreError { .. }));
        assert!(matches!(
            one("[c10d] sendBytes failed on SocketImpl(fd=53, addr=[localhost]:37912, remote=[localhost]:29613): Broken pipe"),
            EventKind::StoreError { .. }
        ));
        assert!(matches!(one("[PG ID 0 PG GUID 0(default_pg) Rank 1] Failed to check the \"should dump\" flag on TCPStore, (maybe TCPStore server has shut down too early), with error: Broken pipe"), EventKind::StoreError { .. }));
        assert!(matches!(one("[Rank 0] Desync debug report: Rank 1 is not joining the collective"), EventKind::Warning { .. }));
    }

    #[test]
    fn collective_mismatch_detail_and_old() {
        let mut out = Vec::new();
        specific("Detected mismatch between collectives on ranks. Rank 1 is running collective: CollectiveFingerPrint(SequenceNumber=10, OpType=ALLREDUCE, TensorShape=[1024], TensorDtypes=Float, TensorDeviceTypes=TensorOptions(dtype=float (default), device=cuda, layout=Strided (default), requires_grad=false (default), pinned_memory=false (default), memory_format=(nullopt))), but Rank 0 is running collective: CollectiveFingerPrint(SequenceNumber=10, OpType=ALLREDUCE, TensorShape=[1153], TensorDtypes=Float, TensorDeviceTypes=TensorOptions(dtype=float (default), device=cuda, layout=Strided (default), requires_grad=false (default), pinned_memory=false (default), memory_format=(nullopt))).Collectives differ in the following aspects:   Tensor Tensor shapes: 1024vs 1153", &mut out);
        let EventKind::CollectiveMismatch { this, other } = &out[0] else { panic!("{out:?}") };
        assert_eq!((this.rank, this.seq, this.op.as_str()), (Rank(1), Some(SeqNo(10)), "ALLREDUCE"));
        assert_eq!((this.shapes.clone(), this.dtypes.clone()), (vec!["[1024]".to_string()], vec!["Float".to_string()]));
        assert_eq!((other.rank, other.shapes.clone()), (Rank(0), vec!["[1153]".to_string()]));
        out.clear();
        specific("Detected mismatch between collectives on ranks. Rank 0 is running inconsistent collective: CollectiveFingerPrint(OpType=BROADCAST, TensorShape=[20, 10], TensorDtypes=Float, TensorDeviceTypes=TensorOptions(dtype=float (default), device=cuda)), but Rank 1 is running inconsistent collective: CollectiveFingerPrint(OpType=ALLREDUCE, TensorShape=[[3], [4, 5]], TensorDtypes=[Float, Half])", &mut out);
        let EventKind::CollectiveMismatch { this, other } = &out[0] else { panic!("{out:?}") };
        assert_eq!((this.seq, this.op.as_str(), this.shapes.clone()), (None, "BROADCAST", vec!["[20, 10]".to_string()]));
        assert_eq!(
            (other.shapes.clone(), other.dtypes.clone()),
            (vec!["[3]".to_string(), "[4, 5]".to_string()], vec!["Float".to_string(), "Half".to_string()])
        );
    }

    #[test]
    fn gloo_and_nccl_errors() {
        let mut out = Vec::new();
        specific("[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:547] Connection closed by peer [127.0.0.1]:49353", &mut out);
        assert_eq!(out, vec![EventKind::ConnectionClosed { peer: Some(PeerRef::Address("127.0.0.1:49353".into())), transport: "gloo".into() }]);
        out.clear();
        specific("[/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 20000ms for recv operation to complete", &mut out);
        assert_eq!(out, vec![EventKind::TransportTimeout { transport: "gloo".into(), operation: "recv".into(), timeout_ms: Some(20000) }]);
        out.clear();
        specific("NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, remote process exited or there was a network error, NCCL version 2.21.5", &mut out);
        assert!(matches!(&out[0], EventKind::NcclError { code: Some(c), .. } if c == "ncclRemoteError"));
        out.clear();
        specific("NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:121, unhandled cuda error, NCCL version 2.14.3", &mut out);
        assert!(matches!(&out[0], EventKind::NcclError { code: Some(c), .. } if c == "ncclUnhandledCudaError"));
        out.clear();
        // The watchdog's check names NCCL errors; only its reason can be one. A process group
        // the program shut down is no failure.
        let shutdown = "[Rank 3] found async exception when checking for NCCL errors: NCCL communicator encountered error set by ProcessGroupNCCL: Process Group shutdown on rank 3";
        specific(shutdown, &mut out);
        assert!(out.is_empty(), "{out:?}");
        specific(
            "[Rank 3] found async exception when checking for NCCL errors: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)",
            &mut out,
        );
        assert!(matches!(&out[..], [EventKind::NcclError { code: Some(c), .. }] if c == "ncclSystemError"), "{out:?}");
    }
}
