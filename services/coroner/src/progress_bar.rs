//! The bar `analyze` and `import` draw while they read their input (bytes read of the total, and
//! files), on stderr and only when stderr is a terminal: nothing in a pipe, a log file or
//! `--json` output. indicatif draws at most 10 times a second whatever the rate of updates.

use coroner_bundle::Progress;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

/// A bar, or nothing when it is not to be shown. Cheap to clone (one shared bar).
#[derive(Clone)]
pub struct Bar(Option<ProgressBar>);

impl Bar {
    /// A bar on stderr when `wanted` and stderr is a terminal; else nothing.
    pub fn on_stderr(wanted: bool) -> Bar {
        if !wanted || !std::io::stderr().is_terminal() {
            return Bar(None);
        }
        let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr_with_hz(10));
        let style = ProgressStyle::with_template("{spinner} reading {bytes}/{total_bytes} {wide_bar} {msg} {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
        bar.set_style(style);
        Bar(Some(bar))
    }

    pub fn update(&self, p: &Progress) {
        let Some(bar) = &self.0 else { return };
        bar.set_length(p.total_bytes.max(p.bytes));
        bar.set_position(p.bytes);
        bar.set_message(format!("{}/{} files", p.files, p.total_files));
    }

    /// Takes the bar off the terminal (before the report or warnings are printed).
    pub fn clear(&self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}
