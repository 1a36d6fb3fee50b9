//! One snapshot file's upload (`snapshots.rs` decides which files and when): its name on the
//! server, the first `cap` bytes read off the runtime, `SnapshotStatus` asked how much the server
//! already holds, then the rest in 1 MiB chunks over `UploadSnapshot`.

use coroner_proto::v1;
use sha2::{Digest, Sha256};
use std::path::Path;
use std::time::{Duration, SystemTime};

const CHUNK: usize = 1 << 20;
/// How long one `SnapshotStatus` or `UploadSnapshot` call may take before it is retried.
const CALL_LIMIT: Duration = Duration::from_secs(30);

pub type Client = v1::ingest_client::IngestClient<coroner_proto::auth::Channel>;

pub enum Failure {
    /// The server will not take it as it is: not tried again until the file changes.
    Refused(String),
    /// Tried again at the next poll.
    Retry(String),
}

/// Reads up to `cap` bytes of `path` and uploads them, under the agent's `rank` or else the one
/// the file's name states; answers the name it was filed under.
pub async fn upload(mut client: Client, session: &str, cap: u64, rank: Option<u32>, path: &Path, folder: &str, mtime: SystemTime) -> Result<String, Failure> {
    let safe = safe_file_name(path);
    let rank = rank.or_else(|| rank_in_name(&safe));
    let kind = coroner_snapshot::kind_of(folder, &safe).to_string();
    let name = format!("{folder}/{safe}");
    let (bytes, full) = read_capped(path, cap).await?;
    let header = v1::SnapshotHeader {
        rank,
        kind,
        name: name.clone(),
        size: bytes.len() as u64,
        sha256: hex::encode(Sha256::digest(&bytes)),
        captured_ns: mtime.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0),
        original_size: (full > bytes.len() as u64).then_some(full),
    };
    let Some(offset) = resume_at(&mut client, session, &header, bytes.len()).await? else { return Ok(name) };
    let call = client.upload_snapshot(tokio_stream::iter(chunks(session, &header, &bytes, offset)));
    match tokio::time::timeout(CALL_LIMIT, call).await {
        Ok(Ok(_)) => Ok(name),
        Ok(Err(st)) if matches!(st.code(), tonic::Code::InvalidArgument | tonic::Code::Unimplemented | tonic::Code::PermissionDenied) => {
            Err(Failure::Refused(st.message().to_string()))
        }
        Ok(Err(st)) => Err(Failure::Retry(st.to_string())),
        Err(_) => Err(Failure::Retry("timed out".into())),
    }
}

/// The rank a file name states: `rank3.stack.txt`, `nccl_trace_rank_3`.
pub fn rank_in_name(name: &str) -> Option<u32> {
    if let Some(at) = name.find("nccl_trace_rank_") {
        let d: String = name[at + 16..].chars().take_while(char::is_ascii_digit).collect();
        return d.parse().ok();
    }
    let d: String = name.strip_prefix("rank")?.chars().take_while(char::is_ascii_digit).collect();
    d.parse().ok()
}

/// The file's name as the server may file it: no separators, control characters, leading dot
/// or `..`.
fn safe_file_name(path: &Path) -> String {
    let file_name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let safe: String = file_name.chars().map(|c| if c == '/' || c == '\\' || c.is_control() { '_' } else { c }).collect();
    if safe.is_empty() || safe.starts_with('.') { format!("_{safe}") } else { safe }.replace("..", "__")
}

/// The first `cap` bytes of `path` and its whole length, read on a blocking thread.
async fn read_capped(path: &Path, cap: u64) -> Result<(Vec<u8>, u64), Failure> {
    let p = path.to_path_buf();
    let read = tokio::task::spawn_blocking(move || -> std::io::Result<(Vec<u8>, u64)> {
        use std::io::Read;
        let f = std::fs::File::open(&p)?;
        let full = f.metadata()?.len();
        let mut bytes = Vec::new();
        f.take(cap).read_to_end(&mut bytes)?;
        Ok((bytes, full))
    })
    .await
    .map_err(|e| Failure::Retry(e.to_string()))?;
    read.map_err(|e| Failure::Refused(format!("read: {e}")))
}

/// Where the upload starts: bytes the server has need not travel again, all of them (`None`: the
/// content is stored, perhaps from another job) or the start of an upload a broken connection or
/// a restart cut short.
async fn resume_at(client: &mut Client, session: &str, header: &v1::SnapshotHeader, len: usize) -> Result<Option<usize>, Failure> {
    let status = client.snapshot_status(v1::SnapshotStatusRequest { session_id: session.to_string(), header: Some(header.clone()) });
    match tokio::time::timeout(CALL_LIMIT, status).await {
        Ok(Ok(r)) if r.get_ref().stored => Ok(None),
        Ok(Ok(r)) => Ok(Some((r.get_ref().resume_offset as usize).min(len))),
        // A server from before SnapshotStatus: send everything.
        Ok(Err(st)) if st.code() == tonic::Code::Unimplemented => Ok(Some(0)),
        Ok(Err(st)) if st.code() == tonic::Code::InvalidArgument => Err(Failure::Refused(st.message().to_string())),
        Ok(Err(st)) => Err(Failure::Retry(st.to_string())),
        Err(_) => Err(Failure::Retry("SnapshotStatus timed out".into())),
    }
}

/// The chunks from `offset` to the end, the header on the first and `last` on the last. At the
/// end already (the stream broke before the server could finish): one empty last chunk.
fn chunks(session: &str, header: &v1::SnapshotHeader, bytes: &[u8], mut offset: usize) -> Vec<v1::SnapshotChunk> {
    let first = offset;
    let mut chunks = Vec::new();
    loop {
        let end = (offset + CHUNK).min(bytes.len());
        chunks.push(v1::SnapshotChunk {
            session_id: session.to_string(),
            header: (offset == first).then(|| header.clone()),
            offset: offset as u64,
            data: bytes[offset..end].to_vec(),
            last: end == bytes.len(),
        });
        if end == bytes.len() {
            return chunks;
        }
        offset = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_from_names() {
        assert_eq!(rank_in_name("nccl_trace_rank_12"), Some(12));
        assert_eq!(rank_in_name("rank3.stack.txt"), Some(3));
        assert_eq!(rank_in_name("core.1234"), None);
    }

    #[test]
    fn names_are_filed_safely() {
        assert_eq!(safe_file_name(Path::new("/s/rank3.stack.txt")), "rank3.stack.txt");
        assert_eq!(safe_file_name(Path::new("/s/.hidden")), "_.hidden");
        assert_eq!(safe_file_name(Path::new("/s/a\u{7}b..c")), "a_b__c");
    }

    #[test]
    fn chunks_cover_the_rest_once_with_the_header_first() {
        let header = v1::SnapshotHeader { name: "snapshots/x".into(), ..Default::default() };
        let bytes = vec![7u8; CHUNK + 10];
        let c = chunks("s", &header, &bytes, 5);
        assert_eq!(
            c.iter().map(|c| (c.offset, c.data.len(), c.last, c.header.is_some())).collect::<Vec<_>>(),
            vec![(5, CHUNK, false, true), (CHUNK as u64 + 5, 5, true, false)]
        );
        let at_end = chunks("s", &header, &bytes, bytes.len());
        assert_eq!(at_end.len(), 1);
        assert!(at_end[0].last && at_end[0].data.is_empty() && at_end[0].header.is_some());
    }
}
