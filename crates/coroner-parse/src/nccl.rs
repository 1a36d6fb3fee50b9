//! NCCL's own debug lines: `host:pid:tid [dev] [file.cc:123 ]NCCL INFO|WARN message`, optionally
//! preceded by a `[YYYY-MM-DD HH:MM:SS] ` timestamp (NCCL >= 2.23, WARN by default).
//!
//! INFO lines are most of a job's volume: [`split`] is byte-level and the INFO path only looks at
//! the message's first and last bytes before anything else.

use crate::util::{leading_u64, num_after};
use coroner_model::{EventKind, PeerRef, Rank};
use regex::Regex;
use std::sync::LazyLock;

/// The parts of an NCCL debug line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NcclLine<'a> {
    pub host: &'a str,
    pub pid: u32,
    pub tid: u32,
    pub dev: &'a str,
    /// `INFO`, `WARN`, `TRACE`, `ABORT`.
    pub level: &'a str,
    pub msg: &'a str,
}

/// The length of a `YYYY-MM-DD HH:MM:SS[.fff][Z] ` (or `T` between) stamp at the start, with the
/// spaces after it.
fn date_time_len(b: &[u8]) -> Option<usize> {
    let d = |i: usize| b.get(i).is_some_and(u8::is_ascii_digit);
    let ok = (0..4).all(d)
        && b.get(4) == Some(&b'-')
        && d(5)
        && d(6)
        && b.get(7) == Some(&b'-')
        && d(8)
        && d(9)
        && matches!(b.get(10), Some(b' ' | b'T'))
        && d(11)
        && d(12)
        && b.get(13) == Some(&b':')
        && d(14)
        && d(15)
        && b.get(16) == Some(&b':')
        && d(17)
        && d(18);
    if !ok {
        return None;
    }
    let mut i = 19;
    while b.get(i).is_some_and(|c| c.is_ascii_digit() || matches!(c, b'.' | b',' | b'Z')) {
        i += 1;
    }
    let spaces = b[i.min(b.len())..].iter().take_while(|c| **c == b' ').count();
    (spaces > 0).then_some(i + spaces)
}

/// Splits an NCCL debug line, or `None` for any other line (cheaply).
pub fn split(s: &str) -> Option<NcclLine<'_>> {
    let b = s.as_bytes();
    let mut i = 0;
    if b.first() == Some(&b'[') && b.get(1).is_some_and(u8::is_ascii_digit) {
        i = memchr::memchr(b']', &b[..b.len().min(48)])? + 1;
        while b.get(i) == Some(&b' ') {
            i += 1;
        }
    } else if let Some(n) = date_time_len(b) {
        // A logging wrapper's own time in front (`2024-05-11 14:10:52.227 host:pid:tid [0] ...`).
        i = n;
    }
    let start = i;
    // `host:pid:tid`, or the host alone (newer NCCL after its own `[date time]`).
    let lim = b.len().min(start + 300);
    let word_end = start + memchr::memchr(b' ', &b[start..lim])?;
    let (host_end, pid, tid) = match memchr::memchr(b':', &b[start..word_end]) {
        Some(c) => {
            let c1 = start + c;
            let (pid, n1) = digits(&b[c1 + 1..])?;
            if b.get(c1 + 1 + n1) != Some(&b':') {
                return None;
            }
            let (tid, n2) = digits(&b[c1 + 2 + n1..])?;
            if c1 + 2 + n1 + n2 != word_end {
                return None;
            }
            (c1, pid, tid)
        }
        None => (word_end, 0, 0),
    };
    if host_end == start {
        return None;
    }
    let mut j = word_end;
    if b.get(j + 1) != Some(&b'[') {
        return None;
    }
    let close = j + 1 + memchr::memchr(b']', &b[j + 1..b.len().min(j + 16)])?;
    let dev = s.get(j + 2..close)?;
    if dev.is_empty() || !dev.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    j = close + 1;
    // Optional `file.cc:123 ` before `NCCL LEVEL`; NCCL 2.2-2.3 wrote the level alone
    // (`include/socket.h:360 WARN Call to connect failed`).
    let window = &b[j..b.len().min(j + 120)];
    let (level, msg) = match memchr::memmem::find(window, b"NCCL ") {
        Some(k) => {
            let after = s.get(j + k + 5..)?;
            let sp = after.find(' ').unwrap_or(after.len());
            (&after[..sp], after.get(sp + 1..).unwrap_or(""))
        }
        // The bare level only with the full `host:pid:tid` identity: `word [0] WARN ...` alone
        // is too common a shape to be NCCL's.
        None if host_end == word_end => return None,
        None => {
            let mut words = s.get(j..)?.trim_start().splitn(3, ' ');
            let first = words.next()?;
            let (level, rest) = if first.contains(':') {
                (words.next()?, words.next().unwrap_or(""))
            } else {
                (first, s.get(j..)?.trim_start().get(first.len() + 1..).unwrap_or(""))
            };
            (level, rest)
        }
    };
    if !matches!(level, "INFO" | "WARN" | "TRACE" | "ABORT") {
        return None;
    }
    Some(NcclLine { host: s.get(start..host_end)?, pid, tid, dev, level, msg })
}

fn digits(b: &[u8]) -> Option<(u32, usize)> {
    let n = b.iter().take(10).take_while(|c| c.is_ascii_digit()).count();
    if n == 0 {
        return None;
    }
    let v = b[..n].iter().fold(0u64, |a, c| a * 10 + u64::from(c - b'0'));
    Some((u32::try_from(v).ok()?, n))
}

static INIT: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"comm (0x[0-9a-fA-F]+) rank (\d+) nranks (\d+) cudaDev (\d+)(?: nvmlDev \d+)? busId ([0-9a-fA-F]+)").expect("static regex"));

/// What an NCCL line means. `seen_comms` keeps `Init START`/`Init COMPLETE` of one comm to one event.
pub fn classify(l: &NcclLine<'_>, seen_comms: &mut Vec<String>, out: &mut Vec<EventKind>) {
    let m = l.msg;
    if l.level == "INFO" {
        if m.ends_with("Init START") || m.ends_with("Init COMPLETE") {
            if let Some(c) = INIT.captures(m) {
                let comm = c[1].to_string();
                if seen_comms.contains(&comm) {
                    return;
                }
                if seen_comms.len() < 4096 {
                    seen_comms.push(comm);
                }
                let num = |i: usize| c[i].parse::<u32>().ok();
                let (Some(rank), Some(nranks)) = (num(2), num(3)) else { return };
                out.push(EventKind::NcclInit {
                    host: l.host.to_string(),
                    pid: l.pid,
                    rank: Rank(rank),
                    nranks,
                    cuda_dev: num(4),
                    bus_id: Some(c[5].to_string()),
                });
            }
        } else if let Some(r) = m.strip_prefix("[Service thread] Connection closed by localRank ") {
            // `localRank -1` names no peer, and the line's own device its own connection: the
            // proxy thread's shutdown at teardown (`[2] ... Connection closed by localRank 2`).
            let own = r.split_whitespace().next() == Some(l.dev.trim());
            if !r.starts_with('-') && !own {
                let peer = leading_u64(r).and_then(|v| u32::try_from(v).ok()).map(PeerRef::LocalRank);
                out.push(EventKind::ConnectionClosed { peer, transport: "nccl".into() });
            }
        } else if m.ends_with("Abort COMPLETE") {
            out.push(EventKind::Warning { message: format!("NCCL {m}") });
        }
        return;
    }
    if l.level == "WARN" || l.level == "ABORT" {
        out.push(EventKind::NcclWarn { message: m.to_string() });
        if let Some(at) = m.find("Connection closed by remote peer") {
            let r = m[at + "Connection closed by remote peer".len()..].trim_start();
            out.push(EventKind::ConnectionClosed { peer: angle_addr(r), transport: "nccl".into() });
        } else if m.contains("Connection closed by localRank") && !m.contains("localRank -") {
            let peer = num_after(m, "Connection closed by localRank").and_then(|v| u32::try_from(v).ok()).map(PeerRef::LocalRank);
            out.push(EventKind::ConnectionClosed { peer, transport: "nccl".into() });
        }
    }
}

/// A WARN of NCCL's proxy service thread (`[Service thread] Accept failed ...`, `[Proxy Service 0]
/// Failed to execute operation Close from rank 0, retcode 3`): the thread that serves the other
/// local processes' requests fails when one of them went away or while communicators are torn
/// down, so what it says is a consequence, and the return-code chain after it is that thread's
/// own, not a failing call of this process.
pub fn is_proxy_service_warn(msg: &str) -> bool {
    msg.starts_with("[Service thread]") || msg.starts_with("[Proxy Service")
}

/// NCCL's error return propagating up its call stack, `init.cu:864 -> 2` (INFO lines after a
/// WARN): the result code, when it is an error.
pub fn return_code(l: &NcclLine<'_>) -> Option<u32> {
    if l.level != "INFO" {
        return None;
    }
    let (site, code) = l.msg.split_once(" -> ")?;
    if !site.contains(':') || site.contains(' ') {
        return None;
    }
    let code = leading_u64(code.trim()).and_then(|c| u32::try_from(c).ok())?;
    (code != 0).then_some(code)
}

/// NCCL's trace of a collective (`NCCL_DEBUG_SUBSYS=COLL`): `AllReduce: opCount 1a sendbuff 0x..
/// recvbuff 0x.. count 1024 datatype 7 op 0 root 0 comm 0x.. [nranks=8] stream 0x..`.
pub fn collective(l: &NcclLine<'_>) -> Option<EventKind> {
    if l.level != "INFO" {
        return None;
    }
    let (op, rest) = l.msg.split_once(": opCount ")?;
    if op.is_empty() || !op.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return None;
    }
    let hex = rest.split_whitespace().next()?;
    let op_count = u64::from_str_radix(hex, 16).ok()?;
    Some(EventKind::NcclCollective {
        host: l.host.to_string(),
        pid: l.pid,
        op: op.to_string(),
        op_count,
        count: num_after(rest, " count ")?,
        datatype: num_after(rest, " datatype ").and_then(|v| u32::try_from(v).ok())?,
        nranks: num_after(rest, "[nranks=").and_then(|v| u32::try_from(v).ok()),
    })
}

/// The name of an `ncclResult_t`.
pub fn result_name(code: u32) -> &'static str {
    match code {
        1 => "ncclUnhandledCudaError",
        2 => "ncclSystemError",
        3 => "ncclInternalError",
        4 => "ncclInvalidArgument",
        5 => "ncclInvalidUsage",
        6 => "ncclRemoteError",
        7 => "ncclInProgress",
        _ => "ncclError",
    }
}

/// `10.0.0.7<53249>` -> `10.0.0.7:53249`; `host<port>` likewise.
fn angle_addr(r: &str) -> Option<PeerRef> {
    let tok = r.split_whitespace().next()?;
    let tok = tok.trim_end_matches([',', '.', ';']);
    if tok.is_empty() {
        return None;
    }
    match tok.find('<') {
        Some(lt) => {
            let port = leading_u64(&tok[lt + 1..])?;
            Some(PeerRef::Address(format!("{}:{port}", &tok[..lt])))
        }
        None => Some(PeerRef::Address(tok.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(line: &str) -> Vec<EventKind> {
        let mut out = Vec::new();
        let mut seen = Vec::new();
        if let Some(l) = split(line) {
            classify(&l, &mut seen, &mut out);
        }
        out
    }

    #[test]
    fn a_logging_wrappers_time_in_front_is_skipped() {
        let l = split("2024-05-11 14:10:52.227 n176-080-198:2657296:2658232 [0] include/alloc.h:102 NCCL WARN Cuda failure 1 'invalid argument'").unwrap();
        assert_eq!((l.host, l.pid, l.level, l.msg), ("n176-080-198", 2657296, "WARN", "Cuda failure 1 'invalid argument'"));
        assert!(split("2024-05-11 14:10:52 INFO training started").is_none());
    }

    #[test]
    fn split_shapes() {
        let l = split("vm:1141:1141 [0] NCCL INFO Channel 11/0 : 0[0] -> 1[1] via P2P/CUMEM").unwrap();
        assert_eq!((l.host, l.pid, l.tid, l.dev, l.level), ("vm", 1141, 1141, "0", "INFO"));
        let l = split("node7:2231:2301 [3] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.0.0.7<53249> with error 12, opcode 0, len 0, vendor err 129").unwrap();
        assert_eq!((l.host, l.dev, l.level), ("node7", "3", "WARN"));
        assert!(l.msg.starts_with("NET/IB : Got completion"));
        let l = split("[2026-11-30 08:58:51] vm:1141:1294 [0] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote peer vm<43210>").unwrap();
        assert_eq!(l.level, "WARN");
        assert!(split("2026-11-30 08:58:51,398 INFO [rank0] train: step 4 loss 1.45").is_none());
        assert!(split("NCCL version 2.28.9+cuda13.0").is_none());
        assert!(split("a:b:c").is_none());
        // Newer NCCL's own time, then the host alone; NCCL 2.2-2.3's bare level after the file.
        let l = split("[2025-11-24 11:20:21] gpu-server320 [5] misc/socket.cc:46 NCCL WARN socketProgressOpt: Call to send to 10.44.137.149<52905> failed : Connection reset by peer").unwrap();
        assert_eq!((l.host, l.pid, l.dev, l.level), ("gpu-server320", 0, "5", "WARN"));
        let l = split("gpu-bql-144-103:18553:18611 [0] include/socket.h:360 WARN Call to connect failed : Connection timed out").unwrap();
        assert_eq!((l.level, l.msg), ("WARN", "Call to connect failed : Connection timed out"));
        let l = split("gpu-bql-144-103:18553:18611 [0] INFO transport/net_socket.cu:118 -> 2").unwrap();
        assert_eq!((l.level, l.msg), ("INFO", "transport/net_socket.cu:118 -> 2"));
        assert!(split("trainer [0] WARN slow step").is_none(), "a bare level needs NCCL's full identity");
    }

    #[test]
    fn init_once_per_comm_and_old_shape() {
        let mut seen = Vec::new();
        let mut out = Vec::new();
        for line in [
            "vm:1141:1141 [0] NCCL INFO ncclCommInitRankConfig comm 0x2db766f0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 60 commId 0x79479b31a34deafd - Init START",
            "vm:1141:1141 [0] NCCL INFO ncclCommInitRankConfig comm 0x2db766f0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 60 commId 0x79479b31a34deafd - Init COMPLETE",
            "gpu3:77:77 [1] NCCL INFO comm 0x55d0 rank 5 nranks 16 cudaDev 1 busId 1000 - Init COMPLETE",
        ] {
            classify(&split(line).unwrap(), &mut seen, &mut out);
        }
        assert_eq!(out.len(), 2);
        assert_eq!(out[0], EventKind::NcclInit { host: "vm".into(), pid: 1141, rank: Rank(0), nranks: 2, cuda_dev: Some(0), bus_id: Some("60".into()) });
        assert!(matches!(&out[1], EventKind::NcclInit { rank: Rank(5), nranks: 16, .. }));
    }

    #[test]
    fn connection_closed_and_warns() {
        assert_eq!(
            run("vm:1141:1294 [0] NCCL INFO [Service thread] Connection closed by localRank 1"),
            vec![EventKind::ConnectionClosed { peer: Some(PeerRef::LocalRank(1)), transport: "nccl".into() }]
        );
        let out = run("[2026-11-30 08:58:51] vm:1141:1294 [0] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote peer 10.0.0.7<43210>");
        assert_eq!(out.len(), 2);
        assert_eq!(out[1], EventKind::ConnectionClosed { peer: Some(PeerRef::Address("10.0.0.7:43210".into())), transport: "nccl".into() });
        for w in [
            "n:1:2 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.0.0.7<53249> with error 12, opcode 0",
            "n:1:2 [0] misc/socket.cc:540 NCCL WARN Net : Connection closed by remote peer",
            "n:1:2 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.0.0.2<40000> failed : No route to host",
            "n:1:2 [0] misc/socket.cc:564 NCCL WARN Socket Timeout",
            "n:1:2 [0] include/alloc.h:48 NCCL WARN Cuda failure 'out of memory'",
            "n:1:2 [0] transport/shm.cc:590 NCCL WARN Error while creating shared memory segment /dev/shm/nccl-x (size 9637888)",
        ] {
            assert!(matches!(run(w).first(), Some(EventKind::NcclWarn { .. })), "{w}");
        }
        assert!(run("n:1:2 [0] NCCL INFO misc/socket.cc:50 -> 6").is_empty());
        assert!(matches!(run("n:1:2 [0] proxy.cc:1 NCCL WARN [Service thread] Connection closed by localRank -1").as_slice(), [EventKind::NcclWarn { .. }]));
        assert_eq!(return_code(&split("XXX:430:2237 [0] NCCL INFO init.cu:864 -> 2").unwrap()), Some(2));
        assert_eq!(return_code(&split("n:1:2 [0] NCCL INFO misc/group.cu:69 -> 2 [Async thread]").unwrap()), Some(2));
        assert_eq!(return_code(&split("n:1:2 [0] NCCL INFO Channel 00 : 0 -> 1 via P2P").unwrap()), None);
        let c = collective(&split("gpu3:32615:32615 [0] NCCL INFO Broadcast: opCount 1a sendbuff 0x7f88e4000000 recvbuff 0x7f88e4000000 count 25503912 datatype 6 op 0 root 0 comm 0x7f88e005a260 [nranks=8] stream 0x55f20d2f5db0").unwrap());
        assert_eq!(
            c,
            Some(EventKind::NcclCollective {
                host: "gpu3".into(),
                pid: 32615,
                op: "Broadcast".into(),
                op_count: 26,
                count: 25503912,
                datatype: 6,
                nranks: Some(8)
            })
        );
        assert_eq!(collective(&split("n:1:2 [0] NCCL INFO Using network Socket").unwrap()), None);
        assert!(matches!(run("n:1:2 [0] NCCL INFO comm 0x5 rank 0 nranks 2 cudaDev 0 busId 1000 - Abort COMPLETE").first(), Some(EventKind::Warning { .. })));
    }
}
