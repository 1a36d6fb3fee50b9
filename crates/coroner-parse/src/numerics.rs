//! Training whose numbers stopped being numbers, read across lines: nothing crashes, but the
//! run has diverged. Two mechanisms, whatever the framework prints:
//!
//! - **the fp16 loss scale collapses**: a dynamic loss scaler halves its scale on every overflow
//!   (DeepSpeed `OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 4, reducing to 2`, apex
//!   `Gradient overflow. Skipping step, loss scaler 0 reducing loss scale to 0.5`, fairseq
//!   `overflow detected, setting loss scale to: 0.25`). A few overflows early in training are
//!   normal (the scale starts at 2^16..2^32 and settles); a scale driven down to
//!   [`COLLAPSED_SCALE`] or below, or a scaler that says it is at its minimum, means the
//!   gradients are non-finite at any scale. One overflow that lands below it is held: a second
//!   overflow makes it certain, progress lines with a finite loss after it clear it (the scale
//!   settled low and training went on: fairseq routinely runs at 0.5), and a log that ends on it
//!   reports it ([`Numerics::held`]);
//! - **loss or gradient norm stay NaN/Inf**: progress lines whose loss or grad norm is `nan` or
//!   `inf` ([`NON_FINITE_RUN`] in a row: one skipped step is how fp16 scaling works).
//!
//! Each emits one `Divergence` event per (rank, stream), on the line where it became certain.

use coroner_model::EventKind;
use regex::Regex;
use std::sync::LazyLock;

/// A loss scale at or below this after overflows is a collapse: DeepSpeed's default minimum is
/// 1, and four halvings above it no healthy fp16 run sits.
pub const COLLAPSED_SCALE: f64 = 16.0;

/// Consecutive progress lines with a non-finite loss or grad norm that make a divergence.
pub const NON_FINITE_RUN: u32 = 2;

static SCALE: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"(?i)(?:reducing (?:loss scale )?to|setting loss scale to:?|loss scale(?: to)?:?)\s*([0-9][0-9.e+-]*)").ok());

/// A loss or gradient norm printed as `nan`/`inf`: `loss: nan`, `lm loss: nan`, `train_loss=inf`,
/// each term of a sum (`rpn_loss_cls: nan`, `loss_box: nan`), `grad_norm: nan`. A loss *scale*
/// is not a loss (`loss scale: inf` is DeepSpeed saying it skipped a step).
static NON_FINITE: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r#"(?i)\b((?:lm |total |train_|val_|[a-z]+_)?loss(?:_[a-z]+)*|grad[ _]?norm|gnorm)['"]?\s*[:=]?\s*['"]?(nan|[+-]?inf)\b"#).ok()
});

/// What the tracker has seen on one (rank, stream).
#[derive(Debug, Clone, Default)]
pub struct Numerics {
    non_finite_run: u32,
    reported_scale: bool,
    reported_run: bool,
    /// A loss scale that fell to the collapse line once, not yet certain.
    held: Option<EventKind>,
}

impl Numerics {
    /// Reads one line; pushes a `Divergence` when the line makes one certain.
    pub fn observe(&mut self, t: &str, out: &mut Vec<EventKind>) {
        let overflow = t.contains("OVERFLOW!") || t.contains("Gradient overflow") || t.contains("overflow detected");
        if overflow || t.contains("at minimum") || t.contains("Minimum loss scale") {
            self.scale_line(t, overflow, out);
            return;
        }
        if !(t.contains("nan") || t.contains("inf") || t.contains("NaN") || t.contains("Inf")) {
            if t.contains("loss") || t.contains("grad") {
                self.non_finite_run = 0;
                // Training went on with a finite loss after the scale fell: it settled.
                self.held = None;
            }
            return;
        }
        let Some(re) = NON_FINITE.as_ref() else { return };
        match re.captures(t).filter(|c| !c.get(1).is_some_and(|m| m.as_str().to_ascii_lowercase().contains("scale"))) {
            Some(c) => {
                self.non_finite_run += 1;
                if self.non_finite_run >= NON_FINITE_RUN && !self.reported_run {
                    self.reported_run = true;
                    let what = c.get(1).map_or("loss", |m| m.as_str());
                    out.push(EventKind::Divergence {
                        message: format!("{what} is non-finite on {} progress lines in a row: {}", self.non_finite_run, t.trim()),
                    });
                }
            }
            None => {
                if t.contains("loss") {
                    self.non_finite_run = 0;
                }
            }
        }
    }

    fn scale_line(&mut self, t: &str, overflow: bool, out: &mut Vec<EventKind>) {
        if self.reported_scale {
            return;
        }
        let at_minimum = t.contains("already at minimum") || t.contains("Minimum loss scale reached") || t.contains("at minimum loss scale");
        let scale = SCALE.as_ref().and_then(|re| re.captures_iter(t).last()).and_then(|c| c.get(1)?.as_str().trim_end_matches(['.', ',']).parse::<f64>().ok());
        let collapsed = overflow && scale.is_some_and(|s| s <= COLLAPSED_SCALE);
        if !(at_minimum || collapsed) {
            return;
        }
        let what = match scale {
            Some(s) if !at_minimum => format!("the fp16 loss scale collapsed to {s} after gradient overflows"),
            _ => "the fp16 loss scale is at its minimum and gradients still overflow".to_string(),
        };
        let divergence = EventKind::Divergence { message: format!("{what}: {}", t.trim()) };
        if at_minimum || self.held.take().is_some() {
            self.reported_scale = true;
            out.push(divergence);
        } else {
            self.held = Some(divergence);
        }
    }

    /// A collapse seen once and neither confirmed nor cleared yet: what a log that ends here
    /// reports (the event of the line that held it).
    pub fn held(&self) -> Option<&EventKind> {
        self.held.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The events of `lines`, with what is still held at their end.
    fn run(lines: &[&str]) -> Vec<EventKind> {
        let mut n = Numerics::default();
        let mut out = Vec::new();
        for l in lines {
            n.observe(l, &mut out);
        }
        out.extend(n.held().cloned());
        out
    }

    /// A scale that fell low once and then trained on with finite losses settled (fairseq's
    /// runs sit at 0.5 for epochs); falling again, or ending there, is the collapse.
    #[test]
    fn a_low_scale_that_training_goes_on_from_is_no_collapse() {
        let overflow = "| WARNING: overflow detected, setting loss scale to: 0.5";
        let progress = "| epoch 068 | loss 3.573 | nll_loss 1.864 | ppl 3.64 | loss_scale 0.500";
        assert!(run(&[overflow, progress, progress]).is_empty());
        assert_eq!(run(&[overflow, "| WARNING: overflow detected, setting loss scale to: 0.25"]).len(), 1);
        assert_eq!(run(&[progress, overflow]).len(), 1);
        // Cleared, then falling twice more: a collapse after all.
        assert_eq!(run(&[overflow, progress, overflow, overflow]).len(), 1);
    }

    #[test]
    fn a_loss_scale_driven_to_the_floor_is_a_divergence_in_every_scaler_wording() {
        for line in [
            "[2026-01-02 10:00:00,000] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 3 Skipping step. Attempted loss scale: 4, reducing to 2",
            "[INFO] [stage2.py:1400:step] [deepscale] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 1, reducing to 1",
            "Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 0.0625",
            "| WARNING: overflow detected, setting loss scale to: 0.5",
            "Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.",
        ] {
            assert!(matches!(run(&[line]).as_slice(), [EventKind::Divergence { .. }]), "{line}");
        }
    }

    #[test]
    fn early_overflows_at_a_high_scale_are_how_fp16_training_starts() {
        assert!(run(&[
            "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 4294967296, reducing to 2147483648",
            "Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 32768.0",
            "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768 but hysteresis is 2. Reducing hysteresis to 1",
        ])
        .is_empty());
    }

    #[test]
    fn non_finite_loss_or_grad_norm_in_a_row_is_a_divergence_and_one_skipped_step_is_not() {
        let hf = "{'loss': 0.0, 'grad_norm': nan, 'learning_rate': 9.7e-06, 'epoch': 0.53}";
        assert!(run(&[hf, "{'loss': 0.31, 'grad_norm': 1.2, 'learning_rate': 9.7e-06, 'epoch': 0.54}", hf]).is_empty());
        assert_eq!(run(&[hf, hf, hf]).len(), 1);
        let megatron = " iteration 12/ 100 | lm loss: 7.1E+00 | loss scale: 1.0 | grad norm: nan | number of nan iterations: 0 |";
        assert_eq!(run(&[megatron, megatron]).len(), 1);
        assert_eq!(run(&["step 10 loss nan", "step 11 loss=inf"]).len(), 1);
        assert!(run(&["step 10 loss 0.5 (nan-safe)", "inference done", "loss: infinity-norm regulariser on"]).is_empty());
        // A total and its terms, each on a line of its own.
        assert_eq!(run(&["iter: 3760 / 70000, total loss: nan", " >>> rpn_loss_cls: nan", " >>> loss_box: nan"]).len(), 1);
        // A loss scale is not a loss.
        assert!(run(&["loss scale: inf", "loss_scale: inf"]).is_empty());
    }
}
