//! The JSON shapes of real qemu-ga replies (captured into `tests/fixtures/`
//! by `cargo run --example capture-fixtures --features testing`), decoded
//! through the same framing and typed calls the live transport uses.

use std::fs;
use std::path::PathBuf;

use serde_json::Value;
use vrouter_qga::framing::{self, Disposition};
use vrouter_qga::testing::{AgentProcess, capture_replies};
use vrouter_qga::{
    Agent, AgentError, CallFuture, Command, ExecStatus, ExitStatus, FileChunk, FileHandle, Pid, QgaError, Reply,
    Transport, TransportError,
};

fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/{name}.jsonl"))
}

fn fixture(name: &str) -> Vec<u8> {
    fs::read(fixture_path(name)).unwrap_or_else(|e| panic!("fixture {name}: {e}"))
}

/// The single reply line of a fixture, as JSON.
fn fixture_json(name: &str) -> Value {
    serde_json::from_slice(&fixture(name)).unwrap()
}

/// Answers every command with one captured reply line, parsed by the
/// transport's own framing.
struct Replay(Vec<u8>);

impl Transport for Replay {
    fn call<'a>(&'a self, _command: &'a Command) -> CallFuture<'a> {
        Box::pin(async move {
            let line = self.0.strip_suffix(b"\n").unwrap_or(&self.0);
            match framing::parse_line(line) {
                Ok(Some((_id, reply))) => Ok(reply),
                Ok(None) => Err(TransportError::Garbled("blank fixture".into())),
                Err(detail) => Err(TransportError::Garbled(detail)),
            }
        })
    }
}

fn agent(name: &str) -> Agent<Replay> {
    Agent::new(Replay(fixture(name)))
}

fn agent_error(result: Result<impl std::fmt::Debug, QgaError>) -> (&'static str, AgentError) {
    match result {
        Err(QgaError::Agent { command, error }) => (command, error),
        other => panic!("expected an agent error, got {other:?}"),
    }
}

#[tokio::test]
async fn ping_sync_and_file_replies_decode() {
    agent("ping").ping().await.unwrap();
    agent("sync").sync(77).await.unwrap();
    let wrong = agent("sync").sync(78).await.unwrap_err();
    assert!(
        matches!(&wrong, QgaError::UnexpectedReply { command: "guest-sync", detail } if detail.contains("77")),
        "{wrong:?}"
    );

    let handle = agent("file-open")
        .file_open("/x", vrouter_qga::OpenMode::Write)
        .await
        .unwrap();
    assert_eq!(Value::from(handle.0), fixture_json("file-open")["return"]);
    assert_eq!(
        agent("file-write")
            .file_write(FileHandle(1000), b"hello")
            .await
            .unwrap(),
        5
    );
    agent("file-close").file_close(FileHandle(1000)).await.unwrap();

    let reads = [
        ("file-read-partial", b"hel".to_vec(), false),
        ("file-read-eof", b"lo".to_vec(), true),
        ("file-read-empty-eof", vec![], true),
    ];
    for (name, data, eof) in reads {
        assert_eq!(
            agent(name).file_read(FileHandle(1001), 3).await.unwrap(),
            FileChunk { data, eof },
            "{name}"
        );
    }
}

#[tokio::test]
async fn file_errors_keep_class_and_description() {
    let (command, error) = agent_error(
        agent("file-read-count-too-large")
            .file_read(FileHandle(1), 50331649)
            .await,
    );
    assert_eq!(command, "guest-file-read");
    assert_eq!(error.class.as_deref(), Some("GenericError"));
    assert_eq!(error.desc, "value '50331649' is invalid for argument count");

    let (command, error) = agent_error(
        agent("file-open-missing")
            .file_open("/m", vrouter_qga::OpenMode::Read)
            .await,
    );
    assert_eq!(command, "guest-file-open");
    assert!(error.desc.contains("No such file or directory"), "{error}");

    let (_, error) = agent_error(agent("file-handle-unknown").file_close(FileHandle(999999)).await);
    assert_eq!(error.desc, "handle '999999' has not been found");
}

#[tokio::test]
async fn exec_replies_decode() {
    let pid = agent("exec")
        .exec(&vrouter_qga::ExecRequest::new("/bin/sleep"))
        .await
        .unwrap();
    assert_eq!(Value::from(pid.0), fixture_json("exec")["return"]["pid"]);

    assert_eq!(
        agent("exec-status-running").exec_status(Pid(1)).await.unwrap(),
        ExecStatus::Running
    );

    let ExecStatus::Exited(output) = agent("exec-status-exited").exec_status(Pid(1)).await.unwrap() else {
        panic!("expected exited");
    };
    assert_eq!(output.status, ExitStatus::Code(3));
    assert_eq!(output.stdout, b"out\n");
    assert_eq!(output.stderr, b"err\n");
    assert!(!output.stdout_truncated && !output.stderr_truncated);

    let ExecStatus::Exited(output) = agent("exec-status-signal").exec_status(Pid(1)).await.unwrap() else {
        panic!("expected exited");
    };
    assert_eq!(output.status, ExitStatus::Signal(9));

    let ExecStatus::Exited(output) = agent("exec-status-no-capture").exec_status(Pid(1)).await.unwrap() else {
        panic!("expected exited");
    };
    assert!(output.success() && output.stdout.is_empty() && output.stderr.is_empty());

    let (command, error) = agent_error(
        agent("exec-missing-binary")
            .exec(&vrouter_qga::ExecRequest::new("/x"))
            .await,
    );
    assert_eq!(command, "guest-exec");
    assert!(error.desc.contains("Failed to execute child process"), "{error}");
}

#[tokio::test]
async fn unknown_pid_reply_is_classified() {
    let error = agent("exec-status-unknown-pid")
        .exec_status(Pid(4242))
        .await
        .unwrap_err();
    match error {
        QgaError::UnknownPid { pid, error } => {
            assert_eq!(pid, Pid(4242));
            assert_eq!(error, AgentError::new("GenericError", "Invalid parameter 'pid'"));
        }
        other => panic!("expected UnknownPid, got {other:?}"),
    }
}

#[tokio::test]
async fn osinfo_and_unknown_commands_decode() {
    let info = agent("osinfo").os_info().await.unwrap();
    let raw = &fixture_json("osinfo")["return"];
    assert_eq!(info.id.as_deref(), raw["id"].as_str());
    assert_eq!(info.pretty_name.as_deref(), raw["pretty-name"].as_str());
    assert_eq!(info.kernel_release.as_deref(), raw["kernel-release"].as_str());

    let (_, error) = agent_error(agent("command-not-found").ping().await);
    assert_eq!(error.class.as_deref(), Some("CommandNotFound"));
}

#[test]
fn framing_reads_the_handshake_and_anonymous_errors() {
    let handshake = fixture("handshake");
    let mut splitter = framing::LineSplitter::new(1024);
    splitter.push(&handshake);
    let first = splitter.next_line().unwrap().unwrap();
    let (id, reply) = framing::parse_line(&first).unwrap().unwrap();
    assert_eq!(id, None);
    assert!(
        matches!(reply, Reply::Error(ref e) if e.desc.contains("JSON parse error")),
        "{reply:?}"
    );
    let second = splitter.next_line().unwrap().unwrap();
    assert_eq!(second[0], framing::DELIMITER);
    let (_, reply) = framing::parse_line(&second).unwrap().unwrap();
    assert!(framing::is_sync_reply(&reply, 4242));

    let parse_error = fixture("parse-error");
    let (id, reply) = framing::parse_line(parse_error.trim_ascii_end()).unwrap().unwrap();
    assert!(matches!(framing::classify(id, reply, 99), Disposition::Unparsed(_)));

    let ours = fixture("exec-status-unknown-pid");
    let (id, reply) = framing::parse_line(ours.trim_ascii_end()).unwrap().unwrap();
    assert!(matches!(
        framing::classify(id.clone(), reply.clone(), 23),
        Disposition::Ours(_)
    ));
    assert_eq!(framing::classify(id, reply, 24), Disposition::Stray);
}

/// The structure of a JSON value with the values themselves dropped.
fn shape(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), shape(v))).collect()),
        Value::Array(items) => Value::Array(items.iter().map(shape).collect()),
        Value::String(_) => Value::from("string"),
        Value::Number(_) => Value::from("number"),
        Value::Bool(_) => Value::from("bool"),
        Value::Null => Value::Null,
    }
}

/// The committed fixtures still describe the agent installed here: same
/// replies, same members, same types (values such as pids differ per run).
#[test]
fn installed_agent_still_answers_in_the_fixture_shapes() {
    let process = AgentProcess::start().unwrap_or_else(|e| panic!("{e}"));
    let replies = capture_replies(&process).unwrap_or_else(|e| panic!("{e}"));
    let mut names: Vec<&str> = replies.iter().map(|r| r.name).collect();
    names.sort();
    let mut committed: Vec<String> = fs::read_dir(fixture_path("x").parent().unwrap())
        .unwrap()
        .map(|entry| {
            entry
                .unwrap()
                .file_name()
                .to_string_lossy()
                .trim_end_matches(".jsonl")
                .to_owned()
        })
        .collect();
    committed.sort();
    assert_eq!(
        names, committed,
        "every captured reply has a committed fixture and vice versa"
    );

    for reply in replies {
        let committed = fixture(reply.name);
        if reply.name == "handshake" {
            assert_eq!(reply.bytes, committed, "the handshake bytes are fixed");
            continue;
        }
        let live: Value = serde_json::from_slice(&reply.bytes).unwrap();
        let stored: Value = serde_json::from_slice(&committed).unwrap();
        if reply.name == "osinfo" {
            // The members come from the host's os-release; `id` is the one
            // the crate relies on.
            assert!(live["return"]["id"].is_string(), "{live}");
            continue;
        }
        assert_eq!(shape(&live), shape(&stored), "{}", reply.name);
    }
}
