//! `coroner fr DIR [--json]`: the flight recorder analysis of a folder of dumps alone, what a
//! `torchfrtrace DIR` user runs: each group's collectives matched across ranks, the first mismatch
//! with every rank's entry side by side, the divergent rank with the rule that named it, where the
//! job stopped, and what the dumps cannot say. No logs, so no clock offsets and no fates: a rank
//! without a dump is weighed by the dumps alone (`coroner analyze` of the folder with the logs
//! weighs it with them).

use coroner_analysis::flight::{analyze, Clocks, FlightInput};
use coroner_model::Rank;
use std::path::Path;
use std::process::ExitCode;

pub fn run(dir: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let folder = coroner_bundle::dumps::read_dumps(dir)?;
    for w in &folder.warnings {
        crate::say_err!("coroner: warning: {w}");
    }
    if folder.dumps.is_empty() {
        anyhow::bail!("no flight recorder dump in {} (files named <prefix><rank>, pickle or JSON)", dir.display());
    }
    // The world: every rank the default group lists, or up to the highest rank that dumped.
    let listed = folder.dumps.values().flat_map(|d| d.groups.values()).map(|g| g.ranks.len() as u32).max().unwrap_or(0);
    let highest = folder.dumps.keys().map(|r| r.0 + 1).max().unwrap_or(0);
    let input = FlightInput {
        dumps: folder.dumps.iter().map(|(r, d)| (*r, d)).collect(),
        world: Some(listed.max(highest)),
        fates: Default::default(),
        clocks: Clocks::raw(),
    };
    let report = analyze(&input);
    if json {
        crate::term::out_json(&serde_json::to_string_pretty(&report)?);
        return Ok(ExitCode::SUCCESS);
    }
    let versions: std::collections::BTreeSet<String> = folder.dumps.values().map(|d| format!("{} {}", d.version, d.encoding)).collect();
    crate::say!(
        "coroner fr: {} dump{} in {} ({}; format {})",
        folder.dumps.len(),
        if folder.dumps.len() == 1 { "" } else { "s" },
        dir.display(),
        folder.files.iter().map(|(r, f)| format!("rank {}: {f}", Rank::to_string(r))).collect::<Vec<_>>().join(", "),
        versions.into_iter().collect::<Vec<_>>().join(", ")
    );
    // Op names, call sites and file names come from the dumps: made visible like any log text.
    crate::term::out(&coroner_analysis::flight::text::render(&report));
    Ok(ExitCode::SUCCESS)
}
