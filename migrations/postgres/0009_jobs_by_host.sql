-- coroner metadata schema v9 (PostgreSQL): the jobs list filtered by host (`JobFilter::host`) finds a
-- host's jobs by index instead of reading every job_hosts row. Keep in step with
-- ../sqlite/0009_jobs_by_host.sql.
CREATE INDEX job_hosts_by_host ON job_hosts (host, job_id);
