-- coroner metadata schema v4 (SQLite): a job's attempts. Keep in step with
-- ../postgres/0004_attempts.sql.
--
-- The attempt a session belongs to: 0 for the job's first start, n for its n-th restart (torchrun's
-- TORCHELASTIC_RESTART_COUNT, Slurm's SLURM_RESTART_COUNT, a pod's restart count, or coronerd's
-- inference: a new agent of a rank whose process had ended). A job recovered from its rows marks
-- each attempt as begun when its first session opened.
ALTER TABLE sessions ADD COLUMN attempt INTEGER NOT NULL DEFAULT 0;
