//! Synthetic long-running jobs for the live monitor: healthy ones that must raise nothing (print
//! rates that differ per rank, a slow start, checkpoints written by every rank or by rank 0 alone,
//! evaluation phases, job-wide data stalls) and hung ones. Each rank's process is also sampled
//! every second as its agent would (CPU time, disk bytes; GPU utilisation where the scenario says
//! the agent has it). Deterministic: a fixed-seed generator.

use coroner_analysis::live::Feed;
use coroner_model::{Nanos, Rank};

const S: Nanos = 1_000_000_000;
const MS: Nanos = 1_000_000;
const WORLD: u32 = 8;

pub struct SynthJob {
    pub name: &'static str,
    pub feed: Feed,
    /// False for a scenario shown to document a limitation, left out of the false-alarm rate.
    pub counted: bool,
}

pub struct HungJob {
    pub name: &'static str,
    pub feed: Feed,
    pub culprit: Rank,
    pub culprit_last: Nanos,
}

struct Rng(u64);

impl Rng {
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// What one rank's process does over a span: cores of CPU, bytes a second of disk, GPU percent.
#[derive(Clone, Copy)]
struct Activity {
    from: Nanos,
    to: Nanos,
    cores: f64,
    io: f64,
    gpu: u32,
}

#[derive(Default)]
struct Job {
    lines: Vec<(Rank, Nanos, String)>,
    activity: Vec<Vec<Activity>>,
    sample_gpu: bool,
}

impl Job {
    fn new() -> Job {
        Job { activity: vec![Vec::new(); WORLD as usize], ..Default::default() }
    }

    fn line(&mut self, rank: u32, at: Nanos, text: String) {
        self.lines.push((Rank(rank), at, text));
    }

    fn act(&mut self, rank: u32, from: Nanos, to: Nanos, cores: f64, io: f64, gpu: u32) {
        self.activity[rank as usize].push(Activity { from, to, cores, io, gpu });
    }

    /// Every rank computing (one core, GPU busy) over a span.
    fn compute(&mut self, from: Nanos, to: Nanos) {
        for r in 0..WORLD {
            self.act(r, from, to, 1.0, 0.0, 95);
        }
    }

    /// The lines, and a liveness sample per rank per second, integrated from the activities.
    fn feed(self) -> Feed {
        let last_line = self.lines.iter().map(|l| l.1).max().unwrap_or(0);
        let end = self.activity.iter().flatten().map(|a| a.to).max().unwrap_or(0).max(last_line);
        let mut liveness = Vec::new();
        for (r, acts) in self.activity.iter().enumerate() {
            let (mut cpu, mut io) = (0f64, 0f64);
            let mut t = 0;
            while t <= end {
                let mut gpu = 0;
                for a in acts.iter().filter(|a| a.from < t + S && a.to > t) {
                    let overlap = (a.to.min(t + S) - a.from.max(t)) as f64;
                    cpu += a.cores * overlap;
                    io += a.io * overlap / 1e9;
                    gpu = gpu.max(a.gpu);
                }
                t += S;
                let g = self.sample_gpu.then_some(gpu);
                liveness.push((Rank(r as u32), t, Some(cpu as u64), Some(io as u64), g));
            }
        }
        Feed { lines: self.lines, ends: Vec::new(), liveness }
    }
}

fn megatron(n: u64, total: u64, ms: f64, loss: f64) -> String {
    format!(" [2026-11-30 10:{:02}:{:02}] iteration {n:>8}/{total:>8} | consumed samples: {:>10} | elapsed time per iteration (ms): {ms:.1} | learning rate: 3.000E-04 | lm loss: {loss:.6E} |", (n / 60) % 60, n % 60, n * 512)
}

/// A synchronous training loop: each step all ranks compute ~`step` (jittered), then print.
/// `pause(n)` may add a phase after step n; `prints(rank, n)` says who prints which step.
#[allow(clippy::too_many_arguments)]
fn train(
    job: &mut Job,
    rng: &mut Rng,
    mut t: Nanos,
    steps: u64,
    step: Nanos,
    prints: impl Fn(u32, u64) -> bool,
    text: impl Fn(u32, u64, f64) -> String,
    mut pause: impl FnMut(&mut Job, u64, Nanos) -> Nanos,
) -> Nanos {
    for n in 0..steps {
        let d = (step as f64 * (0.85 + 0.3 * rng.unit())) as Nanos;
        job.compute(t, t + d);
        t += d;
        for r in 0..WORLD {
            if prints(r, n) {
                let jitter = (rng.unit() * 30.0) as Nanos * MS;
                let loss = 2.0 + rng.unit();
                job.line(r, t + jitter, text(r, n, loss));
            }
        }
        t = pause(job, n, t + 30 * MS);
    }
    t
}

fn no_pause(_: &mut Job, _: u64, t: Nanos) -> Nanos {
    t
}

pub fn healthy_jobs(hours: f64) -> Vec<SynthJob> {
    let steps = (hours * 3600.0) as u64; // about a second a step
    let mut out = Vec::new();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);

    let mut j = Job::new();
    train(&mut j, &mut rng, 0, steps, S, |_, _| true, |_, n, l| megatron(n, steps, 1000.0, l), no_pause);
    out.push(SynthJob { name: "steady (Megatron lines)", feed: j.feed(), counted: true });

    // Rank 0 logs every step, the others every tenth; rank 0 also logs throughput every 50.
    let mut j = Job::new();
    train(
        &mut j,
        &mut rng,
        0,
        steps,
        S,
        |r, n| r == 0 || n % 10 == 0,
        |r, n, l| format!("Epoch 1 Step [{n}/{steps}] rank={r} loss={l:.4}"),
        |job, n, t| {
            if n % 50 == 0 {
                job.line(0, t, format!("throughput: {:.1} samples/s, memory 61.2 GB", 480.0 + n as f64 % 7.0));
            }
            t
        },
    );
    out.push(SynthJob { name: "different print rates", feed: j.feed(), counted: true });

    // Four minutes of start-up (data, compilation), two more for the first step.
    let mut j = Job::new();
    for r in 0..WORLD {
        j.line(r, 0, format!("[rank{r}] init_process_group backend=nccl world={WORLD}"));
        j.act(r, 0, 240 * S, 1.0, 5e6, 0);
        j.line(r, 240 * S, format!("[rank{r}] step 0 loss 9.81"));
        j.act(r, 240 * S, 360 * S, 1.0, 0.0, 50);
    }
    train(&mut j, &mut rng, 360 * S, steps, S, |_, _| true, |r, n, l| format!("[rank{r}] step {} loss {l:.3}", n + 1), no_pause);
    out.push(SynthJob { name: "slow first steps", feed: j.feed(), counted: true });

    // Every 600 steps, every rank writes its shard of the checkpoint for 90 s.
    let mut j = Job::new();
    train(
        &mut j,
        &mut rng,
        0,
        steps,
        S,
        |_, _| true,
        |r, n, l| format!("[rank{r}] step {n} loss {l:.3}"),
        |job, n, t| {
            if n % 600 != 599 {
                return t;
            }
            for r in 0..WORLD {
                job.line(r, t, format!("[rank{r}] saving checkpoint shard to /ckpt/step_{n}/rank{r}.pt"));
                job.act(r, t, t + 90 * S, 1.0, 200e6, 0);
            }
            t + 90 * S
        },
    );
    out.push(SynthJob { name: "checkpoints, every rank", feed: j.feed(), counted: true });

    // Every 600 steps rank 0 alone writes the checkpoint for 90 s; the others wait at a barrier.
    let mut j = Job::new();
    train(
        &mut j,
        &mut rng,
        0,
        steps,
        S,
        |_, _| true,
        |r, n, l| format!("[rank{r}] step {n} loss {l:.3}"),
        |job, n, t| {
            if n % 600 != 599 {
                return t;
            }
            job.line(0, t, format!("[rank0] saving checkpoint to /ckpt/step_{n}.pt"));
            job.act(0, t, t + 90 * S, 1.0, 300e6, 0);
            for r in 1..WORLD {
                job.act(r, t, t + 90 * S, 0.02, 0.0, 0);
            }
            t + 90 * S
        },
    );
    let feed = j.feed();
    // The same job without heartbeats (an agent too old to send them): nothing tells the writer
    // from a stuck rank the first time; the pause is learned after that.
    let blind = Feed { liveness: Vec::new(), ..feed.clone() };
    out.push(SynthJob { name: "checkpoints, rank 0 alone", feed, counted: true });
    out.push(SynthJob { name: "  the same, no heartbeats", feed: blind, counted: false });

    // Every 1000 steps, 200 evaluation batches on every rank (their own counter).
    let mut j = Job::new();
    train(
        &mut j,
        &mut rng,
        0,
        steps,
        S,
        |_, _| true,
        |r, n, l| format!("[rank{r}] step {n} loss {l:.3}"),
        |job, n, mut t| {
            if n % 1000 != 999 {
                return t;
            }
            for k in 0..200 {
                job.compute(t, t + 200 * MS);
                t += 200 * MS;
                for r in 0..WORLD {
                    job.line(r, t, format!("[rank{r}] eval iter {k}/200 acc 0.{}", 500 + k));
                }
            }
            t
        },
    );
    out.push(SynthJob { name: "evaluation phases", feed: j.feed(), counted: true });

    // Every 700 steps the whole job waits 30 s for data (every rank idle, no lines).
    let mut j = Job::new();
    train(
        &mut j,
        &mut rng,
        0,
        steps,
        S,
        |_, _| true,
        |r, n, l| format!("[rank{r}] step {n} loss {l:.3}"),
        |job, n, t| {
            if n % 700 != 699 {
                return t;
            }
            for r in 0..WORLD {
                job.act(r, t, t + 30 * S, 0.05, 0.0, 0);
            }
            t + 30 * S
        },
    );
    out.push(SynthJob { name: "job-wide data stalls", feed: j.feed(), counted: true });
    out
}

/// An hour of training, then rank 3 hangs at step 3600 in one of four ways.
pub fn hung_jobs() -> Vec<HungJob> {
    let mut out = Vec::new();
    let steps = 3600;
    for (name, culprit_prints, others_ahead, gpu) in [
        ("hang, culprit printed more", true, false, false),
        ("hang, others one step ahead", false, true, false),
        ("hang, all quiet, no GPU data", false, false, false),
        ("hang, all quiet, GPU sampled", false, false, true),
    ] {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let mut j = Job::new();
        j.sample_gpu = gpu;
        let t = train(&mut j, &mut rng, 0, steps, S, |_, _| true, |r, n, l| format!("[rank{r}] step {n} loss {l:.3}"), no_pause);
        let mut culprit_last = j.lines.iter().filter(|l| l.0 == Rank(3)).map(|l| l.1).max().unwrap_or(0);
        if culprit_prints {
            j.line(3, t, "[rank3] waiting for the next batch from the data loader".into());
            culprit_last = t;
        }
        if others_ahead {
            for r in (0..WORLD).filter(|r| *r != 3) {
                j.line(r, t + S, format!("[rank{r}] step {steps} loss 2.100"));
            }
        }
        // From here on: the culprit idles; the others spin in the collective, GPU busy, until the
        // watchdog (600 s) would fire. A last line marks the end of the replay.
        j.act(3, t, t + 600 * S, 0.01, 0.0, 0);
        for r in (0..WORLD).filter(|r| *r != 3) {
            j.act(r, t, t + 600 * S, 1.0, 0.0, 100);
        }
        out.push(HungJob { name, feed: j.feed(), culprit: Rank(3), culprit_last });
    }
    out
}
