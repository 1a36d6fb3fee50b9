//! Integration tests of coroner-store: the conformance suite run against SQLite (a file in a
//! temporary folder) and PostgreSQL (a fresh database per test, dropped afterwards), plus the
//! behaviour that belongs to one backend (opening files, bad URLs).
//!
//! PostgreSQL is found at `CORONER_TEST_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`). When it cannot be reached the PostgreSQL
//! tests fail, unless `CORONER_SKIP_POSTGRES=1`, which makes them print a note and pass.

mod backends;
mod incidents;
mod leases;

mod notifications;
mod storage;
mod suite;
mod tls;

use backends::{with_postgres, with_sqlite};

/// Runs every suite case against one backend, as one `#[tokio::test]` per case.
macro_rules! conformance_tests {
    ($backend:ident, $with:ident, [$($case:ident),* $(,)?]) => {
        mod $backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() -> anyhow::Result<()> {
                    super::$with(stringify!($case), super::suite::$case).await
                }
            )*
        }
    };
}

macro_rules! all_backends {
    ($($case:ident),* $(,)?) => {
        conformance_tests!(sqlite, with_sqlite, [$($case),*]);
        conformance_tests!(postgres, with_postgres, [$($case),*]);
    };
}

all_backends!(
    touch_job_creates_then_only_widens,
    sessions_round_trip_and_reopen_replaces,
    sessions_keep_their_attempt,
    sessions_open_in_groups_all_or_none,
    clock_samples_keep_rank_then_arrival_order,
    process_ends_upsert_per_rank,
    exits_record_in_groups_all_or_none,
    lines_and_report_update_the_job,
    list_jobs_filters_newest_first,
    list_jobs_pages_by_keyset,
    snapshots_are_deduplicated,
    unknown_jobs_are_refused_clearly,
    jobs_do_not_see_each_other,
    many_tasks_at_once,
    signatures_round_trip_newest_first_and_keep_their_first_time,
    job_hosts_are_replaced_per_job,
    retention_deletes_jobs_but_keeps_their_signatures,
    a_lease_is_exclusive_while_it_lives,
    an_expired_lease_is_taken_over_with_a_new_epoch,
    renewing_extends_and_releasing_frees_without_resetting_the_epoch,
    concurrent_acquires_grant_one_owner,
    a_notification_is_claimed_once_with_a_delivery_per_sink,
    delivery_attempts_are_logged_and_filtered,
    concurrent_claims_of_one_event_grant_one,
    deleting_a_job_takes_its_rows_and_references,
    storage_usage_counts_indexes_and_each_content_once,
    oldest_finished_jobs_come_first_and_running_ones_never,
    the_job_tally_follows_creation_verdicts_and_deletion,
    a_reference_filed_after_the_sweep_looked_wins,
    a_reference_to_a_content_being_deleted_is_refused_until_it_is_gone,
    sweeps_and_uploads_racing_never_both_win,
    orphans_are_claimed_once_and_abandoned_deletions_revive,
);

mod single_backend {
    use coroner_model::JobId;
    use coroner_store::{connect, StoreError};

    #[tokio::test]
    async fn sqlite_data_survives_reconnecting() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let url = format!("sqlite:{}", dir.path().join("meta.db").display());
        let j = JobId::parse("persist-1")?;
        {
            let store = connect(&url).await?;
            store.touch_job(&j, Some(4), 10).await?;
            store.add_lines_count(&j, 3).await?;
        }
        // Reconnecting runs the migrations again, which must be a no-op.
        let store = connect(&url).await?;
        let row = store.get_job(&j).await?.expect("job survives");
        assert_eq!((row.world_size, row.lines), (Some(4), 3));
        Ok(())
    }

    #[tokio::test]
    async fn sqlite_url_forms_are_accepted() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("rwc.db");
        connect(&format!("sqlite://{}?mode=rwc", path.display())).await?;
        assert!(path.exists());
        let mem = connect("sqlite::memory:").await?;
        mem.touch_job(&JobId::parse("m")?, None, 1).await?;
        assert!(mem.get_job(&JobId::parse("m")?).await?.is_some());
        Ok(())
    }

    #[tokio::test]
    async fn an_unopenable_sqlite_path_says_what_to_check() {
        let err = connect("sqlite:/nonexistent-dir/sub/meta.db").await.err().expect("must fail");
        assert!(matches!(err, StoreError::OpenSqlite { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains("cannot open the database at sqlite:/nonexistent-dir/sub/meta.db"), "{msg}");
        assert!(msg.contains("check the path and permissions"), "{msg}");
    }

    #[tokio::test]
    async fn unknown_schemes_are_refused() {
        let err = connect("mysql://u:pw@h/db").await.err().expect("must fail");
        assert!(matches!(err, StoreError::BadUrl(_)), "{err:?}");
        assert!(!err.to_string().contains("pw"), "the password is masked: {err}");
    }

    #[tokio::test]
    async fn an_unreachable_postgres_says_so_without_the_password() {
        let err = connect("postgres://u:secret@127.0.0.1:1/db").await.err().expect("must fail");
        assert!(matches!(err, StoreError::ConnectPostgres { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains("cannot connect to PostgreSQL at postgres://u:***@127.0.0.1:1/db"), "{msg}");
        assert!(!msg.contains("secret"), "{msg}");
    }
}
