//! The shared backend: PostgreSQL, for deployments where several servers or tools read the
//! same metadata. Migrations take PostgreSQL's advisory lock, so concurrent starts are safe.

use crate::backend::impl_metastore;
use crate::error::redact_url;
use crate::incidents::impl_incident_store;
use crate::leases::impl_lease_store;

use crate::notifications::impl_notification_store;
use crate::storage::impl_storage_store;
use crate::StoreError;
use sqlx::postgres::{PgPool, PgPoolOptions};
use std::time::Duration;

/// The database's clock, in ns since the Unix epoch (job leases are timed by it).
const NOW_NS: &str = "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000000)::BIGINT";

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations/postgres");

const MAX_CONNECTIONS: u32 = 16;

/// The metastore in a PostgreSQL database.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: PgPool,
}

impl PostgresStore {
    /// Connects to a `postgres://` or `postgresql://` URL and applies the migrations. TLS (rustls,
    /// the webpki roots) follows the URL's libpq parameters: `sslmode` (`disable`, `prefer`, the
    /// default, `require`, `verify-ca`, `verify-full`) and `sslrootcert=PATH` for a private CA.
    pub async fn connect(url: &str) -> Result<PostgresStore, StoreError> {
        let location = redact_url(url);
        let pool =
            PgPoolOptions::new().max_connections(MAX_CONNECTIONS).acquire_timeout(Duration::from_secs(10)).connect(url).await.map_err(
                |source| match is_tls(&source) {
                    true => StoreError::PostgresTls { location: location.clone(), source },
                    false => StoreError::ConnectPostgres { location: location.clone(), source },
                },
            )?;
        MIGRATOR.run(&pool).await.map_err(|source| StoreError::Migrate { location: location.clone(), source })?;
        Ok(PostgresStore { pool })
    }

    /// Closes every connection.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// Whether connecting failed in TLS: the server offers none, or rustls refused its certificate
/// (which sqlx reports as an IO error).
fn is_tls(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Tls(_) => true,
        sqlx::Error::Io(io) => io.get_ref().is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some()),
        _ => false,
    }
}

impl_metastore!(PostgresStore);
impl_incident_store!(PostgresStore);
impl_storage_store!(PostgresStore);
impl_lease_store!(PostgresStore, NOW_NS);
impl_notification_store!(PostgresStore);
