-- coroner metadata schema v1 (PostgreSQL). Times are i64 nanoseconds since the Unix epoch on
-- the clock of the host that took them. Every integer is BIGINT so that both backends read and
-- write i64. Keep in step with ../sqlite/0001_initial.sql.

CREATE TABLE jobs (
    job_id        TEXT   PRIMARY KEY,
    world_size    BIGINT,
    first_seen_ns BIGINT NOT NULL,
    last_seen_ns  BIGINT NOT NULL,
    verdict       TEXT   NOT NULL DEFAULT 'running',
    culprit_rank  BIGINT,
    fault_class   TEXT,
    lines         BIGINT NOT NULL DEFAULT 0,
    report_json   TEXT
);
CREATE INDEX jobs_by_last_seen ON jobs (last_seen_ns DESC);

CREATE TABLE sessions (
    session_id     TEXT   PRIMARY KEY,
    job_id         TEXT   NOT NULL REFERENCES jobs (job_id) ON DELETE CASCADE,
    rank           BIGINT,
    local_rank     BIGINT,
    world_size     BIGINT,
    host           TEXT   NOT NULL,
    pid            BIGINT NOT NULL,
    launcher       TEXT   NOT NULL,
    agent_instance TEXT   NOT NULL,
    versions_json  TEXT   NOT NULL,
    opened_ns      BIGINT NOT NULL
);
CREATE INDEX sessions_by_job ON sessions (job_id, opened_ns);

CREATE TABLE clock_samples (
    id             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id         TEXT   NOT NULL REFERENCES jobs (job_id) ON DELETE CASCADE,
    rank           BIGINT NOT NULL,
    t1_agent_send  BIGINT NOT NULL,
    t2_server_recv BIGINT NOT NULL,
    t3_server_send BIGINT NOT NULL,
    t4_agent_recv  BIGINT NOT NULL
);
CREATE INDEX clock_samples_by_job ON clock_samples (job_id, rank, id);

CREATE TABLE process_ends (
    job_id    TEXT   NOT NULL REFERENCES jobs (job_id) ON DELETE CASCADE,
    rank      BIGINT NOT NULL,
    exit_code BIGINT,
    signal    BIGINT,
    at_ns     BIGINT,
    PRIMARY KEY (job_id, rank)
);

-- rank_key is the rank, or -1 for a snapshot without a rank, so that the uniqueness of
-- (job, sha256, rank, name) holds for both (NULLs are distinct in a UNIQUE constraint).
CREATE TABLE snapshots (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id       TEXT   NOT NULL REFERENCES jobs (job_id) ON DELETE CASCADE,
    rank_key     BIGINT NOT NULL,
    kind         TEXT   NOT NULL,
    name         TEXT   NOT NULL,
    size         BIGINT NOT NULL,
    sha256       TEXT   NOT NULL,
    captured_ns  BIGINT NOT NULL,
    stored_bytes BIGINT NOT NULL,
    UNIQUE (job_id, sha256, rank_key, name)
);
CREATE INDEX snapshots_by_job ON snapshots (job_id, captured_ns);
