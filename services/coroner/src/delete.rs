//! `coroner delete JOB`: deletes a job on coronerd (gRPC `Admin.DeleteJob`, the write token):
//! its index, rows, report and snapshot references, then the snapshot contents no other job
//! names. Asks first, on standard input, unless `--yes`; a running job needs `--force`.
//! Exits 0 when the job was deleted, 1 when the deletion was not confirmed, 2 on an error.

use crate::remote::{channel, status_message, Server};
use bytesize::ByteSize;
use coroner_proto::v1::{self, admin_client::AdminClient};
use std::io::{BufRead, Write};
use std::process::ExitCode;

pub async fn run(server: &Server, job: &str, yes: bool, force: bool) -> anyhow::Result<ExitCode> {
    if !yes && !confirmed(server, job)? {
        crate::say_err!("coroner: job {job} was not deleted (answer y, or pass --yes)");
        return Ok(ExitCode::from(1));
    }
    let mut client = AdminClient::new(channel(server).await?);
    let d = client.delete_job(v1::DeleteJobRequest { job_id: job.to_string(), force }).await.map_err(status_message)?.into_inner();
    crate::say!(
        "deleted job {} ({}, {} lines, {} of index; {} snapshot contents no other job named, {})",
        d.job_id,
        d.verdict,
        d.lines,
        ByteSize(d.index_bytes),
        d.snapshot_contents_deleted,
        ByteSize(d.snapshot_bytes_deleted)
    );
    Ok(ExitCode::SUCCESS)
}

/// Asks on standard error, reads the answer from standard input: `y` or `yes` deletes.
fn confirmed(server: &Server, job: &str) -> anyhow::Result<bool> {
    crate::say_err!("Delete job {job} from {server}: its lines, report and snapshots? This cannot be undone. [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer).map_err(|e| anyhow::anyhow!("read the confirmation from standard input: {e} (pass --yes)"))?;
    Ok(is_yes(&answer))
}

fn is_yes(answer: &str) -> bool {
    matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

#[cfg(test)]
mod tests {
    use super::is_yes;

    #[test]
    fn only_y_or_yes_confirms() {
        for yes in ["y\n", "Y", " yes \n", "YES"] {
            assert!(is_yes(yes), "{yes:?}");
        }
        for no in ["", "\n", "n", "no", "yep", "y es"] {
            assert!(!is_yes(no), "{no:?}");
        }
    }
}
