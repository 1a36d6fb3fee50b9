//! The live monitor's state and its evaluation. See the module documentation for the method.

use super::shape::{shape, ShapeLearner};
use coroner_model::{format_rfc3339_ns, Nanos, Rank, SuspectedHang};
use std::collections::{BTreeMap, HashMap, VecDeque};

const NS_PER_MS: i64 = 1_000_000;
/// Lines remembered per rank (for the evidence and for what a rank printed after its last step).
const RECENT: usize = 16;
/// Progress lines remembered per rank (for the median step time).
const PROGRESS: usize = 64;
/// Learned pause lengths kept per job.
const MAX_PAUSES: usize = 4096;
/// CPU use, in cores, from which a silent process counts as busy: its threshold is stretched.
const BUSY_CORES: f64 = 0.5;
/// Disk traffic, in bytes a second, from which a silent process counts as working (writing a
/// checkpoint, reading a dataset shard): not suspected while it lasts.
const WORKING_IO_BYTES_PER_S: f64 = 1_048_576.0;
/// GPU utilisation (percent) under which a GPU is idle, and from which it is busy.
const GPU_IDLE: u32 = 10;
const GPU_BUSY: u32 = 50;

/// When to suspect a hang.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveConfig {
    /// A rank is suspected after this many median step times of silence...
    pub step_multiple: f64,
    /// ...and never before this much silence.
    pub floor_ns: Nanos,
    /// Leading step intervals left out of the median (compilation, warm-up).
    pub skip_first_steps: usize,
    /// The threshold is multiplied by this while the silent process is busy on the CPU (a silent
    /// process moving over 1 MiB/s to or from disk is not suspected at all).
    pub busy_factor: f64,
    /// Lines of evidence per finding.
    pub last_lines: usize,
}

impl Default for LiveConfig {
    fn default() -> Self {
        LiveConfig { step_multiple: 10.0, floor_ns: 5_000_000_000, skip_first_steps: 1, busy_factor: 6.0, last_lines: 5 }
    }
}

#[derive(Debug, Clone)]
struct Line {
    idx: u64,
    at: Nanos,
    template: String,
    text: String,
}

/// One progress shape of one rank: which field counts, and its recent occurrences.
#[derive(Debug, Clone, Default)]
struct Progress {
    field: usize,
    total: u64,
    /// (line index, capture time, step)
    seen: VecDeque<(u64, Nanos, u64)>,
    /// The median interval between the remembered occurrences (past the warm-up), kept up to date
    /// as they arrive: an evaluation of a 16,384-rank job reads it instead of sorting every rank's
    /// intervals at every tick.
    median: Option<Nanos>,
}

#[derive(Debug, Clone, Default)]
struct RankLive {
    host: Option<String>,
    learner: ShapeLearner,
    /// The shapes with a counter on this rank, by template.
    progress: HashMap<String, Progress>,
    /// Per template: the last few occurrences, so a template found to be progress late still has
    /// its first intervals.
    pending: HashMap<String, VecDeque<(u64, Nanos, Vec<u64>)>>,
    recent: VecDeque<Line>,
    lines: u64,
    ended: bool,
    /// The last two liveness samples: (time, CPU ns, IO bytes).
    samples: VecDeque<(Nanos, Option<u64>, Option<u64>)>,
    gpu_util: Option<u32>,
}

/// The live state of one job. Feed it; ask it.
#[derive(Debug, Clone, Default)]
pub struct LiveMonitor {
    config: LiveConfig,
    ranks: BTreeMap<Rank, RankLive>,
    /// Per line shape: the longest pause seen after it on any rank (past each rank's first step).
    pauses: HashMap<String, Nanos>,
    /// The latest capture time of any line pushed.
    latest: Option<Nanos>,
}

/// What the evaluation needs of one rank that prints progress.
#[derive(Debug, Clone)]
struct View<'a> {
    rank: Rank,
    live: &'a RankLive,
    step: u64,
    progress_at: Nanos,
    last_at: Nanos,
    median: Option<Nanos>,
    /// Shapes of the lines printed after the last progress line; None when more than remembered.
    extras: Option<Vec<&'a str>>,
    progress: &'a Progress,
}

impl LiveMonitor {
    pub fn new(config: LiveConfig) -> Self {
        LiveMonitor { config, ..Default::default() }
    }

    pub fn config(&self) -> &LiveConfig {
        &self.config
    }

    pub fn set_host(&mut self, rank: Rank, host: &str) {
        if !host.is_empty() {
            self.ranks.entry(rank).or_default().host = Some(host.to_string());
        }
    }

    /// One line of one rank, with its capture time. Lines must come in capture order per rank.
    pub fn push_line(&mut self, rank: Rank, at: Nanos, text: &str) {
        self.latest = Some(self.latest.map_or(at, |l| l.max(at)));
        let r = self.ranks.entry(rank).or_default();
        let idx = r.lines;
        r.lines += 1;
        let Some(s) = shape(text) else {
            push_recent(r, Line { idx, at, template: String::new(), text: clip(text) });
            return;
        };
        // The pause after the previous line, learned once the rank is past its first step.
        if let Some(prev) = r.recent.back() {
            let past_first_step = !r.progress.is_empty();
            if past_first_step && !prev.template.is_empty() && !r.progress.contains_key(&prev.template) {
                let gap = at.saturating_sub(prev.at);
                if self.pauses.len() < MAX_PAUSES || self.pauses.contains_key(&prev.template) {
                    let e = self.pauses.entry(prev.template.clone()).or_insert(0);
                    *e = (*e).max(gap);
                }
            }
        }
        let counters = r.learner.add(&s);
        if let Some(p) = r.progress.get_mut(&s.template) {
            if let Some(&step) = s.numbers.get(p.field) {
                p.total += 1;
                p.seen.push_back((idx, at, step));
                if p.seen.len() > PROGRESS {
                    p.seen.pop_front();
                }
                p.median = median_interval(p, self.config.skip_first_steps);
            }
        } else if !s.numbers.is_empty() {
            let q = r.pending.entry(s.template.clone()).or_default();
            q.push_back((idx, at, s.numbers.clone()));
            if q.len() > 3 {
                q.pop_front();
            }
            if let Some(&field) = counters.first() {
                let seen: VecDeque<_> = q.iter().filter_map(|(i, t, n)| Some((*i, *t, *n.get(field)?))).collect();
                let mut p = Progress { field, total: seen.len() as u64, seen, median: None };
                p.median = median_interval(&p, self.config.skip_first_steps);
                r.progress.insert(s.template.clone(), p);
                r.pending.remove(&s.template);
            } else if r.pending.len() > 512 {
                r.pending.clear();
            }
        }
        push_recent(r, Line { idx, at, template: s.template, text: clip(text) });
    }

    /// The rank's process ended (or its agent said so): it is no longer a suspect or a peer.
    pub fn push_end(&mut self, rank: Rank) {
        self.ranks.entry(rank).or_default().ended = true;
    }

    /// A liveness sample from the rank's agent: the process's CPU time and bytes read and written
    /// so far, and its GPU's utilisation when the agent samples it.
    pub fn push_liveness(&mut self, rank: Rank, at: Nanos, cpu_ns: Option<u64>, io_bytes: Option<u64>, gpu_util: Option<u32>) {
        let r = self.ranks.entry(rank).or_default();
        if cpu_ns.is_some() || io_bytes.is_some() {
            r.samples.push_back((at, cpu_ns, io_bytes));
            if r.samples.len() > 2 {
                r.samples.pop_front();
            }
        }
        if gpu_util.is_some() {
            r.gpu_util = gpu_util;
        }
    }

    /// The latest capture time of any line pushed so far (how far the evidence has arrived).
    pub fn latest_capture(&self) -> Option<Nanos> {
        self.latest
    }

    /// The job's progress template and its counter field: of the shapes with a counter on at
    /// least half as many ranks as the most widespread one, the one printed most recently (a burst
    /// of numbered lines at start-up, such as NCCL's channel list, stops; progress goes on).
    pub fn job_template(&self) -> Option<(&str, usize)> {
        let mut votes: BTreeMap<(&str, usize), (usize, Nanos)> = BTreeMap::new();
        for r in self.ranks.values() {
            for (t, p) in &r.progress {
                let last = p.seen.back().map_or(Nanos::MIN, |s| s.1);
                let e = votes.entry((t.as_str(), p.field)).or_insert((0, Nanos::MIN));
                e.0 += 1;
                e.1 = e.1.max(last);
            }
        }
        let most = votes.values().map(|v| v.0).max()?;
        votes.into_iter().filter(|(_, (n, _))| n * 2 >= most).max_by(|a, b| (a.1 .1, a.1 .0).cmp(&(b.1 .1, b.1 .0)).then(b.0.cmp(&a.0))).map(|(k, _)| k)
    }

    /// The ranks suspected of hanging at `now` (same clock as the lines' capture times).
    /// Linear in the number of ranks (what every rank shares is computed once), so it can run
    /// every few hundred milliseconds on a large job.
    pub fn evaluate(&self, now: Nanos) -> Vec<SuspectedHang> {
        let Some((template, _)) = self.job_template() else { return Vec::new() };
        let views: Vec<View<'_>> =
            self.ranks.iter().filter(|(_, r)| !r.ended).filter_map(|(rank, r)| self.view(*rank, r, template)).filter(|v| v.median.is_some()).collect();
        if views.len() < 2 {
            return Vec::new();
        }
        let overview = self.overview(&views, now);
        // When the majority passed a step depends on the step alone: computed once per step
        // (16,384 ranks falling behind at once, on a loaded server, were 16,384 sorts of 16,384).
        let mut passed_at = HashMap::new();
        let mut out = Vec::new();
        for v in &views {
            if activity(v.live) == Activity::Io {
                continue;
            }
            let silent = now.saturating_sub(v.last_at);
            let threshold = self.threshold(v);
            if silent <= threshold {
                continue;
            }
            let at = Moment { now, silent, threshold };
            if let Some(found) = self.behind(v, &views, &overview, at, &mut passed_at) {
                out.push(found);
            } else if let Some(found) = self.stalled_apart(v, &overview, at) {
                out.push(found);
            }
        }
        out
    }

    /// What the ranks that print progress share: computed once per evaluation.
    fn overview<'a>(&self, views: &[View<'a>], now: Nanos) -> Overview<'a> {
        let mut counts: HashMap<Phase<'a>, usize> = HashMap::new();
        for x in views {
            *counts.entry(phase(x)).or_default() += 1;
        }
        let majority = counts.iter().find(|(_, n)| **n * 2 > views.len()).map(|(p, _)| p.clone());
        // No majority (two ranks, or an even split): at one common step, the ranks that printed
        // more than what all of them printed after it are the odd ones.
        let tie = match (&majority, views.iter().all(|x| x.step == views[0].step)) {
            (None, true) => {
                let lists: Option<Vec<Vec<&str>>> = views.iter().map(|x| x.extras.clone()).collect();
                lists.map(|lists| {
                    let common = common_prefix(&lists);
                    (common, lists.iter().filter(|l| l.len() > common).count())
                })
            }
            _ => None,
        };
        let mut steps: Vec<u64> = views.iter().map(|v| v.step).collect();
        steps.sort_unstable();
        Overview {
            distinct: counts.len(),
            majority,
            tie,
            median_step: steps[steps.len() / 2],
            steps,
            stalled: views.iter().filter(|p| self.stalled(p, now)).count(),
            spinning: views.iter().filter(|p| spinning(p)).count(),
            n: views.len(),
        }
    }

    fn stalled(&self, v: &View<'_>, now: Nanos) -> bool {
        now.saturating_sub(v.progress_at) >= self.base_threshold(v)
    }

    fn view<'a>(&self, rank: Rank, r: &'a RankLive, template: &str) -> Option<View<'a>> {
        let p = r.progress.get(template)?;
        let &(idx, progress_at, step) = p.seen.back()?;
        let median = p.median;
        let remembered_all = r.recent.front().is_some_and(|l| l.idx <= idx + 1);
        let extras = remembered_all.then(|| r.recent.iter().filter(|l| l.idx > idx).map(|l| l.template.as_str()).collect());
        let last_at = r.recent.back().map_or(progress_at, |l| l.at);
        Some(View { rank, live: r, step, progress_at, last_at, median, extras, progress: p })
    }

    /// max(multiple x median step, floor).
    fn base_threshold(&self, v: &View<'_>) -> Nanos {
        let by_step = v.median.map_or(0.0, |m| m as f64 * self.config.step_multiple) as Nanos;
        by_step.max(self.config.floor_ns)
    }

    /// The base threshold, stretched after a line known to precede long pauses and while busy.
    fn threshold(&self, v: &View<'_>) -> Nanos {
        let mut t = self.base_threshold(v);
        if let Some(last) = v.live.recent.back() {
            if let Some(pause) = self.pauses.get(&last.template) {
                t = t.max(pause.saturating_mul(2));
            }
        }
        if activity(v.live) == Activity::Cpu {
            t = (t as f64 * self.config.busy_factor) as Nanos;
        }
        t
    }

    /// Most other ranks printed a later step than this silent one, longer than its threshold ago.
    /// `passed_at`: when the majority passed each step asked about in this evaluation.
    fn behind(&self, v: &View<'_>, views: &[View<'_>], o: &Overview<'_>, at: Moment, passed_at: &mut HashMap<u64, Nanos>) -> Option<SuspectedHang> {
        let peers = o.n - 1;
        let ahead = o.steps.len() - o.steps.partition_point(|s| *s <= v.step);
        if ahead * 2 <= peers {
            return None;
        }
        // Since when most others have been past this rank's step: a rank whose next line is merely
        // a few milliseconds later than theirs (after a pause every rank took) is not behind.
        let majority_passed = *passed_at.entry(v.step).or_insert_with(|| {
            let mut passed: Vec<Nanos> =
                views.iter().filter(|p| p.step > v.step).map(|p| p.progress.seen.iter().find(|s| s.2 > v.step).map_or(Nanos::MIN, |s| s.1)).collect();
            // ahead > peers / 2, so this is in range: when the majority of the peers had passed.
            let (_, nth, _) = passed.select_nth_unstable(peers / 2);
            *nth
        });
        if at.now.saturating_sub(majority_passed) <= at.threshold {
            return None;
        }
        let summary = format!(
            "rank {} has printed nothing for {} (its usual step takes {}) while {} of {} other ranks printed a later step (most reached step {}); it is at step {}",
            v.rank,
            secs(at.silent),
            v.median.map_or("?".into(), secs),
            ahead,
            peers,
            o.median_step,
            v.step
        );
        Some(self.finding(v, "behind", summary, Some(o.median_step), at))
    }

    /// Most ranks have stopped progressing; this one stopped somewhere the majority did not, or
    /// its GPU idles while theirs spin.
    fn stalled_apart(&self, v: &View<'_>, o: &Overview<'_>, at: Moment) -> Option<SuspectedHang> {
        let peers = o.n - 1;
        let stalled_peers = o.stalled - usize::from(self.stalled(v, at.now));
        if stalled_peers * 2 <= peers {
            return None;
        }
        let mine = phase(v);
        let diverged = match (&o.majority, o.tie) {
            (Some(m), _) => mine != *m && v.step <= m.0,
            (None, Some((common, odd))) => v.extras.as_ref().is_some_and(|e| e.len() > common) && odd * 2 <= o.n,
            (None, None) => false,
        };
        let peers_step = o.majority.as_ref().map_or(o.median_step, |m| m.0);
        if diverged {
            let last = v.live.recent.back().map(|l| l.text.as_str()).unwrap_or("");
            let summary = if v.step < peers_step {
                format!(
                    "rank {} has printed nothing for {} (its usual step takes {}); the others are stalled too, but at step {}, and it is still at step {}",
                    v.rank,
                    secs(at.silent),
                    v.median.map_or("?".into(), secs),
                    peers_step,
                    v.step
                )
            } else {
                format!(
                    "rank {} has printed nothing for {} (its usual step takes {}); every rank has stopped, the others where they usually wait for a collective, while this one went quiet after `{}`",
                    v.rank,
                    secs(at.silent),
                    v.median.map_or("?".into(), secs),
                    last
                )
            };
            return Some(self.finding(v, "diverged", summary, Some(peers_step), at));
        }
        // Everyone stopped at the same place: the GPU tells the waiting ranks from the stuck one.
        let same_place = o.distinct == 1;
        let idle = v.live.gpu_util.is_some_and(|u| u < GPU_IDLE);
        let spinning_peers = o.spinning - usize::from(spinning(v));
        if same_place && idle && spinning_peers * 2 > peers {
            let summary = format!(
                "rank {} has printed nothing for {} and its GPU is idle, while {} of {} other ranks, stopped at the same step, keep their GPUs busy (waiting in a collective)",
                v.rank,
                secs(at.silent),
                spinning_peers,
                peers
            );
            return Some(self.finding(v, "gpu_idle", summary, Some(peers_step), at));
        }
        None
    }

    fn finding(&self, v: &View<'_>, why: &str, summary: String, peers_step: Option<u64>, at: Moment) -> SuspectedHang {
        let Moment { now, silent, threshold } = at;
        let n = self.config.last_lines;
        let recent = &v.live.recent;
        SuspectedHang {
            rank: v.rank,
            host: v.live.host.clone(),
            why: why.to_string(),
            summary,
            last_step: Some(v.step),
            peers_step,
            steps_behind: peers_step.map_or(0, |p| p.saturating_sub(v.step)),
            silent_ms: (silent / NS_PER_MS).max(0) as u64,
            threshold_ms: (threshold / NS_PER_MS).max(0) as u64,
            median_step_ms: v.median.map(|m| (m / NS_PER_MS).max(0) as u64),
            last_line_time: Some(format_rfc3339_ns(v.last_at)),
            last_lines: recent.iter().skip(recent.len().saturating_sub(n)).map(|l| l.text.clone()).collect(),
            raised_at: format_rfc3339_ns(now),
        }
    }
}

/// Where a rank stopped: its last step, and the shapes of what it printed after it.
type Phase<'a> = (u64, Option<Vec<&'a str>>);

/// The evaluation's time, and one rank's silence and threshold at it.
#[derive(Debug, Clone, Copy)]
struct Moment {
    now: Nanos,
    silent: Nanos,
    threshold: Nanos,
}

/// What the ranks that print progress share, computed once per evaluation.
struct Overview<'a> {
    n: usize,
    /// Steps of all ranks, ascending, and their median.
    steps: Vec<u64>,
    median_step: u64,
    /// The phase more than half the ranks are in, and how many distinct phases there are.
    majority: Option<Phase<'a>>,
    distinct: usize,
    /// Without a majority, all at one step with every extra line remembered: the length of what
    /// all printed after the step, and how many printed more.
    tie: Option<(usize, usize)>,
    /// Ranks whose progress stopped for longer than their base threshold.
    stalled: usize,
    /// Ranks whose GPU is busy.
    spinning: usize,
}

fn spinning(v: &View<'_>) -> bool {
    v.live.gpu_util.is_some_and(|u| u >= GPU_BUSY)
}

fn phase<'a>(x: &View<'a>) -> Phase<'a> {
    (x.step, x.extras.clone())
}

/// The median interval between a progress shape's remembered occurrences, its first
/// `skip_first_steps` intervals (warm-up) left out.
fn median_interval(p: &Progress, skip_first_steps: usize) -> Option<Nanos> {
    let dropped = p.total - p.seen.len() as u64;
    let skip = (skip_first_steps as u64).saturating_sub(dropped) as usize;
    let mut intervals: Vec<Nanos> = p.seen.iter().zip(p.seen.iter().skip(1)).map(|(a, b)| b.1.saturating_sub(a.1)).skip(skip).collect();
    if intervals.is_empty() {
        return None;
    }
    let mid = intervals.len() / 2;
    Some(*intervals.select_nth_unstable(mid).1)
}

fn push_recent(r: &mut RankLive, line: Line) {
    r.recent.push_back(line);
    if r.recent.len() > RECENT {
        r.recent.pop_front();
    }
}

fn clip(text: &str) -> String {
    match text.char_indices().nth(300) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_string(),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Activity {
    /// Idle, or nothing known.
    Idle,
    /// At least half a core of CPU between the last two liveness samples.
    Cpu,
    /// At least 1 MiB/s to or from disk between them.
    Io,
}

fn activity(r: &RankLive) -> Activity {
    let (Some(&(t0, c0, io0)), Some(&(t1, c1, io1))) = (r.samples.front(), r.samples.back()) else { return Activity::Idle };
    if t1 <= t0 {
        return Activity::Idle;
    }
    let secs = t1.saturating_sub(t0) as f64 / 1e9;
    let rate = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (Some(a), Some(b)) => b.saturating_sub(a) as f64 / secs,
        _ => 0.0,
    };
    if rate(io0, io1) >= WORKING_IO_BYTES_PER_S {
        Activity::Io
    } else if rate(c0, c1) / 1e9 >= BUSY_CORES {
        Activity::Cpu
    } else {
        Activity::Idle
    }
}

fn common_prefix(lists: &[Vec<&str>]) -> usize {
    let Some(first) = lists.first() else { return 0 };
    (0..first.len()).take_while(|&i| lists.iter().all(|l| l.get(i) == Some(&first[i]))).count()
}

fn secs(ns: Nanos) -> String {
    let s = ns as f64 / 1e9;
    if s >= 10.0 {
        format!("{s:.0} s")
    } else if s >= 0.1 {
        format!("{s:.1} s")
    } else {
        format!("{:.0} ms", s * 1e3)
    }
}
