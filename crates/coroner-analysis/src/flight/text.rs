//! The flight recorder section for a person: the verdict, each group's first mismatch with every
//! rank's entry side by side, where the job stopped, the straggler, and what the dumps cannot say.
//! The report's text and `coroner fr` print the same.

use coroner_model::{FlightRecorderReport, FrEntryView, Rank};
use std::fmt::Write;

pub fn render(fr: &FlightRecorderReport) -> String {
    let mut out = String::new();
    let _ = write(&mut out, fr);
    out
}

fn write(out: &mut String, fr: &FlightRecorderReport) -> std::fmt::Result {
    let v = &fr.verdict;
    match (v.culprits.as_slice(), v.rule) {
        ([], _) if v.candidates.is_empty() => writeln!(out, "  verdict: no rank named - {}", v.summary)?,
        ([], _) => writeln!(out, "  verdict: unknown (could be {}) - {}", ranks(&v.candidates), v.summary)?,
        (c, Some(rule)) => writeln!(out, "  verdict: {} diverged first by rule `{rule}` (confidence {:.2}) - {}", names(c), v.confidence, v.summary)?,
        (c, None) => writeln!(out, "  verdict: {} - {}", names(c), v.summary)?,
    }
    writeln!(out, "  dumps: {}{}", ranks(&fr.dumped), if fr.missing.is_empty() { String::new() } else { format!("; none from {}", ranks(&fr.missing)) })?;
    for g in &fr.groups {
        let desc = if g.desc.is_empty() || g.desc == "undefined" { String::new() } else { format!(" ({})", g.desc) };
        match &g.divergence {
            None if g.desc.ends_with("point-to-point") => {
                writeln!(out, "  pg {}{desc}: ranks {} agree on every send and recv their buffers pair ({} pairs matched)", g.pg, ranks(&g.ranks), g.matched)?;
            }
            None => writeln!(out, "  pg {}{desc}: ranks {} agree on every collective in their buffers ({} matched)", g.pg, ranks(&g.ranks), g.matched)?,
            Some(d) => {
                writeln!(out, "  pg {}{desc}: {} matched, first mismatch at {} ({}):", g.pg, g.matched, d.seq, d.differs)?;
                table(out, &d.entries)?;
            }
        }
    }
    for s in &fr.stopped {
        let mut parts = Vec::new();
        if !s.waiting.is_empty() {
            parts.push(format!("waiting: {}", ranks(&s.waiting)));
        }
        if !s.never_issued.is_empty() {
            parts.push(format!("never issued it: {}", ranks(&s.never_issued)));
        }
        if !s.unknown.is_empty() {
            parts.push(format!("unknown: {}", ranks(&s.unknown)));
        }
        writeln!(out, "  stopped: pg {} {} {} ({})", s.pg, s.seq, s.op, parts.join("; "))?;
    }
    if let Some(s) = &fr.straggler_summary {
        writeln!(out, "  straggler: {s}")?;
    }
    for c in &fr.cannot_say {
        writeln!(out, "  cannot say: {c}")?;
    }
    Ok(())
}

fn table(out: &mut String, entries: &[FrEntryView]) -> std::fmt::Result {
    let cell = |e: &FrEntryView| -> [String; 6] {
        if e.status != "issued" {
            return [format!("rank {}", e.rank), format!("({})", e.status), String::new(), String::new(), String::new(), String::new()];
        }
        [
            format!("rank {}", e.rank),
            e.op.clone(),
            format!("in {} out {}", e.input_sizes, e.output_sizes),
            e.dtypes.clone(),
            e.state.clone(),
            e.call_site.clone().unwrap_or_else(|| "-".into()),
        ]
    };
    let rows: Vec<[String; 6]> = entries.iter().map(cell).collect();
    let width = |i: usize| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0);
    let w: Vec<usize> = (0..5).map(width).collect();
    for r in &rows {
        writeln!(
            out,
            "    {:<w0$}  {:<w1$}  {:<w2$}  {:<w3$}  {:<w4$}  {}",
            r[0],
            r[1],
            r[2],
            r[3],
            r[4],
            r[5],
            w0 = w[0],
            w1 = w[1],
            w2 = w[2],
            w3 = w[3],
            w4 = w[4]
        )?;
    }
    Ok(())
}

fn names(r: &[Rank]) -> String {
    match r {
        [one] => format!("rank {one}"),
        many => format!("ranks {}", ranks(many)),
    }
}

fn ranks(r: &[Rank]) -> String {
    if r.is_empty() {
        return "none".into();
    }
    crate::hang::join(r)
}
