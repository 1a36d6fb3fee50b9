//! `coroner analyze`: the whole pipeline in process, no server.

use anyhow::Context;
use coroner_analysis::RuleSet;
use coroner_pipeline::JobPipeline;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub fn run(paths: &[PathBuf], json: bool, job: Option<String>, rules: Option<&Path>, history: Option<&str>) -> anyhow::Result<ExitCode> {
    let rules = load_rules(rules)?;
    let job = job.unwrap_or_else(|| default_job_id(&paths[0]));
    let bar = crate::progress_bar::Bar::on_stderr(!json);
    let analysis = coroner_bundle::analyze_with_progress(paths, &job, &rules, &mut |p| bar.update(p));
    bar.clear();
    let coroner_bundle::Analysis { mut report, summary, pipeline } = analysis?;
    for w in &summary.warnings {
        crate::say_err!("coroner: warning: {w}");
    }
    if let Some(url) = history {
        attach_history(&mut report, &pipeline, url)?;
    }
    if json {
        crate::term::out_json(&serde_json::to_string_pretty(&report)?);
    } else {
        crate::say_part!("{}", coroner_analysis::text::render(&report));
    }
    Ok(crate::outcome::exit_code(report.verdict))
}

/// Links the earlier failures in a metastore (coronerd's database) that look like this one.
fn attach_history(report: &mut coroner_model::Report, pipeline: &JobPipeline, url: &str) -> anyhow::Result<()> {
    let evidence = pipeline.evidence();
    let Some(sig) = coroner_analysis::signature::signature(report, Some(&evidence)) else { return Ok(()) };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let past = rt.block_on(async {
        let store = coroner_store::connect(url).await.context("open the failure history (--history)")?;
        let filter = coroner_store::SignatureFilter { class: Some(sig.class), ..Default::default() };
        store.signatures(&filter).await.context("read the failure history")
    })?;
    report.similar_incidents = Some(coroner_analysis::history::similar_incidents(&report.job_id, &sig, &past));
    Ok(())
}

pub fn load_rules(path: Option<&Path>) -> anyhow::Result<RuleSet> {
    match path {
        None => Ok(RuleSet::builtin()),
        Some(p) => {
            let text = std::fs::read_to_string(p).with_context(|| format!("read rules file {}", p.display()))?;
            let user = RuleSet::parse(&text).with_context(|| format!("load rules file {}", p.display()))?;
            Ok(RuleSet::with_overrides(user))
        }
    }
}

fn default_job_id(path: &Path) -> String {
    if path.as_os_str() == "-" {
        return "stdin".to_string();
    }
    let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let name = canonical.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    if name.is_empty() {
        "job".to_string()
    } else {
        name
    }
}
