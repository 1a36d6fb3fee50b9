//! The supervisor: the process the launcher started (`coroner-agent run -- CMD`). It does the
//! least that keeps the job whole, and nothing that can fail for long:
//!
//! 1. runs CMD with its stdout and stderr on pipes (stdin, and everything else, as given);
//! 2. copies each pipe through to its own stdout or stderr byte for byte as it arrives
//!    (`capture::pump`), and queues each read with its capture time in a bounded queue
//!    (`chunks.rs`): in a burst faster than the shipper takes them a pipe thread waits for room at
//!    most 250 ms (as on a slow terminal), then reads are dropped and counted; with no shipper
//!    running, nothing ever waits. It does not split lines: that is the shipper's work;
//! 3. hands the reads to the **shipper**, a process of its own (`coroner-agent shipper`, named
//!    `coroner-shipper`), over the feed pipe (`feed.rs`); the shipper splits and numbers the
//!    lines, spools, ships, watches snapshots and talks to coronerd;
//! 4. forwards SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to the child, waits for
//!    it, sends its end down the feed, waits for the shipper at most `--linger`, and exits with
//!    the child's status (128+N for a signal).
//!
//! Why two processes: the network, TLS, the spool, snapshot uploads and nvidia-smi are where the
//! agent can hang, run out of memory or panic; none of that is in this process. If the shipper
//! dies, the supervisor keeps passing the output through and starts a new shipper (at most
//! [`MAX_SHIPPERS`], not more often than every [`RESPAWN_AFTER`]); the child never notices. If
//! the supervisor itself is killed, the shipper still holds the child's pipes and takes over
//! the pass-through (see `shipping.rs`), so the child never gets a broken pipe.
//! ARCHITECTURE.md, "The agent's processes", says why this design and not another.

use crate::capture;
use crate::chunks::{ChunkQueue, Entry};
use crate::feed::{self, End};
use crate::plan::Plan;
use crate::relay;
use coroner_model::now_ns;
use coroner_model::Stream;
use coroner_proto::convert::stream_to_wire;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// The queue between the pipes and the feed: what a burst may hold while the shipper catches up.
const QUEUE_BYTES: usize = 4 << 20;
/// One write to the feed: about this many bytes.
const FEED_BATCH_BYTES: usize = 1 << 20;
/// The feed pipe's buffer, asked of the kernel (a plain pipe holds 64 KiB).
const FEED_PIPE_BYTES: libc::c_int = 1 << 20;
/// How many shipper processes one run may start (the first and two replacements).
pub const MAX_SHIPPERS: u32 = 3;
/// A dead shipper is replaced no sooner than this after the last one started.
pub const RESPAWN_AFTER: Duration = Duration::from_secs(5);
/// Signals passed on to the child as they arrive.
const FORWARDED: [libc::c_int; 6] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT, libc::SIGUSR1, libc::SIGUSR2];

/// Runs the command under the plan and returns the exit code to leave with.
pub fn run(plan: Plan, command: &[std::ffi::OsString]) -> i32 {
    match Running::spawn(plan, command) {
        Ok(running) => running.wait().flush(),
        Err(code) => code,
    }
}

/// The child while it runs, and what carries its output: the pumps, the queue and the feeder
/// (which starts the shipper).
struct Running {
    plan: Plan,
    child: Child,
    forwarder: Forwarder,
    queue: Arc<ChunkQueue>,
    pumps: Vec<std::thread::JoinHandle<()>>,
    end_tx: mpsc::Sender<End>,
    done_rx: mpsc::Receiver<Option<OwnedFd>>,
}

/// The child has ended and its end is on the way to the shipper.
struct Ended {
    status: ExitStatus,
    linger: Duration,
    /// The linger counted from the child's end.
    deadline: Instant,
    /// Kept until the end: the feeder reads its end from it.
    _end_tx: mpsc::Sender<End>,
    done_rx: mpsc::Receiver<Option<OwnedFd>>,
}

impl Running {
    /// Starts the command, its pumps and the feeder. When it cannot start, the exit code to
    /// leave with (see [`spawn_child`]).
    fn spawn(mut plan: Plan, command: &[std::ffi::OsString]) -> Result<Running, i32> {
        prepare_folders(&mut plan);
        // Installed before the child exists, so a signal in between does not kill the supervisor.
        let forwarder = Forwarder::install();
        let mut child = spawn_child(&plan, command)?;
        plan.child_pid = child.id();
        let (out, err) = (child.stdout.take(), child.stderr.take());
        forwarder.target(child.id());
        // Copies of the pipes' read ends, for each shipper to hold (the pumps close theirs at EOF).
        let copy = |fd: Option<RawFd>| fd.and_then(|fd| dup_cloexec(fd).ok());
        let queue = Arc::new(ChunkQueue::new(QUEUE_BYTES));
        let progress = shared_progress();
        let feeder = Feeder::new(
            plan.clone(),
            queue.clone(),
            copy(out.as_ref().map(AsRawFd::as_raw_fd)),
            copy(err.as_ref().map(AsRawFd::as_raw_fd)),
            progress.as_ref().and_then(|p| dup_cloexec(p.fd()).ok()),
        );
        let pumps = start_pumps([out.map(OwnedFd::from), err.map(OwnedFd::from)], &queue, progress.as_ref());
        let (end_tx, end_rx) = mpsc::channel::<End>();
        let (done_tx, done_rx) = mpsc::channel::<Option<OwnedFd>>();
        std::thread::spawn(move || {
            let shipper = feeder.run(end_rx);
            let _ = done_tx.send(shipper);
        });
        Ok(Running { plan, child, forwarder, queue, pumps, end_tx, done_rx })
    }

    /// Waits for the child, then for its pipes to close (a grandchild that keeps them open is
    /// not waited for past the linger), and sends its end down the feed.
    fn wait(self) -> Ended {
        let Running { plan, mut child, forwarder, queue, pumps, end_tx, done_rx } = self;
        let status = wait(&mut child);
        let at_ns = now_ns();
        drop(forwarder);
        let deadline = Instant::now() + plan.linger();
        while !pumps.iter().all(|p| p.is_finished()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        queue.close();
        let _ = end_tx.send(End { exit_code: status.code(), signal: status.signal(), at_ns, dropped: 0 });
        Ended { status, linger: plan.linger(), deadline, _end_tx: end_tx, done_rx }
    }
}

impl Ended {
    /// The shipper has until the deadline to deliver what it holds (the rest stays in its
    /// spool); then the exit code to leave with, the child's.
    fn flush(self) -> i32 {
        let deadline = self.deadline.max(Instant::now() + self.linger);
        if let Ok(Some(delivered)) = self.done_rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            wait_delivered(&delivered, deadline);
        }
        exit_code_of(self.status)
    }
}

/// Starts the command with its stdout and stderr on pipes and the plan's environment. When it
/// cannot start, the exit code to leave with: like a shell's (127 not found, 126 not runnable),
/// or the command's own when the agent's trouble (no pipes, no memory) made it run unwrapped.
fn spawn_child(plan: &Plan, command: &[std::ffi::OsString]) -> Result<Child, i32> {
    let child_env = plan.child_env(|k| std::env::var(k).ok(), std::env::vars_os().map(|(k, _)| k.to_string_lossy().into_owned()));
    let mut cmd = Command::new(&command[0]);
    cmd.args(&command[1..]).stdin(Stdio::inherit()).stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.envs(child_env.set.iter().map(|(k, v)| (k, v)));
    for k in &child_env.remove {
        cmd.env_remove(k);
    }
    match cmd.spawn() {
        Ok(c) => Ok(c),
        Err(e) if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied) => {
            tracing::error!("run {}: {e}", command[0].to_string_lossy());
            Err(if e.kind() == std::io::ErrorKind::NotFound { 127 } else { 126 })
        }
        Err(e) => {
            // The agent's own trouble (no pipes, no memory): the command runs without it.
            tracing::warn!("cannot capture the command's output ({e}); running it unwrapped");
            Err(run_unwrapped(command))
        }
    }
}

/// What the pass-through wrote and consumed, shared with the shipper (see `relay.rs`).
fn shared_progress() -> Option<Arc<relay::Progress>> {
    match relay::Progress::create() {
        Ok(p) => Some(Arc::new(p)),
        Err(e) => {
            tracing::warn!("no shared memory for the pass-through's progress ({e}); a chunk may be lost if the agent is killed");
            None
        }
    }
}

/// One thread per pipe (stdout, stderr) passing it through to ours and queueing each read.
fn start_pumps(pipes: [Option<OwnedFd>; 2], queue: &Arc<ChunkQueue>, progress: Option<&Arc<relay::Progress>>) -> Vec<std::thread::JoinHandle<()>> {
    let mut pumps = Vec::new();
    for ((pipe, stream), slot) in pipes.into_iter().zip([Stream::Stdout, Stream::Stderr]).zip(0..) {
        let Some(pipe) = pipe else { continue };
        let (q, progress) = (queue.clone(), progress.cloned());
        let wire = stream_to_wire(stream) as u8;
        let sink = move |chunk, ns| q.push(wire, ns, chunk);
        pumps.push(std::thread::spawn(move || {
            // Our own stdout (1) or stderr (2), written without buffering.
            let dst = 1 + slot as RawFd;
            match progress.as_deref() {
                Some(p) => relay::relay(pipe, dst, stream, p, relay::Slot(slot), sink),
                None if slot == 0 => capture::pump(File::from(pipe), std::io::stdout(), stream, sink),
                None => capture::pump(File::from(pipe), std::io::stderr(), stream, sink),
            }
        }));
    }
    pumps
}

/// The agent's exit code for the child's status: the code, or 128+signal like a shell.
pub fn exit_code_of(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => 128 + sig,
        (None, None) => 1,
    }
}

/// Replaces this process with the command, as if the agent had never been there. Returns only
/// if that fails (then like a shell: 127 not found, 126 not runnable).
pub fn run_unwrapped(command: &[std::ffi::OsString]) -> i32 {
    let e = Command::new(&command[0]).args(&command[1..]).exec();
    tracing::error!("run {}: {e}", command[0].to_string_lossy());
    if e.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    }
}

fn wait(child: &mut Child) -> ExitStatus {
    loop {
        match child.wait() {
            Ok(s) => return s,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                // Only possible if someone else reaped it: poll until it is gone.
                tracing::warn!("wait for the child: {e}");
                while std::path::Path::new(&format!("/proc/{}", child.id())).exists() {
                    std::thread::sleep(Duration::from_millis(50));
                }
                return ExitStatus::from_raw(1 << 8);
            }
        }
    }
}

/// Creates the spool and snapshot folders; a folder that cannot be made turns the feature off
/// (said, and noted for the report), never the run.
fn prepare_folders(plan: &mut Plan) {
    if let Err(e) = std::fs::create_dir_all(&plan.key_dir).and_then(|()| std::fs::create_dir_all(&plan.snapshot_dir)) {
        let note = format!("cannot create the spool folder {} ({e}); lines are held in memory only", plan.key_dir.display());
        tracing::warn!("{note}");
        plan.notes.push(note);
    }
    if !plan.snapshots {
        return;
    }
    if let Err(e) = std::fs::create_dir_all(&plan.fr_dir) {
        tracing::warn!("create {}: {e}; flight recorder dumps go to PyTorch's default place", plan.fr_dir.display());
    }
    plan.fr_pipe_prefix = match std::env::var("TORCH_NCCL_DEBUG_INFO_PIPE_FILE") {
        Ok(p) => Some(p),
        Err(_) => {
            let dir = plan.key_dir.join("frpipe");
            std::fs::create_dir_all(&dir).ok().map(|()| dir.join("nccl_trace_rank_").display().to_string())
        }
    };
}

/// Forwards the usual signals to the child (once it is known) until dropped.
struct Forwarder {
    handle: Option<signal_hook::iterator::Handle>,
    pid: Arc<std::sync::atomic::AtomicI32>,
}

impl Forwarder {
    fn install() -> Forwarder {
        let pid = Arc::new(std::sync::atomic::AtomicI32::new(0));
        let mut signals = match signal_hook::iterator::Signals::new(FORWARDED) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("cannot forward signals to the child ({e}); they reach it only when sent to its process group");
                return Forwarder { handle: None, pid };
            }
        };
        let handle = signals.handle();
        let target = pid.clone();
        std::thread::spawn(move || {
            for sig in signals.forever() {
                let pid = target.load(std::sync::atomic::Ordering::Relaxed);
                if pid > 0 {
                    // SAFETY: kill(2) with our child's pid; a failure (already gone) is harmless.
                    unsafe {
                        libc::kill(pid, sig);
                    }
                }
            }
        });
        Forwarder { handle: Some(handle), pid }
    }

    fn target(&self, pid: u32) {
        self.pid.store(i32::try_from(pid).unwrap_or(0), std::sync::atomic::Ordering::Relaxed);
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.pid.store(0, std::sync::atomic::Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            h.close();
        }
    }
}

/// Hands the queued reads to the shipper process over the feed, starting (and restarting) it.
struct Feeder {
    plan: Plan,
    queue: Arc<ChunkQueue>,
    child_out: Option<OwnedFd>,
    child_err: Option<OwnedFd>,
    /// The pass-through's shared progress page, for each shipper to map.
    progress: Option<OwnedFd>,
    shipper: Option<ShipperProcess>,
    started: u32,
    last_start: Instant,
    /// Lines that never reached a shipper (none running, or it died while they were sent),
    /// reported in the end's count of dropped lines.
    lost: u64,
}

struct ShipperProcess {
    child: Child,
    feed: File,
    /// The read end of a pipe whose only writer is the shipper: it closes it (or dies) once it
    /// has delivered what it can, so end of file here means "nothing left to wait for".
    done: OwnedFd,
}

impl Feeder {
    fn new(plan: Plan, queue: Arc<ChunkQueue>, child_out: Option<OwnedFd>, child_err: Option<OwnedFd>, progress: Option<OwnedFd>) -> Self {
        Feeder { plan, queue, child_out, child_err, progress, shipper: None, started: 0, last_start: Instant::now(), lost: 0 }
    }

    /// Starts the shipper, feeds it until the queue is closed and empty, then sends the end and
    /// returns the shipper process.
    fn run(mut self, end: mpsc::Receiver<End>) -> Option<OwnedFd> {
        self.start_shipper();
        let queue = self.queue.clone();
        let mut buf = Vec::with_capacity(FEED_BATCH_BYTES + (64 << 10));
        while !queue.is_finished() {
            let batch = queue.take(FEED_BATCH_BYTES, Duration::from_millis(200));
            if self.shipper.is_none() && self.started < MAX_SHIPPERS && self.last_start.elapsed() >= RESPAWN_AFTER {
                self.start_shipper();
            }
            if batch.is_empty() {
                self.check_shipper();
                continue;
            }
            buf.clear();
            for entry in &batch {
                feed::encode_entry(entry, &mut buf);
            }
            self.send(&buf, &batch);
        }
        let mut end = end.recv().ok()?;
        end.dropped += self.lost;
        buf.clear();
        feed::encode_end(&end, &mut buf);
        self.send(&buf, &[]);
        // Closing the feed tells the shipper that nothing more comes; what is left to watch is
        // whether it has delivered.
        let ShipperProcess { done, .. } = self.shipper.take()?;
        Some(done)
    }

    fn send(&mut self, bytes: &[u8], entries: &[Entry]) {
        let Some(s) = self.shipper.as_mut() else {
            self.lost += lines_in(entries);
            return;
        };
        if let Err(e) = s.feed.write_all(bytes) {
            self.lost += lines_in(entries);
            self.shipper_gone(Some(e));
        }
    }

    /// Notices a shipper that died while there was nothing to send.
    fn check_shipper(&mut self) {
        if let Some(s) = self.shipper.as_mut() {
            if let Ok(Some(_)) = s.child.try_wait() {
                self.shipper_gone(None);
            }
        }
    }

    fn shipper_gone(&mut self, error: Option<std::io::Error>) {
        let Some(mut s) = self.shipper.take() else { return };
        // No one to make room: a full queue drops at once instead of waiting.
        self.queue.set_draining(false);
        // It stopped reading: whatever it is doing, it is no longer shipping.
        let _ = s.child.kill();
        let how = match s.child.wait() {
            Ok(st) => match (st.code(), st.signal()) {
                (_, Some(sig)) => format!("killed by signal {sig}"),
                (Some(code), _) => format!("exited {code}"),
                _ => "ended".into(),
            },
            Err(_) => error.map(|e| e.to_string()).unwrap_or_else(|| "ended".into()),
        };
        let next = if self.started < MAX_SHIPPERS {
            format!("starting another in {}s", RESPAWN_AFTER.saturating_sub(self.last_start.elapsed()).as_secs())
        } else {
            "no more lines will be shipped".into()
        };
        tracing::warn!("the shipper process {} ({how}); the job runs on and its output still passes through; {next}", s.child.id());
    }

    fn start_shipper(&mut self) {
        self.started += 1;
        self.last_start = Instant::now();
        let mut plan = self.plan.clone();
        if self.started > 1 {
            plan.instance = format!("{}-s{}", plan.instance, self.started);
            plan.notes = vec![format!("the shipper process was restarted ({} of {MAX_SHIPPERS}); lines in between were not shipped", self.started)];
        }
        let fd = |f: &Option<OwnedFd>| f.as_ref().map(AsRawFd::as_raw_fd);
        match ShipperProcess::spawn(&plan, [fd(&self.child_out), fd(&self.child_err), fd(&self.progress)]) {
            Ok(s) => {
                self.shipper = Some(s);
                self.queue.set_draining(true);
            }
            Err(e) => tracing::warn!("cannot start the shipper process ({e}); the output passes through but is not shipped"),
        }
    }
}

/// How many lines a batch of entries holds (a chunk's newlines, a gap's count).
fn lines_in(entries: &[Entry]) -> u64 {
    entries
        .iter()
        .map(|e| match e {
            Entry::Chunk { bytes, .. } => memchr::memchr_iter(b'\n', bytes).count() as u64,
            Entry::Gap { lines, .. } => *lines,
        })
        .sum()
}

impl ShipperProcess {
    /// Starts `coroner-agent shipper` with the feed on fd 3, copies of the child's pipes on fds 4
    /// and 5 (for taking over the pass-through), the write end of the "delivered" pipe on fd 6
    /// and the pass-through's progress page on fd 7, and sends it the plan.
    fn spawn(plan: &Plan, shared: [Option<RawFd>; 3]) -> std::io::Result<Self> {
        let (read, write) = cloexec_pipe()?;
        // SAFETY: F_SETPIPE_SZ on a pipe we own; failure (over the system's limit) is harmless.
        unsafe {
            libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, FEED_PIPE_BYTES);
        }
        let (done, done_w) = cloexec_pipe()?;
        let [child_out, child_err, progress] = shared;
        let sources = [Some(read.as_raw_fd()), child_out, child_err, Some(done_w.as_raw_fd()), progress];
        let mut cmd = Command::new("/proc/self/exe");
        cmd.arg0("coroner-shipper").arg("shipper").stdin(Stdio::null());
        // SAFETY: between fork and exec only dup/dup2/close, which are async-signal-safe. Each
        // source is first copied above the target range so no dup2 clobbers another's source.
        unsafe {
            cmd.pre_exec(move || {
                let mut high = [-1; 5];
                for (i, src) in sources.iter().enumerate() {
                    if let Some(fd) = src {
                        high[i] = libc::fcntl(*fd, libc::F_DUPFD, 10);
                        if high[i] < 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                    }
                }
                for (i, fd) in high.iter().enumerate() {
                    let target = 3 + i as libc::c_int;
                    if *fd >= 0 {
                        if libc::dup2(*fd, target) < 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                        libc::close(*fd);
                    } else {
                        libc::close(target);
                    }
                }
                Ok(())
            });
        }
        let child = cmd.spawn()?;
        drop(read);
        drop(done_w);
        let mut feed = File::from(write);
        let mut buf = Vec::new();
        feed::encode_plan(plan, &mut buf);
        if let Err(e) = feed.write_all(&buf) {
            let mut child = child;
            let _ = child.kill();
            let _ = child.wait();
            return Err(e);
        }
        Ok(ShipperProcess { child, feed, done })
    }
}

/// Waits until the shipper says it has delivered what it can (end of file on `delivered`: it
/// closed its end, or died), at most until `deadline`.
fn wait_delivered(delivered: &OwnedFd, deadline: Instant) {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        let mut fds = [libc::pollfd { fd: delivered.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
        let ms = libc::c_int::try_from(left.as_millis()).unwrap_or(libc::c_int::MAX).max(1);
        // SAFETY: poll on one descriptor we own, with a correctly sized array.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), 1, ms) };
        if rc != 0 && !(rc < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted) {
            return;
        }
    }
}

fn dup_cloexec(fd: RawFd) -> std::io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC makes a new descriptor, which we then own.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    if new < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `new` was just created and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

fn cloexec_pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds: [libc::c_int; 2] = [0; 2];
    // SAFETY: pipe2 writes two new descriptors into the array, which we then own.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_status_maps_like_a_shell() {
        assert_eq!(exit_code_of(ExitStatus::from_raw(0)), 0);
        assert_eq!(exit_code_of(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code_of(ExitStatus::from_raw(9)), 137);
        assert_eq!(exit_code_of(ExitStatus::from_raw(15)), 143);
        // Killed by SIGSEGV with a core dump (0x80 flag).
        assert_eq!(exit_code_of(ExitStatus::from_raw(11 | 0x80)), 139);
    }
}
