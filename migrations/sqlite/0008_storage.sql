-- coroner metadata schema v8 (SQLite): bounded storage. Keep in step with
-- ../postgres/0008_storage.sql.
--
-- snapshot_contents: one row per content-addressed snapshot file on disk. The snapshots rows that
-- name a sha256 are its references; a content no row names is garbage. Deleting one is a
-- protocol (coronerd's snapshots/gc.rs): mark the row 'deleting' only while it is 'live', still
-- unreferenced and at the generation read when it was found unreferenced; remove the file;
-- delete the row. Filing a reference bumps the generation of a 'live' row (or creates it) in the
-- same transaction as the reference, and is refused while the row is 'deleting', so a sweep and
-- a concurrent upload of the same content never both win.
CREATE TABLE snapshot_contents (
    sha256       TEXT    PRIMARY KEY NOT NULL,
    stored_bytes INTEGER NOT NULL,
    state        TEXT    NOT NULL DEFAULT 'live' CHECK (state IN ('live', 'deleting')),
    generation   INTEGER NOT NULL DEFAULT 0,
    -- When it was marked 'deleting' (the sweeper's clock): a deletion abandoned that long ago is revived.
    marked_ns    INTEGER
);
INSERT INTO snapshot_contents (sha256, stored_bytes) SELECT sha256, MAX(stored_bytes) FROM snapshots GROUP BY sha256;
CREATE INDEX snapshots_by_sha256 ON snapshots (sha256);

-- A job's index bytes on disk, as its owner last measured them after a commit: retention by size
-- adds these up instead of walking the folders.
ALTER TABLE jobs ADD COLUMN index_bytes INTEGER NOT NULL DEFAULT 0;
CREATE INDEX jobs_by_verdict_last_seen ON jobs (verdict, last_seen_ns);

-- job_tally: how many jobs hold each (verdict, fault class), kept by triggers as jobs are
-- created, judged and deleted, so that /metrics reads a handful of rows whatever the number of
-- jobs. fault_class is '' for none.
CREATE TABLE job_tally (
    verdict     TEXT    NOT NULL,
    fault_class TEXT    NOT NULL,
    jobs        INTEGER NOT NULL,
    PRIMARY KEY (verdict, fault_class)
);
INSERT INTO job_tally (verdict, fault_class, jobs) SELECT verdict, COALESCE(fault_class, ''), COUNT(*) FROM jobs GROUP BY verdict, COALESCE(fault_class, '');

CREATE TRIGGER job_tally_insert AFTER INSERT ON jobs BEGIN
    INSERT OR IGNORE INTO job_tally (verdict, fault_class, jobs) VALUES (NEW.verdict, COALESCE(NEW.fault_class, ''), 0);
    UPDATE job_tally SET jobs = jobs + 1 WHERE verdict = NEW.verdict AND fault_class = COALESCE(NEW.fault_class, '');
END;

CREATE TRIGGER job_tally_delete AFTER DELETE ON jobs BEGIN
    UPDATE job_tally SET jobs = jobs - 1 WHERE verdict = OLD.verdict AND fault_class = COALESCE(OLD.fault_class, '');
END;

CREATE TRIGGER job_tally_update AFTER UPDATE OF verdict, fault_class ON jobs
WHEN OLD.verdict IS NOT NEW.verdict OR OLD.fault_class IS NOT NEW.fault_class BEGIN
    UPDATE job_tally SET jobs = jobs - 1 WHERE verdict = OLD.verdict AND fault_class = COALESCE(OLD.fault_class, '');
    INSERT OR IGNORE INTO job_tally (verdict, fault_class, jobs) VALUES (NEW.verdict, COALESCE(NEW.fault_class, ''), 0);
    UPDATE job_tally SET jobs = jobs + 1 WHERE verdict = NEW.verdict AND fault_class = COALESCE(NEW.fault_class, '');
END;
