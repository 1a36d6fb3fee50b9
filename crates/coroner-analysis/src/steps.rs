//! One rank's progress lines, kept in bounded memory: one entry per step number, at most
//! [`MAX_STEPS_PER_RANK`] of them.
//!
//! A rank prints a progress line every step for as long as it trains, and other lines name the
//! step too (`checkpoint ... for step 1200`), so keeping every line's mark grew a job's memory with
//! every line it printed. The analysis reads only the first time each step was seen (clock
//! alignment compares ranks step by step; the pace reads the time from one step to the next) and
//! the highest step. So a step's repeats fold into one entry, and once a rank has printed more
//! distinct steps than the cap, only steps that are multiples of a stride are kept: the stride
//! doubles (2, 4, 8, ...) until the entries fit again, and later steps that are not multiples of it
//! are only counted. The thinning is by step number, not by arrival, so ranks at about the same
//! progress keep the same steps and still have steps in common to compare. Below the cap (every
//! job of the test corpus) nothing is dropped and the analysis reads exactly what it read before.

use coroner_model::Nanos;

/// Distinct steps kept per rank: 1,024 entries of 24 bytes, 24 KiB per rank at most.
pub const MAX_STEPS_PER_RANK: usize = 1024;

/// One progress line: which step, and when (what [`StepLog::push`] takes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepMark {
    pub step: u64,
    pub capture_ns: Nanos,
    pub printed_ns: Option<Nanos>,
}

/// The first time one step was seen on one rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepTime {
    pub step: u64,
    /// The earliest capture time of a line naming this step (clock alignment reads this).
    pub first_capture_ns: Nanos,
    /// The earliest printed time of those lines, a line without one counting its capture time
    /// (the pace reads this).
    pub first_printed_ns: Nanos,
}

/// One rank's steps: sorted by step, one entry per step, every step a multiple of `stride`.
#[derive(Debug, Clone)]
pub struct StepLog {
    times: Vec<StepTime>,
    stride: u64,
    cap: usize,
    max_step: Option<u64>,
    /// Progress lines seen, and those whose step is no longer (or was never) kept.
    marks: u64,
    dropped: u64,
}

impl Default for StepLog {
    fn default() -> Self {
        StepLog::with_cap(MAX_STEPS_PER_RANK)
    }
}

impl StepLog {
    /// A log keeping at most `cap` steps (at least 2).
    pub fn with_cap(cap: usize) -> StepLog {
        StepLog { times: Vec::new(), stride: 1, cap: cap.max(2), max_step: None, marks: 0, dropped: 0 }
    }

    /// Records one progress line.
    pub fn push(&mut self, m: StepMark) {
        self.marks += 1;
        self.max_step = Some(self.max_step.map_or(m.step, |s| s.max(m.step)));
        let printed = m.printed_ns.unwrap_or(m.capture_ns);
        loop {
            // `%`, not `is_multiple_of` (Rust 1.87; the workspace builds on 1.85): the stride is never 0.
            if m.step % self.stride != 0 {
                self.dropped += 1;
                return;
            }
            let at = match self.times.last() {
                Some(last) if last.step < m.step => Err(self.times.len()),
                None => Err(0),
                _ => self.times.binary_search_by_key(&m.step, |t| t.step),
            };
            match at {
                Ok(i) => {
                    // A repeat of a step: only its first times are kept.
                    let t = &mut self.times[i];
                    t.first_capture_ns = t.first_capture_ns.min(m.capture_ns);
                    t.first_printed_ns = t.first_printed_ns.min(printed);
                    self.dropped += 1;
                    return;
                }
                Err(i) if self.times.len() < self.cap => {
                    self.times.insert(i, StepTime { step: m.step, first_capture_ns: m.capture_ns, first_printed_ns: printed });
                    return;
                }
                // Full: thin, then look at this step again under the wider stride.
                Err(_) => {
                    if !self.thin() {
                        self.dropped += 1;
                        return;
                    }
                }
            }
        }
    }

    /// Doubles the stride until there is room for one more step (dense steps: half the cap is
    /// left; sparse step numbers, every 50th step logged, may take several doublings). False when
    /// the stride cannot grow further.
    fn thin(&mut self) -> bool {
        let before = self.times.len();
        while self.times.len() >= self.cap && self.stride < 1 << 63 {
            self.stride *= 2;
            let stride = self.stride;
            self.times.retain(|t| t.step % stride == 0);
        }
        self.dropped += (before - self.times.len()) as u64;
        self.times.len() < self.cap
    }

    /// The kept steps, sorted by step, one per step.
    pub fn times(&self) -> &[StepTime] {
        &self.times
    }

    /// Every kept step is a multiple of this (1 until the rank printed more than the cap).
    pub fn stride(&self) -> u64 {
        self.stride
    }

    /// The highest step any progress line named, kept or not.
    pub fn max_step(&self) -> Option<u64> {
        self.max_step
    }

    /// How many progress lines were recorded.
    pub fn marks(&self) -> u64 {
        self.marks
    }

    /// How many progress lines left no entry of their own: repeats of a step and lines of steps
    /// thinned out.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    pub fn len(&self) -> usize {
        self.times.len()
    }

    pub fn is_empty(&self) -> bool {
        self.times.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(step: u64, capture_ns: Nanos, printed_ns: Option<Nanos>) -> StepMark {
        StepMark { step, capture_ns, printed_ns }
    }

    #[test]
    fn repeats_of_a_step_keep_its_first_times() {
        let mut log = StepLog::default();
        log.push(mark(3, 300, Some(290)));
        log.push(mark(1, 100, None));
        log.push(mark(3, 250, None));
        log.push(mark(3, 260, Some(200)));
        log.push(mark(2, 200, None));
        let got: Vec<(u64, Nanos, Nanos)> = log.times().iter().map(|t| (t.step, t.first_capture_ns, t.first_printed_ns)).collect();
        assert_eq!(got, vec![(1, 100, 100), (2, 200, 200), (3, 250, 200)]);
        assert_eq!((log.max_step(), log.marks(), log.dropped(), log.stride()), (Some(3), 5, 2, 1));
    }

    /// The bug this bounds: coronerd's memory grew by every progress line a job printed (a
    /// 1,000-rank job of 6,000 lines per rank held 150 MB of step marks, and as much again for
    /// every report computed from them).
    #[test]
    fn a_long_job_keeps_at_most_the_cap_and_the_stride_says_which() {
        let mut log = StepLog::default();
        for step in 0..1_000_000u64 {
            log.push(mark(step, step as Nanos * 1000, None));
            // Another line naming the same step (a checkpoint line) adds nothing.
            log.push(mark(step, step as Nanos * 1000 + 1, None));
        }
        assert!(log.len() <= MAX_STEPS_PER_RANK, "{} steps kept", log.len());
        assert!(log.len() > MAX_STEPS_PER_RANK / 4, "{} steps kept", log.len());
        assert!(log.times.capacity() <= MAX_STEPS_PER_RANK, "the vector grew past the cap: {}", log.times.capacity());
        let stride = log.stride();
        assert_eq!(stride, 1024, "1,000,000 steps thinned to fit 1,024");
        assert!(log.times().iter().all(|t| t.step % stride == 0 && t.first_capture_ns == t.step as Nanos * 1000));
        assert!(log.times().windows(2).all(|w| w[1].step == w[0].step + stride));
        assert_eq!(log.max_step(), Some(999_999), "the highest step is exact");
        assert_eq!(log.marks(), 2_000_000);
        assert_eq!(log.dropped(), 2_000_000 - log.len() as u64);
    }

    #[test]
    fn ranks_at_about_the_same_progress_keep_the_same_steps() {
        let (mut a, mut b) = (StepLog::with_cap(64), StepLog::with_cap(64));
        for step in 0..5_000u64 {
            a.push(mark(step, 0, None));
        }
        for step in (0..5_100u64).rev() {
            b.push(mark(step, 0, None));
        }
        assert_eq!(a.stride(), b.stride());
        let common = a.times().iter().filter(|t| b.times().iter().any(|u| u.step == t.step)).count();
        assert_eq!(common, a.len(), "every step a keeps, b keeps too");
    }

    #[test]
    fn sparse_step_numbers_are_thinned_too() {
        let mut log = StepLog::with_cap(16);
        for step in (0..100_000u64).step_by(50) {
            log.push(mark(step, 0, None));
        }
        assert!(log.len() <= 16 && log.len() >= 2, "{} kept at stride {}", log.len(), log.stride());
        let mut extremes = StepLog::with_cap(2);
        for step in [0, u64::MAX, 1 << 63, 5, u64::MAX - 1] {
            extremes.push(mark(step, 0, None));
        }
        assert!(extremes.len() <= 2);
        assert_eq!(extremes.max_step(), Some(u64::MAX));
    }
}
