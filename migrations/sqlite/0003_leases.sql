-- coroner metadata schema v3 (SQLite): job ownership leases. Keep in step with
-- ../postgres/0003_leases.sql. With SQLite one coronerd owns every job, but the semantics are
-- the same, so the server runs one code path on both backends.
--
-- One row per job ever owned. A lease is live while expires_ns (the database's clock, ns since
-- the Unix epoch) is in the future; the addresses are where the owner serves (agents and queries
-- are sent there). epoch is the fencing token: it grows by one each time the
-- lease changes hands and never goes back (releasing a lease expires it, the row stays).

CREATE TABLE job_leases (
    job_id     TEXT    PRIMARY KEY NOT NULL,
    owner      TEXT    NOT NULL,
    grpc_address TEXT NOT NULL,
    http_address TEXT NOT NULL,
    epoch      INTEGER NOT NULL,
    expires_ns INTEGER NOT NULL
);
CREATE INDEX job_leases_by_owner ON job_leases (owner);
