-- coroner metadata schema v1 (SQLite). Times are i64 nanoseconds since the Unix epoch on the
-- clock of the host that took them. Keep in step with ../postgres/0001_initial.sql.

CREATE TABLE jobs (
    job_id        TEXT    PRIMARY KEY NOT NULL,
    world_size    INTEGER,
    first_seen_ns INTEGER NOT NULL,
    last_seen_ns  INTEGER NOT NULL,
    verdict       TEXT    NOT NULL DEFAULT 'running',
    culprit_rank  INTEGER,
    fault_class   TEXT,
    lines         INTEGER NOT NULL DEFAULT 0,
    report_json   TEXT
);
CREATE INDEX jobs_by_last_seen ON jobs (last_seen_ns DESC);

CREATE TABLE sessions (
    session_id     TEXT    PRIMARY KEY NOT NULL,
    job_id         TEXT    NOT NULL REFERENCES jobs (job_id) ON DELETE CASCADE,
    rank           INTEGER,
    local_rank     INTEGER,
    world_size     INTEGER,
    host           TEXT    NOT NULL,
    pid            INTEGER NOT NULL,
    launcher       TEXT    NOT NULL,
    agent_instance TEXT    NOT NULL,
    versions_json  TEXT    NOT NULL,
    opened_ns      INTEGER NOT NULL
);
CREATE INDEX sessions_by_job ON sessions (job_id, opened_ns);

CREATE TABLE clock_samples (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id         TEXT    NOT NULL REFERENCES jobs (job_id) ON DELETE CASCADE,
    rank           INTEGER NOT NULL,
    t1_agent_send  INTEGER NOT NULL,
    t2_server_recv INTEGER NOT NULL,
    t3_server_send INTEGER NOT NULL,
    t4_agent_recv  INTEGER NOT NULL
);
CREATE INDEX clock_samples_by_job ON clock_samples (job_id, rank, id);

CREATE TABLE process_ends (
    job_id    TEXT    NOT NULL REFERENCES jobs (job_id) ON DELETE CASCADE,
    rank      INTEGER NOT NULL,
    exit_code INTEGER,
    signal    INTEGER,
    at_ns     INTEGER,
    PRIMARY KEY (job_id, rank)
);

-- rank_key is the rank, or -1 for a snapshot without a rank, so that the uniqueness of
-- (job, sha256, rank, name) holds for both (NULLs are distinct in a UNIQUE constraint).
CREATE TABLE snapshots (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id       TEXT    NOT NULL REFERENCES jobs (job_id) ON DELETE CASCADE,
    rank_key     INTEGER NOT NULL,
    kind         TEXT    NOT NULL,
    name         TEXT    NOT NULL,
    size         INTEGER NOT NULL,
    sha256       TEXT    NOT NULL,
    captured_ns  INTEGER NOT NULL,
    stored_bytes INTEGER NOT NULL,
    UNIQUE (job_id, sha256, rank_key, name)
);
CREATE INDEX snapshots_by_job ON snapshots (job_id, captured_ns);
