-- coroner metadata schema v3 (PostgreSQL): job ownership leases, for several coronerd
-- instances sharing one database. Keep in step with ../sqlite/0003_leases.sql.
--
-- One row per job ever owned. A lease is live while expires_ns (the database's clock, ns since
-- the Unix epoch) is in the future; the addresses are where the owner serves (agents and queries
-- are sent there). epoch is the fencing token: it grows by one each time the
-- lease changes hands and never goes back (releasing a lease expires it, the row stays).
-- No foreign key to jobs: a lease may be taken before the job row exists.

CREATE TABLE job_leases (
    job_id     TEXT   PRIMARY KEY,
    owner      TEXT   NOT NULL,
    grpc_address TEXT NOT NULL,
    http_address TEXT NOT NULL,
    epoch      BIGINT NOT NULL,
    expires_ns BIGINT NOT NULL
);
CREATE INDEX job_leases_by_owner ON job_leases (owner);
