//! The CLI's own smoke test. (Its presence also makes `cargo test` build the `coroner` binary that
//! the workspace integration tests run.)

#[test]
fn help_lists_the_commands() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_coroner")).arg("--help").output().expect("run coroner");
    let text = String::from_utf8_lossy(&out.stdout);
    for cmd in ["analyze", "import", "report", "jobs", "search"] {
        assert!(text.contains(cmd), "{cmd} missing from --help:\n{text}");
    }
}
