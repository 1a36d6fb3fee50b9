-- coroner metadata schema v8 (PostgreSQL): bounded storage. Keep in step with
-- ../sqlite/0008_storage.sql, which explains the tables.

CREATE TABLE snapshot_contents (
    sha256       TEXT   PRIMARY KEY,
    stored_bytes BIGINT NOT NULL,
    state        TEXT   NOT NULL DEFAULT 'live' CHECK (state IN ('live', 'deleting')),
    generation   BIGINT NOT NULL DEFAULT 0,
    -- When it was marked 'deleting' (the sweeper's clock): a deletion abandoned that long ago is revived.
    marked_ns    BIGINT
);
INSERT INTO snapshot_contents (sha256, stored_bytes) SELECT sha256, MAX(stored_bytes) FROM snapshots GROUP BY sha256;
CREATE INDEX snapshots_by_sha256 ON snapshots (sha256);

ALTER TABLE jobs ADD COLUMN index_bytes BIGINT NOT NULL DEFAULT 0;
CREATE INDEX jobs_by_verdict_last_seen ON jobs (verdict, last_seen_ns);

CREATE TABLE job_tally (
    verdict     TEXT   NOT NULL,
    fault_class TEXT   NOT NULL,
    jobs        BIGINT NOT NULL,
    PRIMARY KEY (verdict, fault_class)
);
INSERT INTO job_tally (verdict, fault_class, jobs) SELECT verdict, COALESCE(fault_class, ''), COUNT(*) FROM jobs GROUP BY verdict, COALESCE(fault_class, '');

CREATE FUNCTION job_tally_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        UPDATE job_tally SET jobs = jobs - 1 WHERE verdict = OLD.verdict AND fault_class = COALESCE(OLD.fault_class, '');
    END IF;
    IF TG_OP IN ('UPDATE', 'INSERT') THEN
        INSERT INTO job_tally (verdict, fault_class, jobs) VALUES (NEW.verdict, COALESCE(NEW.fault_class, ''), 1)
        ON CONFLICT (verdict, fault_class) DO UPDATE SET jobs = job_tally.jobs + 1;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER job_tally_insert_delete AFTER INSERT OR DELETE ON jobs
    FOR EACH ROW EXECUTE FUNCTION job_tally_change();
CREATE TRIGGER job_tally_update AFTER UPDATE OF verdict, fault_class ON jobs
    FOR EACH ROW WHEN (OLD.verdict IS DISTINCT FROM NEW.verdict OR OLD.fault_class IS DISTINCT FROM NEW.fault_class)
    EXECUTE FUNCTION job_tally_change();
