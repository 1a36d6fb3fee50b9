//! The harness's command line, shared by `coroner-bench field` and the crate's example.

use crate::{run_all, Half, Scores};
use std::path::PathBuf;
use std::process::ExitCode;

pub const USAGE: &str = "usage: field [--dir tests/data/field] [--json] [--only ID] [--baseline] [--half dev|held] [--wrong] [--show]
  --only ID    cases whose id contains ID
  --baseline   also run the grep baseline and print its score beside coroner's
  --half H     only the dev or the held-out half (FNV-1a of the id, even = dev)
  --wrong      list only the cases coroner gets wrong
  --show       print coroner's report for each case listed";

#[derive(Debug, Default)]
struct Opts {
    dir: Option<PathBuf>,
    json: bool,
    only: Option<String>,
    baseline: bool,
    half: Option<Half>,
    wrong: bool,
    show: bool,
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts::default();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().cloned().ok_or_else(|| format!("{name} needs a value\n{USAGE}"));
        match a.as_str() {
            "--dir" => o.dir = Some(PathBuf::from(value("--dir")?)),
            "--json" => o.json = true,
            "--only" => o.only = Some(value("--only")?),
            "--baseline" => o.baseline = true,
            "--wrong" => o.wrong = true,
            "--show" => o.show = true,
            "--half" => {
                o.half = Some(match value("--half")?.as_str() {
                    "dev" => Half::Dev,
                    "held" => Half::Held,
                    other => return Err(format!("--half takes dev or held, not {other:?}")),
                });
            }
            "-h" | "--help" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    Ok(o)
}

/// Runs the harness; exits 0 whatever the score (the floors live in the crate's test).
pub fn main(args: &[String]) -> Result<ExitCode, String> {
    let o = parse(args)?;
    let dir = o.dir.unwrap_or_else(crate::default_dir);
    let mut outcomes = run_all(&dir, o.only.as_deref(), o.baseline).map_err(|e| e.to_string())?;
    if let Some(h) = o.half {
        outcomes.retain(|x| x.case.half() == h);
    }
    let scores = Scores::tally(&outcomes);
    if o.json {
        println!("{}", serde_json::to_string_pretty(&scores.to_json(&outcomes)).map_err(|e| e.to_string())?);
        return Ok(ExitCode::SUCCESS);
    }
    let listed: Vec<_> = outcomes.iter().filter(|x| !o.wrong || !x.right).cloned().collect();
    if o.show {
        let rules = coroner_analysis::RuleSet::builtin();
        for x in &listed {
            println!(
                "===== {} ({}) expected {:?} {:?} culprit {:?}",
                x.case.id, x.case.label.shape, x.case.label.verdict, x.case.label.classes, x.case.label.culprit
            );
            match coroner_bundle::analyze(&x.case.input_paths(), &x.case.id, &rules) {
                Ok(a) => print!("{}", coroner_analysis::text::render(&a.report)),
                Err(e) => println!("error: {e}"),
            }
        }
    }
    let text = scores.render(&listed);
    if o.wrong {
        // The tables always cover every case run, not only the wrong ones.
        let full = scores.render(&[]);
        print!("{}{}", text.lines().take_while(|l| !l.is_empty()).map(|l| format!("{l}\n")).collect::<String>(), full);
    } else {
        print!("{text}");
    }
    Ok(ExitCode::SUCCESS)
}
