//! The agent's on-disk spool: every batch it forms is appended here before it is sent, so lines
//! the server never acknowledged survive the agent's exit and are replayed by the next agent of
//! the same job and rank key (or uploaded later).
//!
//! # Format (version 2)
//!
//! One append-only file per agent instance, `<dir>/<agent_instance>.spool`:
//!
//! - header: magic `CORSPOOL`, `u32` format version, `u32` length, the session's
//!   `OpenSessionRequest` (prost), and the `u32` crc32 of those bytes;
//! - records: `u32` body length, `u32` crc32 of the body, then the body: one kind byte and a
//!   payload: `1` a `LogBatch` (prost) numbered by this agent from 0 (the base record says
//!   where its streams start), `2` the acknowledgement of a batch id (`u64`), `3` the process
//!   end (`ProcessExit`, prost), `4` the server acknowledged that end, `5` the base (below),
//!   `6` (since version 2) a `LogBatch` whose numbers are already rebased: the exact bytes
//!   that were sent.
//!
//! The base record is a list of entries, each a `u16` key length, the key and a `u64`: a stream
//! key (`<rank>/<stream>`) and where that stream starts, and under the key `*` (which no stream
//! key looks like) the instance's lane offset, written first. An older agent's base has no `*`
//! entry: its lane starts at 0. In memory it is a [`SeqBase`]; the conversion is here.
//!
//! All integers little-endian. A reader stops at the first torn or corrupt record and says so.
//! Version 1 files (no kind 6) are still read.
//!
//! # Durability (fsync policy)
//!
//! A batch record is written with one `write` before the batch is sent, so it survives the
//! agent's own death (the kernel has it). It is made durable against the host's crash by an
//! `fdatasync` in the background: one at a time, each covering every record written before it
//! (so a burst costs a few syncs, a quiet stream about ten per second at the default 100 ms
//! batching), never one per line, and never on the path that drains the queue. Acknowledgement
//! records are not synced: losing one only makes the next agent resend lines the server
//! deduplicates by sequence number. The exit record is synced. Lines still in the in-memory queue
//! when the agent is SIGKILLed are lost; that window is one batching interval.
//!
//! Each live agent holds an exclusive `flock` on its spool file, so a replaying agent never takes
//! a spool from one that is still running.

use crate::seq_base::SeqBase;
use bytes::{BufMut, Bytes, BytesMut};
use coroner_proto::v1;
use prost::Message;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

pub const MAGIC: &[u8; 8] = b"CORSPOOL";
pub const FORMAT_VERSION: u32 = 2;
/// Older versions this reader still reads.
const READABLE_VERSIONS: [u32; 2] = [1, 2];
const MAX_RECORD: u32 = 256 << 20;

const KIND_BATCH: u8 = 1;
const KIND_ACK: u8 = 2;
const KIND_EXIT: u8 = 3;
const KIND_EXIT_ACKED: u8 = 4;
const KIND_BASE: u8 = 5;
const KIND_REBASED_BATCH: u8 = 6;
/// The base record's key for the lane offset (no stream key looks like it).
const OFFSET_KEY: &str = "*";

/// One spool record.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// Lines numbered by this agent from 0 (rebased on the spool's base record when sent).
    Batch(v1::LogBatch),
    /// Lines whose numbers are already rebased (what the server was sent).
    RebasedBatch(v1::LogBatch),
    Ack(u64),
    Exit(v1::ProcessExit),
    ExitAcked,
    /// This instance's sequence base, learnt from the server.
    Base(SeqBase),
}

impl Record {
    fn encode(&self) -> Vec<u8> {
        let mut body = Vec::new();
        match self {
            Record::Batch(b) => {
                body.push(KIND_BATCH);
                b.encode(&mut body).expect("vec grows");
            }
            Record::RebasedBatch(b) => {
                body.push(KIND_REBASED_BATCH);
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
            Record::Base(base) => {
                body.push(KIND_BASE);
                for (key, start) in std::iter::once((OFFSET_KEY, base.offset())).chain(base.streams()) {
                    body.extend_from_slice(&(key.len() as u16).to_le_bytes());
                    body.extend_from_slice(key.as_bytes());
                    body.extend_from_slice(&start.to_le_bytes());
                }
            }
        }
        body
    }

    fn decode(body: &[u8]) -> Result<Record, String> {
        let (kind, payload) = body.split_first().ok_or("empty record")?;
        match *kind {
            KIND_BATCH => v1::LogBatch::decode(payload).map(Record::Batch).map_err(|e| e.to_string()),
            KIND_REBASED_BATCH => v1::LogBatch::decode(payload).map(Record::RebasedBatch).map_err(|e| e.to_string()),
            KIND_ACK => {
                let id: [u8; 8] = payload.try_into().map_err(|_| "ack record is not 8 bytes")?;
                Ok(Record::Ack(u64::from_le_bytes(id)))
            }
            KIND_EXIT => v1::ProcessExit::decode(payload).map(Record::Exit).map_err(|e| e.to_string()),
            KIND_EXIT_ACKED => Ok(Record::ExitAcked),
            KIND_BASE => {
                let (mut streams, mut offset) = (std::collections::HashMap::new(), 0);
                let mut rest = payload;
                while !rest.is_empty() {
                    let n = usize::from(u16::from_le_bytes(rest.get(..2).ok_or("torn base entry")?.try_into().expect("2 bytes")));
                    let key = rest.get(2..2 + n).ok_or("torn base entry")?;
                    let base = rest.get(2 + n..10 + n).ok_or("torn base entry")?;
                    let key = String::from_utf8(key.to_vec()).map_err(|_| "base key is not UTF-8")?;
                    let start = u64::from_le_bytes(base.try_into().expect("8 bytes"));
                    if key == OFFSET_KEY {
                        offset = start;
                    } else {
                        streams.insert(key, start);
                    }
                    rest = &rest[10 + n..];
                }
                Ok(Record::Base(SeqBase::from_parts(streams, offset)))
            }
            other => Err(format!("unknown record kind {other}")),
        }
    }
}

/// A batch record built around bytes encoded elsewhere (see `crate::wire`): the frame is
/// written to the spool as is, and its payload is what is sent.
#[derive(Debug, Clone)]
pub struct BatchFrame {
    frame: Bytes,
}

impl BatchFrame {
    /// `fill` appends the `LogBatch` bytes; `rebased` says whether their numbers are rebased.
    pub fn build<T>(rebased: bool, capacity: usize, fill: impl FnOnce(&mut BytesMut) -> T) -> (BatchFrame, T) {
        let mut b = BytesMut::with_capacity(9 + capacity);
        b.put_slice(&[0; 8]);
        b.put_u8(if rebased { KIND_REBASED_BATCH } else { KIND_BATCH });
        let out = fill(&mut b);
        let len = (b.len() - 8) as u32;
        let crc = crc32fast::hash(&b[8..]);
        b[..4].copy_from_slice(&len.to_le_bytes());
        b[4..8].copy_from_slice(&crc.to_le_bytes());
        (BatchFrame { frame: b.freeze() }, out)
    }

    /// The `LogBatch` bytes.
    pub fn payload(&self) -> Bytes {
        self.frame.slice(9..)
    }

    pub fn len(&self) -> usize {
        self.frame.len()
    }
}

/// Appends records to one spool file, which it holds locked.
#[derive(Debug)]
pub struct SpoolWriter {
    file: File,
    path: PathBuf,
    len: u64,
    max_bytes: u64,
    /// Where the records start (what [`SpoolWriter::reset`] keeps).
    header_len: u64,
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
        let len = header.len() as u64;
        Ok(SpoolWriter { file, path: path.to_path_buf(), len, max_bytes, header_len: len })
    }

    /// Continues an existing spool (one being replayed), whose file the caller has locked.
    pub fn reopen(file: File, path: &Path, valid_len: u64) -> io::Result<Self> {
        // Cut a torn tail so new records follow the last good one.
        file.set_len(valid_len)?;
        Ok(SpoolWriter { file, path: path.to_path_buf(), len: valid_len, max_bytes: u64::MAX, header_len: valid_len })
    }

    /// Cuts every record, keeping the header: for a spool whose records were all acknowledged,
    /// so that its size limit bounds what is unacknowledged rather than all that was ever sent.
    pub fn reset(&mut self) -> io::Result<()> {
        self.file.set_len(self.header_len)?;
        self.len = self.header_len;
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one record, syncing it when `sync`; returns its offset, or `SpoolFull`. The size
    /// limit holds batches back; the small records about them (acknowledgements, the base, the
    /// process end) are always written, so a full spool still replays correctly.
    pub fn append(&mut self, record: &Record, sync: bool) -> io::Result<Result<u64, SpoolFull>> {
        let body = record.encode();
        let total = 8 + body.len() as u64;
        let batch = matches!(record, Record::Batch(_) | Record::RebasedBatch(_));
        if batch && self.len + total > self.max_bytes {
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

    /// Appends batch frames, then syncs once when `sync`; returns their offsets, or `SpoolFull`
    /// (then none was written).
    pub fn append_frames(&mut self, frames: &[&BatchFrame], sync: bool) -> io::Result<Result<Vec<u64>, SpoolFull>> {
        let total: u64 = frames.iter().map(|f| f.len() as u64).sum();
        if self.len + total > self.max_bytes {
            return Ok(Err(SpoolFull));
        }
        let mut offsets = Vec::with_capacity(frames.len());
        for f in frames {
            offsets.push(self.len);
            self.file.write_all(&f.frame)?;
            self.len += f.len() as u64;
        }
        if sync && !frames.is_empty() {
            self.file.sync_data()?;
        }
        Ok(Ok(offsets))
    }

    /// Another handle on the file, to sync it from another thread.
    pub fn sync_handle(&self) -> io::Result<File> {
        self.file.try_clone()
    }

    /// The payload of the batch record at `offset`, as written (a batch evicted from memory, to
    /// resend it without decoding it), and whether its numbers are rebased.
    pub fn read_batch_payload(&self, offset: u64) -> io::Result<(Bytes, bool)> {
        let bad = |m: String| io::Error::new(io::ErrorKind::InvalidData, m);
        let mut head = [0u8; 8];
        self.read_exact_at(&mut head, offset)?;
        let len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes"));
        let crc = u32::from_le_bytes(head[4..].try_into().expect("4 bytes"));
        if !(1..=MAX_RECORD).contains(&len) {
            return Err(bad(format!("implausible record length {len} at offset {offset}")));
        }
        let mut body = vec![0u8; len as usize];
        self.read_exact_at(&mut body, offset + 8)?;
        if crc32fast::hash(&body) != crc {
            return Err(bad(format!("checksum mismatch at offset {offset}")));
        }
        let rebased = match body[0] {
            KIND_BATCH => false,
            KIND_REBASED_BATCH => true,
            other => return Err(bad(format!("record at offset {offset} is of kind {other}, not a batch"))),
        };
        Ok((Bytes::from(body).slice(1..), rebased))
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        self.file.read_exact_at(buf, offset)
    }

    /// Reads back the record at `offset`.
    #[cfg(test)]
    pub fn read_at(&self, offset: u64) -> io::Result<Record> {
        use std::io::{Seek, SeekFrom};
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
    pub fn base(&self) -> Option<SeqBase> {
        self.records.iter().rev().find_map(|(_, r)| if let Record::Base(b) = r { Some(b.clone()) } else { None })
    }
}

/// A spooled batch the server has not acknowledged.
#[derive(Debug, Clone, PartialEq)]
pub struct SpooledBatch {
    pub batch: v1::LogBatch,
    /// Its numbers are already rebased (no base to add).
    pub rebased: bool,
}

/// What of a spool the server has not acknowledged.
#[derive(Debug, Default)]
pub struct Unacked {
    pub batches: Vec<SpooledBatch>,
    pub exit: Option<v1::ProcessExit>,
}

impl SpoolContents {
    pub fn unacked(&self) -> Unacked {
        let acked: std::collections::HashSet<u64> = self.records.iter().filter_map(|(_, r)| if let Record::Ack(id) = r { Some(*id) } else { None }).collect();
        let mut out = Unacked::default();
        let mut exit_acked = false;
        for (_, r) in &self.records {
            match r {
                Record::Batch(b) if !acked.contains(&b.batch_id) => out.batches.push(SpooledBatch { batch: b.clone(), rebased: false }),
                Record::RebasedBatch(b) if !acked.contains(&b.batch_id) => {
                    out.batches.push(SpooledBatch { batch: b.clone(), rebased: true });
                }
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
    if !READABLE_VERSIONS.contains(&version) {
        return Err(bad(&format!("spool format version {version} is not supported (this agent reads versions 1 to {FORMAT_VERSION})")));
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
        v1::LogBatch { batch_id: id, lines: vec![v1::LogLine { seq: id, raw: text.to_vec(), stream: 1, ..Default::default() }], ..Default::default() }
    }

    #[test]
    fn written_records_read_back_and_acks_hide_batches() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a1.spool");
        let mut w = SpoolWriter::create(&path, &session(), u64::MAX).unwrap();
        let off = w.append(&Record::Batch(batch(0, b"one \xff")), true).unwrap().unwrap();
        w.append(&Record::Batch(batch(1, b"two")), true).unwrap().unwrap();
        w.append(&Record::Ack(0), false).unwrap().unwrap();
        let base = SeqBase::from_session(&[("3/stdout".to_string(), 7)].into(), 1 << 40);
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
        assert_eq!(u.batches, vec![SpooledBatch { batch: batch(1, b"two"), rebased: false }]);
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
        let mut v3 = Vec::from(&MAGIC[..]);
        v3.extend_from_slice(&3u32.to_le_bytes());
        v3.extend_from_slice(&[0; 8]);
        let err = read_spool(&v3[..]).unwrap_err();
        assert!(err.to_string().contains("version 3"), "{err}");
    }

    #[test]
    fn a_version_1_spool_still_reads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a1.spool");
        let mut w = SpoolWriter::create(&path, &session(), u64::MAX).unwrap();
        w.append(&Record::Batch(batch(0, b"old")), true).unwrap().unwrap();
        drop(w);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[8..12].copy_from_slice(&1u32.to_le_bytes());
        let c = read_spool(&bytes[..]).unwrap();
        assert_eq!(c.unacked().batches, vec![SpooledBatch { batch: batch(0, b"old"), rebased: false }]);
    }

    #[test]
    fn batch_frames_are_spooled_as_sent_and_read_back_without_decoding() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a1.spool");
        let mut w = SpoolWriter::create(&path, &session(), u64::MAX).unwrap();
        let encoded = |b: &v1::LogBatch, rebased| BatchFrame::build(rebased, 64, |out| b.encode(out).unwrap()).0;
        let (one, two) = (encoded(&batch(1, b"rebased \xff"), true), encoded(&batch(2, b"local"), false));
        let at = w.append_frames(&[&one, &two], true).unwrap().unwrap();
        w.append(&Record::Ack(2), false).unwrap().unwrap();
        assert_eq!(w.read_batch_payload(at[0]).unwrap(), (one.payload(), true));
        assert_eq!(w.read_batch_payload(at[1]).unwrap(), (two.payload(), false));
        assert_eq!(v1::LogBatch::decode(one.payload()).unwrap(), batch(1, b"rebased \xff"));
        let c = read_spool(File::open(&path).unwrap()).unwrap();
        assert_eq!(c.records[0], (at[0], Record::RebasedBatch(batch(1, b"rebased \xff"))));
        assert_eq!(c.unacked().batches, vec![SpooledBatch { batch: batch(1, b"rebased \xff"), rebased: true }]);
        // Not a batch, or a damaged one: an error, never a wrong batch.
        let ack_at = at[1] + two.len() as u64;
        assert!(w.read_batch_payload(ack_at).is_err());
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[at[0] as usize + 12] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert!(w.read_batch_payload(at[0]).unwrap_err().to_string().contains("checksum"));
    }

    #[test]
    fn a_reset_spool_keeps_its_header_and_takes_records_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a1.spool");
        let mut w = SpoolWriter::create(&path, &session(), 200).unwrap();
        w.append(&Record::Batch(batch(0, &[b'x'; 100])), true).unwrap().unwrap();
        assert!(w.append(&Record::Batch(batch(1, &[b'y'; 100])), true).unwrap().is_err(), "full");
        w.reset().unwrap();
        w.append(&Record::Batch(batch(1, &[b'y'; 100])), true).unwrap().unwrap();
        let c = read_spool(File::open(&path).unwrap()).unwrap();
        assert_eq!(c.session, session());
        assert_eq!(c.unacked().batches, vec![SpooledBatch { batch: batch(1, &[b'y'; 100]), rebased: false }]);
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

    /// A spool written by the agent of 5a4e50e (before the base was a type): its base record
    /// (with the `*` offset entry) reads as the same base, and is written back byte for byte.
    #[test]
    fn a_spool_written_before_the_typed_base_still_reads() {
        let bytes = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/v2-before-seqbase.spool")).unwrap();
        let c = read_spool(&bytes[..]).unwrap();
        assert!(c.corrupt.is_none());
        assert_eq!((c.session.job_id.as_str(), c.session.rank, c.session.agent_instance.as_str()), ("job-v2", Some(3), "a-v2"));
        let base = c.base().unwrap();
        assert_eq!((base.start_of("3/stdout"), base.start_of("3/stderr"), base.offset()), (10, 1 << 40, 1 << 40));
        let u = c.unacked();
        let batches: Vec<(u64, bool, Vec<u64>)> =
            u.batches.iter().map(|b| (b.batch.batch_id, b.rebased, b.batch.lines.iter().map(|l| l.seq).collect())).collect();
        assert_eq!(batches, vec![(1, false, vec![0]), (2, true, vec![12])]);
        assert_eq!(u.batches[1].batch.lines[0].raw, b"step 3 loss \xff");
        assert_eq!(u.exit.map(|e| e.exit_code), Some(Some(1)));
        let (at, record) = c.records.iter().find(|(_, r)| matches!(r, Record::Base(_))).unwrap();
        let body = record.encode();
        assert_eq!(&bytes[*at as usize + 8..*at as usize + 8 + body.len()], &body[..], "the same bytes as before");
    }
}
