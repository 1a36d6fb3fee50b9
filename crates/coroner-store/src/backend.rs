//! The one implementation of [`crate::Metastore`], shared by both backends.
//!
//! The SQL is the same text for both (see `sql.rs`); what differs is only the pool type, so the
//! trait impl is stamped out per backend by [`impl_metastore!`] while row decoding and the
//! value conversions here are generic over the row type.

use crate::{JobRow, SessionRecord, SnapshotRecord, StoreError};
use coroner_model::{ClockSample, JobId, ProcessEnd, Rank};
use sqlx::{ColumnIndex, Decode, Row, Type};

/// Reads typed columns from a row of either backend, turning a decode failure into
/// [`StoreError::Corrupt`].
pub(crate) trait Get {
    fn get_i64(&self, col: &str) -> Result<i64, StoreError>;
    fn get_opt_i64(&self, col: &str) -> Result<Option<i64>, StoreError>;
    fn get_string(&self, col: &str) -> Result<String, StoreError>;
    fn get_opt_string(&self, col: &str) -> Result<Option<String>, StoreError>;
}

fn corrupt(col: &str, e: sqlx::Error) -> StoreError {
    StoreError::Corrupt(format!("column {col}: {e}"))
}

impl<R> Get for R
where
    R: Row,
    for<'a> &'a str: ColumnIndex<R>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
{
    fn get_i64(&self, col: &str) -> Result<i64, StoreError> {
        self.try_get::<i64, _>(col).map_err(|e| corrupt(col, e))
    }
    fn get_opt_i64(&self, col: &str) -> Result<Option<i64>, StoreError> {
        self.try_get::<Option<i64>, _>(col).map_err(|e| corrupt(col, e))
    }
    fn get_string(&self, col: &str) -> Result<String, StoreError> {
        self.try_get::<String, _>(col).map_err(|e| corrupt(col, e))
    }
    fn get_opt_string(&self, col: &str) -> Result<Option<String>, StoreError> {
        self.try_get::<Option<String>, _>(col).map_err(|e| corrupt(col, e))
    }
}

/// Unsigned counts are stored as i64; one above `i64::MAX` is kept at the maximum.
pub(crate) fn u64_to_db(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn to_u32(col: &str, v: i64) -> Result<u32, StoreError> {
    u32::try_from(v).map_err(|_| StoreError::Corrupt(format!("column {col} holds {v}, not a 32-bit unsigned value")))
}

fn to_i32(col: &str, v: i64) -> Result<i32, StoreError> {
    i32::try_from(v).map_err(|_| StoreError::Corrupt(format!("column {col} holds {v}, not a 32-bit value")))
}

fn to_u64(col: &str, v: i64) -> Result<u64, StoreError> {
    u64::try_from(v).map_err(|_| StoreError::Corrupt(format!("column {col} holds the negative {v}")))
}

fn opt_u32(row: &impl Get, col: &str) -> Result<Option<u32>, StoreError> {
    row.get_opt_i64(col)?.map(|v| to_u32(col, v)).transpose()
}

fn job_id(row: &impl Get) -> Result<JobId, StoreError> {
    let s = row.get_string("job_id")?;
    JobId::parse(&s).map_err(|e| StoreError::Corrupt(format!("column job_id: {e}")))
}

/// The `rank_key` of a snapshot: its rank, or -1 without one.
pub(crate) fn rank_key(rank: Option<Rank>) -> i64 {
    rank.map_or(-1, |r| i64::from(r.0))
}

pub(crate) fn job_row(row: &impl Get) -> Result<JobRow, StoreError> {
    Ok(JobRow {
        job_id: job_id(row)?,
        world_size: opt_u32(row, "world_size")?,
        first_seen_ns: row.get_i64("first_seen_ns")?,
        last_seen_ns: row.get_i64("last_seen_ns")?,
        verdict: row.get_string("verdict")?,
        culprit_rank: opt_u32(row, "culprit_rank")?.map(Rank),
        fault_class: row.get_opt_string("fault_class")?,
        lines: to_u64("lines", row.get_i64("lines")?)?,
        report_json: row.get_opt_string("report_json")?,
    })
}

pub(crate) fn session_row(row: &impl Get) -> Result<SessionRecord, StoreError> {
    let versions_json = row.get_string("versions_json")?;
    let versions = serde_json::from_str(&versions_json)
        .map_err(|e| StoreError::Corrupt(format!("column versions_json: {e}")))?;
    Ok(SessionRecord {
        session_id: row.get_string("session_id")?,
        job_id: job_id(row)?,
        rank: opt_u32(row, "rank")?.map(Rank),
        local_rank: opt_u32(row, "local_rank")?,
        world_size: opt_u32(row, "world_size")?,
        host: row.get_string("host")?,
        pid: to_u32("pid", row.get_i64("pid")?)?,
        launcher: row.get_string("launcher")?,
        agent_instance: row.get_string("agent_instance")?,
        versions,
        opened_ns: row.get_i64("opened_ns")?,
    })
}

pub(crate) fn versions_json(s: &SessionRecord) -> String {
    // A map of strings to strings always serializes.
    serde_json::to_string(&s.versions).unwrap_or_else(|_| "{}".to_string())
}

pub(crate) fn clock_row(row: &impl Get) -> Result<ClockSample, StoreError> {
    Ok(ClockSample {
        rank: Rank(to_u32("rank", row.get_i64("rank")?)?),
        t1_agent_send: row.get_i64("t1_agent_send")?,
        t2_server_recv: row.get_i64("t2_server_recv")?,
        t3_server_send: row.get_i64("t3_server_send")?,
        t4_agent_recv: row.get_i64("t4_agent_recv")?,
    })
}

pub(crate) fn end_row(row: &impl Get) -> Result<ProcessEnd, StoreError> {
    Ok(ProcessEnd {
        rank: Rank(to_u32("rank", row.get_i64("rank")?)?),
        exit_code: row.get_opt_i64("exit_code")?.map(|v| to_i32("exit_code", v)).transpose()?,
        signal: row.get_opt_i64("signal")?.map(|v| to_i32("signal", v)).transpose()?,
        at_ns: row.get_opt_i64("at_ns")?,
    })
}

pub(crate) fn snapshot_row(row: &impl Get) -> Result<SnapshotRecord, StoreError> {
    let rank_key = row.get_i64("rank_key")?;
    Ok(SnapshotRecord {
        job_id: job_id(row)?,
        rank: if rank_key < 0 { None } else { Some(Rank(to_u32("rank_key", rank_key)?)) },
        kind: row.get_string("kind")?,
        name: row.get_string("name")?,
        size: to_u64("size", row.get_i64("size")?)?,
        sha256: row.get_string("sha256")?,
        captured_ns: row.get_i64("captured_ns")?,
        stored_bytes: to_u64("stored_bytes", row.get_i64("stored_bytes")?)?,
    })
}

/// Implements [`crate::Metastore`] for a store type with a `pool: sqlx::Pool<_>` field.
macro_rules! impl_metastore {
    ($store:ty) => {
        #[async_trait::async_trait]
        impl $crate::Metastore for $store {
            async fn touch_job(&self, job: &coroner_model::JobId, world_size: Option<u32>, now_ns: i64) -> Result<(), $crate::StoreError> {
                sqlx::query($crate::sql::TOUCH_JOB)
                    .bind(job.as_str())
                    .bind(world_size.map(i64::from))
                    .bind(now_ns)
                    .execute(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("record the job", job.as_str(), e))?;
                Ok(())
            }

            async fn open_session(&self, s: &$crate::SessionRecord) -> Result<(), $crate::StoreError> {
                sqlx::query($crate::sql::OPEN_SESSION)
                    .bind(&s.session_id)
                    .bind(s.job_id.as_str())
                    .bind(s.rank.map(|r| i64::from(r.0)))
                    .bind(s.local_rank.map(i64::from))
                    .bind(s.world_size.map(i64::from))
                    .bind(&s.host)
                    .bind(i64::from(s.pid))
                    .bind(&s.launcher)
                    .bind(&s.agent_instance)
                    .bind($crate::backend::versions_json(s))
                    .bind(s.opened_ns)
                    .execute(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("record the session", s.job_id.as_str(), e))?;
                Ok(())
            }

            async fn sessions(&self, job: &coroner_model::JobId) -> Result<Vec<$crate::SessionRecord>, $crate::StoreError> {
                let rows = sqlx::query($crate::sql::SESSIONS)
                    .bind(job.as_str())
                    .fetch_all(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("read the job's sessions", job.as_str(), e))?;
                rows.iter().map($crate::backend::session_row).collect()
            }

            async fn add_clock_samples(&self, job: &coroner_model::JobId, samples: &[coroner_model::ClockSample]) -> Result<(), $crate::StoreError> {
                if samples.is_empty() {
                    return Ok(());
                }
                let err = |e| $crate::StoreError::query("record clock samples", job.as_str(), e);
                let mut tx = self.pool.begin().await.map_err(err)?;
                for s in samples {
                    sqlx::query($crate::sql::ADD_CLOCK_SAMPLE)
                        .bind(job.as_str())
                        .bind(i64::from(s.rank.0))
                        .bind(s.t1_agent_send)
                        .bind(s.t2_server_recv)
                        .bind(s.t3_server_send)
                        .bind(s.t4_agent_recv)
                        .execute(&mut *tx)
                        .await
                        .map_err(err)?;
                }
                tx.commit().await.map_err(err)?;
                Ok(())
            }

            async fn clock_samples(&self, job: &coroner_model::JobId) -> Result<Vec<coroner_model::ClockSample>, $crate::StoreError> {
                let rows = sqlx::query($crate::sql::CLOCK_SAMPLES)
                    .bind(job.as_str())
                    .fetch_all(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("read clock samples", job.as_str(), e))?;
                rows.iter().map($crate::backend::clock_row).collect()
            }

            async fn record_exit(&self, job: &coroner_model::JobId, end: &coroner_model::ProcessEnd) -> Result<(), $crate::StoreError> {
                sqlx::query($crate::sql::RECORD_EXIT)
                    .bind(job.as_str())
                    .bind(i64::from(end.rank.0))
                    .bind(end.exit_code.map(i64::from))
                    .bind(end.signal.map(i64::from))
                    .bind(end.at_ns)
                    .execute(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("record the process end", job.as_str(), e))?;
                Ok(())
            }

            async fn process_ends(&self, job: &coroner_model::JobId) -> Result<Vec<coroner_model::ProcessEnd>, $crate::StoreError> {
                let rows = sqlx::query($crate::sql::PROCESS_ENDS)
                    .bind(job.as_str())
                    .fetch_all(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("read process ends", job.as_str(), e))?;
                rows.iter().map($crate::backend::end_row).collect()
            }

            async fn add_lines_count(&self, job: &coroner_model::JobId, n: u64) -> Result<(), $crate::StoreError> {
                let done = sqlx::query($crate::sql::ADD_LINES)
                    .bind(job.as_str())
                    .bind($crate::backend::u64_to_db(n))
                    .execute(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("count the job's lines", job.as_str(), e))?;
                if done.rows_affected() == 0 {
                    return Err($crate::StoreError::UnknownJob(job.to_string()));
                }
                Ok(())
            }

            async fn save_report(
                &self,
                job: &coroner_model::JobId,
                verdict: &str,
                culprit: Option<coroner_model::Rank>,
                class: Option<&str>,
                report_json: &str,
            ) -> Result<(), $crate::StoreError> {
                let done = sqlx::query($crate::sql::SAVE_REPORT)
                    .bind(job.as_str())
                    .bind(verdict)
                    .bind(culprit.map(|r| i64::from(r.0)))
                    .bind(class)
                    .bind(report_json)
                    .execute(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("save the report", job.as_str(), e))?;
                if done.rows_affected() == 0 {
                    return Err($crate::StoreError::UnknownJob(job.to_string()));
                }
                Ok(())
            }

            async fn get_job(&self, job: &coroner_model::JobId) -> Result<Option<$crate::JobRow>, $crate::StoreError> {
                let row = sqlx::query(&$crate::sql::get_job())
                    .bind(job.as_str())
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("read the job", job.as_str(), e))?;
                row.as_ref().map($crate::backend::job_row).transpose()
            }

            async fn list_jobs(&self, f: &$crate::JobFilter) -> Result<Vec<$crate::JobRow>, $crate::StoreError> {
                let rows = sqlx::query(&$crate::sql::list_jobs())
                    .bind(f.verdict.as_deref())
                    .bind(f.fault_class.as_deref())
                    .bind(f.since_ns)
                    .fetch_all(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("list jobs", "", e))?;
                rows.iter().map($crate::backend::job_row).collect()
            }

            async fn add_snapshot(&self, s: &$crate::SnapshotRecord) -> Result<bool, $crate::StoreError> {
                let done = sqlx::query($crate::sql::ADD_SNAPSHOT)
                    .bind(s.job_id.as_str())
                    .bind($crate::backend::rank_key(s.rank))
                    .bind(&s.kind)
                    .bind(&s.name)
                    .bind($crate::backend::u64_to_db(s.size))
                    .bind(&s.sha256)
                    .bind(s.captured_ns)
                    .bind($crate::backend::u64_to_db(s.stored_bytes))
                    .execute(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("record the snapshot", s.job_id.as_str(), e))?;
                Ok(done.rows_affected() > 0)
            }

            async fn snapshots(&self, job: &coroner_model::JobId) -> Result<Vec<$crate::SnapshotRecord>, $crate::StoreError> {
                let rows = sqlx::query($crate::sql::SNAPSHOTS)
                    .bind(job.as_str())
                    .fetch_all(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("read the job's snapshots", job.as_str(), e))?;
                rows.iter().map($crate::backend::snapshot_row).collect()
            }
        }
    };
}

pub(crate) use impl_metastore;
