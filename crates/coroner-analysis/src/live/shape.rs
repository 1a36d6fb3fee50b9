//! A line's shape: its text with the numbers masked, and the numbers. Two lines of one template
//! (`step 4 loss 1.45`, `step 5 loss 0.97`) have the same shape; the job's progress template is
//! the shape whose numbers include a counter (a field that grows by the same stride each time).
//!
//! Dates, times of day and hex values are masked whole and never taken as counters: a seconds
//! field also grows by one when a step takes a second.

use std::collections::HashMap;

/// Lines longer than this are not progress lines (tracebacks, NCCL topology dumps).
const MAX_LEN: usize = 400;
/// Distinct shapes tracked per rank; the rest are only masked, not learned.
const MAX_SHAPES: usize = 512;
/// A field is a counter after this many equal positive strides in a row.
const COUNTER_RUN: u32 = 2;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape {
    pub template: String,
    pub numbers: Vec<u64>,
}

/// The shape of a line, or None for a line too long to be a progress line.
pub fn shape(text: &str) -> Option<Shape> {
    if text.len() > MAX_LEN {
        return None;
    }
    let mut template = String::with_capacity(text.len());
    let mut numbers = Vec::new();
    for (i, token) in text.split_whitespace().enumerate() {
        if i > 0 {
            template.push(' ');
        }
        if is_time_like(token) {
            template.push_str("<t>");
            continue;
        }
        if token.len() > 2 && (token.starts_with("0x") || token.starts_with("0X")) {
            template.push_str("<h>");
            continue;
        }
        let bytes = token.as_bytes();
        let mut j = 0;
        while j < bytes.len() {
            if bytes[j].is_ascii_digit() {
                let start = j;
                while j < bytes.len() && bytes[j].is_ascii_digit() {
                    j += 1;
                }
                template.push_str("<n>");
                numbers.push(token[start..j].parse().unwrap_or(u64::MAX));
            } else {
                let start = j;
                while j < bytes.len() && !bytes[j].is_ascii_digit() {
                    j += 1;
                }
                template.push_str(&token[start..j]);
            }
        }
    }
    Some(Shape { template, numbers })
}

/// `08:58:51,398`, `2026-11-30`, `08:58:47.665496298`: digits on both sides of `:` or `-`.
fn is_time_like(token: &str) -> bool {
    let b = token.as_bytes();
    b.windows(3).any(|w| w[0].is_ascii_digit() && (w[1] == b':' || w[1] == b'-') && w[2].is_ascii_digit())
}

/// What one rank's lines of one shape have shown so far.
#[derive(Debug, Clone, Default)]
struct Track {
    count: u64,
    last: Vec<u64>,
    /// Per field: the last stride and how many times in a row it repeated.
    strides: Vec<(i128, u32)>,
}

/// Learns which of one rank's shapes carry a counter.
#[derive(Debug, Clone, Default)]
pub struct ShapeLearner {
    tracks: HashMap<String, Track>,
}

impl ShapeLearner {
    /// Records a line's shape; returns the counter fields this shape has shown so far.
    pub fn add(&mut self, s: &Shape) -> Vec<usize> {
        if s.numbers.is_empty() {
            return Vec::new();
        }
        if !self.tracks.contains_key(&s.template) && self.tracks.len() >= MAX_SHAPES {
            return Vec::new();
        }
        let t = self.tracks.entry(s.template.clone()).or_default();
        t.count += 1;
        if t.last.len() != s.numbers.len() {
            t.last = s.numbers.clone();
            t.strides = vec![(0, 0); s.numbers.len()];
            return Vec::new();
        }
        let mut counters = Vec::new();
        for (i, (&now, &before)) in s.numbers.iter().zip(&t.last).enumerate() {
            let d = i128::from(now) - i128::from(before);
            let (stride, run) = &mut t.strides[i];
            if d > 0 && d == *stride {
                *run += 1;
            } else {
                *stride = d;
                *run = u32::from(d > 0);
            }
            if *run >= COUNTER_RUN {
                counters.push(i);
            }
        }
        t.last = s.numbers.clone();
        counters
    }

    pub fn count(&self, template: &str) -> u64 {
        self.tracks.get(template).map_or(0, |t| t.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_masked_and_times_are_not_counters() {
        let s = shape("2026-11-30 08:58:51,398 INFO [rank0] train: step 4 loss 1.453372").unwrap();
        assert_eq!(s.template, "<t> <t> INFO [rank<n>] train: step <n> loss <n>.<n>");
        assert_eq!(s.numbers, vec![0, 4, 1, 453372]);
        let s = shape("iteration 120/1000 | lr 0x1f").unwrap();
        assert_eq!(s.template, "iteration <n>/<n> | lr <h>");
        assert_eq!(s.numbers, vec![120, 1000]);
        assert!(shape(&"x".repeat(500)).is_none());
    }

    #[test]
    fn a_field_with_a_steady_stride_is_a_counter() {
        let mut l = ShapeLearner::default();
        let mut last = Vec::new();
        for (step, loss) in [(0, 31), (10, 17), (20, 99), (30, 5)] {
            last = l.add(&shape(&format!("it {step}/1000 loss 0.{loss}")).unwrap());
        }
        assert_eq!(last, vec![0], "the step field (stride 10) is the only counter");
        let mut l = ShapeLearner::default();
        for ms in [398, 403, 405, 409] {
            last = l.add(&shape(&format!("batch done in {ms} us")).unwrap());
        }
        assert!(last.is_empty(), "an uneven stride is not a counter");
    }
}
