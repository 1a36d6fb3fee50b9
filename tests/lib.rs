//! Helpers shared by coroner's integration tests: where the fixtures and binaries are, the answer
//! keys (read by tests only, never by the product), and clock skewing for alignment tests.

use coroner_bundle::Sink;
use coroner_model::{LogLine, ProcessEnd, Rank, SnapshotSummary};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub mod skew;

/// `tests/data` in the source tree.
pub fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data")
}

/// Every corpus bundle copied into the tests (answer keys are kept apart, in `data/truth`).
pub fn corpus_bundles() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(data_dir().join("corpus"))
        .expect("tests/data/corpus exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    v.sort();
    v
}

/// The answer key of a bundle: (verdict, culprit rank, fault class).
pub fn truth(bundle: &Path) -> (String, Option<u32>, String) {
    let name = bundle.file_name().expect("bundle has a name").to_string_lossy().into_owned();
    let path = data_dir().join("truth").join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let v: serde_json::Value = serde_json::from_str(&text).expect("truth is JSON");
    (
        v["verdict"].as_str().expect("verdict").to_string(),
        v["culprit_rank"].as_u64().map(|r| r as u32),
        v["fault_class"].as_str().expect("fault_class").to_string(),
    )
}

/// A built binary of the workspace (`cargo test --workspace` builds them; run `cargo build --bins` otherwise).
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target/<profile>");
    let path = dir.join(name);
    assert!(path.exists(), "{} is not built; run `cargo build --bins` (or `cargo test --workspace`) first", path.display());
    path
}

/// A sink that collects what a bundle holds, for tests that transform it before analysis.
#[derive(Default)]
pub struct Collected {
    pub lines: Vec<LogLine>,
    pub ends: Vec<ProcessEnd>,
    pub world_size: Option<u32>,
    pub snapshots: Vec<SnapshotSummary>,
}

impl Sink for Collected {
    fn line(&mut self, line: LogLine) {
        self.lines.push(line);
    }
    fn end(&mut self, end: ProcessEnd) {
        self.ends.push(end);
    }
    fn world_size(&mut self, n: u32) {
        self.world_size = Some(n);
    }
    fn snapshot(&mut self, mut summary: SnapshotSummary, facts: coroner_bundle::SnapshotFacts, _dir: &Path) {
        summary.highlights = facts.highlights;
        self.snapshots.push(summary);
    }
    fn note(&mut self, _note: String) {}
    fn finished(&mut self) {}
}

impl Collected {
    pub fn load(bundle: &Path) -> Collected {
        let mut c = Collected::default();
        coroner_bundle::load_paths(&[bundle.to_path_buf()], &mut c).expect("bundle loads");
        c
    }

    /// Runs the real pipeline over what was collected.
    pub fn report(&self, job: &str) -> coroner_model::Report {
        let mut p = coroner_pipeline::JobPipeline::new(job);
        if let Some(w) = self.world_size {
            p.set_world_size(w);
        }
        for l in &self.lines {
            p.push_line(l.clone());
        }
        for e in &self.ends {
            p.add_end(e.clone());
        }
        p.set_finished(true);
        p.report(&coroner_analysis::RuleSet::builtin())
    }

    pub fn ranks(&self) -> Vec<Rank> {
        let mut r: Vec<Rank> = self.lines.iter().filter_map(|l| l.rank).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
        r.sort();
        r
    }
}

/// The (verdict, culprit, class) a report states, in the answer key's terms.
pub fn headline(report: &coroner_model::Report) -> (String, Option<u32>, String) {
    let f = report.first_failure.as_ref();
    (report.verdict.as_str().to_string(), f.and_then(|f| f.rank.map(|r| r.0)), f.map(|f| f.class.as_str().to_string()).unwrap_or_else(|| "none".to_string()))
}

pub type Shifts = BTreeMap<Option<Rank>, i64>;

/// Asserts that `coroner analyze` or `coroner report` answered: its exit status is the code of a
/// verdict (0 succeeded, 1 failed, 3 unknown, 4 running; 2 means it could not answer), and when
/// it printed a JSON report, the code is the one that report's verdict owes.
pub fn assert_answered(out: &std::process::Output) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let code = out.status.code().unwrap_or_else(|| panic!("coroner was killed by a signal: {stderr}"));
    assert!(matches!(code, 0 | 1 | 3 | 4), "coroner exited {code}, not a verdict's code: {stderr}");
    let Ok(report) = serde_json::from_slice::<serde_json::Value>(&out.stdout) else { return };
    let owed = match report["verdict"].as_str() {
        Some("succeeded") => 0,
        Some("failed") => 1,
        Some("unknown") => 3,
        Some("running") => 4,
        _ => return,
    };
    assert_eq!(code, owed, "exit status for verdict {}: {stderr}", report["verdict"]);
}

/// Polls `check` until it answers `Ok`, and returns that; after `within` (a generous deadline
/// for a condition, never a timing assertion), fails the test with `what` and the last answer.
pub fn eventually<T>(within: std::time::Duration, what: &str, mut check: impl FnMut() -> Result<T, String>) -> T {
    let deadline = std::time::Instant::now() + within;
    loop {
        match check() {
            Ok(found) => return found,
            Err(last) => assert!(std::time::Instant::now() < deadline, "{what}: {last}"),
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// Whether a CLI run succeeded and printed `marker`; if not, what it said instead (for
/// [`eventually`]).
pub fn printed(out: &std::process::Output, marker: &str) -> Result<(), String> {
    if out.status.success() && String::from_utf8_lossy(&out.stdout).contains(marker) {
        return Ok(());
    }
    Err(format!("{marker:?} not printed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr)))
}
