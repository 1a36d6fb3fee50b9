//! The web page in a real headless browser (Debian's `chromium`, which `.ci/run` installs, driven
//! over the DevTools protocol: `cdp.rs`): the
//! page of an imported corpus bundle, after its script ran, shows the culprit and a timeline with
//! one lane per rank. Also: the page's error answers (400 with the parser's message, 404).
//!
//! Without chromium the browser test says SKIPPED on stderr and passes, so `cargo test
//! --workspace` passes on a fresh machine; with `CI=true` (set by `.ci/run`, which installs it)
//! a missing browser fails the test instead.

use crate::served::TestServer;
use std::io::Write;
use std::path::{Path, PathBuf};

const BROWSERS: [&str; 2] = ["/usr/bin/chromium", "/usr/bin/chromium-browser"];

/// The installed browser; `None` (said loudly) when there is none and this is not CI.
pub(crate) fn chromium() -> Option<PathBuf> {
    if let Some(found) = BROWSERS.iter().map(PathBuf::from).find(|p| p.exists()) {
        return Some(found);
    }
    let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    assert!(
        !ci,
        "chromium is not installed ({BROWSERS:?}) and CI={}: the browser test must run in CI; `apt-get install -y chromium` (.ci/run does it)",
        std::env::var("CI").unwrap_or_default()
    );
    // Straight to stderr, past the test harness's capture: a passing test's output is not shown.
    let _ = writeln!(std::io::stderr(), "SKIPPED the browser test: no chromium at {BROWSERS:?}; `apt-get install -y chromium` (or run .ci/run) to run it");
    None
}

#[test]
fn the_job_page_shows_the_culprit_and_the_timeline_in_a_real_browser() {
    let Some(browser) = chromium() else { return };
    let served = TestServer::start();
    let report = served.import("nccl2_hang_r1", "web-hang");
    assert_eq!(report["first_failure"]["rank"], 1, "{report:#}");
    let url = format!("http://127.0.0.1:{}/jobs/web-hang", served.http_port);
    // Over the DevTools protocol (`cdp.rs`): the page follows the job over server-sent events,
    // so it never finishes loading as `--dump-dom` waits for.
    let mut b = crate::cdp::Browser::launch(&browser);
    let tab = b.open(&url, 1400, 900);
    b.wait_for(&tab, "the timeline drawn", "document.getElementById('timeline-svg') !== null", std::time::Duration::from_secs(60));
    let dom = b.eval(&tab, "document.documentElement.outerHTML").as_str().expect("the page's HTML").to_string();

    // The verdict banner names the culprit.
    let culprit = dom.find("id=\"culprit\"").map(|i| &dom[i..(i + 200).min(dom.len())]).unwrap_or("");
    assert!(culprit.contains("rank 1"), "no culprit in the banner: {culprit:?}");
    assert!(dom.contains("hang"), "the fault class is on the page");
    // The script drew the timeline: an SVG inside #timeline with one lane per rank, the culprit's marked.
    let tl = dom.find("id=\"timeline\"").map(|i| &dom[i..]).expect("a #timeline element");
    assert!(tl.contains("id=\"timeline-svg\""), "the timeline was not drawn: {}", &tl[..tl.len().min(400)]);
    assert!(tl.contains("class=\"lane culprit\" data-ranks=\"1\""), "the culprit's lane is marked");
    assert!(tl.contains("class=\"lane\" data-ranks=\"0\""), "rank 0 has a lane");
    assert!(tl.contains("class=\"ev root") || tl.contains("class=\"ev symptom"), "events are drawn by role");
    // The rest of the page.
    for id in ["id=\"evidence\"", "id=\"search\"", "/jobs/web-hang/report.json"] {
        assert!(dom.contains(id), "{id} missing");
    }

    // A picture for a person to look at (CORONER_SCREENSHOT=/path.png keeps it).
    if let Ok(path) = std::env::var("CORONER_SCREENSHOT") {
        b.screenshot(&tab, Path::new(&path));
        assert!(Path::new(&path).exists(), "no screenshot at {path}");
    }
}

#[test]
fn the_page_and_its_api_answer_bad_requests_with_reasons_not_500() {
    let served = TestServer::start();
    served.import("nccl2_oom_r1", "web-oom");

    let (status, body) = served.get("/jobs/no-such-job");
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("no job"), "{body}");
    let (status, body) = served.get_json("/api/jobs/no-such-job/search?q=x");
    assert_eq!(status, 404, "{body}");

    // A malformed query gets the parser's message.
    let (status, body) = served.get_json("/api/jobs/web-oom/search?q=%22unclosed");
    assert_eq!(status, 400, "{body}");
    assert!(body["error"].as_str().is_some_and(|e| e.contains("bad query")), "{body}");
    let (status, body) = served.get_json("/api/jobs/web-oom/search?q=x&since=yesterday");
    assert_eq!(status, 400, "{body}");
    let (status, body) = served.get_json("/api/jobs/web-oom/search?q=x&cursor=zz");
    assert_eq!(status, 400, "{body}");

    // The search API: hits on the aligned clock, the culprit's lines found.
    let (status, body) = served.get_json("/api/jobs/web-oom/search?q=OutOfMemoryError&limit=5");
    assert_eq!(status, 200, "{body}");
    let hits = body["hits"].as_array().expect("hits");
    assert!(!hits.is_empty() && hits.iter().all(|h| h["rank"] == 1), "{body:#}");
    let (status, counts) = served.get_json("/api/jobs/web-oom/counts?q=OutOfMemoryError");
    assert_eq!(status, 200);
    assert!(counts.as_array().is_some_and(|c| c.iter().any(|x| x["rank"] == 1)), "{counts}");

    // The jobs page lists it; the report page renders the collective table when there is one.
    let (status, body) = served.get("/");
    assert_eq!(status, 200);
    assert!(body.contains("/jobs/web-oom"), "{body}");
    let (status, _) = served.get("/jobs/web-oom");
    assert_eq!(status, 200);
    let (status, t) = served.get_json("/api/jobs/web-oom/timeline?group=host");
    assert_eq!(status, 200);
    assert_eq!(t["grouped_by_host"], true, "{t}");
    assert!(t["lanes"].as_array().is_some_and(|l| !l.is_empty()), "{t}");

    // Snapshots: an unknown sha is a 404, a malformed one a 400.
    let (status, _) = served.get(&format!("/jobs/web-oom/snapshots/{}", "0".repeat(64)));
    assert_eq!(status, 404);
    let (status, _) = served.get("/jobs/web-oom/snapshots/not-a-sha");
    assert_eq!(status, 400);
}
