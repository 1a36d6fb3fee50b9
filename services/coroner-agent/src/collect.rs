//! What the agent arranges before the child starts and gathers after it fails: PyTorch's flight
//! recorder switched on (unless the user set it), where core files land, and, on failure,
//! `nvidia-smi -q -x` and the kernel log's Xid / ECC / OOM-killer lines, each bounded in time.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Environment for the child: flight recorder on, dumping into `fr_dir`, and a dump on watchdog
/// timeout. Variables the user already set (in `env`) are left alone, and the
/// old and new names are treated as one setting.
pub fn child_env(fr_dir: &Path, env: impl Fn(&str) -> Option<String>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let prefix = fr_dir.join("nccl_trace_rank_").display().to_string();
    let groups: [(&[&str], String); 3] = [
        (&["TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"], "2000".into()),
        (&["TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"], prefix),
        (&["TORCH_NCCL_DUMP_ON_TIMEOUT"], "1".into()),
    ];
    for (names, value) in groups {
        if names.iter().all(|n| env(n).is_none()) {
            for n in names {
                out.insert(n.to_string(), value.clone());
            }
        }
    }
    out
}

/// Where core files go, from `/proc/sys/kernel/core_pattern`: a folder and the literal file-name
/// prefix before the first `%`. None for a pipe to a handler (`|/usr/lib/systemd/...`) or a
/// pattern with `%` in its folder.
pub fn core_location(pattern: &str, cwd: &Path) -> Option<(PathBuf, String)> {
    let p = pattern.trim();
    if p.is_empty() || p.starts_with('|') {
        return None;
    }
    let path = Path::new(p);
    let dir = match path.parent() {
        Some(d) if d.as_os_str().is_empty() => cwd.to_path_buf(),
        Some(d) if d.is_absolute() => d.to_path_buf(),
        Some(d) => cwd.join(d),
        None => cwd.to_path_buf(),
    };
    if dir.to_string_lossy().contains('%') {
        return None;
    }
    let name = path.file_name()?.to_string_lossy().into_owned();
    let prefix = name.split('%').next().unwrap_or_default().to_string();
    (!prefix.is_empty()).then_some((dir, prefix))
}

/// Core files in `dir` starting with `prefix`, written at or after `since`.
pub fn cores_since(dir: &Path, prefix: &str, since: SystemTime) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut out: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .filter(|e| e.metadata().ok().filter(|m| m.is_file()).and_then(|m| m.modified().ok()).is_some_and(|t| t >= since))
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

fn on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(program)).find(|p| p.is_file())
}

/// Runs a program with a time limit; its stdout, or None when it is missing, fails or times out.
async fn output_within(program: &str, args: &[&str], limit: Duration) -> Option<Vec<u8>> {
    let exe = on_path(program)?;
    let child = tokio::process::Command::new(exe)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .ok()?;
    match tokio::time::timeout(limit, child.wait_with_output()).await {
        Ok(Ok(out)) if out.status.success() && !out.stdout.is_empty() => Some(out.stdout),
        Ok(_) => None,
        Err(_) => {
            tracing::debug!("{program} took longer than {limit:?}; skipped");
            None
        }
    }
}

/// Kernel log lines worth keeping: Xid, ECC, AER, OOM killer, fallen off the bus.
pub fn kernel_lines(log: &[u8], max: usize) -> Vec<String> {
    let text = String::from_utf8_lossy(log);
    let mut keep: Vec<String> = text
        .lines()
        .filter(|l| {
            let mut ev = Vec::new();
            coroner_parse::kernel::classify(l, &mut ev)
        })
        .map(str::to_string)
        .collect();
    if keep.len() > max {
        keep.drain(..keep.len() - max);
    }
    keep
}

/// After a failure: writes `<prefix>nvidia-smi-q.xml` and `<prefix>dmesg-xid.txt` into `dir`
/// where they can be had within `limit` each (run side by side). Returns the files written.
pub async fn on_failure(dir: &Path, prefix: &str, limit: Duration) -> Vec<PathBuf> {
    let (smi, dmesg) = tokio::join!(output_within("nvidia-smi", &["-q", "-x"], limit), output_within("dmesg", &[], limit),);
    let mut written = Vec::new();
    if let Some(xml) = smi {
        let p = dir.join(format!("{prefix}nvidia-smi-q.xml"));
        match std::fs::write(&p, xml) {
            Ok(()) => written.push(p),
            Err(e) => tracing::warn!("save nvidia-smi output to {}: {e}", p.display()),
        }
    }
    if let Some(log) = dmesg {
        let lines = kernel_lines(&log, 200);
        if !lines.is_empty() {
            let p = dir.join(format!("{prefix}dmesg-xid.txt"));
            match std::fs::write(&p, lines.join("\n") + "\n") {
                Ok(()) => written.push(p),
                Err(e) => tracing::warn!("save kernel log lines to {}: {e}", p.display()),
            }
        }
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flight_recorder_env_respects_the_user() {
        let none = |_: &str| None;
        let env = child_env(Path::new("/spool/fr"), none);
        assert_eq!(env["TORCH_FR_BUFFER_SIZE"], "2000");
        assert_eq!(env["TORCH_NCCL_TRACE_BUFFER_SIZE"], "2000");
        assert_eq!(env["TORCH_FR_DUMP_TEMP_FILE"], "/spool/fr/nccl_trace_rank_");
        assert_eq!(env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"], "/spool/fr/nccl_trace_rank_");
        assert_eq!(env["TORCH_NCCL_DUMP_ON_TIMEOUT"], "1");
        // The user set the old name: neither name is touched.
        let user = |k: &str| (k == "TORCH_NCCL_TRACE_BUFFER_SIZE" || k == "TORCH_NCCL_DUMP_ON_TIMEOUT").then(|| "0".to_string());
        let env = child_env(Path::new("/x"), user);
        assert!(!env.contains_key("TORCH_FR_BUFFER_SIZE") && !env.contains_key("TORCH_NCCL_TRACE_BUFFER_SIZE"));
        assert!(!env.contains_key("TORCH_NCCL_DUMP_ON_TIMEOUT"));
        assert!(env.contains_key("TORCH_FR_DUMP_TEMP_FILE"));
    }

    #[test]
    fn core_patterns() {
        let cwd = Path::new("/work/job");
        assert_eq!(core_location("core", cwd), Some((cwd.into(), "core".into())));
        assert_eq!(core_location("/var/crash/core.%e.%p\n", cwd), Some(("/var/crash".into(), "core.".into())));
        assert_eq!(core_location("cores/c-%p", cwd), Some(("/work/job/cores".into(), "c-".into())));
        assert_eq!(core_location("|/usr/lib/systemd/systemd-coredump %P", cwd), None);
        assert_eq!(core_location("/var/%h/core", cwd), None);
        assert_eq!(core_location("%e.core", cwd), None);
    }

    #[test]
    fn only_new_cores_with_the_prefix() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("core.1"), b"x").unwrap();
        std::fs::write(dir.path().join("notes.txt"), b"x").unwrap();
        let found = cores_since(dir.path(), "core", SystemTime::UNIX_EPOCH);
        assert_eq!(found, vec![dir.path().join("core.1")]);
        let later = SystemTime::now() + Duration::from_secs(60);
        assert!(cores_since(dir.path(), "core", later).is_empty());
    }

    #[test]
    fn kernel_lines_keep_the_last_matches() {
        let log = b"[1.0] boot\n[2.0] NVRM: Xid (PCI:0000:0a:00): 79, pid=1, GPU has fallen off the bus.\n[3.0] Out of memory: Killed process 42 (python)\n";
        assert_eq!(kernel_lines(log, 10).len(), 2);
        assert_eq!(kernel_lines(log, 1), vec!["[3.0] Out of memory: Killed process 42 (python)"]);
    }
}
