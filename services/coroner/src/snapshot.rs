//! `coroner snapshot list JOB` and `coroner snapshot get JOB SHA256 -o FILE`.

use crate::remote::{connect, every_page, status_message};
use anyhow::Context;
use coroner_proto::v1;
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use tokio_stream::StreamExt;

pub async fn list(server: &crate::remote::Server, job: &str, json: bool) -> anyhow::Result<ExitCode> {
    let client = connect(server).await?;
    let snaps = every_page(|page_token| {
        let mut client = client.clone();
        let job_id = job.to_string();
        async move {
            let page = client.list_snapshots(v1::ListSnapshotsRequest { job_id, page_token, ..Default::default() }).await?.into_inner();
            Ok((page.snapshots, page.next_page_token))
        }
    })
    .await?;
    if json {
        let rows: Vec<serde_json::Value> = snaps
            .iter()
            .map(|s| serde_json::json!({"rank": s.rank, "kind": s.kind, "name": s.name, "size": s.size, "stored_bytes": s.stored_bytes, "sha256": s.sha256}))
            .collect();
        crate::term::out_json(&serde_json::to_string_pretty(&rows)?);
    } else {
        crate::say!("{:<64} {:>6} {:<16} {:>12}  NAME", "SHA256", "RANK", "KIND", "SIZE");
        for s in &snaps {
            let rank = s.rank.map(|r| r.to_string()).unwrap_or_else(|| "-".into());
            crate::say!("{:<64} {:>6} {:<16} {:>12}  {}", s.sha256, rank, s.kind, s.size, s.name);
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn get(server: &crate::remote::Server, job: &str, sha256: &str, output: &Path) -> anyhow::Result<ExitCode> {
    let mut client = connect(server).await?;
    let mut stream =
        client.get_snapshot(v1::GetSnapshotRequest { job_id: job.to_string(), sha256: sha256.to_string() }).await.map_err(status_message)?.into_inner();
    let tmp = output.with_extension("part");
    let mut file = std::fs::File::create(&tmp).with_context(|| format!("create {}", tmp.display()))?;
    let mut hasher = Sha256::new();
    let mut info = None;
    let mut written = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(status_message)?;
        if chunk.info.is_some() {
            info = chunk.info;
        }
        anyhow::ensure!(chunk.offset == written, "the server sent bytes at offset {} after {written}", chunk.offset);
        hasher.update(&chunk.data);
        file.write_all(&chunk.data).with_context(|| format!("write {}", tmp.display()))?;
        written += chunk.data.len() as u64;
    }
    file.sync_all().with_context(|| format!("write {}", tmp.display()))?;
    std::fs::rename(&tmp, output).with_context(|| format!("move the download to {}", output.display()))?;
    let info = info.unwrap_or_default();
    if written < info.size {
        crate::say_err!("note: the server kept only the first {written} of {} bytes of {} (its snapshot cap)", info.size, info.name);
    } else if hex::encode(hasher.finalize()) != sha256.to_ascii_lowercase() {
        anyhow::bail!("the bytes written to {} do not match sha256 {sha256}", output.display());
    }
    crate::say_err!("wrote {written} bytes of {} to {}", info.name, output.display());
    Ok(ExitCode::SUCCESS)
}
