//! The size limits in `constants`, checked against the installed qemu-ga
//! and the running kernel rather than taken on trust.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use vrouter_qga::testing::AgentProcess;
use vrouter_qga::{Command, FileHandle, QgaError, TransportError, constants, framing};

fn start() -> AgentProcess {
    AgentProcess::start().unwrap_or_else(|e| panic!("{e}"))
}

/// A `guest-file-write` request line for `handle` as close to `target`
/// bytes (newline included) as base64's groups of four allow, not over.
fn write_request_near(handle: i64, target: usize) -> Vec<u8> {
    let envelope = format!(r#"{{"execute":"guest-file-write","arguments":{{"handle":{handle},"buf-b64":""}}}}"#);
    let padding = (target - envelope.len() - 1) / 4 * 4;
    let mut line = envelope.replace(r#""buf-b64":"""#, &format!(r#""buf-b64":"{}""#, "A".repeat(padding)));
    line.push('\n');
    line.into_bytes()
}

/// Sends raw lines on one connection, reading one reply line per line,
/// then closes the way the agent needs (shut down, drain to EOF).
fn raw_exchange(process: &AgentProcess, lines: &[Vec<u8>]) -> Vec<String> {
    let mut stream = UnixStream::connect(process.socket_path()).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut replies = Vec::new();
    for line in lines {
        stream.write_all(line).unwrap();
        let mut reply = String::new();
        reader.read_line(&mut reply).unwrap();
        replies.push(reply);
    }
    stream.shutdown(std::net::Shutdown::Write).unwrap();
    let mut rest = Vec::new();
    let _ = reader.read_to_end(&mut rest);
    replies
}

#[test]
fn the_agent_parses_messages_up_to_its_limit_and_refuses_larger_ones() {
    let process = start();
    let path = process.guest_path("limit.bin");
    let open = format!(
        "{{\"execute\":\"guest-file-open\",\"arguments\":{{\"path\":{},\"mode\":\"w\"}}}}\n",
        serde_json::Value::from(path.as_str())
    );
    let opened = raw_exchange(&process, &[open.into_bytes()]);
    let handle: serde_json::Value = serde_json::from_str(&opened[0]).unwrap();
    let handle = handle["return"].as_i64().unwrap_or_else(|| panic!("{}", opened[0]));

    let limit = constants::AGENT_MAX_MESSAGE_BYTES;
    let under = write_request_near(handle, limit - 200);
    assert!(under.len() > limit - 204 && under.len() <= limit - 200);
    let replies = raw_exchange(&process, &[under]);
    assert!(
        replies[0].contains("\"count\""),
        "just under the limit refused: {}",
        replies[0]
    );

    let over = write_request_near(handle, limit + 200);
    assert!(over.len() > limit + 196 && over.len() <= limit + 200);
    let replies = raw_exchange(&process, &[over]);
    assert!(
        replies[0].contains("JSON token size limit exceeded"),
        "just over the limit: {}",
        replies[0]
    );
}

#[tokio::test]
async fn the_transport_refuses_a_request_over_the_limit_without_sending_it() {
    let process = start();
    let agent = process.agent();
    let path = process.guest_path("too-big.bin");
    let handle = agent.file_open(&path, vrouter_qga::OpenMode::Write).await.unwrap();
    let too_big = vec![0u8; constants::AGENT_MAX_MESSAGE_BYTES / 4 * 3 + 1];
    match agent.file_write(handle, &too_big).await {
        Err(QgaError::Transport {
            command: "guest-file-write",
            source: TransportError::RequestTooLarge { size, limit },
        }) => {
            assert!(size > limit);
            assert_eq!(limit, constants::AGENT_MAX_MESSAGE_BYTES);
        }
        other => panic!("expected RequestTooLarge, got {other:?}"),
    }
    // Nothing reached the agent: the same connection carries on.
    agent.file_close(handle).await.unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
    agent.transport().close().await;
}

#[test]
fn a_full_write_chunk_fits_one_command_line_argument() {
    // `virsh qemu-agent-command <domain> <json>`: the JSON is one argv
    // string, which Linux caps at MAX_ARG_STRLEN (128 KiB with the nul).
    let chunk = vec![0xA5u8; constants::WRITE_CHUNK_BYTES];
    let json = Command::file_write(FileHandle(i64::from(i32::MAX)), &chunk).to_json();
    let status = std::process::Command::new("/bin/true").arg(&json).status().unwrap();
    assert!(status.success(), "{} bytes as one argument", json.len());

    // The cap is real on this kernel: one byte over it cannot be executed.
    let over = "A".repeat(128 * 1024);
    let error = std::process::Command::new("/bin/true").arg(&over).status().unwrap_err();
    assert_eq!(error.raw_os_error(), Some(7), "E2BIG expected, got {error}");

    // And the id the unix transport adds does not matter for virsh.
    assert!(framing::request_line(&Command::file_write(FileHandle(1), &chunk), i64::MAX).len() < 128 * 1024);
}
