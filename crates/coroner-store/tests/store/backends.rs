//! Fresh stores for the conformance suite: a SQLite file in a temporary folder, or a
//! PostgreSQL database created for one test and dropped after it, even when the test fails.

use anyhow::{bail, Context, Result};
use coroner_store::{connect, Metastore};
use sqlx::{Connection, PgConnection};
use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

pub async fn with_sqlite<F, Fut>(_name: &str, case: F) -> Result<()>
where
    F: FnOnce(Arc<dyn Metastore>) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let dir = tempfile::tempdir()?;
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("meta.db").display());
    let store = connect(&url).await.context("open a temporary SQLite store")?;
    case(store).await
}

const DEFAULT_ADMIN_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

fn unique_db_name() -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    format!("coroner_test_{}_{}_{}", std::process::id(), nanos, COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// The admin URL with its database name replaced.
fn url_for_db(admin_url: &str, db: &str) -> Result<String> {
    let (base, query) = admin_url.split_once('?').map_or((admin_url, None), |(b, q)| (b, Some(q)));
    let scheme_end = base.find("://").context("the PostgreSQL URL has no scheme")? + 3;
    let host_end = base[scheme_end..].find('/').map_or(base.len(), |i| scheme_end + i);
    let mut url = format!("{}/{db}", &base[..host_end]);
    if let Some(q) = query {
        url = format!("{url}?{q}");
    }
    Ok(url)
}

pub async fn with_postgres<F, Fut>(name: &str, case: F) -> Result<()>
where
    F: FnOnce(Arc<dyn Metastore>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<()>> + Send + 'static,
{
    with_postgres_database(name, move |url| async move {
        let store = connect(&url).await.context("connect to the test database")?;
        case(store).await
    })
    .await
}

/// Runs `case` with the URL of a PostgreSQL database created for it and dropped after it.
pub async fn with_postgres_database<F, Fut>(name: &str, case: F) -> Result<()>
where
    F: FnOnce(String) -> Fut + Send + 'static,
    Fut: Future<Output = Result<()>> + Send + 'static,
{
    let admin_url = std::env::var("CORONER_TEST_POSTGRES_URL").unwrap_or_else(|_| DEFAULT_ADMIN_URL.to_string());
    let mut admin = match PgConnection::connect(&admin_url).await {
        Ok(conn) => conn,
        Err(e) if std::env::var("CORONER_SKIP_POSTGRES").is_ok_and(|v| v == "1") => {
            eprintln!("SKIPPED postgres::{name}: PostgreSQL at {admin_url} is unreachable ({e}) and CORONER_SKIP_POSTGRES=1");
            return Ok(());
        }
        Err(e) => bail!(
            "PostgreSQL at {admin_url} is unreachable: {e}. Start it, point CORONER_TEST_POSTGRES_URL \
             at one, or set CORONER_SKIP_POSTGRES=1 to skip the PostgreSQL tests"
        ),
    };
    let db = unique_db_name();
    sqlx::query(&format!("CREATE DATABASE {db}")).execute(&mut admin).await.with_context(|| format!("create the test database {db}"))?;
    // Run the case in its own task so that a failed assertion still lets us drop the database.
    let url = url_for_db(&admin_url, &db)?;
    let outcome = tokio::spawn(case(url)).await;
    sqlx::query(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)")).execute(&mut admin).await.with_context(|| format!("drop the test database {db}"))?;
    match outcome {
        Ok(result) => result,
        Err(join) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
        Err(join) => Err(join.into()),
    }
}
