//! Running processes through a real qemu-ga. Every command runs in, reads
//! or writes only the test agent's own temporary directory.

use std::fs;
use std::time::Duration;

use vrouter_qga::testing::AgentProcess;
use vrouter_qga::{ExecRequest, ExecStatus, ExitStatus, Pid, PollOptions, QgaError};

fn start() -> AgentProcess {
    AgentProcess::start().unwrap_or_else(|e| panic!("{e}"))
}

/// Quick polling; the bound only stops a broken test from hanging.
const POLL: PollOptions = PollOptions {
    interval: Duration::from_millis(20),
    timeout: Duration::from_secs(30),
};

#[tokio::test]
async fn a_script_shows_both_streams_and_its_exit_code() {
    let process = start();
    let agent = process.agent();
    let script = process.guest_path("three.sh");
    fs::write(
        &script,
        "echo 'to stdout'\necho 'to stderr' >&2\nprintf 'no newline'\nexit 3\n",
    )
    .unwrap();

    let output = agent
        .run(&ExecRequest::new("/bin/sh").arg(&script), POLL)
        .await
        .unwrap();
    assert_eq!(output.status, ExitStatus::Code(3));
    assert!(!output.success());
    assert_eq!(output.stdout, b"to stdout\nno newline");
    assert_eq!(output.stderr, b"to stderr\n");
    assert!(!output.stdout_truncated && !output.stderr_truncated);
    agent.transport().close().await;
}

#[tokio::test]
async fn stdin_arguments_and_environment_reach_the_process() {
    let process = start();
    let agent = process.agent();
    let request = ExecRequest::new("/bin/sh")
        .args(["-c", r#"printf '%s|%s|' "$1" "$GREETING"; cat"#, "sh", "first arg"])
        .env(["GREETING=hello", "PATH=/usr/bin:/bin"])
        .input(b"from stdin \x00\xff bytes".to_vec());
    let output = agent.run(&request, POLL).await.unwrap();
    assert_eq!(output.status, ExitStatus::Code(0));
    assert_eq!(output.stdout, b"first arg|hello|from stdin \x00\xff bytes");
    agent.transport().close().await;
}

#[tokio::test]
async fn a_killed_process_reports_its_signal() {
    let process = start();
    let agent = process.agent();
    let output = agent
        .run(&ExecRequest::new("/bin/sh").args(["-c", "kill -9 $$"]), POLL)
        .await
        .unwrap();
    assert_eq!(output.status, ExitStatus::Signal(9));
    assert_eq!(output.status.shell_code(), 137);
    agent.transport().close().await;
}

#[tokio::test]
async fn the_agent_forgets_a_pid_once_it_reported_the_exit() {
    let process = start();
    let agent = process.agent();
    let pid = agent.exec(&ExecRequest::new("/bin/true")).await.unwrap();
    let output = agent.wait(pid, POLL).await.unwrap();
    assert!(output.success());

    let error = agent.exec_status(pid).await.unwrap_err();
    assert!(error.is_unknown_pid(), "{error:?}");
    match error {
        QgaError::UnknownPid { pid: reported, error } => {
            assert_eq!(reported, pid);
            assert_eq!(error.class.as_deref(), Some("GenericError"));
            assert_eq!(error.desc, "Invalid parameter 'pid'");
        }
        other => panic!("expected UnknownPid, got {other:?}"),
    }
    agent.transport().close().await;
}

#[tokio::test]
async fn a_restarted_agent_does_not_know_the_old_pid() {
    let mut process = start();
    let agent = process.agent();
    let pid = agent.exec(&ExecRequest::new("/bin/true")).await.unwrap();
    process.restart().unwrap_or_else(|e| panic!("{e}"));
    // The same transport reconnects to the new agent by itself.
    let error = agent.exec_status(pid).await.unwrap_err();
    assert!(error.is_unknown_pid(), "{error:?}");
    agent.transport().close().await;
}

#[tokio::test]
async fn a_pid_the_agent_never_started_is_unknown() {
    let process = start();
    let agent = process.agent();
    let error = agent.exec_status(Pid(-1)).await.unwrap_err();
    assert!(error.is_unknown_pid(), "{error:?}");
    agent.transport().close().await;
}

#[tokio::test]
async fn a_running_process_is_running_until_it_exits() {
    let process = start();
    let agent = process.agent();
    let fifo = process.guest_path("gate");
    let status = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(status.success(), "mkfifo {fifo}");
    // Blocks on the FIFO until the test opens it for writing.
    let pid = agent
        .exec(&ExecRequest::new("/bin/sh").args(["-c", r#"read line < "$0"; echo "got $line""#, &fifo]))
        .await
        .unwrap();
    assert_eq!(agent.exec_status(pid).await.unwrap(), ExecStatus::Running);
    let wait = PollOptions {
        interval: Duration::from_millis(10),
        timeout: Duration::from_millis(50),
    };
    match agent.wait(pid, wait).await {
        Err(QgaError::ExecTimeout { pid: reported, waited }) => {
            assert_eq!(reported, pid);
            assert!(waited >= wait.timeout);
        }
        other => panic!("expected ExecTimeout, got {other:?}"),
    }
    // The timeout left the pid valid: open the gate and collect the result.
    tokio::task::spawn_blocking(move || fs::write(&fifo, "go\n"))
        .await
        .unwrap()
        .unwrap();
    let output = agent.wait(pid, POLL).await.unwrap();
    assert_eq!(output.stdout, b"got go\n");
    agent.transport().close().await;
}

#[tokio::test]
async fn output_over_the_capture_cap_is_flagged_truncated() {
    let process = start();
    let agent = process.agent();
    // 17 MiB on stdout, a little on stderr: only stdout passes the 16 MiB cap.
    let request = ExecRequest::new("/bin/sh").args(["-c", "head -c 17825792 /dev/zero; echo small >&2"]);
    let output = agent.run(&request, POLL).await.unwrap();
    assert!(output.success());
    assert!(output.stdout_truncated);
    assert!(!output.stderr_truncated);
    assert_eq!(output.stdout.len(), 16 * 1024 * 1024);
    assert_eq!(output.stderr, b"small\n");
    agent.transport().close().await;
}

#[tokio::test]
async fn a_missing_executable_is_an_agent_error() {
    let process = start();
    let agent = process.agent();
    let missing = process.guest_path("no-such-binary");
    match agent.exec(&ExecRequest::new(missing.as_str())).await {
        Err(QgaError::Agent { command, error }) => {
            assert_eq!(command, "guest-exec");
            assert!(error.desc.contains(&missing), "{error}");
        }
        other => panic!("expected an agent error, got {other:?}"),
    }
    agent.transport().close().await;
}
