//! docker-compose.yml: `docker compose config` validates it when Docker Compose is installed
//! (the test says why it skipped otherwise), and every `CORONER_*` variable it sets is one that
//! coronerd, the agent or the CLI reads (a misspelt variable would be ignored silently).

use coroner_tests::data_dir;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    data_dir().join("../..")
}

/// The `env = "CORONER_..."` names declared in a source file.
fn declared(path: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("read {path}: {e}"));
    text.split("env = \"").skip(1).filter_map(|rest| rest.split('"').next()).map(str::to_string).collect()
}

#[test]
fn the_compose_file_names_only_variables_coroner_reads() {
    let compose = std::fs::read_to_string(repo().join("docker-compose.yml")).expect("docker-compose.yml");
    let known: BTreeSet<String> =
        ["services/coronerd/src/config.rs", "services/coroner-agent/src/main.rs", "services/coroner/src/main.rs"].iter().flat_map(|p| declared(p)).collect();
    assert!(known.contains("CORONER_LEASE_TTL"), "the scan finds coronerd's variables: {known:?}");
    let used: BTreeSet<&str> = compose.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).filter(|w| w.starts_with("CORONER_")).collect();
    assert!(used.len() >= 5, "the compose file configures coroner: {used:?}");
    for v in used {
        assert!(known.contains(v), "docker-compose.yml sets {v}, which nothing reads");
    }
    for service in ["postgres:", "coronerd-a:", "coronerd-b:", "demo-job:"] {
        assert!(compose.contains(&format!("\n  {service}")), "docker-compose.yml has the service {service}");
    }
}

#[test]
fn docker_compose_config_validates_the_file() {
    let version = Command::new("docker").args(["compose", "version"]).output();
    match version {
        Ok(out) if out.status.success() => {}
        Ok(out) => {
            println!("SKIPPED docker compose config: `docker compose version` failed: {}", String::from_utf8_lossy(&out.stderr).trim());
            return;
        }
        Err(e) => {
            println!("SKIPPED docker compose config: docker is not installed ({e})");
            return;
        }
    }
    let out = Command::new("docker")
        .args(["compose", "-f"])
        .arg(repo().join("docker-compose.yml"))
        .args(["--profile", "demo", "config", "--quiet"])
        .output()
        .expect("run docker compose config");
    assert!(out.status.success(), "docker compose config: {}", String::from_utf8_lossy(&out.stderr));
}
