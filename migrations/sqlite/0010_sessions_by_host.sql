-- coroner metadata schema v10 (SQLite): the jobs list filtered by host (`JobFilter::host`) also
-- finds a running job, by the hosts its agents' sessions named, through this index. Keep in step
-- with ../postgres/0010_sessions_by_host.sql.
CREATE INDEX sessions_by_host ON sessions (host, job_id);
