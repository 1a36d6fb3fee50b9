//! The Admin service: deleting a job (`coroner delete`). Behind the **write** token (the read
//! token cannot delete: `auth.rs`), and proxied to the job's owner like queries (`proxy.rs`), so
//! the instance holding its index deletes it.

use crate::deletion::{Deleter, Why};
use crate::views::job_id;
use coroner_proto::v1::{self, admin_server::Admin};
use tonic::{Request, Response, Status};

pub struct AdminService {
    deleter: Deleter,
}

impl AdminService {
    pub fn new(deleter: Deleter) -> Self {
        AdminService { deleter }
    }
}

#[tonic::async_trait]
impl Admin for AdminService {
    async fn delete_job(&self, req: Request<v1::DeleteJobRequest>) -> Result<Response<v1::DeleteJobResponse>, Status> {
        let req = req.into_inner();
        let id = job_id(&req.job_id)?;
        let d = self.deleter.delete(&id, Why::Request, req.force).await?;
        Ok(Response::new(v1::DeleteJobResponse {
            job_id: id.to_string(),
            verdict: d.verdict,
            lines: d.lines,
            index_bytes: d.index_bytes,
            snapshot_contents_deleted: d.collected.contents,
            snapshot_bytes_deleted: d.collected.bytes,
        }))
    }
}
