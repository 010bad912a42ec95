//! A [`Transport`] over a unix stream socket: `qemu-ga -m unix-listen`, or
//! the host end of a QEMU `-chardev socket` that carries the agent channel.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::sync::Mutex;

use crate::command::Command;
use crate::constants::{AGENT_MAX_MESSAGE_BYTES, MAX_REPLY_BYTES};
use crate::error::TransportError;
use crate::framing::{self, Disposition, LineSplitter};
use crate::reply::Reply;
use crate::transport::{CallFuture, Transport};

/// The default bound on one call, connection and handshake included.
///
/// Every command this crate sends returns at once in the guest (`guest-exec`
/// does not wait for the process); the slowest is a 48 MiB
/// `guest-file-read`, about a second. 30 s only trips on an agent that is
/// wedged or gone.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a connection being given up waits for the agent to finish
/// writing and close its side.
///
/// qemu-ga 7.2 in unix-listen mode exits when a client closes while a reply
/// is still unread in the client's socket (its next read sees
/// `ECONNRESET`, which it treats as fatal). So a connection is closed by
/// shutting down our write side and reading until the agent closes; this
/// bound keeps a wedged agent from stalling the caller.
pub const RETIRE_DRAIN: Duration = Duration::from_secs(1);

/// Talks to an agent listening on a unix socket, one command at a time.
///
/// The connection is opened on first use and kept; each new connection is
/// resynchronised (`0xFF` + `guest-sync-delimited` with a random id) before
/// any command. A call that ends without its own clean reply (timeout,
/// garbage, an error for an unparsable request) closes the connection, so
/// the next call starts from a fresh handshake. If a kept connection turns
/// out to be dead before any byte of a command was sent (the agent
/// restarted between calls), the call reconnects once; after a command was
/// sent, a lost reply is an error, never a silent retry, because the
/// command may have run.
#[derive(Debug)]
pub struct UnixSocketTransport {
    path: PathBuf,
    timeout: Duration,
    connection: Mutex<Option<Connection>>,
}

#[derive(Debug)]
struct Connection {
    stream: UnixStream,
    lines: LineSplitter,
}

/// How a call ended, for deciding whether the connection may be kept.
enum Outcome {
    Clean(Reply),
    /// The agent answered, but the channel may hold leftovers.
    Dirty(Reply),
}

impl UnixSocketTransport {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        UnixSocketTransport {
            path: path.into(),
            timeout: DEFAULT_CALL_TIMEOUT,
            connection: Mutex::new(None),
        }
    }

    /// Bounds each call (connection and handshake included).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Closes the kept connection, if any, the way the agent expects.
    pub async fn close(&self) {
        if let Some(connection) = self.connection.lock().await.take() {
            connection.retire().await;
        }
    }

    async fn call_inner(&self, command: &Command) -> Result<Reply, TransportError> {
        let id = random_id()?;
        let request = framing::request_line(command, id);
        if request.len() > AGENT_MAX_MESSAGE_BYTES {
            return Err(TransportError::RequestTooLarge {
                size: request.len(),
                limit: AGENT_MAX_MESSAGE_BYTES,
            });
        }
        let mut slot = self.connection.lock().await;
        let outcome = tokio::time::timeout(self.timeout, self.exchange(&mut slot, &request, id)).await;
        let outcome = match outcome {
            Ok(outcome) => outcome,
            Err(_elapsed) => Err(TransportError::Timeout(self.timeout)),
        };
        match outcome {
            Ok(Outcome::Clean(reply)) => Ok(reply),
            Ok(Outcome::Dirty(reply)) => {
                if let Some(connection) = slot.take() {
                    connection.retire().await;
                }
                Ok(reply)
            }
            Err(error) => {
                if let Some(connection) = slot.take() {
                    connection.retire().await;
                }
                Err(error)
            }
        }
    }

    /// Sends `request` and reads until its reply, on the kept connection
    /// or a new one.
    async fn exchange(
        &self,
        slot: &mut Option<Connection>,
        request: &[u8],
        id: i64,
    ) -> Result<Outcome, TransportError> {
        let reused = slot.is_some();
        if !reused {
            *slot = Some(Connection::open(&self.path).await?);
        }
        let connection = slot.as_mut().expect("connection was just ensured");
        match connection.send(request).await {
            Ok(()) => {}
            Err(SendError::NothingSent(_)) if reused => {
                // The kept connection died between calls and the agent saw
                // nothing of this command: start over on a fresh one.
                *slot = None;
                *slot = Some(Connection::open(&self.path).await?);
                let connection = slot.as_mut().expect("connection was just opened");
                connection.send(request).await.map_err(SendError::into_transport)?;
            }
            Err(error) => return Err(error.into_transport()),
        }
        let connection = slot.as_mut().expect("connection is present");
        connection.await_reply(id).await
    }
}

impl Transport for UnixSocketTransport {
    fn call<'a>(&'a self, command: &'a Command) -> CallFuture<'a> {
        Box::pin(self.call_inner(command))
    }
}

enum SendError {
    /// Not one byte reached the agent.
    NothingSent(io::Error),
    /// Part of the command was written before the connection failed.
    Partial(io::Error),
}

impl SendError {
    fn into_transport(self) -> TransportError {
        match self {
            SendError::NothingSent(error) | SendError::Partial(error) => io_error(error),
        }
    }
}

impl Connection {
    async fn open(path: &Path) -> Result<Connection, TransportError> {
        let stream = UnixStream::connect(path)
            .await
            .map_err(|source| TransportError::Connect {
                path: path.to_owned(),
                source,
            })?;
        let mut connection = Connection {
            stream,
            lines: LineSplitter::new(MAX_REPLY_BYTES),
        };
        connection.synchronise().await?;
        Ok(connection)
    }

    /// The QGA handshake: reset the agent's parser, then skip everything
    /// until the reply that echoes our random id.
    async fn synchronise(&mut self) -> Result<(), TransportError> {
        let id = random_id()?;
        self.stream
            .write_all(&framing::sync_request(id))
            .await
            .map_err(io_error)?;
        loop {
            let line = self.read_line().await?;
            match framing::parse_line(&line) {
                Ok(Some((_, reply))) if framing::is_sync_reply(&reply, id) => return Ok(()),
                // The parse error for our 0xFF, stale replies, stale
                // fragments: all expected before the sync reply.
                Ok(_) | Err(_) => {
                    tracing::debug!(
                        bytes = line.len(),
                        "skipping stale guest agent output while synchronising"
                    )
                }
            }
        }
    }

    async fn send(&mut self, request: &[u8]) -> Result<(), SendError> {
        let mut written = 0;
        while written < request.len() {
            match self.stream.write(&request[written..]).await {
                Ok(0) => {
                    let error = io::Error::new(io::ErrorKind::WriteZero, "the agent socket accepts no more data");
                    return Err(if written == 0 {
                        SendError::NothingSent(error)
                    } else {
                        SendError::Partial(error)
                    });
                }
                Ok(n) => written += n,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) if written == 0 => return Err(SendError::NothingSent(error)),
                Err(error) => return Err(SendError::Partial(error)),
            }
        }
        Ok(())
    }

    async fn await_reply(&mut self, id: i64) -> Result<Outcome, TransportError> {
        loop {
            let line = self.read_line().await?;
            let (reply_id, reply) = match framing::parse_line(&line) {
                Ok(Some(parsed)) => parsed,
                Ok(None) => continue,
                Err(detail) => return Err(TransportError::Garbled(detail)),
            };
            match framing::classify(reply_id, reply, id) {
                Disposition::Ours(reply) => return Ok(Outcome::Clean(reply)),
                Disposition::Unparsed(error) => return Ok(Outcome::Dirty(Reply::Error(error))),
                Disposition::Stray => {
                    tracing::debug!(bytes = line.len(), "skipping a guest agent reply to another request")
                }
            }
        }
    }

    async fn read_line(&mut self) -> Result<Vec<u8>, TransportError> {
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            match self.lines.next_line() {
                Ok(Some(line)) => return Ok(line),
                Ok(None) => {}
                Err(too_long) => return Err(TransportError::ReplyTooLarge { limit: too_long.limit }),
            }
            let n = self.stream.read(&mut chunk).await.map_err(io_error)?;
            if n == 0 {
                return Err(TransportError::Closed);
            }
            self.lines.push(&chunk[..n]);
        }
    }

    /// Closes without leaving unread replies behind (see [`RETIRE_DRAIN`]).
    async fn retire(mut self) {
        let _ = self.stream.shutdown().await;
        let mut sink = vec![0u8; 64 * 1024];
        let drain = async {
            loop {
                match self.stream.read(&mut sink).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        };
        let _ = tokio::time::timeout(RETIRE_DRAIN, drain).await;
    }
}

/// A peer that vanished is reported as [`TransportError::Closed`], whichever
/// errno the kernel picked for it.
fn io_error(error: io::Error) -> TransportError {
    match error.kind() {
        io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset | io::ErrorKind::UnexpectedEof => {
            TransportError::Closed
        }
        _ => TransportError::Io(error),
    }
}

/// A fresh id from the OS random source, kept within 53 bits so it survives
/// any JSON parser that reads numbers as doubles, and non-negative because
/// QEMU reads it as a signed 64-bit integer.
fn random_id() -> Result<i64, TransportError> {
    let raw = getrandom::u64().map_err(|e| TransportError::Io(io::Error::other(format!("OS random source: {e}"))))?;
    Ok((raw >> 11) as i64)
}
