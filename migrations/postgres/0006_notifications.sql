-- coroner metadata schema v6 (PostgreSQL): notifications sent by coronerd (docs/NOTIFY.md). Keep in
-- step with ../sqlite/0006_notifications.sql. Every integer is BIGINT (i64 on both backends).
--
-- notification_events: one row per event ever claimed, keyed by (job, kind, key), so that an
-- event is sent once whatever recomputes it (a restart, a report written again, another
-- instance). payload_json is the event as the webhook body carries it.
-- notification_deliveries: the delivery log, one row per event and sink: attempts made, state
-- (pending, delivered, failed), the last HTTP status and the last error. Pending rows are resumed
-- when coronerd starts. No foreign key to jobs: retention deletes jobs, the log stays.

CREATE TABLE notification_events (
    job_id       TEXT    NOT NULL,
    kind         TEXT    NOT NULL,
    event_key    TEXT    NOT NULL,
    created_ns   BIGINT NOT NULL,
    payload_json TEXT    NOT NULL,
    PRIMARY KEY (job_id, kind, event_key)
);

CREATE TABLE notification_deliveries (
    job_id      TEXT    NOT NULL,
    kind        TEXT    NOT NULL,
    event_key   TEXT    NOT NULL,
    sink        TEXT    NOT NULL,
    state       TEXT    NOT NULL,
    attempts    BIGINT NOT NULL,
    last_status BIGINT,
    last_error  TEXT,
    updated_ns  BIGINT NOT NULL,
    PRIMARY KEY (job_id, kind, event_key, sink),
    FOREIGN KEY (job_id, kind, event_key) REFERENCES notification_events (job_id, kind, event_key) ON DELETE CASCADE
);
CREATE INDEX notification_deliveries_by_time ON notification_deliveries (updated_ns);
CREATE INDEX notification_deliveries_by_state ON notification_deliveries (state);
