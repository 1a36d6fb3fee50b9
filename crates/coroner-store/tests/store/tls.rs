//! PostgreSQL over TLS: sqlx is built with rustls, and the URL's `sslmode` and `sslrootcert`
//! decide (libpq's names). Run against the test server as it is configured, never changing it:
//! with `ssl = on` (Debian's default, a self-signed certificate), `sslmode=require` connects, full
//! verification against the public roots refuses the certificate, saying what to set, and
//! `sslrootcert` naming the certificate makes it trusted; with
//! `ssl = off`, `sslmode=require` is refused, saying what the server lacks.

use crate::backends::with_postgres_database;
use anyhow::{Context, Result};
use coroner_store::{connect, StoreError};
use sqlx::{Connection, PgConnection};

fn with_param(url: &str, param: &str) -> String {
    format!("{url}{}{param}", if url.contains('?') { '&' } else { '?' })
}

#[tokio::test]
async fn postgres_tls_follows_the_urls_sslmode() -> Result<()> {
    with_postgres_database("tls", |url| async move {
        let mut plain = PgConnection::connect(&with_param(&url, "sslmode=disable")).await.context("connect without TLS")?;
        let ssl: String = sqlx::query_scalar("SHOW ssl").fetch_one(&mut plain).await?;
        let required = connect(&with_param(&url, "sslmode=require")).await;
        if ssl == "on" {
            let store = required.context("sslmode=require against a server with ssl = on")?;
            store.touch_job(&coroner_model::JobId::parse("over-tls")?, None, 1).await?;
            let in_tls: bool = sqlx::query_scalar(
                "SELECT bool_or(ssl) FROM pg_stat_ssl JOIN pg_stat_activity USING (pid) WHERE datname = current_database() AND pid <> pg_backend_pid()",
            )
            .fetch_one(&mut plain)
            .await?;
            assert!(in_tls, "the store's connections use TLS");
            let err = connect(&with_param(&url, "sslmode=verify-full"))
                .await
                .err()
                .context("a self-signed certificate passed full verification against the public roots")?;
            assert!(matches!(err, StoreError::PostgresTls { .. }), "{err:?}");
            assert!(err.to_string().contains("sslrootcert=PATH"), "{err}");
            // The same certificate named as the CA by sslrootcert is trusted: the connection verifies
            // (Debian's certificate names `localhost`), or at worst fails on the name, never on the issuer.
            let cert: String = sqlx::query_scalar("SHOW ssl_cert_file").fetch_one(&mut plain).await?;
            let pinned = with_param(&url.replace("127.0.0.1", "localhost"), &format!("sslmode=verify-full&sslrootcert={cert}"));
            if let Err(e) = connect(&pinned).await {
                assert!(!format!("{e:?}").contains("UnknownIssuer"), "sslrootcert={cert} was not trusted: {e:?}");
            }
        } else {
            let err = required.err().context("sslmode=require connected to a server with ssl = off")?;
            assert!(matches!(err, StoreError::PostgresTls { .. }), "{err:?}");
            assert!(err.to_string().contains("ssl = on"), "{err}");
        }
        Ok(())
    })
    .await
}
