//! A guest agent that misbehaves on purpose, for the hostile-peer tests: it
//! listens on a unix socket and speaks the QGA protocol (one JSON command
//! per line in, one reply per line out, `guest-sync-delimited` answered
//! after a `0xFF`), so the bytes a real guest could send travel the real
//! channel — through [`crate::proxmox::FakeProxmox`] (as qemu-server reaches
//! an agent) or [`crate::kube::FakeKubeApi`] (as virsh does).
//!
//! Every byte a guest's agent sends is its tenant's to choose, and a real
//! `qemu-ga` cannot be made to send most of them (a `/proc/uptime` of
//! `1e20`, a reply of 64 MiB, one byte per minute); this stand-in can. It
//! knows what a read of a file needs (`guest-file-open`, `-read`,
//! `-close`), `guest-exec` and `guest-exec-status` (each answered with the
//! raw line a test sets, see [`HostileAgent::set_exec`]), plus `guest-ping`
//! and the sync: any other command is answered with `CommandNotFound`, so a
//! test that needs more fails loudly.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::task::JoinHandle;

/// What a `guest-file-read` of one path answers.
#[derive(Clone, Debug)]
pub enum FileAnswer {
    /// The content, as many bytes per read as asked.
    Content(Vec<u8>),
    /// The content one byte per read, each read answered after `every`,
    /// never at end of file before the last byte.
    Drip { content: Vec<u8>, every: Duration },
    /// This raw line (without its newline) as the reply to every read.
    RawReply(Vec<u8>),
}

/// What `guest-exec` and every `guest-exec-status` after it answer: raw
/// reply lines (without their newline), whatever pid is asked about.
#[derive(Clone, Debug)]
pub struct ExecAnswer {
    pub started: Vec<u8>,
    pub status: Vec<u8>,
}

#[derive(Default)]
struct State {
    files: Mutex<HashMap<String, FileAnswer>>,
    exec: Mutex<Option<ExecAnswer>>,
    /// When set, every reply is written one byte per this pause.
    drip: Mutex<Option<Duration>>,
    statuses: AtomicUsize,
    /// handle -> (path, bytes already read)
    open: Mutex<HashMap<i64, (String, usize)>>,
    next_handle: AtomicUsize,
    reads: AtomicUsize,
}

/// The stand-in agent; it stops listening when dropped.
pub struct HostileAgent {
    _dir: tempfile::TempDir,
    socket: PathBuf,
    state: Arc<State>,
    task: JoinHandle<()>,
}

impl Drop for HostileAgent {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl HostileAgent {
    /// Listens on a fresh socket in a temporary directory.
    pub fn start() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory for the agent socket");
        let socket = dir.path().join("qga.sock");
        let listener = UnixListener::bind(&socket).expect("bind the agent socket");
        let state = Arc::new(State::default());
        let served = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, served.clone()));
            }
        });
        HostileAgent {
            _dir: dir,
            socket,
            state,
            task,
        }
    }

    pub fn socket_path(&self) -> PathBuf {
        self.socket.clone()
    }

    /// From now on, reads of `path` answer `answer`.
    pub fn set_file(&self, path: &str, answer: FileAnswer) {
        self.state.files.lock().unwrap().insert(path.to_owned(), answer);
    }

    /// From now on, `guest-exec` and `guest-exec-status` answer `answer`.
    pub fn set_exec(&self, answer: ExecAnswer) {
        *self.state.exec.lock().unwrap() = Some(answer);
    }

    /// From now on, every reply (the sync's too) goes out one byte per
    /// `every`; `None` sends each at once again.
    pub fn set_drip(&self, every: Option<Duration>) {
        *self.state.drip.lock().unwrap() = every;
    }

    /// `guest-exec-status` commands answered so far.
    pub fn statuses(&self) -> usize {
        self.state.statuses.load(Ordering::SeqCst)
    }

    /// `guest-file-read` commands answered so far.
    pub fn reads(&self) -> usize {
        self.state.reads.load(Ordering::SeqCst)
    }
}

async fn serve(stream: UnixStream, state: Arc<State>) {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).split(b'\n');
    while let Ok(Some(line)) = lines.next_segment().await {
        // A client may send 0xFF to reset the agent's parser first.
        let line: Vec<u8> = line.into_iter().filter(|b| *b != 0xFF).collect();
        let Ok(command) = serde_json::from_slice::<Value>(&line) else {
            continue;
        };
        let mut reply = answer(&state, &command).await;
        reply.push(b'\n');
        let drip = *state.drip.lock().unwrap();
        if send(&mut write, &reply, drip).await.is_err() {
            return;
        }
    }
}

/// Writes `reply` at once, or one byte per `drip`.
async fn send(write: &mut (impl AsyncWriteExt + Unpin), reply: &[u8], drip: Option<Duration>) -> std::io::Result<()> {
    let Some(every) = drip else {
        return write.write_all(reply).await;
    };
    for byte in reply {
        write.write_all(std::slice::from_ref(byte)).await?;
        write.flush().await?;
        tokio::time::sleep(every).await;
    }
    Ok(())
}

/// The reply line (without its newline) to `command`.
async fn answer(state: &State, command: &Value) -> Vec<u8> {
    let execute = command.get("execute").and_then(Value::as_str).unwrap_or("");
    let arguments = command.get("arguments").cloned().unwrap_or(Value::Null);
    let ret = |v: Value| json!({ "return": v }).to_string().into_bytes();
    match execute {
        "guest-sync-delimited" => {
            let mut line = vec![0xFF];
            line.extend(ret(arguments["id"].clone()));
            line
        }
        "guest-sync" => ret(arguments["id"].clone()),
        "guest-ping" | "guest-file-close" => ret(json!({})),
        "guest-file-open" => open(state, &arguments),
        "guest-file-read" => read(state, &arguments).await,
        "guest-exec" | "guest-exec-status" if state.exec.lock().unwrap().is_some() => {
            let answer = state.exec.lock().unwrap().clone().expect("checked above");
            if execute == "guest-exec" {
                answer.started
            } else {
                state.statuses.fetch_add(1, Ordering::SeqCst);
                answer.status
            }
        }
        other => {
            json!({"error": {"class": "CommandNotFound", "desc": format!("The command {other} has not been found")}})
                .to_string()
                .into_bytes()
        }
    }
}

fn open(state: &State, arguments: &Value) -> Vec<u8> {
    let path = arguments["path"].as_str().unwrap_or("").to_owned();
    if !state.files.lock().unwrap().contains_key(&path) {
        let desc = format!("failed to open file '{path}': No such file or directory");
        return json!({"error": {"class": "GenericError", "desc": desc}})
            .to_string()
            .into_bytes();
    }
    let handle = 1000 + state.next_handle.fetch_add(1, Ordering::SeqCst) as i64;
    state.open.lock().unwrap().insert(handle, (path, 0));
    json!({ "return": handle }).to_string().into_bytes()
}

async fn read(state: &State, arguments: &Value) -> Vec<u8> {
    state.reads.fetch_add(1, Ordering::SeqCst);
    let handle = arguments["handle"].as_i64().unwrap_or(-1);
    let count = arguments["count"].as_u64().unwrap_or(4096) as usize;
    let Some((path, offset)) = state.open.lock().unwrap().get(&handle).cloned() else {
        return json!({"error": {"class": "GenericError", "desc": format!("handle '{handle}' has not been found")}})
            .to_string()
            .into_bytes();
    };
    let answer = state.files.lock().unwrap().get(&path).cloned();
    let (content, count) = match answer {
        Some(FileAnswer::RawReply(line)) => return line,
        Some(FileAnswer::Content(content)) => (content, count),
        Some(FileAnswer::Drip { content, every }) => {
            tokio::time::sleep(every).await;
            (content, 1)
        }
        None => (Vec::new(), count),
    };
    let chunk = &content[offset.min(content.len())..(offset + count).min(content.len())];
    let eof = offset + chunk.len() >= content.len();
    state.open.lock().unwrap().insert(handle, (path, offset + chunk.len()));
    json!({"return": {"count": chunk.len(), "buf-b64": BASE64.encode(chunk), "eof": eof}})
        .to_string()
        .into_bytes()
}
