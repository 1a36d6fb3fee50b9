//! `coroner-agent ship --spool-dir DIR`: sends what agents that have exited left in their spools
//! (lines the server never acknowledged, process ends it never heard of), each under the session
//! identity its own agent used, so the server files and deduplicates them exactly as if that
//! agent had delivered them. A spool whose agent still runs (it holds the spool's lock) is left
//! alone. A Slurm epilog or a node's cleanup job can run it after the job's agents are gone.

use crate::connection::{open_channel, servers};
use crate::spool;
use crate::ShipArgs;
use std::fs::File;
use std::path::{Path, PathBuf};

/// How deep below DIR spools are looked for (`<dir>/<job>/<rank-R | node-HOST>/<instance>.spool`).
const MAX_DEPTH: usize = 4;

pub fn run(args: &ShipArgs) -> i32 {
    let auth = match coroner_proto::auth::ClientAuth::default().with_token(args.to.token.as_deref()) {
        Ok(auth) => auth,
        Err(e) => {
            tracing::error!("--token / CORONER_TOKEN: {e}");
            return 2;
        }
    };
    let auth = match auth.with_tls_ca(args.to.tls_ca.as_deref()) {
        Ok(auth) => auth,
        Err(e) => {
            tracing::error!("--tls-ca / CORONER_TLS_CA: {e}");
            return 2;
        }
    };
    let dir = args.spool_dir.clone().unwrap_or_else(|| std::env::temp_dir().join("coroner-spool"));
    let found = leftover_spools(&dir);
    if found.is_empty() {
        tracing::info!("no spools left in {}", dir.display());
        return 0;
    }
    let total = found.len();
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("start the runtime: {e}");
            return 2;
        }
    };
    let shipped = rt.block_on(async {
        let mut channel = None;
        for server in servers(&args.to.server) {
            match open_channel(server, &auth).await {
                Ok(c) => {
                    channel = Some(c);
                    break;
                }
                Err(e) => tracing::warn!("{e}"),
            }
        }
        let Some(channel) = channel else { return 0 };
        let mut shipped = 0;
        for (path, file) in found {
            if crate::replay::replay(channel.clone(), path, file).await {
                shipped += 1;
            }
        }
        shipped
    });
    if shipped == total {
        tracing::info!("shipped {total} spools from {}", dir.display());
        0
    } else {
        tracing::warn!("shipped {shipped} of {total} spools from {}; the rest stay for the next try", dir.display());
        1
    }
}

/// Every spool file below `dir` that no running agent holds, each opened and locked.
fn leftover_spools(dir: &Path) -> Vec<(PathBuf, File)> {
    let mut found = Vec::new();
    let mut folders = vec![(dir.to_path_buf(), 0)];
    while let Some((folder, depth)) = folders.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else { continue };
        let mut has_spools = false;
        for entry in entries.flatten() {
            let Ok(kind) = entry.file_type() else { continue };
            if kind.is_dir() && depth < MAX_DEPTH {
                folders.push((entry.path(), depth + 1));
            } else if kind.is_file() && entry.path().extension().is_some_and(|e| e == "spool") {
                has_spools = true;
            }
        }
        if has_spools {
            found.extend(spool::orphans(&folder, Path::new("")));
        }
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use coroner_proto::v1;

    #[test]
    fn finds_spools_at_any_rank_key_and_skips_those_a_live_agent_holds() {
        let dir = tempfile::tempdir().unwrap();
        let session = v1::OpenSessionRequest { job_id: "j".into(), rank: Some(1), agent_instance: "a".into(), ..Default::default() };
        let key = dir.path().join("j").join("rank-1");
        std::fs::create_dir_all(&key).unwrap();
        let left = spool::SpoolWriter::create(&key.join("a.spool"), &session, u64::MAX).unwrap();
        drop(left);
        let node = dir.path().join("j").join("node-h");
        std::fs::create_dir_all(&node).unwrap();
        let _live = spool::SpoolWriter::create(&node.join("b.spool"), &session, u64::MAX).unwrap();
        let found = leftover_spools(dir.path());
        let names: Vec<_> = found.iter().map(|(p, _)| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
        assert_eq!(names, vec!["a.spool"]);
    }
}
