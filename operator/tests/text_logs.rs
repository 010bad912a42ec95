//! Text logs into a pipe carry no ANSI colour codes: a log collector or a
//! `grep` reads the words, not escape sequences.

use std::process::{Command, Stdio};

#[test]
fn text_logs_into_a_pipe_have_no_escape_codes() {
    let dir = tempfile::tempdir().unwrap();
    // A kubeconfig that does not exist: the process logs its startup notes,
    // then stops at connecting, without dialling anything.
    let missing = dir.path().join("no-such-kubeconfig");
    let output = Command::new(env!("CARGO_BIN_EXE_vrouter-operator"))
        .arg("--log-format=text")
        .arg("--enable-http2")
        .arg(format!("--kubeconfig={}", missing.display()))
        .env("RUST_LOG", "info")
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("run the vrouter-operator binary");
    let (out, err) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    // The note proves a text log line was written (the check below would
    // pass vacuously on an empty pipe).
    assert!(out.contains("--enable-http2: accepted"), "stdout: {out}\nstderr: {err}");
    assert!(out.contains("INFO"), "stdout: {out}");
    for (name, bytes) in [("stdout", &output.stdout), ("stderr", &output.stderr)] {
        assert!(
            !bytes.contains(&0x1b),
            "{name} has an ESC byte: {:?}",
            String::from_utf8_lossy(bytes)
        );
    }
}
