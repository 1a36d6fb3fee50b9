//! The agent's on-disk spool: every batch it forms is appended here before it is sent, so lines
//! the server never acknowledged survive the agent's exit and are replayed by the next agent of
//! the same job and rank key (or uploaded later).
//!
//! # Format (version 1)
//!
//! One append-only file per agent instance, `<dir>/<agent_instance>.spool`:
//!
//! - header: magic `CORSPOOL`, `u32` format version, `u32` length, the session's
//!   `OpenSessionRequest` (prost), and the `u32` crc32 of those bytes;
//! - records: `u32` body length, `u32` crc32 of the body, then the body: one kind byte and a
//!   payload: `1` a `LogBatch` (prost), `2` the acknowledgement of a batch id (`u64`),
//!   `3` the process end (`ProcessExit`, prost), `4` the server acknowledged that end.
//!
//! All integers little-endian. A reader stops at the first torn or corrupt record and says so.
//!
//! # Durability (fsync policy)
//!
//! A batch record is written with one `write` and followed by `fdatasync`: one sync per batch
//! (at most ~10 per second at the default 100 ms batching), never one per line. Acknowledgement
//! records are not synced: losing one only makes the next agent resend lines the server
//! deduplicates by sequence number. The exit record is synced. Lines still in the in-memory queue
//! when the agent is SIGKILLed are lost; that window is one batching interval.
//!
//! Each live agent holds an exclusive `flock` on its spool file, so a replaying agent never takes
//! a spool from one that is still running.

use coroner_proto::v1;
use prost::Message;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

pub const MAGIC: &[u8; 8] = b"CORSPOOL";
pub const FORMAT_VERSION: u32 = 1;
const MAX_RECORD: u32 = 256 << 20;

const KIND_BATCH: u8 = 1;
const KIND_ACK: u8 = 2;
const KIND_EXIT: u8 = 3;
const KIND_EXIT_ACKED: u8 = 4;
const KIND_BASE: u8 = 5;

/// One spool record.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    Batch(v1::LogBatch),
    Ack(u64),
    Exit(v1::ProcessExit),
    ExitAcked,
    /// This instance's sequence base per stream key (`<rank>/<stream>`), learnt from the server.
    Base(std::collections::HashMap<String, u64>),
}

impl Record {
    fn encode(&self) -> Vec<u8> {
        let mut body = Vec::new();
        match self {
            Record::Batch(b) => {
                body.push(KIND_BATCH);
                b.encode(&mut body).expect("vec grows");
            }
            Record::Ack(id) => {
                body.push(KIND_ACK);
                body.extend_from_slice(&id.to_le_bytes());
            }
            Record::Exit(e) => {
                body.push(KIND_EXIT);
                e.encode(&mut body).expect("vec grows");
            }
            Record::ExitAcked => body.push(KIND_EXIT_ACKED),
            Record::Base(map) => {
                body.push(KIND_BASE);
                let mut entries: Vec<_> = map.iter().collect();
                entries.sort();
                for (key, base) in entries {
                    body.extend_from_slice(&(key.len() as u16).to_le_bytes());
                    body.extend_from_slice(key.as_bytes());
                    body.extend_from_slice(&base.to_le_bytes());
                }
            }
        }
        body
    }

    fn decode(body: &[u8]) -> Result<Record, String> {
        let (kind, payload) = body.split_first().ok_or("empty record")?;
        match *kind {
            KIND_BATCH => v1::LogBatch::decode(payload).map(Record::Batch).map_err(|e| e.to_string()),
            KIND_ACK => {
                let id: [u8; 8] = payload.try_into().map_err(|_| "ack record is not 8 bytes")?;
                Ok(Record::Ack(u64::from_le_bytes(id)))
            }
            KIND_EXIT => v1::ProcessExit::decode(payload).map(Record::Exit).map_err(|e| e.to_string()),
            KIND_EXIT_ACKED => Ok(Record::ExitAcked),
            KIND_BASE => {
                let mut map = std::collections::HashMap::new();
                let mut rest = payload;
                while !rest.is_empty() {
                    let n = usize::from(u16::from_le_bytes(rest.get(..2).ok_or("torn base entry")?.try_into().expect("2 bytes")));
                    let key = rest.get(2..2 + n).ok_or("torn base entry")?;
                    let base = rest.get(2 + n..10 + n).ok_or("torn base entry")?;
                    let key = String::from_utf8(key.to_vec()).map_err(|_| "base key is not UTF-8")?;
                    map.insert(key, u64::from_le_bytes(base.try_into().expect("8 bytes")));
                    rest = &rest[10 + n..];
                }
                Ok(Record::Base(map))
            }
            other => Err(format!("unknown record kind {other}")),
        }
    }
}

/// Appends records to one spool file, which it holds locked.
#[derive(Debug)]
pub struct SpoolWriter {
    file: File,
    path: PathBuf,
    len: u64,
    max_bytes: u64,
}

/// The spool would grow past its size limit.
#[derive(Debug)]
pub struct SpoolFull;

impl SpoolWriter {
    /// Creates a new spool file for `session` and locks it.
    pub fn create(path: &Path, session: &v1::OpenSessionRequest, max_bytes: u64) -> io::Result<Self> {
        let mut file = OpenOptions::new().read(true).append(true).create_new(true).open(path)?;
        lock(&file)?;
        let s = session.encode_to_vec();
        let mut header = Vec::with_capacity(20 + s.len());
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        header.extend_from_slice(&(s.len() as u32).to_le_bytes());
        header.extend_from_slice(&s);
        header.extend_from_slice(&crc32fast::hash(&s).to_le_bytes());
        file.write_all(&header)?;
        file.sync_data()?;
        Ok(SpoolWriter { file, path: path.to_path_buf(), len: header.len() as u64, max_bytes })
    }

    /// Continues an existing spool (one being replayed), whose file the caller has locked.
    pub fn reopen(file: File, path: &Path, valid_len: u64) -> io::Result<Self> {
        // Cut a torn tail so new records follow the last good one.
        file.set_len(valid_len)?;
        Ok(SpoolWriter { file, path: path.to_path_buf(), len: valid_len, max_bytes: u64::MAX })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one record, syncing it when `sync`; returns its offset, or `SpoolFull`.
    pub fn append(&mut self, record: &Record, sync: bool) -> io::Result<Result<u64, SpoolFull>> {
        let body = record.encode();
        let total = 8 + body.len() as u64;
        if self.len + total > self.max_bytes {
            return Ok(Err(SpoolFull));
        }
        let mut frame = Vec::with_capacity(total as usize);
        frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
        frame.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
        frame.extend_from_slice(&body);
        let offset = self.len;
        self.file.write_all(&frame)?;
        self.len += total;
        if sync {
            self.file.sync_data()?;
        }
        Ok(Ok(offset))
    }

    /// Reads back the record at `offset` (a batch evicted from memory, to resend it).
    pub fn read_at(&self, offset: u64) -> io::Result<Record> {
        let mut f = &self.file;
        f.seek(SeekFrom::Start(offset))?;
        match read_record(&mut f)? {
            Some(Ok((r, _))) => Ok(r),
            Some(Err(e)) => Err(io::Error::new(io::ErrorKind::InvalidData, e)),
            None => Err(io::Error::new(io::ErrorKind::UnexpectedEof, "no record at offset")),
        }
    }

    /// Removes the file: everything in it reached the server.
    pub fn remove(self) -> io::Result<()> {
        std::fs::remove_file(&self.path)
    }
}

/// Everything a spool file holds.
#[derive(Debug)]
pub struct SpoolContents {
    pub session: v1::OpenSessionRequest,
    /// Records with their offsets, in file order.
    pub records: Vec<(u64, Record)>,
    /// Length of the valid prefix of the file.
    pub valid_len: u64,
    /// Why reading stopped early, when it did (a torn or corrupt record).
    pub corrupt: Option<String>,
}

impl SpoolContents {
    /// The sequence base the spooling agent learnt, if it ever reached the server.
    pub fn base(&self) -> Option<std::collections::HashMap<String, u64>> {
        self.records.iter().rev().find_map(|(_, r)| if let Record::Base(m) = r { Some(m.clone()) } else { None })
    }
}

/// What of a spool the server has not acknowledged.
#[derive(Debug, Default)]
pub struct Unacked {
    pub batches: Vec<v1::LogBatch>,
    pub exit: Option<v1::ProcessExit>,
}

impl SpoolContents {
    pub fn unacked(&self) -> Unacked {
        let acked: std::collections::HashSet<u64> =
            self.records.iter().filter_map(|(_, r)| if let Record::Ack(id) = r { Some(*id) } else { None }).collect();
        let mut out = Unacked::default();
        let mut exit_acked = false;
        for (_, r) in &self.records {
            match r {
                Record::Batch(b) if !acked.contains(&b.batch_id) => out.batches.push(b.clone()),
                Record::Exit(e) => out.exit = Some(e.clone()),
                Record::ExitAcked => exit_acked = true,
                _ => {}
            }
        }
        if exit_acked {
            out.exit = None;
        }
        out
    }
}

/// Reads a whole spool file.
pub fn read_spool(mut r: impl Read) -> io::Result<SpoolContents> {
    let bad = |m: &str| io::Error::new(io::ErrorKind::InvalidData, m.to_string());
    let mut fixed = [0u8; 16];
    r.read_exact(&mut fixed)?;
    if &fixed[..8] != MAGIC {
        return Err(bad("not a coroner spool (bad magic)"));
    }
    let version = u32::from_le_bytes(fixed[8..12].try_into().expect("4 bytes"));
    if version != FORMAT_VERSION {
        return Err(bad(&format!("spool format version {version} is not supported (expected {FORMAT_VERSION})")));
    }
    let slen = u32::from_le_bytes(fixed[12..16].try_into().expect("4 bytes"));
    if slen > MAX_RECORD {
        return Err(bad("spool header too long"));
    }
    let mut s = vec![0u8; slen as usize + 4];
    r.read_exact(&mut s)?;
    let crc = u32::from_le_bytes(s[slen as usize..].try_into().expect("4 bytes"));
    s.truncate(slen as usize);
    if crc32fast::hash(&s) != crc {
        return Err(bad("spool header checksum mismatch"));
    }
    let session = v1::OpenSessionRequest::decode(&s[..]).map_err(|e| bad(&e.to_string()))?;
    let mut offset = 16 + u64::from(slen) + 4;
    let mut records = Vec::new();
    let mut corrupt = None;
    loop {
        match read_record(&mut r) {
            Ok(None) => break,
            Ok(Some(Ok((rec, len)))) => {
                records.push((offset, rec));
                offset += len;
            }
            Ok(Some(Err(e))) => {
                corrupt = Some(format!("record at offset {offset}: {e}"));
                break;
            }
            Err(e) => {
                corrupt = Some(format!("record at offset {offset}: {e}"));
                break;
            }
        }
    }
    Ok(SpoolContents { session, records, valid_len: offset, corrupt })
}

/// Reads one framed record: `None` at a clean end of file, `Some(Err)` for a torn or corrupt one.
fn read_record(r: &mut impl Read) -> io::Result<Option<Result<(Record, u64), String>>> {
    let mut head = [0u8; 8];
    let mut got = 0;
    while got < 8 {
        match r.read(&mut head[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Ok(Some(Err("torn record header".into()))),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes"));
    let crc = u32::from_le_bytes(head[4..].try_into().expect("4 bytes"));
    if len == 0 || len > MAX_RECORD {
        return Ok(Some(Err(format!("implausible record length {len}"))));
    }
    let mut body = vec![0u8; len as usize];
    if let Err(e) = r.read_exact(&mut body) {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            return Ok(Some(Err("torn record body".into())));
        }
        return Err(e);
    }
    if crc32fast::hash(&body) != crc {
        return Ok(Some(Err("checksum mismatch".into())));
    }
    Ok(Some(Record::decode(&body).map(|rec| (rec, 8 + u64::from(len)))))
}

fn lock(file: &File) -> io::Result<()> {
    // SAFETY: flock on a valid, owned file descriptor.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Spool files in `dir` other than `own` that no live agent holds, each opened and locked.
pub fn orphans(dir: &Path, own: &Path) -> Vec<(PathBuf, File)> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path == own || path.extension().and_then(|e| e.to_str()) != Some("spool") {
            continue;
        }
        let Ok(file) = OpenOptions::new().read(true).append(true).open(&path) else { continue };
        if lock(&file).is_ok() {
            found.push((path, file));
        }
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> v1::OpenSessionRequest {
        v1::OpenSessionRequest { job_id: "j".into(), rank: Some(3), agent_instance: "a1".into(), ..Default::default() }
    }

    fn batch(id: u64, text: &[u8]) -> v1::LogBatch {
        v1::LogBatch {
            batch_id: id,
            lines: vec![v1::LogLine { seq: id, raw: text.to_vec(), stream: 1, ..Default::default() }],
            ..Default::default()
        }
    }

    #[test]
    fn written_records_read_back_and_acks_hide_batches() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a1.spool");
        let mut w = SpoolWriter::create(&path, &session(), u64::MAX).unwrap();
        let off = w.append(&Record::Batch(batch(0, b"one \xff")), true).unwrap().unwrap();
        w.append(&Record::Batch(batch(1, b"two")), true).unwrap().unwrap();
        w.append(&Record::Ack(0), false).unwrap().unwrap();
        let base: std::collections::HashMap<String, u64> = [("3/stdout".to_string(), 7)].into();
        w.append(&Record::Base(base.clone()), true).unwrap().unwrap();
        let exit = v1::ProcessExit { exit_code: Some(3), ..Default::default() };
        w.append(&Record::Exit(exit.clone()), true).unwrap().unwrap();
        assert_eq!(w.read_at(off).unwrap(), Record::Batch(batch(0, b"one \xff")));

        let c = read_spool(File::open(&path).unwrap()).unwrap();
        assert_eq!(c.session, session());
        assert_eq!(c.records.len(), 5);
        assert_eq!(c.base(), Some(base));
        assert!(c.corrupt.is_none());
        let u = c.unacked();
        assert_eq!(u.batches, vec![batch(1, b"two")]);
        assert_eq!(u.exit, Some(exit));
    }

    #[test]
    fn a_corrupt_record_stops_the_reader_and_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a1.spool");
        let mut w = SpoolWriter::create(&path, &session(), u64::MAX).unwrap();
        w.append(&Record::Batch(batch(0, b"good")), true).unwrap().unwrap();
        let off = w.append(&Record::Batch(batch(1, b"flipped")), true).unwrap().unwrap();
        w.append(&Record::Batch(batch(2, b"after")), true).unwrap().unwrap();
        drop(w);
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[off as usize + 12] ^= 0x40;
        std::fs::write(&path, &bytes).unwrap();
        let c = read_spool(&bytes[..]).unwrap();
        assert_eq!(c.records.len(), 1);
        assert_eq!(c.valid_len, off);
        assert!(c.corrupt.as_deref().unwrap().contains("checksum"), "{:?}", c.corrupt);

        // A torn tail (the agent died mid-write) is reported the same way.
        bytes[off as usize + 12] ^= 0x40;
        let c = read_spool(&bytes[..last]).unwrap();
        assert_eq!(c.records.len(), 2);
        assert!(c.corrupt.as_deref().unwrap().contains("torn"));
    }

    #[test]
    fn wrong_magic_or_version_is_refused() {
        assert!(read_spool(&b"NOTSPOOL\x01\0\0\0\0\0\0\0\0\0\0\0"[..]).is_err());
        let mut v2 = Vec::from(&MAGIC[..]);
        v2.extend_from_slice(&2u32.to_le_bytes());
        v2.extend_from_slice(&[0; 8]);
        let err = read_spool(&v2[..]).unwrap_err();
        assert!(err.to_string().contains("version 2"));
    }

    #[test]
    fn the_size_limit_refuses_records_and_live_spools_are_not_orphans() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a1.spool");
        let mut w = SpoolWriter::create(&path, &session(), 100).unwrap();
        assert!(w.append(&Record::Batch(batch(0, &[b'x'; 200])), true).unwrap().is_err());
        // Held by `w`: not an orphan. Released: an orphan.
        assert!(orphans(dir.path(), &dir.path().join("other.spool")).is_empty());
        drop(w);
        assert_eq!(orphans(dir.path(), &dir.path().join("other.spool")).len(), 1);
    }
}
