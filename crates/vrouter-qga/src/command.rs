//! Typed requests: one constructor per agent command the operator uses.
//!
//! A [`Command`] is what a [`crate::Transport`] carries: the command name and
//! its JSON arguments, exactly as the agent's `{"execute": …, "arguments": …}`
//! envelope spells them. Transports that cannot pass arbitrary JSON (Proxmox
//! VE's REST API) can inspect [`Command::name`] and [`Command::arguments`] and
//! map each command onto their own endpoints.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::Serialize;
use serde_json::{Map, Value};

/// The agent commands this crate sends, by wire name.
pub mod names {
    pub const PING: &str = "guest-ping";
    pub const SYNC: &str = "guest-sync";
    pub const SYNC_DELIMITED: &str = "guest-sync-delimited";
    pub const FILE_OPEN: &str = "guest-file-open";
    pub const FILE_WRITE: &str = "guest-file-write";
    pub const FILE_READ: &str = "guest-file-read";
    pub const FILE_CLOSE: &str = "guest-file-close";
    pub const EXEC: &str = "guest-exec";
    pub const EXEC_STATUS: &str = "guest-exec-status";
    pub const GET_OSINFO: &str = "guest-get-osinfo";
}

/// Argument names whose values carry file or stdin contents. They may hold
/// router secrets (passwords in a config), so `Debug` shows their size only.
const PAYLOAD_ARGUMENTS: [&str; 2] = ["buf-b64", "input-data"];

/// One agent command: a name and its arguments.
#[derive(Clone, PartialEq, Serialize)]
pub struct Command {
    execute: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    arguments: Option<Map<String, Value>>,
}

/// How `guest-file-open` opens a file (`fopen(3)` modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// `r`: read from the start; the file must exist.
    Read,
    /// `w`: create or truncate, then write from the start.
    Write,
}

impl OpenMode {
    pub fn as_str(self) -> &'static str {
        match self {
            OpenMode::Read => "r",
            OpenMode::Write => "w",
        }
    }
}

/// An open file in the guest, as numbered by the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize, Serialize)]
#[serde(transparent)]
pub struct FileHandle(pub i64);

/// A process started by `guest-exec`, as numbered by the guest kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize, Serialize)]
#[serde(transparent)]
pub struct Pid(pub i64);

impl fmt::Display for Pid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Command {
    fn new(execute: &'static str) -> Self {
        Command {
            execute,
            arguments: None,
        }
    }

    fn arg(mut self, name: &str, value: impl Into<Value>) -> Self {
        self.arguments
            .get_or_insert_with(Map::new)
            .insert(name.to_owned(), value.into());
        self
    }

    /// `guest-ping`: answers `{}` when the agent is alive.
    pub fn ping() -> Self {
        Command::new(names::PING)
    }

    /// `guest-sync`: the agent echoes `id`; used by transports that read
    /// whole lines to find where the stream is.
    pub fn sync(id: i64) -> Self {
        Command::new(names::SYNC).arg("id", id)
    }

    /// `guest-sync-delimited`: like [`Command::sync`], but the agent puts a
    /// `0xFF` byte before its reply, so a reader can throw away everything
    /// before it, even half a line left over from an earlier client.
    pub fn sync_delimited(id: i64) -> Self {
        Command::new(names::SYNC_DELIMITED).arg("id", id)
    }

    pub fn file_open(path: &str, mode: OpenMode) -> Self {
        Command::new(names::FILE_OPEN)
            .arg("path", path)
            .arg("mode", mode.as_str())
    }

    /// `guest-file-write` of `data`, base64-encoded as the agent requires.
    pub fn file_write(handle: FileHandle, data: &[u8]) -> Self {
        Command::new(names::FILE_WRITE)
            .arg("handle", handle.0)
            .arg("buf-b64", BASE64.encode(data))
    }

    /// `guest-file-read` of at most `count` bytes.
    pub fn file_read(handle: FileHandle, count: usize) -> Self {
        Command::new(names::FILE_READ)
            .arg("handle", handle.0)
            .arg("count", count as u64)
    }

    pub fn file_close(handle: FileHandle) -> Self {
        Command::new(names::FILE_CLOSE).arg("handle", handle.0)
    }

    /// `guest-exec` of `request`.
    pub fn exec(request: &crate::ExecRequest) -> Self {
        let mut command = Command::new(names::EXEC).arg("path", request.path.as_str());
        if !request.args.is_empty() {
            command = command.arg("arg", request.args.clone());
        }
        if let Some(env) = &request.env {
            command = command.arg("env", env.clone());
        }
        if let Some(input) = &request.input {
            command = command.arg("input-data", BASE64.encode(input));
        }
        command.arg("capture-output", request.capture_output)
    }

    pub fn exec_status(pid: Pid) -> Self {
        Command::new(names::EXEC_STATUS).arg("pid", pid.0)
    }

    /// `guest-get-osinfo`: uname(2) and os-release(5) fields of the guest.
    pub fn get_osinfo() -> Self {
        Command::new(names::GET_OSINFO)
    }

    /// The command's wire name, e.g. `guest-exec`.
    pub fn name(&self) -> &'static str {
        self.execute
    }

    /// The `arguments` object, absent for commands that take none.
    pub fn arguments(&self) -> Option<&Map<String, Value>> {
        self.arguments.as_ref()
    }

    /// The command as one line of JSON, e.g. for `virsh qemu-agent-command`.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a map of JSON values always serialises")
    }
}

impl fmt::Debug for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("Command");
        s.field("execute", &self.execute);
        if let Some(arguments) = &self.arguments {
            s.field("arguments", &RedactedArguments(arguments));
        }
        s.finish()
    }
}

struct RedactedArguments<'a>(&'a Map<String, Value>);

impl fmt::Debug for RedactedArguments<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut map = f.debug_map();
        for (name, value) in self.0 {
            match value {
                Value::String(payload) if PAYLOAD_ARGUMENTS.contains(&name.as_str()) => {
                    map.entry(name, &format_args!("<{} base64 characters>", payload.len()))
                }
                other => map.entry(name, other),
            };
        }
        map.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn commands_serialise_to_the_agent_envelope() {
        let cases = [
            (Command::ping(), json!({"execute": "guest-ping"})),
            (
                Command::sync(7),
                json!({"execute": "guest-sync", "arguments": {"id": 7}}),
            ),
            (
                Command::file_open("/tmp/x", OpenMode::Write),
                json!({"execute": "guest-file-open", "arguments": {"path": "/tmp/x", "mode": "w"}}),
            ),
            (
                Command::file_open("/config/config.boot", OpenMode::Read),
                json!({"execute": "guest-file-open", "arguments": {"path": "/config/config.boot", "mode": "r"}}),
            ),
            (
                Command::file_write(FileHandle(1000), b"hello"),
                json!({"execute": "guest-file-write", "arguments": {"handle": 1000, "buf-b64": "aGVsbG8="}}),
            ),
            (
                Command::file_read(FileHandle(1001), 4096),
                json!({"execute": "guest-file-read", "arguments": {"handle": 1001, "count": 4096}}),
            ),
            (
                Command::file_close(FileHandle(1001)),
                json!({"execute": "guest-file-close", "arguments": {"handle": 1001}}),
            ),
            (
                Command::exec_status(Pid(4242)),
                json!({"execute": "guest-exec-status", "arguments": {"pid": 4242}}),
            ),
            (Command::get_osinfo(), json!({"execute": "guest-get-osinfo"})),
        ];
        for (command, expected) in cases {
            let actual: Value = serde_json::from_str(&command.to_json()).unwrap();
            assert_eq!(actual, expected, "{}", command.name());
        }
    }

    #[test]
    fn exec_carries_only_the_fields_that_are_set() {
        let bare = crate::ExecRequest::new("/bin/true");
        assert_eq!(
            serde_json::to_value(Command::exec(&bare)).unwrap(),
            json!({"execute": "guest-exec", "arguments": {"path": "/bin/true", "capture-output": true}})
        );
        let full = crate::ExecRequest::new("/bin/cat")
            .arg("-")
            .env(["LANG=C"])
            .input(b"hi".to_vec())
            .capture_output(false);
        assert_eq!(
            serde_json::to_value(Command::exec(&full)).unwrap(),
            json!({"execute": "guest-exec", "arguments": {
                "path": "/bin/cat", "arg": ["-"], "env": ["LANG=C"],
                "input-data": "aGk=", "capture-output": false
            }})
        );
    }

    #[test]
    fn debug_hides_file_and_stdin_contents() {
        let secret = b"set system login user vyos authentication plaintext-password hunter2";
        let write = format!("{:?}", Command::file_write(FileHandle(1), secret));
        let exec = format!(
            "{:?}",
            Command::exec(&crate::ExecRequest::new("/bin/cat").input(secret.to_vec()))
        );
        let encoded = BASE64.encode(secret);
        for shown in [&write, &exec] {
            assert!(!shown.contains(&encoded), "{shown}");
            assert!(!shown.contains("hunter2"), "{shown}");
            assert!(shown.contains("base64 characters"), "{shown}");
        }
        assert!(write.contains("guest-file-write") && write.contains("1"), "{write}");
    }
}
