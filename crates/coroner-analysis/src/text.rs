//! The report for a person: the first line gives the verdict and the culprit.

use coroner_model::{AttemptOutcome, Report, Verdict};
use std::fmt::Write;

pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let _ = write_report(&mut out, report);
    out
}

fn write_report(out: &mut String, r: &Report) -> std::fmt::Result {
    match (&r.verdict, &r.first_failure) {
        (Verdict::Succeeded, Some(f)) if !r.attempts.is_empty() => {
            let failed = r.attempts.iter().find(|a| a.outcome == AttemptOutcome::FailedFirst).map_or(0, |a| a.attempt);
            let last = r.attempts.last().map_or(0, |a| a.attempt);
            let who = f.rank.map_or_else(|| "a process of unknown rank".to_string(), |rank| format!("rank {rank}"));
            let host = f.host.as_ref().map(|h| format!(" on {h}")).unwrap_or_default();
            writeln!(
                out,
                "SUCCEEDED: job {} - recovered in attempt {last}; attempt {failed} failed first: {who}{host}: {} (confidence {:.2})",
                r.job_id, f.class, f.confidence
            )?;
            write_first(out, f)?;
        }
        (Verdict::Succeeded, _) if !r.ranks.is_empty() && r.ranks.iter().all(|k| k.ended.as_deref() == Some("exited 0")) => {
            writeln!(out, "SUCCEEDED: job {} - every rank exited cleanly", r.job_id)?;
        }
        (Verdict::Succeeded, _) => writeln!(out, "SUCCEEDED: job {} - no line reports a failure (how the processes ended is not in these logs)", r.job_id)?,
        (v, Some(f)) if f.rank.is_none() && f.rule.as_deref() == Some("stopped-from-outside") => {
            writeln!(
                out,
                "{}: job {} - stopped from outside, no rank failed first: {} (confidence {:.2})",
                v.as_str().to_uppercase(),
                r.job_id,
                f.class,
                f.confidence
            )?;
            write_first(out, f)?;
        }
        (v, Some(f)) if f.rank.is_none() && f.summary.starts_with("the culprit is not in these logs") => {
            writeln!(out, "{}: job {} - the culprit is not in these logs: {} (confidence {:.2})", v.as_str().to_uppercase(), r.job_id, f.class, f.confidence)?;
            write_first(out, f)?;
        }
        (v, Some(f)) => {
            let who = match f.rank {
                Some(rank) => format!("rank {rank}"),
                None if f.candidates.is_empty() => "a process of unknown rank".to_string(),
                None => format!("rank unknown (candidates: {})", join(&f.candidates)),
            };
            let host = f.host.as_ref().map(|h| format!(" on {h}")).unwrap_or_default();
            writeln!(out, "{}: job {} - {who}{host} failed first: {} (confidence {:.2})", v.as_str().to_uppercase(), r.job_id, f.class, f.confidence)?;
            write_first(out, f)?;
        }
        (v, None) => writeln!(out, "{}: job {} - no failure found", v.as_str().to_uppercase(), r.job_id)?,
    }
    write_attempts(out, r)?;
    crate::history::write_similar(out, r)?;
    if !r.cascade.is_empty() {
        writeln!(out, "\nCascade (who gave up because of whom):")?;
        for c in &r.cascade {
            let indent = "  ".repeat(c.depth.max(1) as usize);
            let by = c.caused_by.map(|r| format!(" <- rank {r}")).unwrap_or_default();
            let on = c.collective.as_ref().map(|c| format!(" [in {c}]")).unwrap_or_default();
            writeln!(out, "{indent}rank {}{by}{on}: {}", c.rank, c.how)?;
        }
    }
    if !r.collectives.is_empty() {
        writeln!(out, "\nCollectives (pg, rank: last enqueued / completed, pending):")?;
        for c in &r.collectives {
            let n = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_else(|| "-".into());
            writeln!(
                out,
                "  pg {} rank {}: {} / {}{}",
                c.pg,
                c.rank,
                n(c.last_enqueued),
                n(c.last_completed),
                c.pending.as_ref().map(|p| format!(", waiting in {p}")).unwrap_or_default()
            )?;
        }
    }
    if let Some(fr) = &r.flight_recorder {
        writeln!(out, "\nFlight recorder (every rank's collectives matched):")?;
        out.push_str(&crate::flight::text::render(fr));
    }
    if !r.ranks.is_empty() {
        writeln!(out, "\nRanks:")?;
    }
    for rk in &r.ranks {
        let clock = if rk.clock.uncertainty_ns < 0 {
            "clock unknown".to_string()
        } else {
            format!("clock {:+.3} s +/- {:.3} s ({})", rk.clock.offset_ns as f64 / 1e9, rk.clock.uncertainty_ns as f64 / 1e9, rk.clock.source)
        };
        writeln!(
            out,
            "  rank {:>5} {:<8} {:<28} last step {:<6} {} lines, {clock}",
            rk.rank.0,
            rk.role,
            rk.ended.clone().unwrap_or_else(|| "end unknown".into()),
            rk.last_step.map(|s| s.to_string()).unwrap_or_else(|| "-".into()),
            rk.lines
        )?;
    }
    if !r.snapshots.is_empty() {
        writeln!(out, "\nSnapshots:")?;
        for s in &r.snapshots {
            let rank = s.rank.map(|r| r.to_string()).unwrap_or_else(|| "-".into());
            writeln!(
                out,
                "  rank {rank} {} {} ({} bytes){}",
                s.kind,
                s.name,
                s.size,
                if s.highlights.is_empty() { String::new() } else { format!(": {}", s.highlights.join("; ")) }
            )?;
        }
    }
    if !r.advice.is_empty() {
        writeln!(out, "\nWhat to do:")?;
        for a in &r.advice {
            writeln!(out, "  - {a}")?;
        }
    }
    if !r.notes.is_empty() {
        writeln!(out, "\nNotes:")?;
        for n in &r.notes {
            writeln!(out, "  - {n}")?;
        }
    }
    Ok(())
}

fn write_first(out: &mut String, f: &coroner_model::FirstFailure) -> std::fmt::Result {
    writeln!(out)?;
    writeln!(out, "  {}", f.summary)?;
    if let Some(t) = &f.time {
        writeln!(out, "  at {t} (aligned clock)")?;
    }
    if !f.evidence.is_empty() {
        writeln!(out, "\nEvidence:")?;
        for e in &f.evidence {
            let rank = e.rank.map(|r| r.to_string()).unwrap_or_else(|| "-".into());
            writeln!(out, "  [{}] rank {rank} {}: {}", e.time, e.stream, e.line)?;
        }
    }
    Ok(())
}

fn join(ranks: &[coroner_model::Rank]) -> String {
    ranks.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(", ")
}

/// A job started more than once: each attempt and what it did.
fn write_attempts(out: &mut String, r: &Report) -> std::fmt::Result {
    if r.attempts.is_empty() {
        return Ok(());
    }
    let first = r
        .attempts
        .iter()
        .find(|a| a.outcome == AttemptOutcome::FailedFirst)
        .map(|a| format!("; the failure, cascade and ranks here are attempt {}'s, the first to fail", a.attempt));
    writeln!(out, "\nAttempts (the job was started {} times{}):", r.attempts.len(), first.unwrap_or_default())?;
    for a in &r.attempts {
        let started = a.started.as_ref().map(|t| format!(" from {t}")).unwrap_or_default();
        let failure = match (a.failed_rank, a.class) {
            (Some(rank), Some(class)) => format!(": rank {rank}, {class}"),
            (None, Some(class)) => format!(": {class}"),
            _ => String::new(),
        };
        writeln!(out, "  attempt {}{started}, {} rank(s): {}{failure}", a.attempt, a.ranks, a.outcome.as_str())?;
    }
    Ok(())
}
