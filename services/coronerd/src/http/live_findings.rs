//! The live findings of a running job on its page: each rank suspected of hanging, why, for how
//! long it had been silent, and its last lines.

use super::escape;
use coroner_model::Report;

pub fn render(r: &Report, out: &mut String) {
    if r.live_findings.is_empty() {
        return;
    }
    out.push_str(
        "<div class=\"banner running\" id=\"live-findings\"><div class=\"headline\"><b class=\"verdict\">SUSPECTED HANG</b> (live, before any watchdog)</div>",
    );
    for f in &r.live_findings {
        out.push_str(&format!(
            "<div class=\"suspect\" data-rank=\"{rank}\"><p><b>rank {rank}</b>{host}: {summary}</p><p class=\"muted\">{why}; silent {silent:.1} s (threshold {threshold:.1} s{median}); last line at {last}; raised at {raised}</p><pre>{lines}</pre></div>",
            rank = f.rank,
            host = f.host.as_deref().map(|h| format!(" on {}", escape(h))).unwrap_or_default(),
            summary = escape(&f.summary),
            why = escape(&f.why),
            silent = f.silent_ms as f64 / 1e3,
            threshold = f.threshold_ms as f64 / 1e3,
            median = f.median_step_ms.map(|m| format!(", median step {m} ms")).unwrap_or_default(),
            last = escape(f.last_line_time.as_deref().unwrap_or("-")),
            raised = escape(&f.raised_at),
            lines = f.last_lines.iter().map(|l| escape(l)).collect::<Vec<_>>().join("\n"),
        ));
    }
    out.push_str("</div>");
}
