//! [`Agent`]: the typed commands, one agent round trip each.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::command::{Command, FileHandle, OpenMode, Pid, names};
use crate::error::{QgaError, is_unknown_pid};
use crate::exec::{self, ExecRequest, ExecStatus};
use crate::files::FileLimits;
use crate::reply::{self, ExecStatusWire, ExecWire, FileReadWire, FileWriteWire, OsInfo, Reply};
use crate::transport::Transport;

/// A guest agent reached through a [`Transport`].
#[derive(Debug, Clone)]
pub struct Agent<T> {
    transport: T,
    pub(crate) limits: FileLimits,
}

/// One `guest-file-read` result, decoded.
#[derive(Clone, PartialEq, Eq)]
pub struct FileChunk {
    pub data: Vec<u8>,
    /// The agent reached the end of the file during this read.
    pub eof: bool,
}

impl std::fmt::Debug for FileChunk {
    /// Sizes only: a chunk of `config.boot` holds the router's secrets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileChunk")
            .field("data", &format_args!("<{} bytes>", self.data.len()))
            .field("eof", &self.eof)
            .finish()
    }
}

impl<T: Transport> Agent<T> {
    pub fn new(transport: T) -> Self {
        Agent {
            transport,
            limits: FileLimits::default(),
        }
    }

    /// Replaces the chunk sizes and read bound (see [`FileLimits`]).
    pub fn with_limits(mut self, limits: FileLimits) -> Result<Self, QgaError> {
        limits.validate()?;
        self.limits = limits;
        Ok(self)
    }

    pub fn limits(&self) -> &FileLimits {
        &self.limits
    }

    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// Sends one command; an agent error becomes [`QgaError::Agent`] (or
    /// [`QgaError::UnknownPid`] by the rule in [`is_unknown_pid`]).
    pub async fn call(&self, command: &Command) -> Result<Value, QgaError> {
        let name = command.name();
        let reply = self
            .transport
            .call(command)
            .await
            .map_err(|source| QgaError::Transport { command: name, source })?;
        match reply {
            Reply::Return(value) => Ok(value),
            Reply::Error(error) if is_unknown_pid(name, &error) => Err(QgaError::UnknownPid {
                pid: pid_argument(command),
                error,
            }),
            Reply::Error(error) => Err(QgaError::Agent { command: name, error }),
        }
    }

    async fn call_typed<R: DeserializeOwned>(&self, command: &Command) -> Result<R, QgaError> {
        let value = self.call(command).await?;
        reply::decode(value).map_err(|detail| QgaError::UnexpectedReply {
            command: command.name(),
            detail,
        })
    }

    /// `guest-ping`: succeeds when the agent answers.
    pub async fn ping(&self) -> Result<(), QgaError> {
        self.call_typed::<serde::de::IgnoredAny>(&Command::ping()).await?;
        Ok(())
    }

    /// `guest-sync`: the agent must echo `id`. For transports that pass
    /// commands through without their own handshake.
    pub async fn sync(&self, id: i64) -> Result<(), QgaError> {
        let echoed: i64 = self.call_typed(&Command::sync(id)).await?;
        if echoed != id {
            return Err(QgaError::UnexpectedReply {
                command: names::SYNC,
                detail: format!("echoed id {echoed}, sent {id}"),
            });
        }
        Ok(())
    }

    pub async fn file_open(&self, path: &str, mode: OpenMode) -> Result<FileHandle, QgaError> {
        self.call_typed(&Command::file_open(path, mode)).await
    }

    /// Writes `data` at the handle's position; returns the bytes written.
    pub async fn file_write(&self, handle: FileHandle, data: &[u8]) -> Result<u64, QgaError> {
        let wire: FileWriteWire = self.call_typed(&Command::file_write(handle, data)).await?;
        Ok(wire.count)
    }

    /// Reads at most `count` bytes; checks the decoded length against the
    /// agent's own count.
    pub async fn file_read(&self, handle: FileHandle, count: usize) -> Result<FileChunk, QgaError> {
        let wire: FileReadWire = self.call_typed(&Command::file_read(handle, count)).await?;
        decode_chunk(wire, count).map_err(|detail| QgaError::UnexpectedReply {
            command: names::FILE_READ,
            detail,
        })
    }

    pub async fn file_close(&self, handle: FileHandle) -> Result<(), QgaError> {
        self.call_typed::<serde::de::IgnoredAny>(&Command::file_close(handle))
            .await?;
        Ok(())
    }

    /// `guest-exec`: starts the process and returns at once with its pid.
    pub async fn exec(&self, request: &ExecRequest) -> Result<Pid, QgaError> {
        let wire: ExecWire = self.call_typed(&Command::exec(request)).await?;
        Ok(Pid(wire.pid))
    }

    /// `guest-exec-status`. After it reports [`ExecStatus::Exited`] once, the
    /// agent forgets the pid; asking again is [`QgaError::UnknownPid`].
    pub async fn exec_status(&self, pid: Pid) -> Result<ExecStatus, QgaError> {
        let wire: ExecStatusWire = self.call_typed(&Command::exec_status(pid)).await?;
        exec::decode_status(wire).map_err(|detail| QgaError::UnexpectedReply {
            command: names::EXEC_STATUS,
            detail,
        })
    }

    /// `guest-get-osinfo`.
    pub async fn os_info(&self) -> Result<OsInfo, QgaError> {
        self.call_typed(&Command::get_osinfo()).await
    }
}

fn pid_argument(command: &Command) -> Pid {
    Pid(command
        .arguments()
        .and_then(|arguments| arguments.get("pid"))
        .and_then(Value::as_i64)
        .unwrap_or_default())
}

fn decode_chunk(wire: FileReadWire, asked: usize) -> Result<FileChunk, String> {
    let data = BASE64
        .decode(wire.buf_b64.as_bytes())
        .map_err(|e| format!("buf-b64 is not valid base64: {e}"))?;
    if data.len() as u64 != wire.count {
        return Err(format!(
            "count says {} bytes but buf-b64 holds {}",
            wire.count,
            data.len()
        ));
    }
    if data.len() > asked {
        return Err(format!("asked for at most {asked} bytes, got {}", data.len()));
    }
    Ok(FileChunk { data, eof: wire.eof })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(count: u64, b64: &str, eof: bool) -> FileReadWire {
        FileReadWire {
            count,
            buf_b64: b64.into(),
            eof,
        }
    }

    #[test]
    fn chunk_debug_shows_size_not_contents() {
        let shown = format!(
            "{:?}",
            FileChunk {
                data: b"hunter2".to_vec(),
                eof: true
            }
        );
        assert_eq!(shown, "FileChunk { data: <7 bytes>, eof: true }");
    }

    #[test]
    fn chunks_decode_and_are_checked() {
        assert_eq!(
            decode_chunk(wire(3, "aGVs", false), 3),
            Ok(FileChunk {
                data: b"hel".to_vec(),
                eof: false
            })
        );
        assert_eq!(
            decode_chunk(wire(0, "", true), 3),
            Ok(FileChunk {
                data: vec![],
                eof: true
            })
        );
        let cases = [
            (wire(2, "aGVs", false), 3, "count says 2 bytes but buf-b64 holds 3"),
            (wire(3, "aGVs", false), 2, "asked for at most 2 bytes, got 3"),
            (wire(3, "a!Vs", false), 3, "not valid base64"),
        ];
        for (wire, asked, expected) in cases {
            let message = decode_chunk(wire, asked).unwrap_err();
            assert!(message.contains(expected), "{message}");
        }
    }
}
