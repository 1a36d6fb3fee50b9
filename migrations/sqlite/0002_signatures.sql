-- coroner metadata schema v2 (SQLite): incident memory across jobs. Keep in step with
-- ../postgres/0002_signatures.sql.
--
-- A failed job's signature and the hosts a job ran on outlive the job: there is no foreign key
-- to jobs, so a job deleted by retention leaves them (the history that suspects are read from).

CREATE TABLE failure_signatures (
    job_id       TEXT    PRIMARY KEY NOT NULL,
    recorded_ns  INTEGER NOT NULL,
    signature_id TEXT    NOT NULL,
    class        TEXT    NOT NULL,
    template     TEXT    NOT NULL,
    frames_json  TEXT    NOT NULL,
    rank         INTEGER,
    host         TEXT,
    gpu          TEXT,
    collective   TEXT
);
CREATE INDEX failure_signatures_by_class ON failure_signatures (class, recorded_ns DESC);
CREATE INDEX failure_signatures_by_time ON failure_signatures (recorded_ns DESC);

CREATE TABLE job_hosts (
    job_id      TEXT    NOT NULL,
    host        TEXT    NOT NULL,
    ranks       INTEGER NOT NULL,
    verdict     TEXT    NOT NULL,
    recorded_ns INTEGER NOT NULL,
    PRIMARY KEY (job_id, host)
);
CREATE INDEX job_hosts_by_time ON job_hosts (recorded_ns);
