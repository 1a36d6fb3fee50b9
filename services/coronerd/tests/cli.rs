//! coronerd's command line. (Its presence also makes `cargo test` build the `coronerd` binary
//! that the workspace integration tests start.)

use std::process::Command;

#[test]
fn every_flag_has_its_environment_variable() {
    let out = Command::new(env!("CARGO_BIN_EXE_coronerd")).arg("--help").output().expect("run coronerd");
    let help = String::from_utf8_lossy(&out.stdout);
    for (flag, env) in [
        ("--data-dir", "CORONER_DATA_DIR"),
        ("--grpc-addr", "CORONER_GRPC_ADDR"),
        ("--http-addr", "CORONER_HTTP_ADDR"),
        ("--database-url", "CORONER_DATABASE_URL"),
    ] {
        assert!(help.contains(flag) && help.contains(env), "{flag} / {env} missing from --help:\n{help}");
    }
}

#[test]
fn an_unusable_database_url_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(env!("CARGO_BIN_EXE_coronerd"))
        .arg("--data-dir")
        .arg(dir.path())
        .args(["--database-url", "mysql://nowhere/db", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"])
        .output()
        .expect("run coronerd");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("metadata store"), "{err}");
}
