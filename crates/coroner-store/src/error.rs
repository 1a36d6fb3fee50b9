//! The store's error type: each variant says what failed and what to do about it.

/// Why a metastore operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("unsupported database url {0:?}: use sqlite:PATH, sqlite://PATH?mode=rwc or postgres://USER@HOST/DB")]
    BadUrl(String),
    #[error("cannot open the database at {location}: {source} (check the path and permissions)")]
    OpenSqlite { location: String, source: sqlx::Error },
    #[error("cannot connect to PostgreSQL at {location}: {source} (check that the server runs, that it accepts this user and that the database exists)")]
    ConnectPostgres { location: String, source: sqlx::Error },
    #[error("cannot open a TLS connection to PostgreSQL at {location}: {source} (the URL's sslmode asks for TLS: check that the server has `ssl = on`, and that sslrootcert=PATH names the CA that signed its certificate; see docs/KUBERNETES.md)")]
    PostgresTls { location: String, source: sqlx::Error },
    #[error("cannot apply the schema migrations to {location}: {source} (was the database written by a newer coroner?)")]
    Migrate { location: String, source: sqlx::migrate::MigrateError },
    #[error("job {0} is not known to the store: record it with touch_job first")]
    UnknownJob(String),
    #[error("snapshot content {0} is being deleted by a storage sweep: upload it again in a moment")]
    ContentBeingDeleted(String),
    #[error("the database holds a value coroner cannot read: {0} (was it written by another version?)")]
    Corrupt(String),
    #[error("cannot {action}: {source}")]
    Query { action: &'static str, source: sqlx::Error },
}

impl StoreError {
    /// Wraps a query error, reading a foreign-key violation as a job that was never touched.
    pub(crate) fn query(action: &'static str, job: &str, source: sqlx::Error) -> StoreError {
        let fk = source.as_database_error().is_some_and(|d| d.is_foreign_key_violation());
        if fk {
            StoreError::UnknownJob(job.to_string())
        } else {
            StoreError::Query { action, source }
        }
    }
}

impl StoreError {
    /// Whether the database could not be reached or could not answer now (down, restarting, out
    /// of connections, the pool's wait timed out, its disk failed, SQLite busy): a retry may
    /// succeed, and the caller should be told so. False for what a retry would not change: a bad
    /// URL, a schema from a newer coroner, a value it cannot read, an unknown job, a bug in a query.
    pub fn is_unavailable(&self) -> bool {
        match self {
            StoreError::OpenSqlite { .. } | StoreError::ConnectPostgres { .. } | StoreError::ContentBeingDeleted(_) => true,
            StoreError::Query { source, .. } => transient(source),
            StoreError::Migrate { source: sqlx::migrate::MigrateError::Execute(source), .. } => transient(source),
            // A certificate the server's TLS is refused for does not change by retrying.
            StoreError::BadUrl(_) | StoreError::PostgresTls { .. } | StoreError::Migrate { .. } | StoreError::UnknownJob(_) | StoreError::Corrupt(_) => false,
        }
    }
}

/// Whether a driver error is about reaching the database rather than about the statement.
fn transient(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_) | sqlx::Error::Tls(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::WorkerCrashed => true,
        // The conversation with the server broke off, e.g. a reconnect whose TLS request
        // (`sslmode=prefer`, the default) met a closed socket: a fresh connection may succeed.
        sqlx::Error::Protocol(_) => true,
        sqlx::Error::Database(d) => {
            if let Some(pg) = d.try_downcast_ref::<sqlx::postgres::PgDatabaseError>() {
                postgres_transient(pg.code())
            } else if let Some(lite) = d.try_downcast_ref::<sqlx::sqlite::SqliteError>() {
                sqlx::error::DatabaseError::code(lite).and_then(|c| c.parse::<i32>().ok()).is_some_and(sqlite_transient)
            } else {
                false
            }
        }
        _ => false,
    }
}

/// PostgreSQL's SQLSTATE classes that say the server, not the statement, is the trouble:
/// 08 connection exception, 53 insufficient resources (too many connections, disk full, out of
/// memory), 57 operator intervention (shutting down, starting up, statement cancelled), and the
/// two of class 40 that a retry resolves (serialization failure, deadlock).
fn postgres_transient(sqlstate: &str) -> bool {
    sqlstate.starts_with("08") || sqlstate.starts_with("53") || sqlstate.starts_with("57") || sqlstate == "40001" || sqlstate == "40P01"
}

/// SQLite's primary result codes (the low byte of an extended code) that say the file, not the
/// statement, is the trouble: BUSY 5, LOCKED 6, NOMEM 7, READONLY 8, IOERR 10, FULL 13, CANTOPEN 14.
fn sqlite_transient(code: i32) -> bool {
    matches!(code & 0xff, 5 | 6 | 7 | 8 | 10 | 13 | 14)
}

/// Hides the password of a database URL before it goes into a message.
pub(crate) fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, tail) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split(':').next().unwrap_or_default();
            let masked = if userinfo.contains(':') { format!("{user}:***") } else { user.to_string() };
            format!("{scheme}://{masked}@{host}{tail}")
        }
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_out_of_reach_is_unavailable_and_a_bad_statement_is_not() {
        let query = |source| StoreError::Query { action: "list jobs", source };
        assert!(query(sqlx::Error::PoolTimedOut).is_unavailable());
        assert!(query(sqlx::Error::PoolClosed).is_unavailable());
        assert!(query(sqlx::Error::Io(std::io::ErrorKind::ConnectionReset.into())).is_unavailable());
        assert!(!query(sqlx::Error::RowNotFound).is_unavailable());
        assert!(!query(sqlx::Error::ColumnNotFound("verdict".into())).is_unavailable());
        assert!(!StoreError::Corrupt("verdict 7".into()).is_unavailable());
        assert!(!StoreError::UnknownJob("j".into()).is_unavailable());
        for state in ["08006", "57P01", "57P03", "53300", "40001"] {
            assert!(postgres_transient(state), "{state}");
        }
        for state in ["42601", "23505", "22P02", "XX000"] {
            assert!(!postgres_transient(state), "{state}");
        }
        // SQLITE_BUSY, SQLITE_IOERR_READ (10 | 1 << 8), SQLITE_CANTOPEN; not SQLITE_ERROR, SQLITE_CORRUPT, SQLITE_CONSTRAINT.
        assert!(sqlite_transient(5) && sqlite_transient(266) && sqlite_transient(14));
        assert!(!sqlite_transient(1) && !sqlite_transient(11) && !sqlite_transient(19));
    }

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(redact_url("postgres://u:secret@h:5432/db"), "postgres://u:***@h:5432/db");
        assert_eq!(redact_url("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact_url("sqlite:/tmp/x.db"), "sqlite:/tmp/x.db");
    }
}
