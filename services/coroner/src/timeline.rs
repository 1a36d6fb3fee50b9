//! `coroner timeline JOB`: the job's timeline as swimlanes in the terminal, one row per rank (or
//! per host for large jobs), on the aligned clock, with the first failure marked.

use crate::remote::{connect, status_message};
use coroner_proto::v1;
use std::io::IsTerminal;
use std::process::ExitCode;

/// The mark of a cell: the most telling event in it wins.
fn mark(role: &str) -> (u8, char) {
    match role {
        "root" => (3, 'X'),
        "symptom" => (2, 's'),
        "progress" => (1, '|'),
        _ => (0, '.'),
    }
}

fn paint(c: char, color: bool) -> String {
    if !color {
        return c.to_string();
    }
    match c {
        'X' => format!("\x1b[1;31m{c}\x1b[0m"),
        's' => format!("\x1b[33m{c}\x1b[0m"),
        '|' => format!("\x1b[34m{c}\x1b[0m"),
        '!' => format!("\x1b[1;31m{c}\x1b[0m"),
        _ => format!("\x1b[2m{c}\x1b[0m"),
    }
}

/// Renders swimlanes `width` cells wide.
pub fn render(t: &v1::TimelineResponse, width: usize, color: bool) -> String {
    let width = width.max(10);
    let (t0, t1) = (t.start_ns, t.end_ns.max(t.start_ns + 1));
    let col = |ns: i64| (((ns - t0) as f64 / (t1 - t0) as f64) * (width - 1) as f64).round().clamp(0.0, (width - 1) as f64) as usize;
    let label_w = t.lanes.iter().map(|l| l.label.len() + 2).max().unwrap_or(8).clamp(8, 40);
    let mut out = String::new();
    let fail_col = t.failure_ns.filter(|f| *f >= t0 && *f <= t1).map(col);
    let reference = t.failure_ns.unwrap_or(t0);
    let rel = |ns: i64| format!("{:+.3}s", (ns - reference) as f64 / 1e9);
    out.push_str(&format!(
        "job {} ({}): {} lanes{}, {} .. {} (aligned; 0 = {})\n",
        crate::term::visible(&t.job_id),
        crate::term::visible(&t.verdict),
        t.lanes.len(),
        if t.grouped_by_host { " grouped by host" } else { "" },
        rel(t0),
        rel(t1),
        if t.failure_ns.is_some() { "first failure" } else { "start" }
    ));
    let mut axis = vec![' '; width];
    if let Some(c) = fail_col {
        axis[c] = 'v';
    }
    out.push_str(&format!("{:label_w$} {}\n", "", axis.iter().collect::<String>()));
    for lane in &t.lanes {
        let culprit = t.culprit_rank.is_some_and(|c| lane.ranks.contains(&c));
        let mut cells: Vec<(u8, char)> = vec![(0, ' '); width];
        if lane.end_ns > 0 {
            for cell in cells.iter_mut().take(col(lane.end_ns) + 1).skip(col(lane.start_ns)) {
                *cell = (0, '.');
            }
        }
        for e in &lane.events {
            let c = col(e.time_ns);
            let m = mark(&e.role);
            if m.0 >= cells[c].0 {
                cells[c] = m;
            }
        }
        if let Some(c) = fail_col {
            if cells[c].0 == 0 {
                cells[c] = (0, '!');
            }
        }
        // The label and role come from the server: made visible before the colours are added.
        let label = format!("{}{}", if culprit { "> " } else { "  " }, crate::term::visible(&lane.label));
        let label: String = label.chars().take(label_w).collect();
        let row: String = cells.iter().map(|(_, ch)| paint(*ch, color)).collect();
        out.push_str(&format!("{label:label_w$} {row} {}\n", crate::term::visible(&lane.role)));
    }
    out.push_str("X root cause  s symptom  | progress  . alive  ! first failure  > culprit\n");
    out
}

pub async fn run(server: &crate::remote::Server, job: &str, width: Option<usize>, group_by_host: bool, json: bool) -> anyhow::Result<ExitCode> {
    let mut client = connect(server).await?;
    let t = client
        .timeline(v1::TimelineRequest { job_id: job.to_string(), group_by_host, max_lanes: 0, max_events_per_lane: 0 })
        .await
        .map_err(status_message)?
        .into_inner();
    if json {
        let lanes: Vec<serde_json::Value> = t
            .lanes
            .iter()
            .map(|l| {
                serde_json::json!({"label": l.label, "ranks": l.ranks, "host": l.host, "role": l.role,
                    "events": l.events.iter().map(|e| serde_json::json!({"time": coroner_model::format_rfc3339_ns(e.time_ns),
                        "rank": e.rank, "kind": e.kind, "role": e.role, "text": e.text})).collect::<Vec<_>>()})
            })
            .collect();
        crate::term::out_json(&serde_json::to_string_pretty(&serde_json::json!({"job_id": t.job_id, "culprit_rank": t.culprit_rank, "lanes": lanes}))?);
    } else {
        let width = width.unwrap_or(100);
        crate::term::out_trusted(&render(&t, width, std::io::stdout().is_terminal()));
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_culprit_lane_is_marked_and_roots_win_their_cell() {
        let ev = |t: i64, role: &str| v1::TimelineEvent { time_ns: t, role: role.into(), ..Default::default() };
        let lane = |r: u32, events| v1::TimelineLane { label: format!("rank {r}"), ranks: vec![r], start_ns: 0, end_ns: 100, events, ..Default::default() };
        let t = v1::TimelineResponse {
            job_id: "j".into(),
            start_ns: 0,
            end_ns: 100,
            culprit_rank: Some(1),
            failure_ns: Some(50),
            lanes: vec![lane(0, vec![ev(90, "symptom")]), lane(1, vec![ev(50, "progress"), ev(50, "root")])],
            ..Default::default()
        };
        let text = render(&t, 11, false);
        let rows: Vec<&str> = text.lines().collect();
        assert!(rows[3].starts_with("> rank 1"), "{text}");
        assert!(rows[3].contains("X"), "{text}");
        assert!(rows[2].contains('s') && rows[2].contains('!'), "{text}");
    }
}
