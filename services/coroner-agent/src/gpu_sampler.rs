//! Periodic GPU memory and utilisation samples while the child runs, so the report can show
//! memory climbing before an out-of-memory error.
//!
//! Every interval it runs `nvidia-smi --query-gpu=...` (bounded by [`QUERY_LIMIT`]; a slow driver
//! never stalls anything but the next sample) and hands one line per GPU, in the form of
//! [`GpuSample::to_line`], to the agent's own `file` stream: the samples are then spooled,
//! shipped, indexed and replayed like every other line. Without `nvidia-smi` it stops quietly
//! after the first try. A rank's agent samples only its rank's GPU (see [`devices_to_sample`]).

use crate::capture::SplitLine;
use bytes::Bytes;
use coroner_model::now_ns;
use coroner_model::{GpuSample, GPU_QUERY_FIELDS};
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long one `nvidia-smi` query may take.
const QUERY_LIMIT: Duration = Duration::from_secs(5);

pub struct Sampler {
    stop: mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Sampler {
    /// Samples every `every` until [`Sampler::stop`]; `sink` gets each round's lines.
    pub fn start(every: Duration, program: PathBuf, visible: Option<String>, mut sink: impl FnMut(Vec<SplitLine>) + Send + 'static) -> Sampler {
        let (stop, stopped) = mpsc::channel();
        let thread = std::thread::spawn(move || loop {
            match query(&program, visible.as_deref()) {
                Ok(samples) => {
                    let at = now_ns();
                    let lines = samples.iter().map(|s| SplitLine { bytes: Bytes::from(s.to_line()), capture_ns: at, truncated: 0 }).collect::<Vec<_>>();
                    if !lines.is_empty() {
                        sink(lines);
                    }
                }
                Err(QueryError::Missing) => {
                    tracing::debug!("no {}: GPU memory is not sampled", program.display());
                    return;
                }
                Err(QueryError::Failed(why)) => tracing::debug!("GPU sample: {why}"),
            }
            if !matches!(stopped.recv_timeout(every), Err(mpsc::RecvTimeoutError::Timeout)) {
                return;
            }
        });
        Sampler { stop, thread }
    }

    /// Stops sampling (at once, even mid-interval) and waits for the thread.
    pub fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
    }
}

enum QueryError {
    Missing,
    Failed(String),
}

/// The GPUs to sample, as `nvidia-smi -i` takes them, or None for all. A rank's agent samples
/// its rank's GPU: by the launchers' convention (torchrun, Slurm, MPI) a process uses the
/// `local_rank`-th of the devices `CUDA_VISIBLE_DEVICES` lists, or device `local_rank` when it
/// lists none. Indices and GPU UUIDs are understood; anything else (`-1`, MIG names) means all.
pub fn devices_to_sample(cuda_visible: Option<&str>, local_rank: Option<u32>) -> Option<String> {
    let listed: Option<Vec<&str>> = match cuda_visible.map(str::trim) {
        None | Some("") => None,
        Some(v) => {
            let ids: Vec<&str> = v.split(',').map(str::trim).collect();
            let ok = ids.iter().all(|d| (!d.is_empty() && d.chars().all(|c| c.is_ascii_digit())) || d.starts_with("GPU-"));
            if !ok {
                return None;
            }
            Some(ids)
        }
    };
    match (listed, local_rank) {
        (Some(ids), Some(l)) => Some(ids.get(l as usize).map_or_else(|| ids.join(","), |d| d.to_string())),
        (Some(ids), None) => Some(ids.join(",")),
        (None, Some(l)) => Some(l.to_string()),
        (None, None) => None,
    }
}

fn query(program: &PathBuf, visible: Option<&str>) -> Result<Vec<GpuSample>, QueryError> {
    let mut cmd = Command::new(program);
    cmd.arg(format!("--query-gpu={GPU_QUERY_FIELDS}")).arg("--format=csv,noheader,nounits");
    if let Some(v) = visible {
        cmd.args(["-i", v]);
    }
    let mut child = match cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn() {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(QueryError::Missing),
        Err(e) => return Err(QueryError::Failed(e.to_string())),
    };
    let deadline = Instant::now() + QUERY_LIMIT;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(QueryError::Failed(format!("{} took longer than {QUERY_LIMIT:?}", program.display())));
            }
        }
    }
    let mut out = String::new();
    if let Some(mut o) = child.stdout.take() {
        let _ = o.read_to_string(&mut out);
    }
    Ok(out.lines().filter_map(GpuSample::from_csv_row).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::sync::{Arc, Mutex};

    #[test]
    fn a_rank_samples_its_own_gpu() {
        assert_eq!(devices_to_sample(None, Some(1)), Some("1".into()));
        assert_eq!(devices_to_sample(Some("4,5,6,7"), Some(1)), Some("5".into()));
        assert_eq!(devices_to_sample(Some("GPU-5b84,GPU-bfdd"), Some(0)), Some("GPU-5b84".into()));
        assert_eq!(devices_to_sample(Some("3"), Some(3)), Some("3".into()), "fewer devices than local ranks: all listed");
        assert_eq!(devices_to_sample(Some("0,1"), None), Some("0,1".into()));
        assert_eq!(devices_to_sample(Some(""), None), None);
        assert_eq!(devices_to_sample(Some("-1"), Some(0)), None);
        assert_eq!(devices_to_sample(Some("MIG-1/2/3"), Some(0)), None);
        assert_eq!(devices_to_sample(None, None), None);
    }

    #[test]
    fn samples_each_gpu_every_interval_until_stopped() {
        let dir = tempfile::tempdir().expect("temp dir");
        let fake = dir.path().join("nvidia-smi");
        let args = dir.path().join("args");
        std::fs::write(
            &fake,
            format!(
                "#!/bin/sh\necho \"$@\" > {}\necho '0, 00000000:18:00.0, 1200, 143771, 97'\necho '1, 00000000:3B:00.0, [N/A], 143771, 0'\n",
                args.display()
            ),
        )
        .expect("write");
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let got: Arc<Mutex<Vec<SplitLine>>> = Arc::default();
        let sink = got.clone();
        let sampler = Sampler::start(Duration::from_millis(50), fake, Some("0".into()), move |l| sink.lock().expect("lock").extend(l));
        std::thread::sleep(Duration::from_millis(400));
        sampler.stop();
        let lines = got.lock().expect("lock").clone();
        assert!(lines.len() >= 2, "{lines:?}");
        let first = std::str::from_utf8(&lines[0].bytes).expect("text");
        assert_eq!(GpuSample::from_line(first).map(|s| (s.used_mib, s.util_pct)), Some((1200, Some(97))));
        assert!(lines.iter().all(|l| !std::str::from_utf8(&l.bytes).expect("text").contains("3B:00")), "a row without memory is no sample");
        let called = std::fs::read_to_string(args).expect("args");
        assert!(called.contains("--query-gpu=index,pci.bus_id,memory.used") && called.contains("-i 0"), "{called}");
    }

    #[test]
    fn no_nvidia_smi_means_no_samples_and_a_quick_stop() {
        let got: Arc<Mutex<usize>> = Arc::default();
        let sink = got.clone();
        let sampler =
            Sampler::start(Duration::from_secs(3600), PathBuf::from("/nonexistent/nvidia-smi"), None, move |l| *sink.lock().expect("lock") += l.len());
        let t = Instant::now();
        sampler.stop();
        assert!(t.elapsed() < Duration::from_secs(2));
        assert_eq!(*got.lock().expect("lock"), 0);
    }
}
