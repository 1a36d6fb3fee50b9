//! `coroner import`: reads a bundle or logs like `analyze` does and ships them to coronerd over the
//! same ingest protocol the agents speak, one session per rank, capture times preserved.

use anyhow::{bail, Context};
use coroner_bundle::Sink;
use coroner_model::{LogLine, ProcessEnd, Rank, SnapshotSummary};
use coroner_proto::auth::Channel;
use coroner_proto::convert::line_to_wire;
use coroner_proto::v1::{self, ingest_client::IngestClient};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

const BATCH_LINES: usize = 2000;
const CHUNK_BYTES: usize = 1 << 20;

#[derive(Default)]
struct Collected {
    lines: BTreeMap<Option<Rank>, Vec<LogLine>>,
    ends: Vec<ProcessEnd>,
    world_size: Option<u32>,
    snapshots: Vec<(SnapshotSummary, PathBuf)>,
    notes: Vec<String>,
}

impl Sink for Collected {
    fn line(&mut self, line: LogLine) {
        self.lines.entry(line.rank).or_default().push(line);
    }
    fn end(&mut self, end: ProcessEnd) {
        self.ends.push(end);
    }
    fn world_size(&mut self, n: u32) {
        self.world_size = Some(n);
    }
    fn snapshot(&mut self, summary: SnapshotSummary, _facts: coroner_bundle::SnapshotFacts, bundle_dir: &Path) {
        let path = bundle_dir.join(&summary.name);
        self.snapshots.push((summary, path));
    }
    fn note(&mut self, note: String) {
        self.notes.push(note);
    }
    fn finished(&mut self) {}
}

/// The host each rank's session names: the bundle does not say where its ranks ran, so the
/// importer says it (`--host` for every rank, `--host-map` per rank), else `import`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hosts {
    pub default: Option<String>,
    pub per_rank: BTreeMap<u32, String>,
}

impl Hosts {
    /// `map` entries are `RANK=HOST` or `FIRST-LAST=HOST`, each flag value may hold several
    /// separated by commas (`0-3=node-a,4-7=node-b`).
    pub fn parse(default: Option<String>, map: &[String]) -> anyhow::Result<Hosts> {
        let mut per_rank = BTreeMap::new();
        for entry in map.iter().flat_map(|m| m.split(',')).map(str::trim).filter(|e| !e.is_empty()) {
            let bad = || anyhow::anyhow!("--host-map entry {entry:?} is not RANK=HOST or FIRST-LAST=HOST (like 0-3=node-a)");
            let (ranks, host) = entry.split_once('=').ok_or_else(bad)?;
            let host = host.trim();
            if host.is_empty() {
                return Err(bad());
            }
            let (first, last) = match ranks.split_once('-') {
                Some((a, b)) => (a.trim().parse::<u32>().map_err(|_| bad())?, b.trim().parse::<u32>().map_err(|_| bad())?),
                None => {
                    let r = ranks.trim().parse::<u32>().map_err(|_| bad())?;
                    (r, r)
                }
            };
            if last < first || last - first > 1 << 20 {
                return Err(bad());
            }
            for r in first..=last {
                per_rank.insert(r, host.to_string());
            }
        }
        Ok(Hosts { default: default.filter(|h| !h.trim().is_empty()), per_rank })
    }

    fn of(&self, rank: Option<Rank>) -> String {
        rank.and_then(|r| self.per_rank.get(&r.0)).or(self.default.as_ref()).cloned().unwrap_or_else(|| "import".to_string())
    }
}

pub async fn run(server: &crate::remote::Server, paths: &[PathBuf], job: &str, hosts: &Hosts) -> anyhow::Result<ExitCode> {
    coroner_model::JobId::parse(job).with_context(|| format!("job id {job:?}"))?;
    let mut collected = Collected::default();
    coroner_bundle::load_paths(paths, &mut collected)?;
    for n in &collected.notes {
        crate::say_err!("coroner: warning: {n}");
    }
    let mut client = IngestClient::new(crate::remote::channel(server).await?);
    let mut total = 0usize;
    let mut ranks: Vec<Option<Rank>> = collected.lines.keys().copied().collect();
    for end in &collected.ends {
        if !ranks.contains(&Some(end.rank)) {
            ranks.push(Some(end.rank));
        }
    }
    for rank in ranks {
        let session = open(&mut client, job, rank, collected.world_size, hosts.of(rank)).await?;
        if let Some(lines) = collected.lines.get(&rank) {
            total += ship(&mut client, &session, lines).await?;
        }
        for end in collected.ends.iter().filter(|e| Some(e.rank) == rank) {
            client
                .report_exit(v1::ProcessExit {
                    session_id: session.clone(),
                    rank: Some(end.rank.0),
                    exit_code: end.exit_code,
                    signal: end.signal,
                    at_ns: end.at_ns.unwrap_or(0),
                    dropped_lines: 0,
                    notes: Vec::new(),
                })
                .await
                .context("report a process end")?;
        }
        for (summary, path) in collected.snapshots.iter().filter(|(s, _)| s.rank == rank) {
            upload(&mut client, &session, summary, path).await?;
        }
    }
    // Snapshots of no rank (host/) go with a rankless session.
    let rankless: Vec<_> = collected.snapshots.iter().filter(|(s, _)| s.rank.is_none()).collect();
    if !rankless.is_empty() {
        let session = open(&mut client, job, None, collected.world_size, hosts.of(None)).await?;
        for (summary, path) in rankless {
            upload(&mut client, &session, summary, path).await?;
        }
    }
    crate::say_err!("coroner: imported {total} lines and {} snapshots as job {job}", collected.snapshots.len());
    Ok(ExitCode::SUCCESS)
}

async fn open(client: &mut IngestClient<Channel>, job: &str, rank: Option<Rank>, world: Option<u32>, host: String) -> anyhow::Result<String> {
    let resp = client
        .open_session(v1::OpenSessionRequest {
            job_id: job.to_string(),
            rank: rank.map(|r| r.0),
            world_size: world,
            host,
            launcher: if rank.is_some() { "import".into() } else { "import-launcher".into() },
            agent_instance: format!("import-{}", std::process::id()),
            ..Default::default()
        })
        .await
        .context("open an ingest session")?;
    Ok(resp.into_inner().session_id)
}

async fn ship(client: &mut IngestClient<Channel>, session: &str, lines: &[LogLine]) -> anyhow::Result<usize> {
    let batches: Vec<v1::LogBatch> = lines
        .chunks(BATCH_LINES)
        .enumerate()
        .map(|(i, chunk)| v1::LogBatch {
            session_id: session.to_string(),
            batch_id: i as u64,
            lines: chunk.iter().map(line_to_wire).collect(),
            clock: Vec::new(),
            spool_backlog: 0,
        })
        .collect();
    let expected = batches.len();
    let mut acks = client.ship_logs(tokio_stream::iter(batches)).await.context("ship log batches")?.into_inner();
    let mut acked = 0;
    while let Some(ack) = acks.message().await.context("wait for acknowledgements")? {
        let _ = ack;
        acked += 1;
    }
    if acked != expected {
        bail!("coronerd acknowledged {acked} of {expected} batches; run the import again (it is idempotent)");
    }
    Ok(lines.len())
}

async fn upload(client: &mut IngestClient<Channel>, session: &str, s: &SnapshotSummary, path: &Path) -> anyhow::Result<()> {
    let bytes = std::fs::read(path).with_context(|| format!("read snapshot {}", path.display()))?;
    let sha = hex::encode(Sha256::digest(&bytes));
    let header = v1::SnapshotHeader {
        rank: s.rank.map(|r| r.0),
        kind: s.kind.clone(),
        name: s.name.clone(),
        size: bytes.len() as u64,
        sha256: sha,
        captured_ns: 0,
        original_size: None,
    };
    let n = bytes.len().div_ceil(CHUNK_BYTES).max(1);
    let chunks: Vec<v1::SnapshotChunk> = (0..n)
        .map(|i| {
            let start = i * CHUNK_BYTES;
            let end = (start + CHUNK_BYTES).min(bytes.len());
            v1::SnapshotChunk {
                session_id: session.to_string(),
                header: (i == 0).then(|| header.clone()),
                offset: start as u64,
                data: bytes[start..end].to_vec(),
                last: i + 1 == n,
            }
        })
        .collect();
    match client.upload_snapshot(tokio_stream::iter(chunks)).await {
        Ok(_) => Ok(()),
        // This one snapshot is refused (its name, say): the rest of the import goes on.
        Err(status) if status.code() == tonic::Code::InvalidArgument => {
            crate::say_err!("coroner: warning: snapshot {} not imported: {}", s.name, status.message());
            Ok(())
        }
        Err(status) => Err(status).with_context(|| format!("upload snapshot {}", s.name)),
    }
}

#[cfg(test)]
mod tests {
    use super::Hosts;
    use coroner_model::Rank;

    #[test]
    fn host_maps_name_ranks_and_ranges() {
        let h = Hosts::parse(Some("rest".into()), &["0=a,2-3=b".into(), "5=c".into()]).expect("valid");
        let of = |r: u32| h.of(Some(Rank(r)));
        assert_eq!((of(0), of(1), of(2), of(3), of(5)), ("a".into(), "rest".into(), "b".into(), "b".into(), "c".into()));
        assert_eq!(h.of(None), "rest");
        assert_eq!(Hosts::parse(None, &[]).expect("empty").of(Some(Rank(0))), "import");
        for bad in ["0", "x=a", "3-1=a", "0="] {
            assert!(Hosts::parse(None, &[bad.into()]).unwrap_err().to_string().contains("is not RANK=HOST"), "{bad}");
        }
    }
}
