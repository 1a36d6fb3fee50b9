//! Judging one case and tallying the corpus: per class, framework, input shape, launcher and half.

use crate::corpus::{Case, Half, Label};
use coroner_model::Report;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::Write;

/// What an analysis concluded, in the label's terms.
#[derive(Debug, Clone, PartialEq)]
pub struct Got {
    pub verdict: String,
    pub class: Option<String>,
    pub rank: Option<u32>,
    /// The report names no failure at all ("no failure found", or a success): on a failed
    /// job, the miss the issue forbids outright.
    pub no_failure_found: bool,
    /// The report's one-line summary, or the error that stopped the analysis.
    pub summary: String,
}

impl Got {
    pub fn from_report(r: &Report) -> Got {
        let f = r.first_failure.as_ref();
        Got {
            verdict: r.verdict.as_str().to_string(),
            class: f.map(|f| f.class.as_str().to_string()),
            rank: f.and_then(|f| f.rank.map(|r| r.0)),
            no_failure_found: f.is_none(),
            summary: f.map(|f| f.summary.clone()).unwrap_or_default(),
        }
    }

    pub fn error(e: String) -> Got {
        Got { verdict: "error".into(), class: None, rank: None, no_failure_found: true, summary: e }
    }

    /// `failed/cuda_oom/r1`, `succeeded`, `unknown (no failure found)`.
    pub fn short(&self) -> String {
        let mut s = self.verdict.clone();
        if let Some(c) = &self.class {
            let _ = write!(s, "/{c}");
        }
        if let Some(r) = self.rank {
            let _ = write!(s, "/r{r}");
        }
        if self.no_failure_found && self.verdict != "succeeded" {
            s.push_str(" (no failure found)");
        }
        s
    }
}

/// Whether `got` is right for `label`. A case labelled `unknown` (the excerpt cannot tell whether
/// the run failed) is answered right by `unknown` or by `succeeded`, which coroner gives a log
/// with no failure in it and says how the processes ended is not there; a failure claimed on such
/// an excerpt is wrong.
pub fn judge(label: &Label, got: &Got) -> bool {
    if label.verdict == "unknown" {
        return got.verdict == "unknown" || got.verdict == "succeeded";
    }
    if got.verdict != label.verdict {
        return false;
    }
    if label.verdict != "failed" {
        return true;
    }
    let class_ok = got.class.as_ref().is_some_and(|c| label.classes.iter().any(|l| l == c));
    let culprit_ok = label.culprit.is_none_or(|c| got.rank == Some(c));
    class_ok && culprit_ok
}

fn expected(label: &Label) -> String {
    let mut s = label.verdict.clone();
    if label.verdict == "failed" {
        let _ = write!(s, "/{}", label.classes.join("|"));
    }
    if let Some(c) = label.culprit {
        let _ = write!(s, "/r{c}");
    }
    s
}

/// One case, judged.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub case: Case,
    pub got: Got,
    pub right: bool,
    pub baseline: Option<Got>,
    pub baseline_right: Option<bool>,
}

impl Outcome {
    pub fn new(case: Case, got: Got, baseline: Option<Got>) -> Outcome {
        let right = judge(&case.label, &got);
        let baseline_right = baseline.as_ref().map(|b| judge(&case.label, b));
        Outcome { case, got, right, baseline, baseline_right }
    }

    /// A failed job reported as "no failure found": the one miss the issue forbids outright.
    pub fn silent_miss(&self) -> bool {
        self.case.label.verdict == "failed" && self.got.no_failure_found
    }
}

/// Right / total, coroner's and the baseline's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    pub n: u32,
    pub right: u32,
    pub baseline_right: u32,
}

impl Tally {
    fn add(&mut self, o: &Outcome) {
        self.n += 1;
        self.right += u32::from(o.right);
        self.baseline_right += u32::from(o.baseline_right == Some(true));
    }

    pub fn pct(&self) -> f64 {
        if self.n == 0 {
            100.0
        } else {
            100.0 * f64::from(self.right) / f64::from(self.n)
        }
    }

    pub fn baseline_pct(&self) -> f64 {
        if self.n == 0 {
            100.0
        } else {
            100.0 * f64::from(self.baseline_right) / f64::from(self.n)
        }
    }
}

/// The corpus's figures.
#[derive(Debug, Clone, Default)]
pub struct Scores {
    pub total: Tally,
    pub by_class: BTreeMap<String, Tally>,
    pub by_framework: BTreeMap<String, Tally>,
    pub by_shape: BTreeMap<String, Tally>,
    pub by_launcher: BTreeMap<String, Tally>,
    pub by_half: BTreeMap<&'static str, Tally>,
    /// Failed cases reported as "no failure found", by id.
    pub silent_misses: Vec<String>,
    pub with_baseline: bool,
}

impl Scores {
    /// A case counts under its first accepted class (the one the label leads with).
    pub fn tally(outcomes: &[Outcome]) -> Scores {
        let mut s = Scores { with_baseline: outcomes.iter().any(|o| o.baseline.is_some()), ..Default::default() };
        for o in outcomes {
            let l = &o.case.label;
            s.total.add(o);
            s.by_class.entry(l.classes.first().cloned().unwrap_or_else(|| "none".into())).or_default().add(o);
            s.by_framework.entry(l.framework.clone()).or_default().add(o);
            s.by_shape.entry(l.shape.clone()).or_default().add(o);
            s.by_launcher.entry(l.launcher.clone()).or_default().add(o);
            s.by_half.entry(o.case.half().as_str()).or_default().add(o);
            if o.silent_miss() {
                s.silent_misses.push(o.case.id.clone());
            }
        }
        s
    }

    pub fn half(&self, h: Half) -> Tally {
        self.by_half.get(h.as_str()).copied().unwrap_or_default()
    }

    pub fn to_json(&self, outcomes: &[Outcome]) -> Value {
        let table = |m: &BTreeMap<String, Tally>| -> Value {
            m.iter().map(|(k, t)| (k.clone(), tally_json(t, self.with_baseline))).collect::<serde_json::Map<_, _>>().into()
        };
        json!({
            "total": tally_json(&self.total, self.with_baseline),
            "dev": tally_json(&self.half(Half::Dev), self.with_baseline),
            "held": tally_json(&self.half(Half::Held), self.with_baseline),
            "no_failure_found_on_failed": self.silent_misses.len(),
            "silent_misses": self.silent_misses,
            "by_class": table(&self.by_class),
            "by_framework": table(&self.by_framework),
            "by_shape": table(&self.by_shape),
            "by_launcher": table(&self.by_launcher),
            "cases": outcomes.iter().map(|o| json!({
                "id": o.case.id,
                "half": o.case.half().as_str(),
                "expected": expected(&o.case.label),
                "got": o.got.short(),
                "right": o.right,
                "summary": o.got.summary,
                "baseline": o.baseline.as_ref().map(Got::short),
                "baseline_right": o.baseline_right,
            })).collect::<Vec<_>>(),
        })
    }

    /// The per-case lines and the tables, for a person.
    pub fn render(&self, outcomes: &[Outcome]) -> String {
        let mut out = String::new();
        for o in outcomes {
            let base = match (&o.baseline, o.baseline_right) {
                (Some(b), Some(r)) => format!("  [grep: {} {}]", b.short(), if r { "right" } else { "wrong" }),
                _ => String::new(),
            };
            let _ = writeln!(
                out,
                "{:<5} {:<4} {:<58} expected {:<40} got {}{base}",
                if o.right { "right" } else { "WRONG" },
                o.case.half().as_str(),
                o.case.id,
                expected(&o.case.label),
                o.got.short()
            );
        }
        for (title, m) in [("class", &self.by_class), ("framework", &self.by_framework), ("shape", &self.by_shape), ("launcher", &self.by_launcher)] {
            let _ = writeln!(out, "\nby {title}:");
            for (k, t) in m {
                let _ = writeln!(out, "  {k:<22} {}", self.cell(t));
            }
        }
        let _ = writeln!(out);
        let _ = writeln!(out, "dev half:  {}", self.cell(&self.half(Half::Dev)));
        let _ = writeln!(out, "held half: {}", self.cell(&self.half(Half::Held)));
        let _ = writeln!(out, "total:     {}", self.cell(&self.total));
        let _ = writeln!(
            out,
            "\"no failure found\" on failed cases: {}{}",
            self.silent_misses.len(),
            if self.silent_misses.is_empty() { String::new() } else { format!(" ({})", self.silent_misses.join(", ")) }
        );
        out
    }

    fn cell(&self, t: &Tally) -> String {
        let mut s = format!("{:>3}/{:<3} {:5.1}%", t.right, t.n, t.pct());
        if self.with_baseline {
            let _ = write!(s, "   grep baseline {:>3}/{:<3} {:5.1}%", t.baseline_right, t.n, t.baseline_pct());
        }
        s
    }
}

fn tally_json(t: &Tally, with_baseline: bool) -> Value {
    let mut v = json!({ "n": t.n, "right": t.right, "pct": (t.pct() * 10.0).round() / 10.0 });
    if with_baseline {
        v["baseline_right"] = json!(t.baseline_right);
        v["baseline_pct"] = json!((t.baseline_pct() * 10.0).round() / 10.0);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn label(verdict: &str, classes: &[&str], culprit: Option<u32>) -> Label {
        Label {
            source: String::new(),
            framework: "pytorch".into(),
            launcher: "none".into(),
            shape: "single".into(),
            verdict: verdict.into(),
            classes: classes.iter().map(|c| c.to_string()).collect(),
            culprit,
            why: String::new(),
        }
    }

    fn got(verdict: &str, class: Option<&str>, rank: Option<u32>) -> Got {
        Got { verdict: verdict.into(), class: class.map(str::to_string), rank, no_failure_found: class.is_none(), summary: String::new() }
    }

    #[test]
    fn right_needs_the_verdict_an_accepted_class_and_the_labelled_culprit() {
        let l = label("failed", &["cuda_oom", "killed"], Some(1));
        assert!(judge(&l, &got("failed", Some("killed"), Some(1))));
        assert!(!judge(&l, &got("failed", Some("killed"), Some(0))), "wrong culprit");
        assert!(!judge(&l, &got("failed", Some("hang"), Some(1))), "class not accepted");
        assert!(!judge(&l, &got("unknown", None, None)));
        let any_rank = label("failed", &["hang"], None);
        assert!(judge(&any_rank, &got("failed", Some("hang"), None)));
        assert!(judge(&label("succeeded", &["none"], None), &got("succeeded", None, None)));
        // An excerpt that cannot tell: no failure claimed is right, a failure claimed is not.
        let open = label("unknown", &[], None);
        assert!(judge(&open, &got("unknown", None, None)) && judge(&open, &got("succeeded", None, None)));
        assert!(!judge(&open, &got("failed", Some("nccl_error"), None)));
    }
}
