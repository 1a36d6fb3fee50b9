//! coroner's full-text index of every captured log line: one tantivy index per job.
//!
//! Every line is a document (its text, exact bytes when they are not UTF-8, rank, stream, seq,
//! capture time, host, severity). What the analysis learns of a line later (its event kind, its
//! printed time) is not stored (see `schema.rs`): a search by event kind names its lines
//! (`SearchRequest::only_lines`). The API is blocking: tantivy commits and searches are CPU and
//! disk work, so coronerd calls it from `spawn_blocking`.
//!
//! Invariants: the index never changes a line's bytes (`IndexedLine::bytes` round-trips exactly);
//! it stores capture times only, never aligned time, so a time filter arrives as per-rank capture
//! windows; results are paged with a keyset cursor and never loaded whole.

mod budget;
mod collect;
mod histogram;
mod limits;
mod schema;
mod search;

pub use budget::Budget;
pub use histogram::{Buckets, Histogram, MAX_BUCKETS};
pub use limits::{check_query, QueryLimits, QueryRefused};
pub use schema::{IndexedLine, LineRef};
pub use search::{SearchPage, SearchRequest, MAX_PAGE_SIZE};

use collect::{OriginStatsCollector, PageCollector, SeqChunkCollector};
use coroner_model::Stream;
use schema::{build_schema, from_document, to_document, unpack_origin, Fields};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};
use tantivy::directory::error::LockError;
use tantivy::directory::MmapDirectory;
use tantivy::indexer::IndexWriterOptions;
use tantivy::indexer::UserOperation;
use tantivy::query::{AllQuery, TermQuery};
use tantivy::schema::IndexRecordOption;
use tantivy::{Executor, Index, IndexReader, IndexWriter, ReloadPolicy, Searcher, TantivyDocument, TantivyError, Term};

/// The writer's memory budget, shared by its indexing threads.
const WRITER_HEAP_BYTES: usize = 50_000_000;
/// The least budget tantivy lets one indexing thread have.
const THREAD_HEAP_MIN_BYTES: usize = 15_000_000;
/// Documents handed to the indexing threads at once (small next to a thread's memory budget).
const ADD_BATCH: usize = 256;
/// How many lines `for_each_line` holds in memory at once.
const REPLAY_CHUNK: usize = 8192;

/// One pool of search threads, one per core, shared by every job's index: a search spreads its
/// segments over the cores it finds free (the 10M-line bench job's p99 went from 71 to 49 ms on
/// 2 cores), and a server holding many jobs does not start threads per job.
fn search_executor() -> Executor {
    static POOL: OnceLock<Executor> = OnceLock::new();
    POOL.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        // Should the threads not start, searches run on the caller's thread, as before.
        Executor::multi_thread(cores, "coroner-search-").unwrap_or(Executor::SingleThread)
    })
    .clone()
}

/// Why an index operation failed.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("cannot create the index folder {path}: {source} (check the path and permissions)")]
    CreateDir { path: PathBuf, source: std::io::Error },
    #[error("cannot open the index at {path}: {source} (check the path and permissions, or move a damaged index away)")]
    Open { path: PathBuf, source: TantivyError },
    #[error("the index at {0} is locked by another writer (is another coronerd running on this data dir?)")]
    Locked(PathBuf),
    #[error("bad query: {0}")]
    BadQuery(String),
    /// The query is over its parse budget (`limits.rs`); it never reached the grammar.
    #[error("{0}")]
    QueryRefused(#[from] QueryRefused),
    /// The search ran out of its time or line budget (`budget.rs`).
    #[error("{0}")]
    OverBudget(String),
    #[error("the search was cancelled: its caller went away or the server is stopping")]
    Cancelled,
    #[error("bad cursor {0:?}: pass the next_cursor of the previous page unchanged")]
    BadCursor(String),
    #[error("the index holds a damaged line: {0} (rebuild the job's index from its sources)")]
    Corrupt(String),
    #[error("the index writer is unusable after a panic in another thread (restart the server)")]
    Poisoned,
    #[error("index operation failed: {0}")]
    Tantivy(#[from] TantivyError),
}

impl IndexError {
    /// Whether the index's storage failed rather than the request (its folder unreadable, a disk
    /// error, its lock held by a writer that is going away): a retry may succeed. Bad queries,
    /// budgets, damaged lines and a poisoned writer are not.
    pub fn is_unavailable(&self) -> bool {
        match self {
            IndexError::CreateDir { .. } | IndexError::Locked(_) => true,
            IndexError::Open { source, .. } | IndexError::Tantivy(source) => storage_failed(source),
            _ => false,
        }
    }
}

fn storage_failed(e: &TantivyError) -> bool {
    matches!(e, TantivyError::IoError(_) | TantivyError::OpenDirectoryError(_) | TantivyError::OpenReadError(_) | TantivyError::LockFailure(..))
}

/// One job's index: a writer behind a mutex and a reader reloaded on every commit.
///
/// The writer (its indexing threads, merge threads and buffers: ~7 threads) is opened with the
/// index and may be closed while the job is idle ([`JobIndex::close_writer`]); the next lines
/// open it again. Searches never need it.
pub struct JobIndex {
    dir: PathBuf,
    index: Index,
    fields: Fields,
    writer: Mutex<Option<IndexWriter>>,
    reader: IndexReader,
}

impl std::fmt::Debug for JobIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobIndex").field("dir", &self.dir).finish_non_exhaustive()
    }
}

impl JobIndex {
    /// Opens the index in `dir`, creating the folder and an empty index when there is none.
    /// Fails with [`IndexError::Locked`] when another writer holds the folder.
    pub fn open_or_create(dir: &Path) -> Result<JobIndex, IndexError> {
        let open_err = |source| IndexError::Open { path: dir.to_path_buf(), source };
        std::fs::create_dir_all(dir).map_err(|source| IndexError::CreateDir { path: dir.to_path_buf(), source })?;
        let directory = MmapDirectory::open(dir).map_err(|e| open_err(e.into()))?;
        let exists = Index::exists(&directory).map_err(|e| open_err(e.into()))?;
        let (index, fields) = if exists {
            // An index keeps the schema it was created with: take its fields by name.
            let index = Index::open(directory).map_err(open_err)?;
            let fields = Fields::resolve(&index.schema()).map_err(|why| open_err(TantivyError::SchemaError(format!("not a coroner line index: {why}"))))?;
            (index, fields)
        } else {
            let (schema, fields) = build_schema();
            (Index::create(directory, schema, Default::default()).map_err(open_err)?, fields)
        };
        let mut index = index;
        index.set_executor(search_executor());
        let writer = open_writer(&index, dir)?;
        let reader = index.reader_builder().reload_policy(ReloadPolicy::Manual).try_into().map_err(open_err)?;
        Ok(JobIndex { dir: dir.to_path_buf(), index, fields, writer: Mutex::new(Some(writer)), reader })
    }

    /// The folder the index lives in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Runs `f` with the writer, opened again if it was closed.
    fn with_writer<T>(&self, f: impl FnOnce(&mut IndexWriter) -> Result<T, IndexError>) -> Result<T, IndexError> {
        let mut guard: MutexGuard<'_, Option<IndexWriter>> = self.writer.lock().map_err(|_| IndexError::Poisoned)?;
        let writer = match guard.as_mut() {
            Some(w) => w,
            None => guard.insert(open_writer(&self.index, &self.dir)?),
        };
        f(writer)
    }

    /// Whether the writer is open (its threads running).
    pub fn has_writer(&self) -> bool {
        self.writer.lock().map(|w| w.is_some()).unwrap_or(false)
    }

    /// Commits what is buffered and closes the writer, stopping its threads; the next
    /// [`JobIndex::add`] opens it again. Blocks while a commit or merge runs.
    pub fn close_writer(&self) -> Result<(), IndexError> {
        let mut guard = self.writer.lock().map_err(|_| IndexError::Poisoned)?;
        if let Some(mut writer) = guard.take() {
            writer.commit()?;
            writer.wait_merging_threads()?;
            self.reader.reload()?;
        }
        Ok(())
    }

    /// Buffers lines for the next commit; they are neither durable nor searchable before it.
    pub fn add(&self, lines: &[IndexedLine]) -> Result<(), IndexError> {
        self.add_refs(lines.iter().map(IndexedLine::as_ref))
    }

    /// [`JobIndex::add`] for borrowed lines.
    pub fn add_refs<'a>(&self, lines: impl IntoIterator<Item = LineRef<'a>>) -> Result<(), IndexError> {
        self.with_writer(|writer| {
            // Documents go to the indexing threads in batches: one channel message and at most
            // one wake-up per batch instead of per line.
            let mut batch = Vec::with_capacity(ADD_BATCH);
            for line in lines {
                batch.push(UserOperation::Add(to_document(&self.fields, line)));
                if batch.len() == ADD_BATCH {
                    writer.run(std::mem::replace(&mut batch, Vec::with_capacity(ADD_BATCH)))?;
                }
            }
            writer.run(batch)?;
            Ok(())
        })
    }

    /// Makes every added line durable, and searchable once this returns.
    pub fn commit(&self) -> Result<(), IndexError> {
        self.with_writer(|writer| {
            writer.commit()?;
            Ok(())
        })?;
        self.reader.reload()?;
        Ok(())
    }

    /// One page of the lines matching `q`, in (capture_ns, rank, stream, seq) order, or in
    /// (capture_ns + rank offset, rank, stream, seq) order when `q.order_offsets` is set;
    /// reversed when `q.descending`.
    /// Within the default query limits and no time or line budget.
    pub fn search(&self, q: &SearchRequest) -> Result<SearchPage, IndexError> {
        self.search_within(q, &Budget::default(), true)
    }

    /// [`JobIndex::search`] within `budget`; `parallel`: spread the segments over the shared
    /// search threads (only when no other search waits for them), else search on this thread.
    pub fn search_within(&self, q: &SearchRequest, budget: &Budget, parallel: bool) -> Result<SearchPage, IndexError> {
        let limit = q.limit.min(MAX_PAGE_SIZE);
        let after = q.cursor.as_deref().map(|c| search::decode_cursor(c, q.descending)).transpose()?;
        let query = search::build_query(&self.index, &self.fields, q, &budget.limits)?;
        let collector = PageCollector {
            after,
            // One more than a page tells whether another page follows.
            limit: if limit == 0 { 0 } else { limit + 1 },
            windows: search::windows_by_rank_key(q),
            offsets: search::offsets_by_rank_key(q),
            descending: q.descending,
        };
        let searcher = self.reader.searcher();
        let (total, mut top) = run(&searcher, query.as_ref(), collector, budget, parallel)?;
        let next_cursor = if top.len() > limit {
            top.truncate(limit);
            top.last().map(|(key, _)| search::encode_cursor(*key, q.descending))
        } else {
            None
        };
        let hits = top.iter().map(|(_, addr)| self.load(&searcher, *addr)).collect::<Result<Vec<_>, _>>()?;
        Ok(SearchPage { hits, total, next_cursor })
    }

    fn load(&self, searcher: &Searcher, addr: tantivy::DocAddress) -> Result<IndexedLine, IndexError> {
        let doc: TantivyDocument = searcher.doc(addr)?;
        from_document(&self.fields, &doc)
    }

    /// How many lines match `query` (tantivy syntax; empty = all) per rank; `None` = no rank.
    pub fn count_by_rank(&self, query: &str) -> Result<BTreeMap<Option<u32>, u64>, IndexError> {
        self.count_by_rank_within(query, &Budget::default(), true)
    }

    /// [`JobIndex::count_by_rank`] within `budget` (`parallel` as in [`JobIndex::search_within`]).
    pub fn count_by_rank_within(&self, query: &str, budget: &Budget, parallel: bool) -> Result<BTreeMap<Option<u32>, u64>, IndexError> {
        let query = search::parse_text_query(&self.index, &self.fields, query, &budget.limits)?;
        let stats = run(&self.reader.searcher(), query.as_ref(), OriginStatsCollector, budget, parallel)?;
        let mut out = BTreeMap::new();
        for (origin, s) in stats {
            *out.entry(search::rank_of_origin(origin)).or_insert(0) += s.count;
        }
        Ok(out)
    }

    /// How many lines match `q` per rank and time bucket (`histogram.rs`): the request's filters
    /// and capture windows hold, its `order_offsets` put each line on the aligned clock; its
    /// limit and cursor are ignored. At most [`MAX_BUCKETS`] buckets.
    pub fn histogram_within(&self, q: &SearchRequest, buckets: Buckets, budget: &Budget, parallel: bool) -> Result<Histogram, IndexError> {
        if buckets.count == 0 || buckets.count > MAX_BUCKETS || buckets.width_ns <= 0 {
            return Err(IndexError::BadQuery(format!(
                "a histogram has 1 to {MAX_BUCKETS} buckets of a positive width (asked: {} of {} ns)",
                buckets.count, buckets.width_ns
            )));
        }
        let query = search::build_query(&self.index, &self.fields, q, &budget.limits)?;
        let collector = histogram::HistogramCollector { buckets, windows: search::windows_by_rank_key(q), offsets: search::offsets_by_rank_key(q) };
        Ok(histogram::by_rank(run(&self.reader.searcher(), query.as_ref(), collector, budget, parallel)?))
    }

    /// Highest committed seq + 1 per (rank, stream): where an agent resumes.
    pub fn stream_positions(&self) -> Result<BTreeMap<(Option<u32>, Stream), u64>, IndexError> {
        let stats = self.reader.searcher().search(&AllQuery, &OriginStatsCollector)?;
        Ok(stats.into_iter().map(|(origin, s)| (unpack_origin(origin), s.max_seq.saturating_add(1))).collect())
    }

    /// Every committed line, ordered by (rank, stream, seq), handed to `f` one at a time; at
    /// most a few thousand lines are held in memory whatever the size of the index. Used to
    /// rebuild the analysis state after a restart. Lines that share a (rank, stream, seq) key
    /// (which ingest deduplicates) may be handed over only once.
    pub fn for_each_line(&self, mut f: impl FnMut(IndexedLine)) -> Result<(), IndexError> {
        let searcher = self.reader.searcher();
        let origins: BTreeMap<u64, _> = searcher.search(&AllQuery, &OriginStatsCollector)?.into_iter().collect();
        for origin in origins.keys() {
            let query = TermQuery::new(Term::from_field_u64(self.fields.origin, *origin), IndexRecordOption::Basic);
            let mut from = 0u64;
            loop {
                let chunk = searcher.search(&query, &SeqChunkCollector { from, k: REPLAY_CHUNK })?;
                for (_, addr) in &chunk {
                    f(self.load(&searcher, *addr)?);
                }
                match chunk.last() {
                    Some((last, _)) if chunk.len() == REPLAY_CHUNK && *last < u64::MAX => {
                        from = last + 1;
                    }
                    _ => break,
                }
            }
        }
        Ok(())
    }

    /// Commits what is buffered and waits for background merges: an orderly shutdown.
    pub fn close(self) -> Result<(), IndexError> {
        if let Some(mut writer) = self.writer.into_inner().map_err(|_| IndexError::Poisoned)? {
            writer.commit()?;
            writer.wait_merging_threads()?;
        }
        Ok(())
    }

    /// Bytes the index's files take on disk now: one listing of its folder (tantivy keeps it
    /// flat), so a few hundred `stat`s at most; merges running in the background change it.
    pub fn disk_bytes(&self) -> u64 {
        folder_bytes(&self.dir)
    }

    /// How many lines are committed.
    pub fn num_lines(&self) -> u64 {
        self.reader.searcher().num_docs()
    }
}

/// The bytes of the files directly in `dir` (none when it cannot be read).
pub fn folder_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir).into_iter().flatten().flatten().filter_map(|e| e.metadata().ok()).filter(|m| m.is_file()).map(|m| m.len()).sum()
}

/// Indexing threads per writer: half the cores, so that the other half parse, analyse and serve
/// what is indexed, and no more than the budget gives each its minimum. Every commit starts a
/// segment per thread that got lines, and a segment's writer costs the same whether it takes ten
/// lines or ten thousand (its term table and column arenas are allocated and zeroed up front):
/// under 16,384 agents' small batches on two cores, two threads' segment writers were a tenth of
/// the server's CPU and doubled the segments to merge.
fn indexing_threads(cores: usize) -> usize {
    (cores / 2).clamp(1, WRITER_HEAP_BYTES / THREAD_HEAP_MIN_BYTES)
}

fn open_writer(index: &Index, dir: &Path) -> Result<IndexWriter, IndexError> {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let threads = indexing_threads(cores);
    // Merges as wide as indexing: tantivy's four merge threads on two cores ran beside the one
    // indexing thread every commit waits for, and took its share of the cores.
    let options =
        IndexWriterOptions::builder().num_worker_threads(threads).num_merge_threads(threads).memory_budget_per_thread(WRITER_HEAP_BYTES / threads).build();
    index.writer_with_options(options).map_err(|e| match e {
        TantivyError::LockFailure(LockError::LockBusy, _) => IndexError::Locked(dir.to_path_buf()),
        other => IndexError::Open { path: dir.to_path_buf(), source: other },
    })
}

/// Runs `collector` over every segment within `budget`, on the shared search threads or this one.
fn run<C: tantivy::collector::Collector>(
    searcher: &Searcher,
    query: &dyn tantivy::query::Query,
    collector: C,
    budget: &Budget,
    parallel: bool,
) -> Result<C::Fruit, IndexError> {
    let collector = budget::Budgeted { inner: collector, budget };
    let executor = if parallel { search_executor() } else { Executor::single_thread() };
    let scoring = tantivy::query::EnableScoring::disabled_from_searcher(searcher);
    budget::settle(budget, searcher.search_with_executor(query, &collector, &executor, scoring))
}

#[cfg(test)]
mod tests;
