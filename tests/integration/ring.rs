//! The ring job (examples/ring_job.py: a multi-rank CPU "training" job, one rank made to fail)
//! under one real coroner-agent per rank, as the end-to-end and watcher tests run it. The ranks
//! meet through files in a folder of the job's (`RING_DIR`), on ports the kernel picked: no
//! port is guessed.

use coroner_tests::{binary, data_dir};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// A ring job of `world` ranks in which `fault` (kill, hang, nan, ...) strikes `fault_rank` at step 2.
pub struct Ring<'a> {
    pub server: &'a str,
    pub job: &'a str,
    pub world: u32,
    pub fault: &'a str,
    pub fault_rank: u32,
}

impl Ring<'_> {
    /// Starts one agent per rank around the job; its spools and rendezvous files go under `dir`.
    pub fn start(&self, dir: &Path) -> Vec<Child> {
        let rendezvous = dir.join("ring");
        std::fs::create_dir_all(&rendezvous).expect("create the ring's rendezvous folder");
        (0..self.world)
            .map(|rank| {
                Command::new(binary("coroner-agent"))
                    .args(["run", "--job", self.job, "--server", self.server, "--flush-timeout", "10"])
                    .arg("--spool-dir")
                    .arg(dir.join("spool"))
                    .args(["--", "python3"])
                    .arg(data_dir().join("../../examples/ring_job.py"))
                    .env("RANK", rank.to_string())
                    .env("WORLD_SIZE", self.world.to_string())
                    .env("RING_DIR", &rendezvous)
                    .env("STEPS", "6")
                    .env("STEP_SECONDS", "0.05")
                    .env("COLLECTIVE_TIMEOUT", "3")
                    .env("FAULT", self.fault)
                    .env("FAULT_RANK", self.fault_rank.to_string())
                    .env("FAULT_STEP", "2")
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("start coroner-agent")
            })
            .collect()
    }
}
