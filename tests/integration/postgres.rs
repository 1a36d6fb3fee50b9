//! A fresh PostgreSQL database for one test, dropped when it goes out of scope (also when the
//! test panics). The server is found at `CORONER_TEST_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`); when it is unreachable the test fails with
//! what to do, unless `CORONER_SKIP_POSTGRES=1`, which makes it say SKIPPED and pass.

use sqlx::{Connection, PgConnection};

pub struct TestDatabase {
    /// The fresh database's URL.
    pub url: String,
    name: String,
    admin: PgConnection,
    rt: tokio::runtime::Handle,
}

impl TestDatabase {
    /// A new database named after `test` and this process; `None` when PostgreSQL is unreachable
    /// and `CORONER_SKIP_POSTGRES=1` (said on stderr).
    pub fn create(rt: &tokio::runtime::Runtime, test: &str) -> Option<TestDatabase> {
        let admin_url = std::env::var("CORONER_TEST_POSTGRES_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
        let mut admin = match rt.block_on(PgConnection::connect(&admin_url)) {
            Ok(c) => c,
            Err(e) if std::env::var("CORONER_SKIP_POSTGRES").is_ok_and(|v| v == "1") => {
                eprintln!("SKIPPED {test}: PostgreSQL at {admin_url} is unreachable ({e}) and CORONER_SKIP_POSTGRES=1");
                return None;
            }
            Err(e) => panic!("PostgreSQL at {admin_url} is unreachable: {e}; start it, point CORONER_TEST_POSTGRES_URL at one, or set CORONER_SKIP_POSTGRES=1"),
        };
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        let name = format!("coroner_{test}_{}_{nanos}", std::process::id());
        rt.block_on(sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut admin)).expect("create the test database");
        let Some((base, _)) = admin_url.rsplit_once('/') else { panic!("CORONER_TEST_POSTGRES_URL {admin_url:?} has no database part") };
        let url = format!("{base}/{name}");
        Some(TestDatabase { url, name, admin, rt: rt.handle().clone() })
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let dropped = self.rt.block_on(sqlx::query(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name)).execute(&mut self.admin));
        if let Err(e) = dropped {
            eprintln!("could not drop the test database {}: {e}", self.name);
        }
    }
}
