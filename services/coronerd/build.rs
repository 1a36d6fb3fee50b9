//! Stamps the build's commit into coronerd (`coroner_build_info{commit}`): `CORONER_COMMIT` when
//! the builder sets it (the Dockerfile, which has no `.git`), else `git rev-parse`, else `unknown`.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string()).filter(|s| !s.is_empty())
}

fn main() {
    println!("cargo:rerun-if-env-changed=CORONER_COMMIT");
    let commit = std::env::var("CORONER_COMMIT").ok().filter(|c| !c.is_empty()).or_else(|| git(&["rev-parse", "--short=12", "HEAD"]));
    // Rebuild when HEAD moves: HEAD itself, and the branch file it points to.
    for path in [git(&["rev-parse", "--git-path", "HEAD"]), git(&["symbolic-ref", "-q", "HEAD"]).and_then(|r| git(&["rev-parse", "--git-path", &r]))]
        .into_iter()
        .flatten()
    {
        if std::path::Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    println!("cargo:rustc-env=CORONER_COMMIT={}", commit.unwrap_or_else(|| "unknown".into()));
}
