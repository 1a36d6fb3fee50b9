//! Tests of the job index against real tantivy indexes in temporary folders.

use super::*;
use std::collections::BTreeSet;

fn line(rank: Option<u32>, stream: Stream, seq: u64, capture_ns: i64, text: &str) -> IndexedLine {
    IndexedLine { rank, stream, seq, capture_ns, host: "node-a".to_string(), severity: "info".to_string(), bytes: text.as_bytes().to_vec() }
}

fn req(query: &str) -> SearchRequest {
    SearchRequest { query: query.to_string(), limit: 100, ..Default::default() }
}

fn keys(page: &SearchPage) -> Vec<(Option<u32>, u64)> {
    page.hits.iter().map(|h| (h.rank, h.seq)).collect()
}

/// Four ranks; rank r's line i is captured at 1000*i + r.
fn sample_index(dir: &Path) -> JobIndex {
    let idx = JobIndex::open_or_create(dir).expect("open index");
    let mut lines = Vec::new();
    for r in 0..4u32 {
        for i in 0..10u64 {
            let text = if i == 5 {
                format!("[rank{r}]:[E ProcessGroupNCCL.cpp:1420] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=11, OpType=ALLREDUCE)")
            } else {
                format!("step {i} loss 0.{r}")
            };
            lines.push(line(Some(r), Stream::Stderr, i, 1000 * i as i64 + i64::from(r), &text));
        }
    }
    lines.push(line(None, Stream::Stdout, 0, 2500, "torchrun: NCCL WARN launcher line"));
    idx.add(&lines).expect("add");
    idx.commit().expect("commit");
    idx
}

#[test]
fn half_the_cores_index_within_the_budget() {
    assert_eq!(indexing_threads(1), 1);
    assert_eq!(indexing_threads(2), 1, "two cores: one indexes, one parses and serves");
    assert_eq!(indexing_threads(4), 2);
    assert_eq!(indexing_threads(16), 3, "each thread keeps tantivy's minimum budget");
    assert!(WRITER_HEAP_BYTES / indexing_threads(128) >= THREAD_HEAP_MIN_BYTES);
}

#[test]
fn index_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<JobIndex>();
}

#[test]
fn lines_are_searchable_only_after_commit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let idx = JobIndex::open_or_create(dir.path()).expect("open");
    idx.add(&[line(Some(0), Stream::Stdout, 0, 1, "hello world")]).expect("add");
    assert_eq!(idx.search(&req("hello")).expect("search").total, 0);
    idx.commit().expect("commit");
    let page = idx.search(&req("hello")).expect("search");
    assert_eq!(page.total, 1);
    assert_eq!(page.hits[0].bytes, b"hello world");
    assert_eq!(idx.num_lines(), 1);
}

#[test]
fn rank_stream_and_time_filters() {
    let dir = tempfile::tempdir().expect("tempdir");
    let idx = sample_index(dir.path());
    assert_eq!(idx.num_lines(), 41);

    let mut q = req("");
    q.rank = Some(2);
    let page = idx.search(&q).expect("search");
    assert_eq!(page.total, 10);
    assert!(page.hits.iter().all(|h| h.rank == Some(2)));

    let mut q = req("");
    q.stream = Some(Stream::Stdout);
    assert_eq!(keys(&idx.search(&q).expect("search")), vec![(None, 0)]);

    // Per-rank windows: rank 0 sees captures 2000..=4000, rank 3 sees 7003..=7003, the no-rank
    // line is in its window; ranks 1 and 2 are absent and so excluded.
    let mut q = req("");
    let windows = BTreeMap::from([(Some(0), (2000, 4000)), (Some(3), (7003, 7003)), (None, (0, 9999))]);
    q.capture_windows = Some(windows);
    let page = idx.search(&q).expect("search");
    assert_eq!(keys(&page), vec![(Some(0), 2), (None, 0), (Some(0), 3), (Some(0), 4), (Some(3), 7)]);
    assert_eq!(page.total, 5);
    let captures: Vec<i64> = page.hits.iter().map(|h| h.capture_ns).collect();
    assert!(captures.windows(2).all(|w| w[0] <= w[1]), "ordered by capture time");

    let mut q = req("loss");
    q.rank = Some(1);
    q.capture_windows = Some(BTreeMap::from([(Some(1), (0, 3001))]));
    assert_eq!(keys(&idx.search(&q).expect("search")), vec![(Some(1), 0), (Some(1), 1), (Some(1), 2), (Some(1), 3)]);
}

#[test]
fn severity_filters() {
    let dir = tempfile::tempdir().expect("tempdir");
    let idx = JobIndex::open_or_create(dir.path()).expect("open");
    let mut err = line(Some(1), Stream::Stderr, 0, 10, "Watchdog caught collective operation timeout");
    err.severity = "error".to_string();
    idx.add(&[err.clone(), line(Some(1), Stream::Stderr, 1, 11, "Watchdog is fine")]).expect("add");
    idx.commit().expect("commit");
    let mut q = req("watchdog");
    q.severity = Some("error".to_string());
    assert_eq!(idx.search(&q).expect("search").hits, vec![err]);
    q.severity = Some("warning".to_string());
    assert_eq!(idx.search(&q).expect("search").total, 0);
}

#[test]
fn tokens_of_nccl_lines_and_phrases_are_searchable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let idx = sample_index(dir.path());
    for query in ["NCCL", "nccl", "WARN", "SeqNum=11", "ProcessGroupNCCL.cpp", "\"collective operation timeout\""] {
        assert!(idx.search(&req(query)).expect(query).total > 0, "{query} finds nothing");
    }
    assert_eq!(idx.search(&req("\"collective operation timeout\"")).expect("phrase").total, 4);
    assert_eq!(idx.search(&req("\"timeout operation collective\"")).expect("phrase").total, 0);
    assert_eq!(idx.search(&req("SeqNum=12")).expect("seqnum").total, 0);
    // Terms are ANDed by default, OR is explicit.
    assert_eq!(idx.search(&req("NCCL launcher")).expect("and").total, 1);
    assert_eq!(idx.search(&req("launcher OR watchdog")).expect("or").total, 5);
}

#[test]
fn paging_with_the_cursor_covers_every_hit_exactly_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let idx = JobIndex::open_or_create(dir.path()).expect("open");
    // Several commits make several segments; equal capture times exercise the tie-break.
    for batch in 0..5u64 {
        let lines: Vec<_> = (0..4u32)
            .flat_map(|r| (0..25u64).map(move |i| (r, batch * 25 + i)))
            .map(|(r, seq)| line(Some(r), Stream::Stdout, seq, (seq / 3) as i64, "tick"))
            .collect();
        idx.add(&lines).expect("add");
        idx.commit().expect("commit");
    }
    let mut q = req("tick");
    q.limit = 7;
    let mut seen = Vec::new();
    let mut pages = 0;
    loop {
        let page = idx.search(&q).expect("search");
        assert_eq!(page.total, 500);
        assert!(page.hits.len() <= 7);
        seen.extend(page.hits.iter().map(|h| (h.capture_ns, h.rank, h.seq)));
        pages += 1;
        match page.next_cursor {
            Some(c) => q.cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(pages, 72);
    assert_eq!(seen.len(), 500);
    let mut sorted = seen.clone();
    sorted.sort();
    assert_eq!(seen, sorted, "pages come in sort order");
    assert_eq!(seen.iter().collect::<BTreeSet<_>>().len(), 500, "no hit twice");

    let mut q = req("tick");
    q.limit = 0;
    let page = idx.search(&q).expect("count only");
    assert_eq!((page.total, page.hits.len(), page.next_cursor), (500, 0, None));
    q.cursor = Some("not a cursor".to_string());
    assert!(matches!(idx.search(&q), Err(IndexError::BadCursor(_))));
}

#[test]
fn descending_pages_are_the_ascending_order_reversed_and_keep_their_cursor() {
    let dir = tempfile::tempdir().expect("tempdir");
    let idx = JobIndex::open_or_create(dir.path()).expect("open");
    for batch in 0..3u64 {
        let lines: Vec<_> = (0..3u32)
            .flat_map(|r| (0..20u64).map(move |i| (r, batch * 20 + i)))
            .map(|(r, seq)| line(Some(r), Stream::Stdout, seq, (seq / 4) as i64, "tick"))
            .collect();
        idx.add(&lines).expect("add");
        idx.commit().expect("commit");
    }
    let all = |descending: bool| {
        let mut q = req("tick");
        q.limit = 11;
        q.descending = descending;
        let mut seen = Vec::new();
        loop {
            let page = idx.search(&q).expect("search");
            assert_eq!(page.total, 180);
            seen.extend(page.hits.iter().map(|h| (h.capture_ns, h.rank, h.seq)));
            match page.next_cursor {
                Some(c) => q.cursor = Some(c),
                None => return seen,
            }
        }
    };
    let mut newest_first = all(true);
    assert_eq!(newest_first.first().map(|h| h.0), Some(14), "the newest line comes first");
    newest_first.reverse();
    assert_eq!(newest_first, all(false));
    // A cursor continues only in the order it was made in.
    let mut q = req("tick");
    q.limit = 5;
    let cursor = idx.search(&q).expect("ascending").next_cursor;
    q.cursor = cursor;
    q.descending = true;
    assert!(matches!(idx.search(&q), Err(IndexError::BadCursor(_))));
}

#[test]
fn invalid_utf8_round_trips_exactly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let idx = JobIndex::open_or_create(dir.path()).expect("open");
    let mut l = line(Some(0), Stream::Stdout, 0, 5, "");
    l.bytes = b"caf\xe9 \xff\xfe broken NCCL".to_vec();
    idx.add(&[l.clone(), line(Some(0), Stream::Stdout, 1, 6, "plain caf\u{e9}")]).expect("add");
    idx.commit().expect("commit");
    let page = idx.search(&req("broken")).expect("search");
    assert_eq!(page.hits, vec![l.clone()]);
    let page = idx.search(&req("plain")).expect("search");
    assert_eq!(page.hits[0].bytes, "plain caf\u{e9}".as_bytes());
    let mut replayed = Vec::new();
    idx.for_each_line(|l| replayed.push(l)).expect("replay");
    assert_eq!(replayed[0], l);
}

#[test]
fn a_malformed_query_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().expect("tempdir");
    let idx = sample_index(dir.path());
    for bad in ["text:\"unterminated", "nosuchfield:foo", "(a AND"] {
        match idx.search(&req(bad)) {
            Err(IndexError::BadQuery(msg)) => assert!(!msg.is_empty()),
            other => panic!("{bad}: expected BadQuery, got {other:?}"),
        }
    }
    assert!(matches!(idx.count_by_rank("nosuchfield:x"), Err(IndexError::BadQuery(_))));
}

#[test]
fn reopening_sees_committed_lines_and_stream_positions() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let idx = sample_index(dir.path());
        idx.add(&[line(Some(0), Stream::Stdout, 41, 1, "more")]).expect("add");
        idx.commit().expect("commit");
        idx.add(&[line(Some(0), Stream::Stdout, 99, 1, "never committed")]).expect("add");
    }
    let idx = JobIndex::open_or_create(dir.path()).expect("reopen");
    assert_eq!(idx.num_lines(), 42);
    assert_eq!(idx.search(&req("committed")).expect("search").total, 0);
    let pos = idx.stream_positions().expect("positions");
    let mut want = BTreeMap::from([((None, Stream::Stdout), 1), ((Some(0), Stream::Stdout), 42)]);
    for r in 0..4 {
        want.insert((Some(r), Stream::Stderr), 10);
    }
    assert_eq!(pos, want);
}

#[test]
fn close_commits_what_is_buffered_and_releases_the_lock() {
    let dir = tempfile::tempdir().expect("tempdir");
    let idx = JobIndex::open_or_create(dir.path()).expect("open");
    idx.add(&[line(Some(2), Stream::Stderr, 0, 1, "last words")]).expect("add");
    idx.close().expect("close");
    let idx = JobIndex::open_or_create(dir.path()).expect("reopen after close");
    assert_eq!(idx.search(&req("\"last words\"")).expect("search").total, 1);
}

#[test]
fn a_second_writer_on_the_same_folder_is_refused_clearly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _first = JobIndex::open_or_create(dir.path()).expect("open");
    match JobIndex::open_or_create(dir.path()) {
        Err(e @ IndexError::Locked(_)) => assert!(e.to_string().contains("locked")),
        other => panic!("expected Locked, got {other:?}"),
    }
}

#[test]
fn count_by_rank_groups_matches() {
    let dir = tempfile::tempdir().expect("tempdir");
    let idx = sample_index(dir.path());
    let counts = idx.count_by_rank("watchdog").expect("count");
    assert_eq!(counts, (0..4).map(|r| (Some(r), 1)).collect());
    let all = idx.count_by_rank("").expect("count all");
    assert_eq!(all.get(&None), Some(&1));
    assert_eq!(all.get(&Some(3)), Some(&10));
    assert!(idx.count_by_rank("nothing_matches_this").expect("count").is_empty());
}

#[test]
fn for_each_line_replays_in_rank_stream_seq_order_across_chunks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let idx = JobIndex::open_or_create(dir.path()).expect("open");
    let n = REPLAY_CHUNK as u64 * 2 + 17;
    // Added out of order and over several commits (segments).
    for part in [1u64, 0, 2] {
        let lines: Vec<_> = (0..n)
            .filter(|s| s % 3 == part)
            .flat_map(|s| [line(Some(1), Stream::Stdout, s, 0, "a"), line(Some(0), Stream::Stderr, s, 0, "b"), line(Some(0), Stream::Stdout, s + 1000, 0, "c")])
            .collect();
        idx.add(&lines).expect("add");
        idx.commit().expect("commit");
    }
    idx.add(&[line(None, Stream::File, 3, 0, "d")]).expect("add");
    idx.commit().expect("commit");
    let mut got = Vec::new();
    idx.for_each_line(|l| got.push((l.rank, l.stream, l.seq))).expect("replay");
    assert_eq!(got.len() as u64, 3 * n + 1);
    let mut sorted = got.clone();
    sorted.sort();
    assert_eq!(got, sorted);
    assert_eq!(got[0], (None, Stream::File, 3));
    assert_eq!(got[1], (Some(0), Stream::Stdout, 1000));
}

#[test]
fn aligned_order_host_and_line_filters() {
    let dir = tempfile::tempdir().expect("tempdir");
    let idx = sample_index(dir.path());
    // Rank 3's clock runs 2500 ns ahead: its line 5 (capture 5003) is at aligned 2503, before
    // rank 0's line 3 (capture 3000). Order and cursor follow aligned time.
    let mut q = req("");
    q.order_offsets = Some(BTreeMap::from([(Some(3), -2500)]));
    q.limit = 7;
    let page = idx.search(&q).expect("search");
    let first: Vec<_> = keys(&page);
    // Rank 3's first lines are aligned before everyone's start.
    assert_eq!(&first[..5], &[(Some(3), 0), (Some(3), 1), (Some(3), 2), (Some(0), 0), (Some(1), 0)]);
    let mut all = first.clone();
    let mut cursor = page.next_cursor.clone();
    while let Some(c) = cursor {
        let mut q2 = q.clone();
        q2.cursor = Some(c);
        let p = idx.search(&q2).expect("page");
        all.extend(keys(&p));
        cursor = p.next_cursor;
    }
    assert_eq!(all.len(), 41, "paging in aligned order visits every line once");
    let pos = |k| all.iter().position(|x| *x == k).expect("present");
    assert!(pos((Some(3), 5)) < pos((Some(0), 3)));

    let mut q = req("");
    q.host = Some("node-a".into());
    assert_eq!(idx.search(&q).expect("search").total, 41);
    q.host = Some("node-b".into());
    assert_eq!(idx.search(&q).expect("search").total, 0);

    let mut q = req("");
    q.only_lines = Some(vec![(Some(1), Stream::Stderr, 5), (None, Stream::Stdout, 0)]);
    assert_eq!(keys(&idx.search(&q).expect("search")), vec![(None, 0), (Some(1), 5)]);
    q.only_lines = Some(Vec::new());
    assert_eq!(idx.search(&q).expect("search").total, 0);
}

/// The schema of indexes written before capture time stopped being an indexed term.
fn schema_with_indexed_capture_time() -> tantivy::schema::Schema {
    use tantivy::schema::{NumericOptions, FAST, INDEXED, STORED, STRING, TEXT};
    let all_num = NumericOptions::default().set_indexed().set_fast().set_stored();
    let mut b = tantivy::schema::Schema::builder();
    b.add_text_field("text", TEXT | STORED);
    b.add_bytes_field("raw", STORED);
    b.add_u64_field("rank", all_num.clone());
    b.add_text_field("stream", STRING | STORED);
    b.add_u64_field("origin", INDEXED | FAST);
    b.add_u64_field("seq", all_num.clone());
    b.add_i64_field("capture_ns", all_num);
    b.add_i64_field("printed_ns", STORED);
    b.add_text_field("host", STRING | STORED);
    b.add_text_field("kind", STRING | STORED);
    b.add_text_field("severity", STRING | STORED);
    b.build()
}

#[test]
fn an_index_written_with_the_earlier_schema_opens_and_answers_time_windows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let old = tantivy::Index::create_in_dir(dir.path(), schema_with_indexed_capture_time()).expect("create an old index");
    drop(old);
    let idx = JobIndex::open_or_create(dir.path()).expect("open the old index");
    idx.add(&[line(Some(0), Stream::Stdout, 0, 100, "early"), line(Some(0), Stream::Stdout, 1, 200, "late")]).expect("add");
    idx.commit().expect("commit");
    let mut q = req("");
    q.capture_windows = Some([(Some(0), (150, 250))].into_iter().collect());
    let page = idx.search(&q).expect("search");
    assert_eq!(keys(&page), vec![(Some(0), 1)]);
    assert_eq!(page.hits[0].capture_ns, 200);
}

#[test]
fn lines_written_with_a_kind_and_a_printed_time_read_back_as_lines() {
    let dir = tempfile::tempdir().expect("tempdir");
    let schema = schema_with_indexed_capture_time();
    let old = tantivy::Index::create_in_dir(dir.path(), schema.clone()).expect("create an old index");
    let field = |name: &str| schema.get_field(name).expect("old field");
    let mut doc = TantivyDocument::default();
    doc.add_text(field("text"), "Watchdog caught collective operation timeout");
    doc.add_u64(field("rank"), 3);
    doc.add_text(field("stream"), "stderr");
    doc.add_u64(field("origin"), schema::origin(Some(3), Stream::Stderr));
    doc.add_u64(field("seq"), 7);
    doc.add_i64(field("capture_ns"), 100);
    doc.add_i64(field("printed_ns"), 99);
    doc.add_text(field("host"), "node-a");
    doc.add_text(field("kind"), "line");
    doc.add_text(field("severity"), "error");
    let mut writer: tantivy::IndexWriter = old.writer(15_000_000).expect("old writer");
    writer.add_document(doc).expect("add an old line");
    writer.commit().expect("commit");
    drop(writer);
    drop(old);
    let idx = JobIndex::open_or_create(dir.path()).expect("open the old index");
    let mut q = req("watchdog");
    q.severity = Some("error".to_string());
    let page = idx.search(&q).expect("search");
    let mut expected = line(Some(3), Stream::Stderr, 7, 100, "Watchdog caught collective operation timeout");
    expected.severity = "error".to_string();
    assert_eq!(page.hits, vec![expected]);
}

#[test]
fn a_folder_holding_some_other_index_is_refused_with_the_reason() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut b = tantivy::schema::Schema::builder();
    b.add_text_field("body", tantivy::schema::TEXT);
    drop(tantivy::Index::create_in_dir(dir.path(), b.build()).expect("create"));
    let err = JobIndex::open_or_create(dir.path()).expect_err("not ours");
    assert!(err.to_string().contains("not a coroner line index"), "{err}");
}

#[test]
fn new_indexes_do_not_index_capture_time() {
    let (schema, f) = schema::build_schema();
    let entry = schema.get_field_entry(f.capture_ns);
    assert!(entry.is_fast() && !entry.is_indexed());
}

#[test]
fn a_query_over_its_parse_budget_is_refused_before_the_grammar_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let idx = sample_index(dir.path());
    let attack = format!("{}foo{}", "(".repeat(100), ")".repeat(100));
    let started = std::time::Instant::now();
    match idx.search(&req(&attack)) {
        Err(IndexError::QueryRefused(r)) => assert_eq!(r.limit, "query_depth"),
        other => panic!("{other:?}"),
    }
    match idx.count_by_rank(&attack) {
        Err(IndexError::QueryRefused(r)) => assert_eq!(r.limit, "query_depth"),
        other => panic!("{other:?}"),
    }
    // The grammar would take longer than the age of the universe; the check takes microseconds.
    assert!(started.elapsed() < std::time::Duration::from_secs(1));
}

#[test]
fn a_search_stops_when_its_budget_is_spent_or_its_caller_raises_stop() {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    let dir = tempfile::tempdir().expect("tempdir");
    let idx = JobIndex::open_or_create(dir.path()).expect("open index");
    let lines: Vec<IndexedLine> = (0..5000u64).map(|i| line(Some(0), Stream::Stdout, i, i as i64, "step loss")).collect();
    idx.add(&lines).expect("add");
    idx.commit().expect("commit");
    let limits = QueryLimits::default();
    // Within budget: the whole answer.
    let ok = Budget::new(limits, Some(std::time::Duration::from_secs(60)), 10_000, Arc::default());
    assert_eq!(idx.search_within(&req("step"), &ok, false).expect("within budget").total, 5000);
    // More matches than the line budget: an error, not a partial count.
    let few = Budget::new(limits, None, 2000, Arc::default());
    assert!(matches!(idx.search_within(&req("step"), &few, false), Err(IndexError::OverBudget(m)) if m.contains("2000 lines")));
    let few = Budget::new(limits, None, 2000, Arc::default());
    assert!(matches!(idx.count_by_rank_within("", &few, true), Err(IndexError::OverBudget(_))));
    // A deadline already passed.
    let late = Budget::new(limits, Some(std::time::Duration::ZERO), u64::MAX, Arc::default());
    assert!(matches!(idx.search_within(&req("step"), &late, true), Err(IndexError::OverBudget(m)) if m.contains("out of time")));
    // The caller went away.
    let stop = Arc::new(AtomicBool::new(true));
    let gone = Budget::new(limits, None, u64::MAX, stop);
    assert!(matches!(idx.search_within(&req("step"), &gone, false), Err(IndexError::Cancelled)));
}

#[test]
fn a_closed_writer_reopens_on_the_next_lines_and_searches_never_need_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let idx = sample_index(dir.path());
    assert!(idx.has_writer());
    idx.close_writer().expect("close the writer");
    assert!(!idx.has_writer());
    assert_eq!(idx.search(&req("watchdog")).expect("search").total, 4);
    idx.add(&[line(Some(9), Stream::Stdout, 0, 1, "after the writer came back")]).expect("add reopens");
    idx.commit().expect("commit");
    assert!(idx.has_writer());
    assert_eq!(idx.search(&req("\"writer came back\"")).expect("search").total, 1);
    idx.close_writer().expect("close again");
    idx.close().expect("close without a writer");
}
