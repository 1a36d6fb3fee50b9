//! The shipper process (`coroner-agent shipper`, shown as `coroner-shipper`), started by the
//! supervisor with the feed on fd 3 and copies of the child's stdout and stderr pipes on fds 4
//! and 5. Everything that talks to the world lives here: the spool, the gRPC shipper, clock
//! probes, heartbeats and stack-dump requests, GPU sampling, the snapshot watcher, and the
//! failure-time collection of GPU and kernel state.
//!
//! It reads the plan, then lines, then the child's end from the feed. If the feed ends without
//! an end, the supervisor is gone (killed, OOM-killed): the shipper **takes over the
//! pass-through**, reading the child's pipes itself and writing them to the same stdout and
//! stderr, numbering on where the supervisor stopped, until the child closes them. How the child
//! ended is then unknown (only its parent could wait for it), and the report says so.
//!
//! It never lets a terminal's or a scheduler's signal stop it (SIGINT, SIGTERM, SIGHUP, SIGQUIT,
//! SIGUSR1, SIGUSR2 are caught and ignored: the supervisor tells it when the child ended). Once
//! the child has ended it delivers lines, the failure-time collection and snapshots for at most the
//! linger, says so to the supervisor (which then exits), stops writing to the job's stdout and
//! stderr (so whoever reads them to their end is not held) and lets a collection or upload still
//! under way finish, for at most [`COLLECT_LIMIT`] more.

use crate::capture::{self, Capture, Sequencer};
use crate::chunks::Entry;
use crate::feed::{self, End, Record};
use crate::plan::Plan;
use crate::queue::LineQueue;
use crate::{collect, gpu_sampler, heartbeat, relay, shipper, snapshots, spool};
use coroner_model::{now_ns, Stream};
use coroner_parse::RankFiler;
use coroner_proto::auth::ClientAuth;
use coroner_proto::v1;
use std::fs::File;
use std::os::fd::{FromRawFd, RawFd};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Where the supervisor puts the feed and the copies of the child's pipes.
const FEED_FD: RawFd = 3;
const CHILD_OUT_FD: RawFd = 4;
const CHILD_ERR_FD: RawFd = 5;
/// Closed once what could be delivered was (the supervisor waits for that, not for our exit).
const DELIVERED_FD: RawFd = 6;
/// The pass-through's progress page (`relay.rs`).
const PROGRESS_FD: RawFd = 7;

/// The in-memory queue between the feed and the shipper, which spools it as fast as the disk
/// takes it (see `queue.rs`).
const QUEUE_LINES: usize = 32 * 1024;
const QUEUE_BYTES: usize = 4 << 20;
/// How long each failure-time collector (nvidia-smi, dmesg) may take.
pub const COLLECT_LIMIT: Duration = Duration::from_secs(5);

/// How the feed ended.
enum Ending {
    /// The supervisor saw the child end.
    Ended(End),
    /// The supervisor is gone; the pass-through was taken over until the pipes closed. `lost`:
    /// lines the supervisor had consumed but not yet handed on when it died (its queue died
    /// with it; they were passed through, never shipped).
    Orphaned { lost: u64 },
}

/// Runs the shipper process; returns its exit code.
pub fn run() -> i32 {
    set_process_name(c"coroner-shipper");
    let stop_asked = Arc::new(std::sync::atomic::AtomicBool::new(false));
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT, libc::SIGUSR1, libc::SIGUSR2] {
        let _ = signal_hook::flag::register(sig, stop_asked.clone());
    }
    // SAFETY: SIGXFSZ would kill us when a file-size limit is hit; ignored, the write fails with
    // EFBIG instead, which the spool handles like a full disk.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
    let Some(feed) = take_fd(FEED_FD) else {
        eprintln!("coroner-shipper: no feed on fd {FEED_FD}; this command is started by `coroner-agent run`");
        return 2;
    };
    let pipes = (take_fd(CHILD_OUT_FD), take_fd(CHILD_ERR_FD));
    let delivered = take_fd(DELIVERED_FD);
    let progress = take_fd(PROGRESS_FD).and_then(|f| relay::Progress::map(f.into()).ok());
    let mut reader = feed::FeedReader::new(feed);
    let plan = match reader.next() {
        Ok(Some(Record::Plan(p))) => *p,
        other => {
            eprintln!("coroner-shipper: the feed did not start with a plan ({other:?})");
            return 2;
        }
    };
    crate::init_tracing(plan.quiet);
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("start the shipper's runtime: {e}");
            return 1;
        }
    };
    rt.block_on(ship(plan, reader, pipes, progress, delivered));
    rt.shutdown_timeout(Duration::from_millis(50));
    0
}

/// Starts the shipper task and its companions (snapshot watcher, heartbeats, GPU sampler),
/// splits the feed into lines until the child's end, then delivers what it can within the
/// linger and lets a collection or upload still under way finish within the hard deadline.
async fn ship(plan: Plan, reader: feed::FeedReader<File>, pipes: (Option<File>, Option<File>), progress: Option<relay::Progress>, delivered: Option<File>) {
    let session = session_request(&plan);
    let (spool, orphans) = open_spool(&plan, &session);
    let queue = Arc::new(LineQueue::new(QUEUE_LINES, QUEUE_BYTES));
    let (finish_tx, finish_rx) = tokio::sync::mpsc::channel(1);
    let auth = client_auth(&plan);
    let mut shipper = shipper::Shipper::new(shipper::Config::new(plan.server.clone(), auth.clone()), session, queue.clone(), spool, orphans);
    let connections = shipper.watch_connections();
    let shipper = tokio::spawn(shipper.run(finish_rx));
    let (snap_tx, snap_rx) = tokio::sync::mpsc::channel(16);
    let watcher = start_watcher(&plan, connections, snap_rx);
    let beat = start_heartbeat(&plan, auth);
    // One numbering for the child's lines (split here from the supervisor's reads) and the GPU
    // samples (on the `file` stream): a launcher agent's local-to-global mapping learnt on one
    // stream applies to all.
    let filer = plan.is_launcher.then(|| RankFiler::new(plan.node_rank_base.unwrap_or(0)));
    let sequencer = Arc::new(Mutex::new(Sequencer::new(filer, queue.clone())));
    let gpu_sampler = start_gpu_sampler(&plan, &sequencer);

    let (ending_tx, ending_rx) = tokio::sync::oneshot::channel();
    {
        let (sequencer, pid) = (sequencer.clone(), plan.child_pid);
        std::thread::spawn(move || {
            let ending = read_feed(reader, pipes, progress, sequencer, pid);
            let _ = ending_tx.send(ending);
        });
    }
    let ending = ending_rx.await.unwrap_or(Ending::Orphaned { lost: 0 });
    if let Some(g) = gpu_sampler {
        tokio::task::spawn_blocking(move || g.stop());
    }
    if let Some(b) = &beat {
        b.abort();
    }
    let (exit, failed) = process_exit(&plan, ending);
    let deadline = tokio::time::Instant::now() + plan.linger();
    let hard_deadline = deadline + COLLECT_LIMIT + Duration::from_secs(2);
    std::thread::spawn(move || {
        std::thread::sleep(hard_deadline.saturating_duration_since(tokio::time::Instant::now()));
        std::process::exit(0);
    });
    // On failure: GPU and kernel state, and core files, gathered while the lines are delivered.
    let gather = (watcher.is_some() && failed).then(|| gather_on_failure(&plan, snap_tx.clone()));
    let _ = finish_tx.send(shipper::Finish { exit, deadline }).await;
    match tokio::time::timeout_at(deadline, shipper).await {
        Ok(Ok(summary)) => report(&summary),
        _ => tracing::warn!("gave up delivering after {:?}; what is left stays in the spool", plan.linger()),
    }
    let (gather, watcher) = settle_snapshots(gather, watcher, &snap_tx, deadline).await;
    // Delivered what could be: the supervisor leaves now; stop holding the job's stdout and
    // stderr open (whoever reads them to their end must not wait for us).
    drop(delivered);
    silence_stdio();
    // A collection or upload still under way may finish in the background, within the hard deadline.
    if let Some(g) = gather {
        let _ = tokio::time::timeout_at(hard_deadline, g).await;
    }
    if let Some(w) = watcher {
        let _ = tokio::time::timeout_at(hard_deadline, w).await;
    }
}

/// Snapshots: what the failure-time collection finds, then everything in the folders, within the
/// linger; what is not shipped by then stays for the next agent of this rank. Answers the tasks
/// still under way (the collection, the watcher), left to finish in the background.
async fn settle_snapshots(
    mut gather: Option<tokio::task::JoinHandle<()>>,
    mut watcher: Option<tokio::task::JoinHandle<snapshots::Summary>>,
    snap_tx: &tokio::sync::mpsc::Sender<snapshots::Msg>,
    deadline: tokio::time::Instant,
) -> (Option<tokio::task::JoinHandle<()>>, Option<tokio::task::JoinHandle<snapshots::Summary>>) {
    if let Some(g) = gather.as_mut() {
        if tokio::time::timeout_at(deadline, g).await.is_ok() {
            gather = None;
        }
    }
    let _ = snap_tx.send(snapshots::Msg::Finish { deadline }).await;
    if let Some(w) = watcher.as_mut() {
        if let Ok(Ok(s)) = tokio::time::timeout_at(deadline, w).await {
            for f in &s.failed {
                tracing::warn!("snapshot {f}");
            }
            watcher = None;
        }
    }
    (gather, watcher)
}

/// The snapshot watcher over the rank's snapshot and flight recorder folders, unless snapshots
/// are off.
fn start_watcher(
    plan: &Plan,
    connections: shipper::ConnWatch,
    messages: tokio::sync::mpsc::Receiver<snapshots::Msg>,
) -> Option<tokio::task::JoinHandle<snapshots::Summary>> {
    plan.snapshots.then(|| {
        let settings = snapshots::Settings {
            watched: vec![
                snapshots::Watched { dir: plan.snapshot_dir.clone(), folder: "snapshots".into() },
                snapshots::Watched { dir: plan.fr_dir.clone(), folder: "flight_recorder".into() },
            ],
            cap: plan.snapshot_cap_bytes,
            rank: plan.rank,
        };
        tokio::spawn(snapshots::run(settings, connections, messages))
    })
}

/// Heartbeats for a rank agent (a launcher agent has no one rank to speak of).
fn start_heartbeat(plan: &Plan, auth: ClientAuth) -> Option<tokio::task::JoinHandle<()>> {
    plan.rank.map(|rank| {
        tokio::spawn(heartbeat::run(heartbeat::Settings {
            server: plan.server.clone(),
            auth,
            job: plan.job.clone(),
            rank,
            pid: plan.child_pid,
            snapshot_dir: plan.snapshot_dir.clone(),
            fr_pipe: plan.fr_pipe_prefix.as_ref().map(|p| PathBuf::from(format!("{p}{rank}.pipe"))),
        }))
    })
}

/// GPU memory samples, numbered with the child's lines on the `file` stream, unless sampling is off.
fn start_gpu_sampler(plan: &Plan, sequencer: &Arc<Mutex<Sequencer>>) -> Option<gpu_sampler::Sampler> {
    (plan.gpu_sample_ms > 0).then(|| {
        let s = sequencer.clone();
        let local_rank = if plan.is_launcher { None } else { plan.local_rank };
        let visible = gpu_sampler::devices_to_sample(plan.cuda_visible_devices.as_deref(), local_rank);
        gpu_sampler::Sampler::start(Duration::from_millis(plan.gpu_sample_ms), PathBuf::from("nvidia-smi"), visible, move |lines| {
            if let Ok(mut s) = s.lock() {
                s.accept_all(Stream::File, lines);
            }
        })
    })
}

/// The process end to report, and whether the child failed (what the failure-time collection
/// waits for).
fn process_exit(plan: &Plan, ending: Ending) -> (v1::ProcessExit, bool) {
    match ending {
        Ending::Ended(e) => {
            let exit = v1::ProcessExit {
                session_id: String::new(),
                rank: plan.rank,
                exit_code: e.exit_code,
                signal: e.signal,
                at_ns: e.at_ns,
                dropped_lines: e.dropped,
                notes: Vec::new(),
            };
            (exit, e.exit_code != Some(0))
        }
        Ending::Orphaned { lost } => {
            let mut note =
                "its supervisor process was killed; the output was still passed through and shipped, but how the process ended is not known".to_string();
            if lost > 0 {
                note.push_str(&format!(" ({lost} lines in flight to the shipper at that moment were printed but not shipped)"));
            }
            let exit = v1::ProcessExit {
                session_id: String::new(),
                rank: plan.rank,
                exit_code: None,
                signal: None,
                at_ns: now_ns(),
                dropped_lines: lost,
                notes: vec![note],
            };
            (exit, false)
        }
    }
}

/// Gathers GPU and kernel state into the snapshot folder, and hands the child's core files to
/// the snapshot watcher.
fn gather_on_failure(plan: &Plan, tx: tokio::sync::mpsc::Sender<snapshots::Msg>) -> tokio::task::JoinHandle<()> {
    let dir = plan.snapshot_dir.clone();
    let prefix = plan.rank.map(|r| format!("rank{r}.")).unwrap_or_default();
    let started = std::time::UNIX_EPOCH + Duration::from_nanos(u64::try_from(plan.started_ns).unwrap_or(0));
    tokio::spawn(async move {
        collect::on_failure(&dir, &prefix, COLLECT_LIMIT).await;
        let pattern = std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap_or_default();
        let cwd = std::env::current_dir().unwrap_or_default();
        if let Some((dir, prefix)) = collect::core_location(&pattern, &cwd) {
            for path in collect::cores_since(&dir, &prefix, started) {
                let _ = tx.send(snapshots::Msg::File { path, folder: "core".into() }).await;
            }
        }
    })
}

/// Splits the supervisor's reads into lines until the child's end, or takes over the
/// pass-through when the feed breaks off without one.
fn read_feed(
    mut reader: feed::FeedReader<File>,
    pipes: (Option<File>, Option<File>),
    progress: Option<relay::Progress>,
    sequencer: Arc<Mutex<Sequencer>>,
    child_pid: u32,
) -> Ending {
    let mut out = Capture::new(Stream::Stdout, sequencer.clone());
    let mut err = Capture::new(Stream::Stderr, sequencer);
    // Newlines received per stream (chunks and gaps), against what the supervisor consumed since
    // this shipper started (a respawned shipper did not receive what its predecessor did; what
    // was consumed before and reaches us after makes `lost` smaller, never larger).
    let consumed = |s: usize| progress.as_ref().map_or(0, |p| p.consumed_lines(relay::Slot(s)));
    let base = [consumed(0), consumed(1)];
    let mut received = [0u64; 2];
    loop {
        let record = reader.next();
        match record {
            Ok(Some(Record::Output(entry))) => {
                let slot = usize::from(i32::from(entry.stream()) == STDERR);
                let capture = if slot == 1 { &mut err } else { &mut out };
                match entry {
                    Entry::Chunk { capture_ns, bytes, .. } => {
                        received[slot] += memchr::memchr_iter(b'\n', &bytes).count() as u64;
                        capture.chunk(&bytes, capture_ns);
                    }
                    Entry::Gap { lines, .. } => {
                        received[slot] += lines;
                        capture.gap(lines);
                    }
                }
            }
            Ok(Some(Record::Plan(_))) => {}
            Ok(Some(Record::End(end))) => {
                out.finish();
                err.finish();
                return Ending::Ended(end);
            }
            Ok(None) | Err(_) => {
                if let Err(e) = &record {
                    tracing::debug!("the feed broke off: {e}");
                }
                let lost: u64 = (0..2).map(|s| consumed(s).saturating_sub(base[s]).saturating_sub(received[s])).sum();
                if lost > 0 {
                    tracing::warn!("{lost} lines the supervisor had read were not handed on before it died; they were printed, not shipped");
                }
                take_over(pipes, progress, out, err, child_pid);
                return Ending::Orphaned { lost };
            }
        }
    }
}

/// The wire value of stderr, as the supervisor tags its reads.
const STDERR: i32 = v1::StreamKind::Stderr as i32;

/// Passes the child's output through in the supervisor's place, with the same line state (a line
/// the supervisor's last read began ends where our first read ends it), until the child (and
/// whatever it started) closes its pipes. What the supervisor wrote out but had not consumed
/// from a pipe is captured here, not written again.
fn take_over(pipes: (Option<File>, Option<File>), progress: Option<relay::Progress>, mut out: Capture, mut err: Capture, child_pid: u32) {
    tracing::warn!("the agent's supervisor is gone; passing the job's output through from here (pid {child_pid} runs on; how it ends will not be known)");
    let written_twice = |pipe: &mut File, slot: usize, capture: &mut Capture| {
        let n = progress.as_ref().map_or(0, |p| p.unconsumed(relay::Slot(slot)));
        if n > 0 {
            if let Ok(bytes) = relay::take_unconsumed(pipe, n) {
                capture.chunk(&bytes::Bytes::from(bytes), now_ns());
            }
        }
    };
    let mut pumps = Vec::new();
    if let Some(mut pipe) = pipes.0 {
        written_twice(&mut pipe, 0, &mut out);
        pumps.push(std::thread::spawn(move || {
            capture::pump(pipe, std::io::stdout(), Stream::Stdout, |c, ns| out.chunk(&c, ns));
            out.finish();
        }));
    }
    if let Some(mut pipe) = pipes.1 {
        written_twice(&mut pipe, 1, &mut err);
        pumps.push(std::thread::spawn(move || {
            capture::pump(pipe, std::io::stderr(), Stream::Stderr, |c, ns| err.chunk(&c, ns));
            err.finish();
        }));
    }
    for p in pumps {
        let _ = p.join();
    }
}

fn session_request(plan: &Plan) -> v1::OpenSessionRequest {
    v1::OpenSessionRequest {
        job_id: plan.job.clone(),
        rank: plan.rank,
        local_rank: plan.local_rank,
        world_size: plan.world_size,
        host: plan.host.clone(),
        pid: plan.child_pid,
        launcher: plan.launcher.clone(),
        versions: Default::default(),
        agent_instance: plan.instance.clone(),
        command: plan.command.clone(),
        node_rank_base: plan.node_rank_base,
        attempt: plan.attempt,
        seq_offset: None,
        seq_lanes: true,
        notes: plan.notes.clone(),
    }
}

fn open_spool(plan: &Plan, session: &v1::OpenSessionRequest) -> (Option<spool::SpoolWriter>, Vec<(PathBuf, File)>) {
    if !plan.key_dir.is_dir() {
        return (None, Vec::new());
    }
    let path = plan.key_dir.join(format!("{}.spool", plan.instance));
    let writer = match spool::SpoolWriter::create(&path, session, plan.spool_max_bytes) {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::warn!("create the spool {}: {e}; lines will be held in memory only", path.display());
            None
        }
    };
    let orphans = spool::orphans(&plan.key_dir, &path);
    (writer, orphans)
}

fn report(s: &shipper::Summary) {
    if s.dropped > 0 {
        tracing::warn!("dropped {} lines (the spool was full, or the disk slower than the output; routine lines went before errors and warnings)", s.dropped);
    }
    if s.unacked_lines > 0 || !s.exit_reported {
        match &s.spool_kept {
            Some(p) => tracing::warn!(
                "{} lines not acknowledged by the server; kept in {} (`coroner-agent ship --spool-dir DIR` sends them later)",
                s.unacked_lines,
                p.display()
            ),
            None => tracing::error!("{} lines not delivered and not spooled", s.unacked_lines),
        }
    }
}

/// The descriptor the supervisor left at `fd`, made close-on-exec (so nvidia-smi or py-spy never
/// inherit it); `None` if nothing is there.
fn take_fd(fd: RawFd) -> Option<File> {
    // SAFETY: F_GETFD/F_SETFD on a descriptor number; failure means it is not open.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        if flags < 0 {
            return None;
        }
        libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
        // SAFETY: the supervisor gave us this descriptor; nothing else in this process owns it.
        Some(File::from_raw_fd(fd))
    }
}

/// Points stdout and stderr at /dev/null.
fn silence_stdio() {
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        use std::os::fd::AsRawFd;
        // SAFETY: dup2 onto our own standard descriptors.
        unsafe {
            libc::dup2(null.as_raw_fd(), 1);
            libc::dup2(null.as_raw_fd(), 2);
        }
    }
}

fn set_process_name(name: &std::ffi::CStr) {
    // SAFETY: PR_SET_NAME copies at most 16 bytes from a NUL-terminated string.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, name.as_ptr() as libc::c_ulong, 0, 0, 0);
    }
}

/// The token and CA of the plan. A bad one is logged and left out, and shipping goes on without
/// it: no setting of the agent's stops the job.
fn client_auth(plan: &Plan) -> ClientAuth {
    let none = ClientAuth::default();
    let auth = none.clone().with_token(plan.token.as_deref()).unwrap_or_else(|e| {
        tracing::error!("--token / CORONER_TOKEN: {e}; shipping without a token");
        none
    });
    auth.clone().with_tls_ca(plan.tls_ca.as_deref()).unwrap_or_else(|e| {
        tracing::error!("--tls-ca / CORONER_TLS_CA: {e}; trusting the public roots only");
        auth
    })
}
