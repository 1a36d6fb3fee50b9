//! The one implementation of [`crate::Metastore`], shared by both backends.
//!
//! The SQL is the same text for both (see `sql.rs`); what differs is only the pool type, so the
//! trait impl is stamped out per backend by [`impl_metastore!`], while row decoding and value
//! conversions (`rows.rs`) are generic over the row type.

/// Implements [`crate::Metastore`] for a store type with a `pool: sqlx::Pool<_>` field.
macro_rules! impl_metastore {
    ($store:ty) => {
        #[async_trait::async_trait]
        impl $crate::Metastore for $store {
            async fn touch_job(&self, job: &coroner_model::JobId, world_size: Option<u32>, now_ns: i64) -> Result<(), $crate::StoreError> {
                sqlx::query($crate::sql::TOUCH_JOB)
                    .bind(job.as_str())
                    .bind(world_size.map(i64::from))
                    .bind(now_ns)
                    .execute(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("record the job", job.as_str(), e))?;
                Ok(())
            }

            async fn open_session(&self, s: &$crate::SessionRecord) -> Result<(), $crate::StoreError> {
                self.open_sessions(std::slice::from_ref(s)).await
            }

            async fn open_sessions(&self, sessions: &[$crate::SessionRecord]) -> Result<(), $crate::StoreError> {
                let Some(first) = sessions.first() else { return Ok(()) };
                let err = |e| $crate::StoreError::query("record the session", first.job_id.as_str(), e);
                let mut tx = self.pool.begin().await.map_err(err)?;
                for s in sessions {
                    sqlx::query($crate::sql::OPEN_SESSION)
                        .bind(&s.session_id)
                        .bind(s.job_id.as_str())
                        .bind(s.rank.map(|r| i64::from(r.0)))
                        .bind(s.local_rank.map(i64::from))
                        .bind(s.world_size.map(i64::from))
                        .bind(&s.host)
                        .bind(i64::from(s.pid))
                        .bind(&s.launcher)
                        .bind(&s.agent_instance)
                        .bind($crate::rows::versions_json(s))
                        .bind(s.opened_ns)
                        .bind(i64::from(s.attempt))
                        .execute(&mut *tx)
                        .await
                        .map_err(|e| $crate::StoreError::query("record the session", s.job_id.as_str(), e))?;
                }
                tx.commit().await.map_err(err)?;
                Ok(())
            }

            async fn sessions(&self, job: &coroner_model::JobId) -> Result<Vec<$crate::SessionRecord>, $crate::StoreError> {
                let rows = sqlx::query($crate::sql::SESSIONS)
                    .bind(job.as_str())
                    .fetch_all(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("read the job's sessions", job.as_str(), e))?;
                rows.iter().map($crate::rows::session_row).collect()
            }

            async fn add_clock_samples(&self, job: &coroner_model::JobId, samples: &[coroner_model::ClockSample]) -> Result<(), $crate::StoreError> {
                if samples.is_empty() {
                    return Ok(());
                }
                let err = |e| $crate::StoreError::query("record clock samples", job.as_str(), e);
                let mut tx = self.pool.begin().await.map_err(err)?;
                for s in samples {
                    sqlx::query($crate::sql::ADD_CLOCK_SAMPLE)
                        .bind(job.as_str())
                        .bind(i64::from(s.rank.0))
                        .bind(s.t1_agent_send)
                        .bind(s.t2_server_recv)
                        .bind(s.t3_server_send)
                        .bind(s.t4_agent_recv)
                        .execute(&mut *tx)
                        .await
                        .map_err(err)?;
                }
                tx.commit().await.map_err(err)?;
                Ok(())
            }

            async fn clock_samples(&self, job: &coroner_model::JobId) -> Result<Vec<coroner_model::ClockSample>, $crate::StoreError> {
                let rows = sqlx::query($crate::sql::CLOCK_SAMPLES)
                    .bind(job.as_str())
                    .fetch_all(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("read clock samples", job.as_str(), e))?;
                rows.iter().map($crate::rows::clock_row).collect()
            }

            async fn record_exit(&self, job: &coroner_model::JobId, end: &coroner_model::ProcessEnd) -> Result<(), $crate::StoreError> {
                self.record_exits(&[(job.clone(), end.clone())]).await
            }

            async fn record_exits(&self, ends: &[(coroner_model::JobId, coroner_model::ProcessEnd)]) -> Result<(), $crate::StoreError> {
                let Some((first, _)) = ends.first() else { return Ok(()) };
                let err = |e| $crate::StoreError::query("record the process end", first.as_str(), e);
                let mut tx = self.pool.begin().await.map_err(err)?;
                for (job, end) in ends {
                    sqlx::query($crate::sql::RECORD_EXIT)
                        .bind(job.as_str())
                        .bind(i64::from(end.rank.0))
                        .bind(end.exit_code.map(i64::from))
                        .bind(end.signal.map(i64::from))
                        .bind(end.at_ns)
                        .execute(&mut *tx)
                        .await
                        .map_err(|e| $crate::StoreError::query("record the process end", job.as_str(), e))?;
                }
                tx.commit().await.map_err(err)?;
                Ok(())
            }

            async fn process_ends(&self, job: &coroner_model::JobId) -> Result<Vec<coroner_model::ProcessEnd>, $crate::StoreError> {
                let rows = sqlx::query($crate::sql::PROCESS_ENDS)
                    .bind(job.as_str())
                    .fetch_all(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("read process ends", job.as_str(), e))?;
                rows.iter().map($crate::rows::end_row).collect()
            }

            async fn add_lines_count(&self, job: &coroner_model::JobId, n: u64) -> Result<(), $crate::StoreError> {
                let done = sqlx::query($crate::sql::ADD_LINES)
                    .bind(job.as_str())
                    .bind($crate::rows::u64_to_db(n))
                    .execute(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("count the job's lines", job.as_str(), e))?;
                if done.rows_affected() == 0 {
                    return Err($crate::StoreError::UnknownJob(job.to_string()));
                }
                Ok(())
            }

            async fn save_report(
                &self,
                job: &coroner_model::JobId,
                verdict: &str,
                culprit: Option<coroner_model::Rank>,
                class: Option<&str>,
                report_json: &str,
            ) -> Result<(), $crate::StoreError> {
                let done = sqlx::query($crate::sql::SAVE_REPORT)
                    .bind(job.as_str())
                    .bind(verdict)
                    .bind(culprit.map(|r| i64::from(r.0)))
                    .bind(class)
                    .bind(report_json)
                    .execute(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("save the report", job.as_str(), e))?;
                if done.rows_affected() == 0 {
                    return Err($crate::StoreError::UnknownJob(job.to_string()));
                }
                Ok(())
            }

            async fn get_job(&self, job: &coroner_model::JobId) -> Result<Option<$crate::JobRow>, $crate::StoreError> {
                let row = sqlx::query(&$crate::sql::get_job())
                    .bind(job.as_str())
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("read the job", job.as_str(), e))?;
                row.as_ref().map($crate::rows::job_row).transpose()
            }

            async fn list_jobs(&self, f: &$crate::JobFilter) -> Result<Vec<$crate::JobRow>, $crate::StoreError> {
                let rows = sqlx::query(&$crate::sql::list_jobs())
                    .bind(f.verdict.as_deref())
                    .bind(f.fault_class.as_deref())
                    .bind(f.since_ns)
                    .bind(f.until_ns)
                    .bind(f.after.as_ref().map(|a| a.last_seen_ns))
                    .bind(f.after.as_ref().map(|a| a.job_id.as_str()))
                    .bind(f.limit.map_or(i64::MAX, i64::from))
                    .bind(f.host.as_deref())
                    .fetch_all(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("list jobs", "", e))?;
                rows.iter().map($crate::rows::job_row).collect()
            }

            async fn add_snapshot(&self, s: &$crate::SnapshotRecord) -> Result<bool, $crate::StoreError> {
                let err = |e| $crate::StoreError::query("record the snapshot", s.job_id.as_str(), e);
                let mut tx = self.pool.begin().await.map_err(err)?;
                // The content first: its row's lock orders this reference against a sweep.
                let registered = sqlx::query($crate::storage::REGISTER_CONTENT)
                    .bind(&s.sha256)
                    .bind($crate::rows::u64_to_db(s.stored_bytes))
                    .execute(&mut *tx)
                    .await
                    .map_err(err)?;
                if registered.rows_affected() == 0 {
                    return Err($crate::StoreError::ContentBeingDeleted(s.sha256.clone()));
                }
                let done = sqlx::query($crate::sql::ADD_SNAPSHOT)
                    .bind(s.job_id.as_str())
                    .bind($crate::rows::rank_key(s.rank))
                    .bind(&s.kind)
                    .bind(&s.name)
                    .bind($crate::rows::u64_to_db(s.size))
                    .bind(&s.sha256)
                    .bind(s.captured_ns)
                    .bind($crate::rows::u64_to_db(s.stored_bytes))
                    .execute(&mut *tx)
                    .await
                    .map_err(err)?;
                tx.commit().await.map_err(err)?;
                Ok(done.rows_affected() > 0)
            }

            async fn snapshots(&self, job: &coroner_model::JobId) -> Result<Vec<$crate::SnapshotRecord>, $crate::StoreError> {
                let rows = sqlx::query($crate::sql::SNAPSHOTS)
                    .bind(job.as_str())
                    .fetch_all(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("read the job's snapshots", job.as_str(), e))?;
                rows.iter().map($crate::rows::snapshot_row).collect()
            }

            async fn snapshot_contents(&self) -> Result<Vec<String>, $crate::StoreError> {
                use $crate::rows::Get as _;
                let rows = sqlx::query($crate::sql::SNAPSHOT_CONTENTS)
                    .fetch_all(&self.pool)
                    .await
                    .map_err(|e| $crate::StoreError::query("list the stored snapshot contents", "", e))?;
                rows.iter().map(|r| r.get_string("sha256")).collect()
            }
        }
    };
}

pub(crate) use impl_metastore;
