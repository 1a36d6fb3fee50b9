//! `coroner import`: reads a bundle or logs like `analyze` does and ships them to coronerd over the
//! same ingest protocol the agents speak, one session per rank, capture times preserved.
//!
//! Memory is bounded whatever the input's size: a loader thread reads the input as `analyze`
//! does (line by line, `coroner_bundle`) and hands lines over in chunks through a channel of a
//! few chunks; the shipper (`import/shipper.rs`) sends each rank's lines as they come, in
//! batches of at most [`shipper::BATCH_LINES`] lines or [`shipper::BATCH_BYTES`], with at most
//! [`shipper::IN_FLIGHT_BATCHES`] queued per stream beside HTTP/2's flow control. Process ends
//! and snapshots (one small record each) are sent after the lines.

mod shipper;

use anyhow::{bail, Context};
use coroner_bundle::{Progress, Sink};
use coroner_model::{LogLine, ProcessEnd, Rank, SnapshotSummary};
use coroner_proto::auth::Channel;
use coroner_proto::v1::{self, ingest_client::IngestClient};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tokio::sync::mpsc;

const CHUNK_BYTES: usize = 1 << 20;
/// Lines the loader hands over at once, and the bytes at which a chunk goes sooner.
const HANDOVER_LINES: usize = 1024;
const HANDOVER_BYTES: usize = 1 << 20;
/// Chunks waiting between the loader and the shipper.
const HANDOVER_CHUNKS: usize = 4;

/// What the loader thread hands the shipper.
enum Item {
    Lines(Vec<LogLine>),
    End(ProcessEnd),
    WorldSize(u32),
    Snapshot(SnapshotSummary, PathBuf),
    Note(String),
}

/// The sink the loader thread reads into: lines in chunks down a bounded channel (the loader
/// waits while the shipper is behind), the progress to the bar.
struct Handover {
    tx: mpsc::Sender<Item>,
    chunk: Vec<LogLine>,
    chunk_bytes: usize,
    bar: crate::progress_bar::Bar,
}

impl Handover {
    fn send(&mut self, item: Item) {
        // A closed channel means the shipper failed; its error is what the user sees.
        let _ = self.tx.blocking_send(item);
    }

    fn flush(&mut self) {
        if !self.chunk.is_empty() {
            let chunk = std::mem::take(&mut self.chunk);
            self.chunk_bytes = 0;
            self.send(Item::Lines(chunk));
        }
    }
}

impl Sink for Handover {
    fn line(&mut self, line: LogLine) {
        self.chunk_bytes += line.bytes.len();
        self.chunk.push(line);
        if self.chunk.len() >= HANDOVER_LINES || self.chunk_bytes >= HANDOVER_BYTES {
            self.flush();
        }
    }
    fn end(&mut self, end: ProcessEnd) {
        self.send(Item::End(end));
    }
    fn world_size(&mut self, n: u32) {
        self.flush();
        self.send(Item::WorldSize(n));
    }
    fn snapshot(&mut self, summary: SnapshotSummary, _facts: coroner_bundle::SnapshotFacts, bundle_dir: &Path) {
        let path = bundle_dir.join(&summary.name);
        self.send(Item::Snapshot(summary, path));
    }
    fn note(&mut self, note: String) {
        self.send(Item::Note(note));
    }
    fn finished(&mut self) {
        self.flush();
    }
    fn progress(&mut self, progress: &Progress) {
        self.bar.update(progress);
    }
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
    for p in paths.iter().filter(|p| p.as_os_str() != "-") {
        if std::fs::symlink_metadata(p).is_err() {
            bail!("{} does not exist", p.display());
        }
    }
    let client = IngestClient::new(crate::remote::channel(server).await?);
    let bar = crate::progress_bar::Bar::on_stderr(true);
    let (tx, mut rx) = mpsc::channel(HANDOVER_CHUNKS);
    let loader = {
        let (paths, bar) = (paths.to_vec(), bar.clone());
        std::thread::spawn(move || coroner_bundle::load_paths(&paths, &mut Handover { tx, chunk: Vec::new(), chunk_bytes: 0, bar }))
    };
    let mut ship = shipper::Shipper::new(client.clone(), job, hosts);
    let (mut ends, mut snapshots, mut notes) = (Vec::new(), Vec::new(), Vec::new());
    while let Some(item) = rx.recv().await {
        match item {
            Item::Lines(lines) => {
                for l in lines {
                    ship.line(l).await?;
                }
            }
            Item::End(e) => ends.push(e),
            Item::WorldSize(n) => ship.world_size = Some(n),
            Item::Snapshot(s, p) => snapshots.push((s, p)),
            Item::Note(n) => notes.push(n),
        }
    }
    ship.close_stream().await?;
    bar.clear();
    let loaded = tokio::task::spawn_blocking(move || loader.join()).await.context("wait for the reader")?;
    loaded.map_err(|_| anyhow::anyhow!("reading the input failed unexpectedly (a bug: please report it)"))??;
    for n in &notes {
        crate::say_err!("coroner: warning: {n}");
    }
    let mut client = client;
    for end in &ends {
        let session = ship.session(Some(end.rank)).await?;
        client
            .report_exit(v1::ProcessExit {
                session_id: session,
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
    for (summary, path) in &snapshots {
        let session = ship.session(summary.rank).await?;
        upload(&mut client, &session, summary, path).await?;
    }
    crate::say_err!("coroner: imported {} lines and {} snapshots as job {job}", ship.total_lines, snapshots.len());
    Ok(ExitCode::SUCCESS)
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
