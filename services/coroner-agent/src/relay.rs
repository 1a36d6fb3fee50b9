//! The supervisor's pass-through, made exactly-once across its own death.
//!
//! A plain pump reads a chunk from the child's pipe and then writes it out; killed between the
//! two (a SIGKILL lands while the thread waits for a CPU after its read), the chunk is gone from
//! the pipe and never reached the terminal. So the supervisor does not consume what it has not
//! written: it peeks at the pipe with `tee(2)` (the bytes stay in the pipe), writes them out,
//! counts them as written, and only then consumes them. The counts live in a page of shared
//! memory ([`Progress`]) that the shipper maps too: when the supervisor is gone, the shipper
//! skips on stdout exactly what was written but not consumed (and captures it, because the
//! supervisor never handed it on), then passes the rest through.
//!
//! Writes to a pipe are cut at PIPE_BUF, which the kernel writes whole or not at all, so a kill
//! during a blocked write leaves nothing half counted. Two instants are left, each a few
//! instructions between a syscall returning and a counter being stored; both are arranged so a
//! kill there repeats output (at most one read, 64 KiB) rather than loses it: a `write` is
//! counted after it returns, a consuming `read` before it is made. If `tee` is refused (a pipe
//! this kernel cannot tee), the relay falls back to read-then-write.

use bytes::{Bytes, BytesMut};
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};

/// One read of the pipe at most (a pipe's own buffer is 64 KiB).
const READ_SIZE: usize = 64 * 1024;
/// The shared page: for stdout and stderr, bytes written out, bytes consumed and the lines
/// (newlines) in what was consumed; the fourth counter of each stream is spare.
const PAGE: usize = 4096;
/// Counters per stream in the page.
const COUNTERS: usize = 4;

/// Per-stream counts shared between the supervisor and the shipper.
pub struct Progress {
    ptr: *mut AtomicU64,
    _fd: OwnedFd,
}

// SAFETY: the mapping is only accessed through atomics and lives as long as the value.
unsafe impl Send for Progress {}
// SAFETY: as above.
unsafe impl Sync for Progress {}

/// Which stream's counters: 0 stdout, 1 stderr.
#[derive(Debug, Clone, Copy)]
pub struct Slot(pub usize);

impl Progress {
    /// A new zeroed page (an anonymous memory file the shipper inherits).
    pub fn create() -> std::io::Result<Progress> {
        // SAFETY: memfd_create with a NUL-terminated name; we own the result.
        let fd = unsafe { libc::memfd_create(c"coroner-progress".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: just created, owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: ftruncate on our own descriptor.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), PAGE as libc::off_t) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Progress::map(fd)
    }

    /// Maps a page another process created (the shipper, from the descriptor it was given).
    pub fn map(fd: OwnedFd) -> std::io::Result<Progress> {
        // SAFETY: a shared mapping of one page of a memory file we hold open; checked below.
        let ptr = unsafe { libc::mmap(std::ptr::null_mut(), PAGE, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd.as_raw_fd(), 0) };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Progress { ptr: ptr.cast(), _fd: fd })
    }

    pub fn fd(&self) -> RawFd {
        self._fd.as_raw_fd()
    }

    fn counter(&self, slot: Slot, which: usize) -> &AtomicU64 {
        debug_assert!(slot.0 < 2 && which < COUNTERS);
        // SAFETY: 2 x COUNTERS counters of 8 bytes fit the mapped page; AtomicU64 has the
        // alignment of the page start plus a multiple of 8.
        unsafe { &*self.ptr.add(slot.0 * COUNTERS + which) }
    }

    /// Newlines in what the supervisor consumed from the pipe (and so should have handed on to
    /// the shipper): what the shipper received less this is what died with the supervisor.
    pub fn consumed_lines(&self, slot: Slot) -> u64 {
        self.counter(slot, 2).load(Ordering::Acquire)
    }

    /// Bytes written out but not consumed from the pipe when the supervisor stopped.
    pub fn unconsumed(&self, slot: Slot) -> u64 {
        let consumed = self.counter(slot, 1).load(Ordering::Acquire);
        self.counter(slot, 0).load(Ordering::Acquire).saturating_sub(consumed)
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        // SAFETY: unmapping the page mapped in `map`.
        unsafe {
            libc::munmap(self.ptr.cast(), PAGE);
        }
    }
}

/// Copies the pipe `src` to `dst` and hands each chunk, with its read time, to `sink`, never
/// consuming from the pipe what has not been written out (see the module doc). Returns when the
/// pipe ends. Falls back to `capture::pump` when `tee` is refused.
///
/// `dst` is written with plain `write(2)` calls (no buffering in between), each counted as soon as
/// it returns, so what reached `dst` and what was counted differ by at most the call under way.
pub fn relay(src: OwnedFd, dst: RawFd, stream: coroner_model::Stream, progress: &Progress, slot: Slot, mut sink: impl FnMut(Bytes, i64)) {
    let Ok((aux_r, aux_w)) = pipe() else {
        return crate::capture::pump(std::fs::File::from(src), Fd(dst), stream, sink);
    };
    let mut passthrough_ok = true;
    let mut capturing = true;
    let max_write = atomic_write_size(dst);
    let mut scratch = vec![0u8; READ_SIZE];
    loop {
        // SAFETY: tee between two pipes we own; blocks until the child writes or closes.
        let n = unsafe { libc::tee(src.as_raw_fd(), aux_w.as_raw_fd(), READ_SIZE, 0) };
        if n == 0 {
            break;
        }
        if n < 0 {
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EINVAL) => return crate::capture::pump(std::fs::File::from(src), Fd(dst), stream, sink),
                _ => {
                    tracing::warn!("reading the child's {}: {e}", stream.as_str());
                    break;
                }
            }
        }
        let n = n as usize;
        let now = coroner_model::now_ns();
        let mut buf = BytesMut::zeroed(n);
        if read_exact(aux_r.as_raw_fd(), &mut buf).is_err() {
            break;
        }
        let chunk = buf.freeze();
        let written = progress.counter(slot, 0);
        if passthrough_ok {
            let mut rest = &chunk[..];
            while !rest.is_empty() {
                let piece = rest.len().min(max_write);
                // SAFETY: write from a live buffer of the given length.
                let k = unsafe { libc::write(dst, rest.as_ptr().cast(), piece) };
                if k < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                if k <= 0 {
                    // Our own stdout may be closed (a pipe whose reader left); keep capturing.
                    passthrough_ok = false;
                    break;
                }
                written.fetch_add(k as u64, Ordering::Release);
                rest = &rest[k as usize..];
            }
        }
        // Not written (stdout closed) counts as written: nobody is to write it again.
        let consumed = progress.counter(slot, 1);
        let target = consumed.load(Ordering::Relaxed) + n as u64;
        if written.load(Ordering::Relaxed) < target {
            written.store(target, Ordering::Release);
        }
        // Consume what was written. It is counted first: killed between the count and the read,
        // the shipper takes bytes still in the pipe for consumed and prints them again (a
        // repeat); counted after, it would take unwritten bytes for written ones (a loss).
        consumed.fetch_add(n as u64, Ordering::Release);
        progress.counter(slot, 2).fetch_add(memchr::memchr_iter(b'\n', &chunk).count() as u64, Ordering::Release);
        if read_exact(src.as_raw_fd(), &mut scratch[..n]).is_err() {
            return;
        }
        if capturing {
            capturing = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sink(chunk, now))).is_ok();
            if !capturing {
                tracing::error!("capturing the child's {} failed; its output still passes through but is no longer shipped", stream.as_str());
            }
        }
    }
}

/// How much one `write` to `fd` may carry so that a SIGKILL during it leaves all of it written or
/// none: PIPE_BUF for a pipe or a socket (the kernel writes at most that much atomically; a
/// larger blocking write killed half way has written a part nobody counted), anything for a
/// file or a terminal.
fn atomic_write_size(fd: RawFd) -> usize {
    // SAFETY: `stat` is plain data, for which all zero bytes are a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes into the struct we own; a bad descriptor is an error return.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return libc::PIPE_BUF;
    }
    match st.st_mode & libc::S_IFMT {
        libc::S_IFIFO | libc::S_IFSOCK => libc::PIPE_BUF,
        _ => usize::MAX,
    }
}

/// A descriptor we write to but do not own (our stdout or stderr).
struct Fd(RawFd);

impl Write for Fd {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // SAFETY: write from a live buffer of the given length.
        let n = unsafe { libc::write(self.0, buf.as_ptr().cast(), buf.len()) };
        if n < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn read_exact(fd: RawFd, mut buf: &mut [u8]) -> std::io::Result<()> {
    while !buf.is_empty() {
        // SAFETY: read into a live buffer of the given length.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf = &mut buf[n as usize..];
    }
    Ok(())
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds: [libc::c_int; 2] = [0; 2];
    // SAFETY: pipe2 writes two new descriptors into the array, which we then own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Reads and returns the first `n` bytes of `src` (what the supervisor wrote out but did not
/// consume), for the shipper to capture without writing them again.
pub fn take_unconsumed(src: &mut impl std::io::Read, n: u64) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0u8; usize::try_from(n).unwrap_or(usize::MAX).min(16 << 20)];
    src.read_exact(&mut buf)?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_relay_consumes_only_what_it_wrote_and_counts_both() {
        let progress = Progress::create().unwrap();
        let (r, w) = pipe().unwrap();
        let mut writer = std::fs::File::from(w);
        let input: Vec<u8> = (0..5000).flat_map(|i| format!("line {i}\n").into_bytes()).collect();
        let feeder = {
            let input = input.clone();
            std::thread::spawn(move || {
                for piece in input.chunks(777) {
                    writer.write_all(piece).unwrap();
                }
            })
        };
        let (out_r, out_w) = pipe().unwrap();
        let drain = std::thread::spawn(move || {
            let mut got = Vec::new();
            std::io::Read::read_to_end(&mut std::fs::File::from(out_r), &mut got).unwrap();
            got
        });
        let mut chunks = Vec::new();
        relay(r, out_w.as_raw_fd(), coroner_model::Stream::Stdout, &progress, Slot(0), |c, _| chunks.extend_from_slice(&c));
        drop(out_w);
        feeder.join().unwrap();
        assert_eq!(drain.join().unwrap(), input);
        assert_eq!(chunks, input);
        assert_eq!(progress.unconsumed(Slot(0)), 0);
        assert_eq!(progress.counter(Slot(0), 0).load(Ordering::Relaxed), input.len() as u64);
    }

    #[test]
    fn a_second_mapping_sees_the_same_counts() {
        let progress = Progress::create().unwrap();
        progress.counter(Slot(1), 0).fetch_add(10, Ordering::Release);
        progress.counter(Slot(1), 1).fetch_add(4, Ordering::Release);
        // SAFETY: dup of our own descriptor.
        let dup = unsafe { OwnedFd::from_raw_fd(libc::dup(progress.fd())) };
        let other = Progress::map(dup).unwrap();
        assert_eq!(other.unconsumed(Slot(1)), 6);
        assert_eq!(other.unconsumed(Slot(0)), 0);
    }
}
