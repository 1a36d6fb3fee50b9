//! Training progress lines: `step 4 loss 1.45`, `iteration 120/1000`, `iter 5/100`,
//! `Epoch 2 Step [10/500]`, `global_step=1200`, HF-style `{'loss': 0.5, 'step': 12}`.
//! A case-insensitive literal prefilter runs before the regex.

use aho_corasick::AhoCorasick;
use regex::Regex;
use std::sync::LazyLock;

static PRE: LazyLock<Option<AhoCorasick>> = LazyLock::new(|| AhoCorasick::builder().ascii_case_insensitive(true).build(["step", "iter"]).ok());

static STEP: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"(?i)(?:\b(?:global_step|step|iteration|iter)\b\s*[:=#]?\s*\[?\s*|'(?:global_)?step':\s*)(\d{1,15})\b").ok());

/// The step number a progress line states, if it is one.
pub fn step(t: &str) -> Option<u64> {
    let t = crate::util::clip(t, 4096);
    PRE.as_ref()?.find(t)?;
    if t.contains("rror") || t.contains("Traceback") || t.contains("xception") {
        return None;
    }
    let c = STEP.as_ref()?.captures(t)?;
    c.get(1)?.as_str().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_shapes() {
        let cases: &[(&str, Option<u64>)] = &[
            ("2026-11-30 08:58:51,398 INFO [rank0] train: step 4 loss 1.453372", Some(4)),
            ("iteration 120/1000 | loss 2.1", Some(120)),
            (" iter 5/100 lr 0.1", Some(5)),
            ("Epoch 2 Step [10/500] loss=0.3", Some(10)),
            ("global_step=1200 loss=0.5", Some(1200)),
            ("{'loss': 0.5, 'grad_norm': 1.2, 'step': 12}", Some(12)),
            ("Step: 33", Some(33)),
            ("Gradient overflow. Skipping step, loss scaler 0 reducing loss scale to 32768.0", None),
            ("timestep 5 noise", None),
            ("total steps 100", None),
            ("RuntimeError: step 4 failed", None),
            ("  File \"x.py\", line 3, in step", None),
            ("training done", None),
        ];
        for (t, want) in cases {
            assert_eq!(step(t), *want, "{t}");
        }
    }
}
