//! Core files (ELF `ET_CORE`): the signal, pid and executable from the `NT_PRSTATUS`,
//! `NT_PRPSINFO` and `NT_SIGINFO` notes. Only the headers and the note segments are read, so a
//! core whose memory segments were cut off by a size cap still reads; one whose notes are cut off
//! is refused.

use crate::SnapshotError;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CoreInfo {
    pub signal: Option<u32>,
    pub pid: Option<u32>,
    /// `pr_fname`: the executable's name (16 bytes at most).
    pub executable: Option<String>,
    /// `pr_psargs`: the start of the command line.
    pub args: Option<String>,
    /// The faulting address from `NT_SIGINFO` for SIGSEGV/SIGBUS/SIGILL/SIGFPE.
    pub fault_addr: Option<u64>,
    pub threads: usize,
}

const NT_PRSTATUS: u32 = 1;
const NT_PRPSINFO: u32 = 3;
const NT_SIGINFO: u32 = 0x5349_4749;

fn bad(msg: impl Into<String>) -> SnapshotError {
    SnapshotError::Format(format!("core: {}", msg.into()))
}

struct Elf<'a> {
    b: &'a [u8],
    le: bool,
    is64: bool,
}

impl Elf<'_> {
    fn uint(&self, at: usize, n: usize) -> Result<u64, SnapshotError> {
        let s = at
            .checked_add(n)
            .and_then(|e| self.b.get(at..e))
            .ok_or_else(|| bad(format!("truncated: {n} bytes at {at} beyond the file's {} bytes", self.b.len())))?;
        let it: Box<dyn Iterator<Item = &u8>> = if self.le { Box::new(s.iter().rev()) } else { Box::new(s.iter()) };
        Ok(it.fold(0u64, |a, x| (a << 8) | u64::from(*x)))
    }
    fn word(&self, at: usize) -> Result<u64, SnapshotError> {
        self.uint(at, if self.is64 { 8 } else { 4 })
    }
}

fn cstr(b: &[u8]) -> Option<String> {
    let end = b.iter().position(|x| *x == 0).unwrap_or(b.len());
    let s = String::from_utf8_lossy(&b[..end]).trim().to_string();
    (!s.is_empty()).then_some(s)
}

/// Reads a core file's notes.
pub fn parse(b: &[u8]) -> Result<CoreInfo, SnapshotError> {
    if !b.starts_with(b"\x7fELF") {
        return Err(bad("not an ELF file"));
    }
    if b.len() < 52 {
        return Err(bad("truncated ELF header"));
    }
    let is64 = match b[4] {
        1 => false,
        2 => true,
        c => return Err(bad(format!("unknown ELF class {c}"))),
    };
    let le = match b[5] {
        1 => true,
        2 => false,
        d => return Err(bad(format!("unknown ELF byte order {d}"))),
    };
    let e = Elf { b, le, is64 };
    let e_type = e.uint(16, 2)?;
    if e_type != 4 {
        return Err(bad(format!("ELF type {e_type} is not a core file (4)")));
    }
    let (phoff, phentsize, phnum) = if is64 { (e.uint(32, 8)?, e.uint(54, 2)?, e.uint(56, 2)?) } else { (e.uint(28, 4)?, e.uint(42, 2)?, e.uint(44, 2)?) };
    let (phoff, phentsize) = (usize::try_from(phoff).map_err(|_| bad("program header offset"))?, phentsize as usize);
    if phnum == 0 || phentsize < if is64 { 56 } else { 32 } {
        return Err(bad("no program headers"));
    }
    let mut info = CoreInfo::default();
    let mut saw_note = false;
    for i in 0..phnum as usize {
        let ph = phoff.checked_add(i * phentsize).ok_or_else(|| bad("program header offset overflows"))?;
        if e.uint(ph, 4)? != 4 {
            continue; // not PT_NOTE
        }
        let (off, size) = if is64 { (e.uint(ph + 8, 8)?, e.uint(ph + 32, 8)?) } else { (e.uint(ph + 4, 4)?, e.uint(ph + 16, 4)?) };
        let start = usize::try_from(off).map_err(|_| bad("note offset"))?;
        let end = usize::try_from(off.saturating_add(size)).map_err(|_| bad("note size"))?;
        if end > b.len() {
            return Err(bad(format!("truncated: the notes end at byte {end}, the file has {}", b.len())));
        }
        saw_note = true;
        notes(&e, start, end, &mut info)?;
    }
    if !saw_note {
        return Err(bad("no PT_NOTE segment"));
    }
    Ok(info)
}

fn notes(e: &Elf<'_>, mut at: usize, end: usize, info: &mut CoreInfo) -> Result<(), SnapshotError> {
    let align4 = |x: usize| x.div_ceil(4) * 4;
    while at + 12 <= end {
        let namesz = e.uint(at, 4)? as usize;
        let descsz = e.uint(at + 4, 4)? as usize;
        let ntype = e.uint(at + 8, 4)? as u32;
        let desc_at = at.checked_add(12 + align4(namesz)).ok_or_else(|| bad("note name size"))?;
        let desc_end = desc_at.checked_add(descsz).filter(|d| *d <= end).ok_or_else(|| bad("note runs past its segment"))?;
        let desc = &e.b[desc_at..desc_end];
        let d = Elf { b: desc, le: e.le, is64: e.is64 };
        match ntype {
            NT_PRSTATUS => {
                info.threads += 1;
                if info.threads == 1 {
                    // elf_siginfo (3 ints), pr_cursig (short, pad), sigpend, sighold (words), pr_pid.
                    let cursig = d.uint(12, 2)? as u32;
                    info.signal = info.signal.or((cursig != 0).then_some(cursig));
                    let pid_at = 16 + 2 * if e.is64 { 8 } else { 4 };
                    info.pid = info.pid.or(Some(d.uint(pid_at, 4)? as u32));
                }
            }
            NT_PRPSINFO => {
                // 64-bit: 4 chars, pad, pr_flag (8), uid, gid, pid, ppid, pgrp, sid (4 each), fname[16], psargs[80].
                // 32-bit: 4 chars, pr_flag (4), uid, gid (2 each), pid, ppid, pgrp, sid (4 each), fname, psargs.
                let (pid_at, fname_at) = if e.is64 { (24, 40) } else { (12, 28) };
                info.pid = info.pid.or(Some(d.uint(pid_at, 4)? as u32));
                info.executable = desc.get(fname_at..fname_at + 16).and_then(cstr);
                info.args = desc.get(fname_at + 16..(fname_at + 96).min(desc.len())).and_then(cstr);
            }
            NT_SIGINFO => {
                let signo = d.uint(0, 4)? as u32;
                if signo != 0 {
                    info.signal = Some(signo);
                }
                // si_code > 0: the kernel raised it (a fault), so the union holds si_addr.
                let code = d.uint(8, 4)? as u32 as i32;
                if matches!(signo, 4 | 7 | 8 | 11) && code > 0 {
                    info.fault_addr = d.word(if e.is64 { 16 } else { 12 }).ok();
                }
            }
            _ => {}
        }
        at = align4(desc_end);
    }
    Ok(())
}

impl CoreInfo {
    pub fn highlights(&self) -> Vec<String> {
        let mut s = String::from("core:");
        if let Some(sig) = self.signal {
            s.push_str(&format!(" {}", coroner_model::signal_label(i32::try_from(sig).unwrap_or(i32::MAX))));
        }
        if let Some(pid) = self.pid {
            s.push_str(&format!(" pid {pid}"));
        }
        if let Some(x) = &self.executable {
            s.push_str(&format!(" {x}"));
        }
        if let Some(a) = self.fault_addr {
            s.push_str(&format!(" at 0x{a:x}"));
        }
        let mut out = vec![s];
        if let Some(a) = &self.args {
            out.push(format!("command: {a}"));
        }
        if self.threads > 1 {
            out.push(format!("{} threads", self.threads));
        }
        out
    }
}

#[cfg(test)]
#[path = "core_tests.rs"]
mod tests;
