//! The flight recorder section of a job's page: the verdict with the rule that decided, and each
//! process group's first mismatch with every rank's entry side by side. Everything from the
//! report is escaped; at most the report's own bounded rows are shown.

use super::escape;
use coroner_model::Report;

pub fn render(r: &Report, out: &mut String) {
    let Some(fr) = &r.flight_recorder else { return };
    let v = &fr.verdict;
    let who = match (v.culprits.as_slice(), v.candidates.as_slice()) {
        ([], []) => "no rank named".to_string(),
        ([], c) => format!("unknown (could be rank {})", c.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(", ")),
        (c, _) => format!("rank {}", c.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(", ")),
    };
    let rule = v.rule.map(|r| format!(" by rule <code>{}</code>, confidence {:.2}", escape(r.as_str()), v.confidence)).unwrap_or_default();
    out.push_str(&format!("<h2>Flight recorder</h2><p id=\"fr-verdict\"><b>{}</b>{rule}: {}</p>", escape(&who), escape(&v.summary)));
    for g in &fr.groups {
        let Some(d) = &g.divergence else { continue };
        out.push_str(&format!(
            "<p>process group {}: {} matched, first mismatch at {} ({})</p><table class=\"fr-mismatch\"><tr><th>rank</th><th>status</th><th>op</th><th>input sizes</th><th>output sizes</th><th>dtypes</th><th>state</th><th>entered</th><th>call site</th></tr>",
            escape(&g.pg),
            g.matched,
            escape(&d.seq),
            escape(&d.differs)
        ));
        for e in &d.entries {
            let culprit = if d.culprits.contains(&e.rank) { " class=\"culprit\"" } else { "" };
            out.push_str(&format!(
                "<tr{culprit}><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"nowrap\">{}</td><td>{}</td></tr>",
                e.rank,
                escape(&e.status),
                escape(&e.op),
                escape(&e.input_sizes),
                escape(&e.output_sizes),
                escape(&e.dtypes),
                escape(&e.state),
                escape(e.created.as_deref().unwrap_or("-")),
                escape(e.call_site.as_deref().unwrap_or("-"))
            ));
        }
        out.push_str("</table>");
    }
    if !fr.cannot_say.is_empty() {
        out.push_str("<ul class=\"muted\">");
        for c in &fr.cannot_say {
            out.push_str(&format!("<li>{}</li>", escape(c)));
        }
        out.push_str("</ul>");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use coroner_model::{FlightRecorderReport, FrDivergence, FrEntryView, FrGroupReport, FrRule, FrVerdict, Rank};

    #[test]
    fn mismatched_entries_are_shown_escaped() {
        let entry = |rank: u32, sizes: &str| FrEntryView {
            rank: Rank(rank),
            status: "issued".into(),
            op: "all_reduce".into(),
            input_sizes: sizes.into(),
            output_sizes: sizes.into(),
            dtypes: "Float".into(),
            state: "scheduled".into(),
            created: None,
            duration_ms: None,
            call_site: Some("<script>x</script> (train.py:3)".into()),
        };
        let fr = FlightRecorderReport {
            dumped: vec![Rank(0), Rank(1)],
            missing: vec![],
            verdict: FrVerdict {
                culprits: vec![Rank(1)],
                candidates: vec![],
                rule: Some(FrRule::OwnHistory),
                confidence: 0.75,
                summary: "seq 6".into(),
                pg: None,
                seq: None,
            },
            groups: vec![FrGroupReport {
                pg: "0".into(),
                desc: "default_pg".into(),
                ranks: vec![Rank(0), Rank(1)],
                matched: 5,
                divergence: Some(FrDivergence {
                    seq: "seq 6".into(),
                    differs: "sizes".into(),
                    rule: Some(FrRule::OwnHistory),
                    culprits: vec![Rank(1)],
                    confidence: 0.75,
                    summary: String::new(),
                    entries: vec![entry(0, "[[1024]]"), entry(1, "[[512]]")],
                }),
            }],
            stopped: vec![],
            stragglers: vec![],
            straggler_summary: None,
            cannot_say: vec![],
        };
        let report = Report {
            format_version: coroner_model::REPORT_FORMAT_VERSION,
            job_id: "j".into(),
            verdict: coroner_model::Verdict::Failed,
            first_failure: None,
            cascade: vec![],
            collectives: vec![],
            ranks: vec![],
            advice: vec![],
            snapshots: vec![],
            notes: vec![],
            live_findings: vec![],
            similar_incidents: None,
            flight_recorder: Some(fr),
            attempts: vec![],
        };
        let mut out = String::new();
        render(&report, &mut out);
        assert!(out.contains("<b>rank 1</b> by rule <code>own history</code>"), "{out}");
        assert!(out.contains("<tr class=\"culprit\"><td>1</td>") && out.contains("[[512]]"), "{out}");
        assert!(!out.contains("<script>") && out.contains("&lt;script&gt;"), "{out}");
    }
}
