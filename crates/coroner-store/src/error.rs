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
    fn passwords_never_reach_messages() {
        assert_eq!(redact_url("postgres://u:secret@h:5432/db"), "postgres://u:***@h:5432/db");
        assert_eq!(redact_url("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact_url("sqlite:/tmp/x.db"), "sqlite:/tmp/x.db");
    }
}
