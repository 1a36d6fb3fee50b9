//! The "attempts" section of a job's page, for a job started more than once (torchrun restarts, a
//! Slurm requeue): each attempt, what it did beside the first failure, and which one the rest of
//! the page describes.

use super::escape;
use coroner_model::{AttemptOutcome, Report};

pub fn render(r: &Report, out: &mut String) {
    if r.attempts.is_empty() {
        return;
    }
    let first = r.attempts.iter().find(|a| a.outcome == AttemptOutcome::FailedFirst);
    out.push_str(&format!(
        "<h2>Attempts</h2><p id=\"attempts-note\">The job was started {} times; its verdict is the last attempt's.{}</p>",
        r.attempts.len(),
        first.map(|a| format!(" The failure, cascade and ranks on this page are attempt {}'s, the first to fail.", a.attempt)).unwrap_or_default()
    ));
    out.push_str(
        "<table id=\"attempts\"><tr><th>attempt</th><th>from</th><th>ranks</th><th>outcome</th><th>failed rank</th><th>class</th><th>failure</th></tr>",
    );
    for a in &r.attempts {
        out.push_str(&format!(
            "<tr class=\"{}\"><td>{}</td><td class=\"nowrap\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&format!("{:?}", a.outcome).to_lowercase()),
            a.attempt,
            escape(a.started.as_deref().unwrap_or("-")),
            a.ranks,
            escape(a.outcome.as_str()),
            a.failed_rank.map(|r| r.to_string()).unwrap_or_else(|| "-".into()),
            a.class.map(|c| c.to_string()).unwrap_or_else(|| "-".into()),
            escape(a.summary.as_deref().unwrap_or("-"))
        ));
    }
    out.push_str("</table>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use coroner_model::{AttemptSummary, FaultClass, Rank, Verdict};

    #[test]
    fn a_restarted_job_lists_its_attempts_and_says_which_one_the_page_describes() {
        let attempt = |n: u32, verdict, outcome, rank: Option<u32>| AttemptSummary {
            attempt: n,
            verdict,
            outcome,
            failed_rank: rank.map(Rank),
            class: rank.map(|_| FaultClass::CudaOom),
            summary: rank.map(|r| format!("rank {r}: <out of memory>")),
            started: Some("2026-12-01T10:00:00Z".into()),
            ranks: 4,
        };
        let mut r: Report = serde_json::from_value(serde_json::json!({
            "format_version": 2, "job_id": "j", "verdict": "succeeded", "first_failure": null, "cascade": [], "collectives": [],
            "ranks": [], "advice": [], "snapshots": [], "notes": []
        }))
        .expect("a report");
        let mut out = String::new();
        render(&r, &mut out);
        assert!(out.is_empty(), "one attempt: no section");
        r.attempts = vec![attempt(0, Verdict::Failed, AttemptOutcome::FailedFirst, Some(3)), attempt(1, Verdict::Succeeded, AttemptOutcome::Recovered, None)];
        render(&r, &mut out);
        assert!(out.contains("started 2 times") && out.contains("attempt 0's, the first to fail"), "{out}");
        assert!(out.contains("<td>recovered</td>") && out.contains("&lt;out of memory&gt;"), "escaped: {out}");
    }
}
