//! The embedded backend: one SQLite file in WAL mode, so readers never wait for the writer,
//! with a busy timeout so that concurrent writers queue instead of failing.

use crate::backend::impl_metastore;
use crate::error::redact_url;
use crate::incidents::impl_incident_store;
use crate::leases::impl_lease_store;

use crate::notifications::impl_notification_store;
use crate::storage::impl_storage_store;
use crate::StoreError;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};
use std::str::FromStr;
use std::time::Duration;

/// The database's clock, in ns since the Unix epoch (job leases are timed by it).
const NOW_NS: &str = "CAST((julianday('now') - 2440587.5) * 86400000000000.0 AS INTEGER)";

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations/sqlite");

/// How long a connection waits for another's write lock before it reports the database busy.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);
/// SQLite runs one writer at a time whatever the pool size; more connections serve readers.
const MAX_CONNECTIONS: u32 = 8;

/// The metastore in a SQLite database file.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
}

impl SqliteStore {
    /// Opens (creating it unless the URL sets a `mode`) the database at a `sqlite:` URL and
    /// applies the migrations.
    pub async fn connect(url: &str) -> Result<SqliteStore, StoreError> {
        let location = redact_url(url);
        let open_err = |source| StoreError::OpenSqlite { location: location.clone(), source };
        let mut options = SqliteConnectOptions::from_str(url)
            .map_err(open_err)?
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(true);
        if !url.contains("mode=") {
            options = options.create_if_missing(true);
        }
        // Every connection to an in-memory database would see a database of its own.
        let in_memory = url.contains(":memory:") || url.contains("mode=memory");
        let pool = SqlitePoolOptions::new()
            .max_connections(if in_memory { 1 } else { MAX_CONNECTIONS })
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(options)
            .await
            .map_err(open_err)?;
        MIGRATOR.run(&pool).await.map_err(|source| StoreError::Migrate { location: location.clone(), source })?;
        Ok(SqliteStore { pool })
    }

    /// Closes every connection, checkpointing the WAL into the database file.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

impl_metastore!(SqliteStore);
impl_incident_store!(SqliteStore);
impl_storage_store!(SqliteStore);
impl_lease_store!(SqliteStore, NOW_NS);
impl_notification_store!(SqliteStore);
