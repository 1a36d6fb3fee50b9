//! Finding: "The write token leaks to read users." The agent passed `CORONER_TOKEN` to the
//! training process it wraps (fixed in the agent); a token file readable by others is refused.

use coroner_tests::binary;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

#[test]
fn the_child_never_sees_the_agents_token() {
    let out = Command::new(binary("coroner-agent"))
        .env("CORONER_TOKEN", "w-secret-token-of-the-agent")
        .env("CORONER_SERVER", "http://127.0.0.1:9")
        .args(["run", "--job", "rt-token", "--rank", "0", "--", "sh", "-c", "env; cat /proc/self/environ | tr '\\0' '\\n'"])
        .output()
        .expect("run the agent");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("PATH="), "the child ran: {text}");
    assert!(!text.contains("w-secret-token-of-the-agent") && !text.contains("CORONER_TOKEN"), "the child saw the token:\n{text}");
}

#[test]
fn a_token_file_others_can_read_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (write, read) = (dir.path().join("write"), dir.path().join("read"));
    std::fs::write(&write, "w-0123456789abcdef\n").expect("write");
    std::fs::write(&read, "r-0123456789abcdef\n").expect("write");
    std::fs::set_permissions(&read, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    std::fs::set_permissions(&write, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let run = || {
        Command::new(binary("coronerd"))
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(["--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--write-token-file"])
            .arg(&write)
            .arg("--read-token-file")
            .arg(&read)
            .env_remove("CORONER_WRITE_TOKEN")
            .env_remove("CORONER_READ_TOKEN")
            .output()
            .expect("run coronerd")
    };
    let out = run();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "coronerd served with a world-readable token file");
    assert!(err.contains("chmod 600") && err.contains(write.to_str().expect("utf-8")), "{err}");
}
