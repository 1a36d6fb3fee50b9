//! The SQL of every operation. Both backends run the same text: `$N` placeholders work in
//! SQLite and PostgreSQL, upserts use `ON CONFLICT`, and the "keep the larger" updates are
//! written as CASE so that they need neither SQLite's `max()` nor PostgreSQL's `GREATEST`.

pub const TOUCH_JOB: &str = "
INSERT INTO jobs (job_id, world_size, first_seen_ns, last_seen_ns) VALUES ($1, $2, $3, $3)
ON CONFLICT (job_id) DO UPDATE SET
    world_size = CASE
        WHEN jobs.world_size IS NULL OR excluded.world_size > jobs.world_size THEN excluded.world_size
        ELSE jobs.world_size END,
    first_seen_ns = CASE
        WHEN excluded.first_seen_ns < jobs.first_seen_ns THEN excluded.first_seen_ns
        ELSE jobs.first_seen_ns END,
    last_seen_ns = CASE
        WHEN excluded.last_seen_ns > jobs.last_seen_ns THEN excluded.last_seen_ns
        ELSE jobs.last_seen_ns END";

pub const OPEN_SESSION: &str = "
INSERT INTO sessions (session_id, job_id, rank, local_rank, world_size, host, pid, launcher,
                      agent_instance, versions_json, opened_ns, attempt)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
ON CONFLICT (session_id) DO UPDATE SET
    job_id = excluded.job_id, rank = excluded.rank, local_rank = excluded.local_rank,
    world_size = excluded.world_size, host = excluded.host, pid = excluded.pid,
    launcher = excluded.launcher, agent_instance = excluded.agent_instance,
    versions_json = excluded.versions_json, opened_ns = excluded.opened_ns, attempt = excluded.attempt";

pub const SESSIONS: &str = "
SELECT session_id, job_id, rank, local_rank, world_size, host, pid, launcher, agent_instance,
       versions_json, opened_ns, attempt
FROM sessions WHERE job_id = $1 ORDER BY opened_ns, session_id";

pub const ADD_CLOCK_SAMPLE: &str = "
INSERT INTO clock_samples (job_id, rank, t1_agent_send, t2_server_recv, t3_server_send, t4_agent_recv)
VALUES ($1, $2, $3, $4, $5, $6)";

pub const CLOCK_SAMPLES: &str = "
SELECT rank, t1_agent_send, t2_server_recv, t3_server_send, t4_agent_recv
FROM clock_samples WHERE job_id = $1 ORDER BY rank, id";

pub const RECORD_EXIT: &str = "
INSERT INTO process_ends (job_id, rank, exit_code, signal, at_ns) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (job_id, rank) DO UPDATE SET
    exit_code = excluded.exit_code, signal = excluded.signal, at_ns = excluded.at_ns";

pub const PROCESS_ENDS: &str = "
SELECT rank, exit_code, signal, at_ns FROM process_ends WHERE job_id = $1 ORDER BY rank";

pub const ADD_LINES: &str = "UPDATE jobs SET lines = lines + $2 WHERE job_id = $1";

pub const SAVE_REPORT: &str = "
UPDATE jobs SET verdict = $2, culprit_rank = $3, fault_class = $4, report_json = $5
WHERE job_id = $1";

const JOB_COLUMNS: &str = "job_id, world_size, first_seen_ns, last_seen_ns, verdict, culprit_rank, fault_class, lines, report_json";

pub fn get_job() -> String {
    format!("SELECT {JOB_COLUMNS} FROM jobs WHERE job_id = $1")
}

pub fn list_jobs() -> String {
    format!(
        "SELECT {JOB_COLUMNS} FROM jobs
         WHERE ($1 IS NULL OR verdict = $1) AND ($2 IS NULL OR fault_class = $2)
           AND ($3 IS NULL OR last_seen_ns >= $3) AND ($4 IS NULL OR first_seen_ns <= $4)
           AND ($5 IS NULL OR last_seen_ns < $5 OR (last_seen_ns = $5 AND job_id > $6))
           AND ($8 IS NULL OR job_id IN (SELECT job_id FROM job_hosts WHERE host = $8 UNION SELECT job_id FROM sessions WHERE host = $8))
         ORDER BY last_seen_ns DESC, job_id
         LIMIT $7"
    )
}

pub const ADD_SNAPSHOT: &str = "
INSERT INTO snapshots (job_id, rank_key, kind, name, size, sha256, captured_ns, stored_bytes)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (job_id, sha256, rank_key, name) DO NOTHING";

pub const SNAPSHOTS: &str = "
SELECT job_id, rank_key, kind, name, size, sha256, captured_ns, stored_bytes
FROM snapshots WHERE job_id = $1 ORDER BY captured_ns, rank_key, name, id";

pub(crate) const SNAPSHOT_CONTENTS: &str = "SELECT DISTINCT sha256 FROM snapshots";
