//! The job page in a real headless browser, driven over the DevTools protocol (`cdp.rs`), as the
//! issue's done-when says: a line printed by an agent appears on an open page (live tail), a
//! line's context (its rank and the ranks around it), a shared search URL reopening the same
//! results (and back/forward), the histogram and its zoom, and a 4,096-rank job page rendering.
//!
//! Figures (the tail's latency, the big page's render time) are printed; the assertions keep
//! generous margins, since CI's machine is small and loaded: they fail when the thing is broken
//! (the line never comes, the page never renders), not when the machine is slow. Without
//! chromium the tests say SKIPPED off CI and fail on CI (`web::chromium`).
//! `CORONER_SCREENSHOTS=DIR` keeps PNGs of the pages (docs/img was made so).

use crate::big_job;
use crate::cdp::{Browser, Tab};
use crate::served::TestServer;
use crate::web::chromium;
use coroner_tests::binary;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What "it never came" means on a loaded 2-core machine.
const LIMIT: Duration = Duration::from_secs(60);
/// A 4,096-rank page drawn later than this (debug build, loaded 2-core machine) has regressed;
/// the target, 2 s, is printed beside the figure.
const RENDER_LIMIT: Duration = Duration::from_secs(20);

fn screenshot(b: &mut Browser, tab: &Tab, name: &str) {
    if let Some(dir) = std::env::var_os("CORONER_SCREENSHOTS") {
        let path = PathBuf::from(dir).join(name);
        b.screenshot(tab, &path);
        eprintln!("screenshot: {}", path.display());
    }
}

/// Scrolls the element with `id` into view (for a screenshot of it).
fn show(b: &mut Browser, tab: &Tab, id: &str) {
    b.eval(tab, &format!("document.getElementById('{id}').scrollIntoView({{block: 'start'}}), true"));
}

#[test]
fn the_job_page_follows_the_job_explores_its_lines_and_shares_its_view() {
    let Some(browser) = chromium() else { return };
    let served = TestServer::start();
    let report = served.import("nccl2_hang_r1", "web-live");
    assert_eq!(report["first_failure"]["rank"], 1, "{report:#}");
    let page = format!("http://127.0.0.1:{}/jobs/web-live", served.http_port);
    let mut b = Browser::launch(&browser);
    let tab = b.open(&page, 1400, 1000);
    b.wait_for(&tab, "the live tail follows the job", "document.getElementById('tail-status').textContent === 'following'", LIMIT);

    // Live tail: a real agent prints a line; the page shows it.
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = format!("tail-marker-{}", std::process::id());
    let stamp = dir.path().join("printed_ns");
    let script = format!("date +%s%N > '{}'; echo '{marker} from rank 0'; sleep 3", stamp.display());
    let mut agent = Command::new(binary("coroner-agent"))
        .args(["run", "--job", "web-live", "--rank", "0", "--world-size", "2", "--server", &served.grpc_url, "--quiet"])
        .arg("--spool-dir")
        .arg(dir.path().join("spool"))
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start coroner-agent");
    b.wait_for(&tab, "the agent's line in the live tail", &format!("document.getElementById('tail').textContent.includes('{marker}')"), LIMIT);
    let seen = coroner_model::now_ns();
    let printed: i64 = std::fs::read_to_string(&stamp).expect("the script's stamp").trim().parse().expect("ns");
    let ms = (seen - printed) / 1_000_000;
    eprintln!("live tail: a line printed by an agent was on the open page {ms} ms later (target: 2,000 ms)");
    assert!(agent.wait().expect("the agent").success());
    // Shown once, with the host and rank it came from.
    let count = b.eval(&tab, &format!("document.getElementById('tail').textContent.split('{marker}').length - 1"));
    assert_eq!(count, 1, "the line is shown once");

    // Search: the URL holds it; the histogram counts every match in buckets.
    b.eval(&tab, "(() => { const f = document.getElementById('search'); f.elements.q.value = 'NCCL'; f.requestSubmit(); return true; })()");
    let (total, _) = b.wait_for(&tab, "search results", "document.getElementById('search-results').getAttribute('data-total')", LIMIT);
    let total: u64 = total.as_str().and_then(|t| t.parse().ok()).expect("a total");
    assert!(total > 0, "NCCL lines in the hang bundle");
    b.wait_for(&tab, "the URL holds the query", "location.search.includes('q=NCCL')", LIMIT);
    let (bars, _) = b.wait_for(&tab, "the histogram", "document.querySelectorAll('#hist-bars rect.bar').length", LIMIT);
    assert_eq!(bars, 60);
    let (_, hist) = served.get_json("/api/jobs/web-live/histogram?q=NCCL");
    let counted: u64 = hist["totals"].as_array().expect("totals").iter().map(|c| c.as_u64().unwrap_or(0)).sum::<u64>() + hist["outside"].as_u64().unwrap_or(0);
    assert_eq!(counted, total, "the histogram counts every match once: {hist}");
    let rows = b.eval(&tab, "Array.from(document.querySelectorAll('#hist-rows .hl')).map(e => e.textContent)");
    assert_eq!(rows, serde_json::json!(["rank 0", "rank 1"]), "a row per rank");

    // Context: click the first hit; its rank's lines and the other rank at the same moment.
    b.eval(&tab, "document.querySelector('#search-results .vrow').click(), true");
    b.wait_for(
        &tab,
        "the clicked line's context",
        "document.querySelector('#ctx-own tr.this') !== null && document.querySelectorAll('#ctx-own tr').length > 1",
        LIMIT,
    );
    let (peers, _) = b.wait_for(&tab, "the other rank at the same moment", "document.querySelectorAll('#context table.peer tr').length", LIMIT);
    assert!(peers.as_u64().unwrap_or(0) > 1, "the peer rank's lines around the moment");
    let (selected, _) = b.wait_for(&tab, "the URL names the line", "new URLSearchParams(location.search).get('line')", LIMIT);
    let own = b.eval(&tab, "document.querySelector('#ctx-own tr.this').textContent");
    show(&mut b, &tab, "search");
    screenshot(&mut b, &tab, "job-search-context.png");

    // Zoom by dragging across the histogram's first buckets: since/until go to the URL.
    let before = b.eval(&tab, "location.href");
    b.eval(&tab, "(() => { const s = document.getElementById('hist-bars'); const at = (t, x) => s.dispatchEvent(new MouseEvent(t, {clientX: s.getBoundingClientRect().left + x, clientY: s.getBoundingClientRect().top + 30, bubbles: true})); at('mousedown', 2); at('mouseup', 350); return true; })()");
    b.wait_for(&tab, "the zoom in the URL", "location.search.includes('since=') && location.search.includes('until=')", LIMIT);
    let (zoomed, _) =
        b.wait_for(&tab, "zoomed results", "location.search.includes('since=') && document.getElementById('search-results').getAttribute('data-total')", LIMIT);
    let zoomed: u64 = zoomed.as_str().and_then(|t| t.parse().ok()).expect("a total");
    assert!(zoomed <= total, "a zoom narrows: {zoomed} of {total}");
    let shared = b.eval(&tab, "location.href").as_str().expect("a URL").to_string();

    // The shared link in a fresh tab: the same results, the same line's context.
    let other = b.open(&shared, 1400, 1000);
    let (again, _) = b.wait_for(&other, "the shared link's results", "document.getElementById('search-results').getAttribute('data-total')", LIMIT);
    assert_eq!(again.as_str().and_then(|t| t.parse::<u64>().ok()), Some(zoomed), "{shared}");
    let q = b.eval(&other, "document.getElementById('search').elements.q.value");
    assert_eq!(q, "NCCL");
    let (own_again, _) = b.wait_for(
        &other,
        "the shared link's context",
        "document.querySelector('#ctx-own tr.this') && document.querySelector('#ctx-own tr.this').textContent",
        LIMIT,
    );
    assert_eq!(own_again, own, "the same line ({selected})");

    // Back: the view before the zoom, results and all.
    b.front(&tab);
    b.eval(&tab, "history.back(), true");
    b.wait_for(
        &tab,
        "back to the unzoomed view",
        &format!("location.href === {before} && document.getElementById('search').elements.since.value === ''"),
        LIMIT,
    );
    let (back_total, _) =
        b.wait_for(&tab, "the unzoomed results", &format!("document.getElementById('search-results').getAttribute('data-total') === '{total}'"), LIMIT);
    assert_eq!(back_total, true);

    // Keys: / focuses the search, j moves the selection, Esc closes the context.
    b.eval(&tab, "document.activeElement.blur(), document.dispatchEvent(new KeyboardEvent('keydown', {key: '/'})), true");
    assert_eq!(b.eval(&tab, "document.activeElement.name"), "q");
    b.eval(&tab, "document.activeElement.blur(), document.dispatchEvent(new KeyboardEvent('keydown', {key: 'j'})), true");
    b.wait_for(&tab, "j selects a row", "document.querySelector('#search-results .vrow.selected') !== null", LIMIT);
    b.eval(&tab, "document.dispatchEvent(new KeyboardEvent('keydown', {key: 'Escape'})), true");
    b.wait_for(&tab, "Esc closes the context", "document.getElementById('context').hidden", LIMIT);

    b.eval(&tab, "window.scrollTo(0, 0), true");
    screenshot(&mut b, &tab, "job-page.png");
    show(&mut b, &tab, "tail-filters");
    screenshot(&mut b, &tab, "job-tail.png");
    let jobs = b.open(&format!("http://127.0.0.1:{}/", served.http_port), 1400, 500);
    b.wait_for(&jobs, "the jobs list", "document.querySelector('#jobs a') !== null", LIMIT);
    screenshot(&mut b, &jobs, "jobs-list.png");
}

/// What the page must show before it counts as drawn: the banner naming the culprit (rendered by
/// the server) and the timeline with its lanes in view painted (drawn by `job.js` from
/// `/api/jobs/<id>/timeline`). Answers the page's own clock (ms since navigation started) at the
/// next animation frame after both were there, so the figure includes a paint.
const DRAWN: &str = "document.getElementById('culprit') !== null && document.querySelector('#timeline-svg g.lane') !== null && \
    new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(Math.max(1, Math.round(performance.now()))))))";

/// A 4,096-rank job on 512 hosts, built through the server's ingest in bulk (a gRPC session per
/// rank over one channel, `big_job.rs`): its page is drawn (banner and timeline) in a figure printed beside the
/// 2 s target; the bound asserted only catches a page that never draws or has become far slower
/// (on CI's loaded 2-core machine, with a debug build). The DOM stays small: lanes and lists
/// draw only what is in view.
#[test]
fn a_4096_rank_job_page_renders_with_few_elements() {
    let Some(browser) = chromium() else { return };
    const WORLD: u32 = 4096;
    let served = TestServer::start();
    let started = Instant::now();
    big_job::ship(&served.grpc_url, "web-big", WORLD);
    eprintln!("4,096-rank job shipped by 4,096 sessions over one gRPC channel in {} ms", started.elapsed().as_millis());
    let culprit = big_job::culprit(WORLD);
    let deadline = Instant::now() + LIMIT;
    let report = loop {
        let r = served.report("web-big");
        if r["first_failure"]["rank"] == culprit || Instant::now() > deadline {
            break r;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(report["first_failure"]["rank"], culprit, "the OOM rank fails first: {}", report["first_failure"]);
    eprintln!("report naming rank {culprit} after {} ms", started.elapsed().as_millis());

    let mut b = Browser::launch(&browser);
    let page = format!("http://127.0.0.1:{}/jobs/web-big", served.http_port);
    // The browser's own start is not the page's render: a blank tab first, then the page.
    let tab = b.open("about:blank", 1400, 1000);
    let started = Instant::now();
    b.navigate(&tab, &page);
    let (in_page, _) = b.wait_for(&tab, "the page drawn (banner with the culprit, timeline lanes)", DRAWN, RENDER_LIMIT);
    let ms = started.elapsed().as_millis();
    let lanes = b.eval(&tab, "+document.getElementById('timeline-svg').getAttribute('data-lanes')");
    let painted = b.eval(&tab, "document.querySelectorAll('#timeline-svg g.lane').length");
    let elements = b.eval(&tab, "document.getElementsByTagName('*').length").as_u64().unwrap_or(u64::MAX);
    eprintln!(
        "4,096-rank job page: drawn (banner, timeline of {lanes} host lanes, {painted} painted) in {ms} ms seen from the test, {in_page} ms by the page's clock (target: 2,000 ms), {elements} elements"
    );
    assert!(ms < RENDER_LIMIT.as_millis(), "drawn in {ms} ms");
    assert_eq!(lanes, WORLD / big_job::RANKS_PER_HOST, "lanes are hosts");
    assert!(painted.as_u64().is_some_and(|n| n > 0 && n < 100), "only the lanes in view are painted: {painted}");
    // Per-rank DOM would be tens of thousands of elements; the page draws what is in view.
    assert!(elements < 5_000, "{elements} elements");
    let named = b.eval(&tab, "document.getElementById('culprit').textContent");
    assert_eq!(named, format!("rank {culprit}"));

    // The histogram groups 4,096 ranks by host.
    b.eval(&tab, "(() => { const f = document.getElementById('search'); f.elements.q.value = 'Watchdog'; f.requestSubmit(); return true; })()");
    let (rows, _) = b.wait_for(&tab, "the histogram's rows", "document.querySelectorAll('#hist-rows .vrow').length", LIMIT);
    assert!(rows.as_u64().is_some_and(|n| n > 0 && n < 100), "only rows in view: {rows}");
    let (_, hist) = served.get_json("/api/jobs/web-big/histogram?q=Watchdog");
    assert_eq!(hist["grouped_by"], "host", "{}", &hist.to_string()[..200]);
    assert_eq!(hist["rows"].as_array().map(Vec::len), Some(512));
    let elements = b.eval(&tab, "document.getElementsByTagName('*').length").as_u64().unwrap_or(u64::MAX);
    assert!(elements < 5_000, "{elements} elements with the search's results and histogram");
    b.eval(&tab, "window.scrollTo(0, 0), true");
    screenshot(&mut b, &tab, "job-4096-ranks.png");
}

/// The page's new endpoints answer bad input with a 400 and the reason, an unknown job with a
/// 404, never a 500; their bounds hold.
#[test]
fn the_exploring_endpoints_answer_bad_requests_with_reasons() {
    let served = TestServer::start();
    served.import("nccl2_oom_r1", "web-bad");
    for (path, status, says) in [
        ("/api/jobs/web-bad/tail?rank=x", 400, "rank"),
        ("/api/jobs/web-bad/tail?stream=stdin", 400, "stream"),
        ("/api/jobs/no-such-job/tail", 404, "no job"),
        ("/api/jobs/web-bad/context?rank=1&stream=stderr", 400, "seq"),
        ("/api/jobs/web-bad/context?rank=1&stream=stderr&seq=0&n=51", 400, "context"),
        ("/api/jobs/web-bad/context?rank=1&stream=stderr&seq=0&peers=0-20", 400, "peers"),
        ("/api/jobs/web-bad/context?rank=1&stream=stderr&seq=999999", 404, "no line"),
        ("/api/jobs/web-bad/histogram?buckets=0", 400, "buckets"),
        ("/api/jobs/web-bad/histogram?buckets=501", 400, "buckets"),
        ("/api/jobs/web-bad/histogram?group=gpu", 400, "group"),
        ("/api/jobs/web-bad/histogram?q=%22unclosed", 400, "bad query"),
        ("/api/jobs/web-bad/histogram?since=2&until=1", 400, "ends before"),
    ] {
        let (got, body) = served.get_json(path);
        assert_eq!(got, status, "{path}: {body}");
        assert!(body["error"].as_str().is_some_and(|e| e.contains(says)), "{path}: {body}");
    }
    for (path, says) in [("/?limit=0", "limit"), ("/?since=yesterday", "since"), ("/?after_ns=5", "after_id"), ("/suspects?since=x", "since")] {
        let (got, body) = served.get(path);
        assert_eq!(got, 400, "{path}: {body}");
        assert!(body.contains(says), "{path}: {body}");
    }
    // And good input: the context of the culprit's first stderr line, the histogram's rows.
    let (got, ctx) = served.get_json("/api/jobs/web-bad/context?rank=1&stream=stderr&seq=0&n=3");
    assert_eq!(got, 200, "{ctx}");
    assert_eq!(ctx["line"]["seq"], 0);
    assert!(ctx["own"].as_array().is_some_and(|o| !o.is_empty() && o.len() <= 4), "{ctx}");
    assert!(ctx["peers"].as_array().is_some_and(|p| p.iter().any(|x| x["rank"] == 0)), "{ctx}");
    let (got, h) = served.get_json("/api/jobs/web-bad/histogram?q=OutOfMemoryError&buckets=10");
    assert_eq!(got, 200, "{h}");
    assert_eq!(h["rows"][0]["label"], "rank 1", "{h}");
    assert_eq!(h["totals"].as_array().map(Vec::len), Some(10));
    let (_, jobs) = served.get("/?limit=1");
    assert!(jobs.contains("/jobs/web-bad"), "{jobs}");
}
