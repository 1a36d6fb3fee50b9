//! Tests for the core file reader: a real core's head (`sleep` killed with SIGSEGV), synthetic
//! cores in both classes and byte orders, and refusals.

use super::*;

const REAL: &[u8] = include_bytes!("../../../tests/data/snapshots/core.sleep.head");

/// A minimal core: ELF header, one PT_NOTE header, notes PRSTATUS, PRPSINFO, SIGINFO.
pub fn synthetic(is64: bool, le: bool, sig: u32, pid: u32, fname: &str) -> Vec<u8> {
    let put = |v: &mut Vec<u8>, x: u64, n: usize| {
        if n > 8 {
            assert_eq!(x, 0);
            v.resize(v.len() + n, 0);
            return;
        }
        let bytes = x.to_le_bytes();
        if le {
            v.extend_from_slice(&bytes[..n]);
        } else {
            v.extend(bytes[..n].iter().rev());
        }
    };
    let w = if is64 { 8 } else { 4 };
    let mut notes = Vec::new();
    let mut note = |ntype: u32, desc: Vec<u8>| {
        put(&mut notes, 5, 4);
        put(&mut notes, desc.len() as u64, 4);
        put(&mut notes, u64::from(ntype), 4);
        notes.extend_from_slice(b"CORE\0\0\0\0");
        notes.extend_from_slice(&desc);
        while notes.len() % 4 != 0 {
            notes.push(0);
        }
    };
    let mut prstatus = Vec::new();
    put(&mut prstatus, u64::from(sig), 4);
    put(&mut prstatus, 0, 4);
    put(&mut prstatus, 0, 4);
    put(&mut prstatus, u64::from(sig), 2);
    put(&mut prstatus, 0, 2);
    put(&mut prstatus, 0, 2 * w);
    put(&mut prstatus, u64::from(pid), 4);
    prstatus.resize(if is64 { 336 } else { 144 }, 0);
    note(1, prstatus);
    let mut psinfo = vec![b'R', b'R', 0, 0];
    if is64 {
        psinfo.extend_from_slice(&[0; 4]);
        put(&mut psinfo, 0, 8);
        put(&mut psinfo, 0, 8); // uid, gid
    } else {
        put(&mut psinfo, 0, 4);
        put(&mut psinfo, 0, 4); // uid, gid (2 each)
    }
    put(&mut psinfo, u64::from(pid), 4);
    psinfo.resize(if is64 { 40 } else { 28 }, 0);
    let mut f = fname.as_bytes().to_vec();
    f.resize(16, 0);
    psinfo.extend_from_slice(&f);
    let mut args = format!("{fname} train.py").into_bytes();
    args.resize(80, 0);
    psinfo.extend_from_slice(&args);
    note(3, psinfo);
    let mut siginfo = Vec::new();
    put(&mut siginfo, u64::from(sig), 4);
    put(&mut siginfo, 0, 4);
    put(&mut siginfo, 1, 4); // SEGV_MAPERR
    if is64 {
        put(&mut siginfo, 0, 4);
    }
    put(&mut siginfo, 0xdead, w);
    siginfo.resize(128, 0);
    note(0x5349_4749, siginfo);

    let (ehsize, phsize) = if is64 { (64, 56) } else { (52, 32) };
    let mut out = b"\x7fELF".to_vec();
    out.push(if is64 { 2 } else { 1 });
    out.push(if le { 1 } else { 2 });
    out.push(1);
    out.resize(16, 0);
    put(&mut out, 4, 2); // ET_CORE
    put(&mut out, 62, 2);
    put(&mut out, 1, 4);
    put(&mut out, 0, w); // entry
    put(&mut out, ehsize, w); // phoff
    put(&mut out, 0, w); // shoff
    put(&mut out, 0, 4); // flags
    put(&mut out, ehsize, 2);
    put(&mut out, phsize, 2);
    put(&mut out, 1, 2); // phnum
    put(&mut out, 0, 6);
    assert_eq!(out.len() as u64, ehsize);
    let off = ehsize + phsize;
    put(&mut out, 4, 4); // PT_NOTE
    if is64 {
        put(&mut out, 0, 4);
        put(&mut out, off, 8);
        put(&mut out, 0, 16);
        put(&mut out, notes.len() as u64, 8);
        put(&mut out, 0, 16);
    } else {
        put(&mut out, off, 4);
        put(&mut out, 0, 8);
        put(&mut out, notes.len() as u64, 4);
        put(&mut out, 0, 12);
    }
    out.extend_from_slice(&notes);
    out
}

#[test]
fn real_core_head() {
    let c = parse(REAL).unwrap();
    assert_eq!(c.signal, Some(11));
    assert_eq!(c.executable.as_deref(), Some("sleep"));
    assert_eq!(c.args.as_deref(), Some("sleep 30"));
    assert!(c.pid.is_some_and(|p| p > 0));
    // Sent with kill(2), not a fault: no address.
    assert_eq!(c.fault_addr, None);
    assert!(c.highlights()[0].starts_with("core: SIGSEGV pid "));
}

#[test]
fn synthetic_cores_in_every_class_and_byte_order() {
    for (is64, le) in [(true, true), (false, true), (true, false), (false, false)] {
        let c = parse(&synthetic(is64, le, 11, 1234, "python")).unwrap();
        assert_eq!((c.signal, c.pid, c.executable.as_deref()), (Some(11), Some(1234), Some("python")), "{is64} {le}");
        assert_eq!(c.fault_addr, Some(0xdead));
        assert_eq!(c.highlights()[0], "core: SIGSEGV pid 1234 python at 0xdead");
    }
}

#[test]
fn refusals_are_clear() {
    assert!(parse(b"").unwrap_err().to_string().contains("not an ELF file"));
    assert!(parse(b"#!/bin/sh\n").unwrap_err().to_string().contains("not an ELF file"));
    assert!(parse(b"\x7fELF\x02\x01").unwrap_err().to_string().contains("truncated ELF header"));
    let mut exec = synthetic(true, true, 11, 1, "x");
    exec[16] = 2; // ET_EXEC
    assert!(parse(&exec).unwrap_err().to_string().contains("not a core file"));
    // Cut anywhere before the end of the notes: an error, never a panic.
    let good = synthetic(true, true, 6, 77, "python3");
    for cut in 0..good.len() {
        assert!(parse(&good[..cut]).is_err(), "cut {cut}");
    }
    let e = parse(&REAL[..REAL.len() - 1]).unwrap_err().to_string();
    assert!(e.contains("truncated: the notes end at byte 16612"), "{e}");
    // Garbage after a valid magic never panics.
    let mut x: u32 = 7;
    for _ in 0..2000 {
        let mut b = good.clone();
        for _ in 0..8 {
            x = x.wrapping_mul(1664525).wrapping_add(1013904223);
            let i = (x as usize >> 8) % b.len();
            b[i] = (x >> 24) as u8;
        }
        let _ = parse(&b);
    }
}
