//! Row decoding and value conversions shared by both backends: typed reads from a row of
//! either database, and the mapping between domain values and the i64 columns that store them.

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

pub(crate) fn to_u64(col: &str, v: i64) -> Result<u64, StoreError> {
    u64::try_from(v).map_err(|_| StoreError::Corrupt(format!("column {col} holds the negative {v}")))
}

fn opt_u32(row: &impl Get, col: &str) -> Result<Option<u32>, StoreError> {
    row.get_opt_i64(col)?.map(|v| to_u32(col, v)).transpose()
}

pub(crate) fn job_id(row: &impl Get) -> Result<JobId, StoreError> {
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
    let versions = serde_json::from_str(&versions_json).map_err(|e| StoreError::Corrupt(format!("column versions_json: {e}")))?;
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
        attempt: to_u32("attempt", row.get_i64("attempt")?)?,
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
