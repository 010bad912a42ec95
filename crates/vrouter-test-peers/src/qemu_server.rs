//! The guest-agent transport of Proxmox VE's qemu-server (`PVE::QMPClient`
//! for a `qga` peer), which the in-test Proxmox API uses to reach a VM's
//! agent socket: the same bytes on the wire, the same waits, the same
//! failures. It carries commands; what they mean is the agent's business.
//!
//! For each command qemu-server opens a new connection to the socket (QEMU
//! serves one client at a time, so it closes as soon as it has its answer),
//! writes `guest-sync-delimited` with a fresh id and the command (each with
//! `arguments`, `{}` when there are none) in one go, without a leading
//! `0xFF`, and reads until the input holds a `0xFF` followed by two whole
//! lines: the sync reply and the command's reply. A sync reply with an older
//! id is a leftover and skipped; another id is an error. No answer within the
//! command's timeout (5 s by default; 3 s for the `guest-ping` that checks
//! the agent before every API call) is `got timeout`.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// qemu-server's default wait for a guest agent command.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);
/// The wait of the `guest-ping` that decides "QEMU guest agent is not running".
pub const PING_TIMEOUT: Duration = Duration::from_secs(3);

/// One VM's agent socket, and the turn its single client must take.
#[derive(Clone, Debug)]
pub struct QgaSocket {
    pub path: PathBuf,
    pub turn: Arc<tokio::sync::Mutex<()>>,
}

impl QgaSocket {
    pub fn new(path: PathBuf) -> Self {
        QgaSocket {
            path,
            turn: Arc::new(tokio::sync::Mutex::new(())),
        }
    }
}

/// qemu-server numbers agent commands `<pid>0<n>`, increasing per process,
/// which is what lets it tell a leftover (smaller id) from its own reply.
fn next_id() -> u64 {
    static SEQUENCE: AtomicU64 = AtomicU64::new(0);
    let n = SEQUENCE.fetch_add(1, Ordering::SeqCst) + 1;
    format!("{}0{n}", std::process::id()).parse().expect("digits")
}

/// Runs one agent command; `Ok` holds the agent's reply object (`return` or
/// `error`), `Err` the transport failure as qemu-server words it.
///
/// The exchange runs to its end even when the caller stops waiting (the
/// HTTP client of the API call went away): a pveproxy worker finishes the
/// request it took, and a reply left unread would make the fast tests'
/// `qemu-ga -m unix-listen` exit, so one client vanishing (a replica killed
/// mid-call) would take the agent away from the next.
pub async fn command(socket: &QgaSocket, execute: &str, arguments: Value, timeout: Duration) -> Result<Value, String> {
    let socket = socket.clone();
    let execute = execute.to_owned();
    tokio::spawn(async move { exchange_once(&socket, &execute, arguments, timeout).await })
        .await
        .unwrap_or_else(|e| Err(format!("agent exchange failed - {e}")))
}

async fn exchange_once(
    socket: &QgaSocket,
    execute: &str,
    arguments: Value,
    timeout: Duration,
) -> Result<Value, String> {
    let _turn = socket.turn.lock().await;
    let id = next_id();
    let mut stream = UnixStream::connect(&socket.path)
        .await
        .map_err(|e| format!("unable to connect to qga socket - {e}"))?;
    let request = format!(
        "{}\n{}\n",
        json!({"execute": "guest-sync-delimited", "arguments": {"id": id}}),
        json!({"execute": execute, "arguments": arguments}),
    );
    let exchange = async {
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| format!("write failed - {e}"))?;
        let mut input = Vec::new();
        let mut chunk = vec![0u8; 64 * 1024];
        // A pair is only complete after a newline: scanning the input (a
        // reply of megabytes arrives in many chunks) only then keeps a
        // large read from timing out in the scan itself.
        let mut newline = false;
        loop {
            while let Some((sync, reply, rest)) = newline.then(|| delimited_pair(&input)).flatten() {
                let sync: Value = serde_json::from_slice(&sync).map_err(|e| e.to_string())?;
                let echoed = sync
                    .get("return")
                    .and_then(Value::as_u64)
                    .ok_or("received response without command id")?;
                let reply = reply.clone();
                input = rest;
                if echoed < id {
                    continue;
                }
                if echoed != id {
                    return Err(format!("got wrong command id '{echoed}' (expected {id})"));
                }
                return serde_json::from_slice::<Value>(&reply).map_err(|e| e.to_string());
            }
            let n = stream.read(&mut chunk).await.map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("client closed connection".into());
            }
            input.extend_from_slice(&chunk[..n]);
            newline = chunk[..n].contains(&b'\n');
        }
    };
    let result = match tokio::time::timeout(timeout, exchange).await {
        Ok(result) => result,
        Err(_) => Err("got timeout".into()),
    };
    let _ = stream.shutdown().await;
    if result.is_err() {
        // qemu-server just closes. The fast tests' `qemu-ga -m unix-listen`
        // exits when a client leaves a reply unread, so what is still coming
        // is read off first (briefly); on virtio it makes no difference.
        let mut sink = vec![0u8; 64 * 1024];
        let drain = async { while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {} };
        let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
    }
    result
}

/// The last `0xFF` in `input` that is followed by two whole lines, each
/// ending in `}`: (sync reply, command reply, what follows).
fn delimited_pair(input: &[u8]) -> Option<(Vec<u8>, Vec<u8>, Vec<u8>)> {
    input
        .iter()
        .enumerate()
        .rev()
        .filter(|(_, b)| **b == 0xFF)
        .find_map(|(at, _)| {
            let after = &input[at + 1..];
            let first = after.iter().position(|&b| b == b'\n')?;
            let second = first + 1 + after[first + 1..].iter().position(|&b| b == b'\n')?;
            let line = |l: &[u8]| -> Option<Vec<u8>> {
                let l = l.strip_suffix(b"\r").unwrap_or(l);
                (!l.is_empty() && l.ends_with(b"}") && !l.contains(&0xFF)).then(|| l.to_vec())
            };
            Some((
                line(&after[..first])?,
                line(&after[first + 1..second])?,
                after[second + 1..].to_vec(),
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pair_after_the_last_delimiter_is_taken() {
        let input = b"{\"return\": 5}\n\xff{\"return\": 7}\n{\"return\": {}}\nrest";
        let (sync, reply, rest) = delimited_pair(input).unwrap();
        assert_eq!(sync, b"{\"return\": 7}");
        assert_eq!(reply, b"{\"return\": {}}");
        assert_eq!(rest, b"rest");
        assert!(delimited_pair(b"\xff{\"return\": 7}\n{\"retu").is_none());
        assert!(delimited_pair(b"{\"return\": 7}\n{}\n").is_none());
    }
}
