//! The unix-socket transport against a real qemu-ga that misbehaves: gone,
//! killed mid-call, restarted, frozen, or left with garbage by another
//! client. Failures must be typed transport errors, never panics or hangs.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

use vrouter_qga::testing::AgentProcess;
use vrouter_qga::{Agent, QgaError, TransportError, UnixSocketTransport};

fn start() -> AgentProcess {
    AgentProcess::start().unwrap_or_else(|e| panic!("{e}"))
}

fn transport_error(result: Result<impl std::fmt::Debug, QgaError>) -> TransportError {
    match result {
        Err(QgaError::Transport { source, .. }) => source,
        other => panic!("expected a transport error, got {other:?}"),
    }
}

#[tokio::test]
async fn no_socket_is_a_connect_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent.sock");
    let agent = Agent::new(UnixSocketTransport::new(&path));
    match transport_error(agent.ping().await) {
        TransportError::Connect { path: named, source } => {
            assert_eq!(named, path);
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        }
        other => panic!("expected Connect, got {other:?}"),
    }
}

#[tokio::test]
async fn a_dead_agent_between_calls_is_a_connect_error_then_recovers() {
    let mut process = start();
    let agent = process.agent();
    agent.ping().await.unwrap();

    process.kill();
    // The kept connection is dead before anything is sent, so the transport
    // tries a fresh one, and nothing listens any more.
    let error = transport_error(agent.ping().await);
    assert!(matches!(error, TransportError::Connect { .. }), "{error:?}");

    process.restart().unwrap_or_else(|e| panic!("{e}"));
    agent.ping().await.unwrap();
    agent.transport().close().await;
}

#[tokio::test]
async fn an_agent_killed_mid_call_is_a_closed_error() {
    let mut process = start();
    let agent = process.agent();
    agent.ping().await.unwrap();

    // Frozen, the agent cannot answer: the call below sends its command and
    // waits. Killing the agent then ends the call half way.
    process.signal("STOP").unwrap_or_else(|e| panic!("{e}"));
    let call = agent.ping();
    let kill = async {
        // One poll of the call sends the command and parks on the reply.
        tokio::task::yield_now().await;
        process.kill();
    };
    let (result, ()) = tokio::join!(call, kill);
    let error = transport_error(result);
    assert!(matches!(error, TransportError::Closed), "{error:?}");
    assert_eq!(
        QgaError::Transport {
            command: "guest-ping",
            source: error
        }
        .to_string(),
        "guest-ping: the guest agent closed the connection before its reply was complete"
    );
}

#[tokio::test]
async fn a_frozen_agent_times_out_and_survives_the_retired_connection() {
    let process = start();
    // Long enough that the first call never trips it on a loaded machine.
    let timeout = Duration::from_secs(2);
    let agent = Agent::new(process.transport().with_timeout(timeout));
    agent.ping().await.unwrap();

    process.signal("STOP").unwrap_or_else(|e| panic!("{e}"));
    let error = transport_error(agent.ping().await);
    assert!(matches!(error, TransportError::Timeout(t) if t == timeout), "{error:?}");
    process.signal("CONT").unwrap_or_else(|e| panic!("{e}"));

    // A new connection, a new handshake, and the agent, still alive, answers.
    agent.ping().await.unwrap();
    agent.transport().close().await;
}

/// Sends half a request and leaves, as a client killed mid-write would.
fn leave_half_a_request(process: &AgentProcess) {
    let mut client = UnixStream::connect(process.socket_path()).unwrap();
    client
        .write_all(br#"{"execute":"guest-exec","arguments":{"path":"/bin/true","arg":["unterminated"#)
        .unwrap();
    client.shutdown(std::net::Shutdown::Write).unwrap();
    // The agent closes its end once it reads our EOF; wait for that so the
    // fragment is in its parser before the next client connects.
    let mut rest = Vec::new();
    client.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "the agent answered a half request: {rest:?}");
}

#[tokio::test]
async fn the_handshake_flushes_what_another_client_left_behind() {
    let process = start();

    // Without the handshake, the fragment swallows the next request.
    leave_half_a_request(&process);
    let mut naive = UnixStream::connect(process.socket_path()).unwrap();
    naive.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    naive.write_all(b"{\"execute\":\"guest-ping\"}\n").unwrap();
    let mut reader = BufReader::new(naive.try_clone().unwrap());
    let mut first = String::new();
    reader.read_line(&mut first).unwrap();
    assert!(first.contains("JSON parse error"), "a naive client got {first:?}");
    naive.shutdown(std::net::Shutdown::Write).unwrap();
    let mut rest = Vec::new();
    reader.read_to_end(&mut rest).unwrap();

    // With it, the first call on a fresh transport just works.
    leave_half_a_request(&process);
    let agent = process.agent();
    agent.ping().await.unwrap();
    agent.transport().close().await;
}

#[tokio::test]
async fn concurrent_calls_share_one_agent_safely() {
    let process = start();
    let agent = Arc::new(process.agent());
    let path = process.guest_path("shared.txt");
    std::fs::write(&path, b"shared contents").unwrap();
    let mut tasks = Vec::new();
    for i in 0..16 {
        let agent = Arc::clone(&agent);
        let path = path.clone();
        tasks.push(tokio::spawn(async move {
            if i % 2 == 0 {
                agent.ping().await.map(|()| Vec::new())
            } else {
                agent.read_file(&path).await
            }
        }));
    }
    for (i, task) in tasks.into_iter().enumerate() {
        let result = task.await.unwrap().unwrap();
        if i % 2 == 1 {
            assert_eq!(result, b"shared contents");
        }
    }
    agent.transport().close().await;
}
