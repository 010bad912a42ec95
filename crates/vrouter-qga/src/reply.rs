//! Replies: the agent's `{"return": …}` / `{"error": …}` envelope and the
//! typed shapes of the `return` values this crate reads.

use std::fmt;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The agent's answer to one command, as a [`crate::Transport`] delivers it.
#[derive(Clone, PartialEq)]
pub enum Reply {
    /// The command succeeded; this is the `return` member.
    Return(Value),
    /// The agent refused or failed the command.
    Error(AgentError),
}

/// An error reported by the agent itself (not by the path to it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentError {
    /// The QMP error class, e.g. `GenericError`, `CommandNotFound`. `None`
    /// when the path to the agent only passed the message on (`virsh`
    /// prints the description without the class).
    pub class: Option<String>,
    /// The agent's human-readable description, kept verbatim.
    pub desc: String,
}

impl AgentError {
    pub fn new(class: impl Into<String>, desc: impl Into<String>) -> Self {
        AgentError {
            class: Some(class.into()),
            desc: desc.into(),
        }
    }

    /// An error whose class the transport could not see.
    pub fn without_class(desc: impl Into<String>) -> Self {
        AgentError {
            class: None,
            desc: desc.into(),
        }
    }
}

impl fmt::Display for AgentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.class {
            Some(class) => write!(f, "{class}: {}", self.desc),
            None => f.write_str(&self.desc),
        }
    }
}

/// The members of a reply envelope besides `return`/`error`.
#[derive(Deserialize)]
struct Envelope {
    #[serde(rename = "return")]
    ret: Option<Value>,
    error: Option<WireError>,
}

#[derive(Deserialize)]
struct WireError {
    class: String,
    desc: String,
}

impl Reply {
    /// Reads one reply envelope as the agent writes it. Other members (the
    /// echoed `id`) are ignored here; the unix-socket transport matches them
    /// itself. Transports that receive the raw reply text (`virsh
    /// qemu-agent-command` prints it) can use this too.
    pub fn from_envelope(value: Value) -> Result<Reply, String> {
        let envelope: Envelope =
            serde_json::from_value(value).map_err(|e| format!("not a reply envelope: {}", bounded(e.to_string())))?;
        match (envelope.ret, envelope.error) {
            (Some(ret), None) => Ok(Reply::Return(ret)),
            (None, Some(error)) => Ok(Reply::Error(AgentError::new(error.class, error.desc))),
            (Some(_), Some(_)) => Err("reply has both \"return\" and \"error\"".into()),
            (None, None) => Err("reply has neither \"return\" nor \"error\"".into()),
        }
    }
}

impl fmt::Debug for Reply {
    /// Shows the shape, not the contents: a `return` may carry file
    /// contents or command output, which can hold router secrets.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reply::Return(value) => write!(f, "Return({})", shape(value)),
            Reply::Error(error) => f.debug_tuple("Error").field(error).finish(),
        }
    }
}

fn shape(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let keys: Vec<&str> = map.keys().map(String::as_str).collect();
            format!("{{{}}}", keys.join(", "))
        }
        Value::Array(items) => format!("[{} items]", items.len()),
        Value::String(s) => format!("<string of {} bytes>", s.len()),
        scalar => scalar.to_string(),
    }
}

/// Reads a `return` value into `T`, or says what is wrong with it.
pub(crate) fn decode<T: DeserializeOwned>(value: Value) -> Result<T, String> {
    serde_json::from_value(value).map_err(|e| bounded(e.to_string()))
}

/// The most of a decoding error kept, in bytes. serde quotes the value it
/// refused (`invalid type: string "…"`), and an agent may send a string of
/// megabytes where a number belongs.
const MAX_DETAIL_BYTES: usize = 256;

/// `detail` cut to [`MAX_DETAIL_BYTES`] on a character boundary, marked.
fn bounded(mut detail: String) -> String {
    if detail.len() > MAX_DETAIL_BYTES {
        let mut end = MAX_DETAIL_BYTES;
        while !detail.is_char_boundary(end) {
            end -= 1;
        }
        detail.truncate(end);
        detail.push_str("… [cut]");
    }
    detail
}

/// `guest-file-read`'s return value.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(crate) struct FileReadWire {
    pub count: u64,
    #[serde(rename = "buf-b64")]
    pub buf_b64: String,
    pub eof: bool,
}

/// `guest-file-write`'s return value.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(crate) struct FileWriteWire {
    pub count: u64,
    #[allow(dead_code)] // part of the wire shape; a write never reports EOF usefully
    pub eof: bool,
}

/// `guest-exec`'s return value.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(crate) struct ExecWire {
    pub pid: i64,
}

/// `guest-exec-status`'s return value.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) struct ExecStatusWire {
    pub exited: bool,
    pub exitcode: Option<i64>,
    pub signal: Option<i64>,
    pub out_data: Option<String>,
    pub err_data: Option<String>,
    #[serde(default)]
    pub out_truncated: bool,
    #[serde(default)]
    pub err_truncated: bool,
}

/// `guest-get-osinfo`'s return value. Every field is optional on the wire:
/// the agent leaves out what uname(2) or os-release(5) do not provide.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct OsInfo {
    pub kernel_release: Option<String>,
    pub kernel_version: Option<String>,
    pub machine: Option<String>,
    /// os-release `ID`, e.g. `vyos`, `dozenos`, `debian`.
    pub id: Option<String>,
    pub name: Option<String>,
    pub pretty_name: Option<String>,
    pub version: Option<String>,
    pub version_id: Option<String>,
    pub variant: Option<String>,
    pub variant_id: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn envelopes_decode_to_return_or_error() {
        assert_eq!(
            Reply::from_envelope(json!({"return": {}, "id": 3})).unwrap(),
            Reply::Return(json!({}))
        );
        assert_eq!(
            Reply::from_envelope(json!({"error": {"class": "GenericError", "desc": "boom"}})).unwrap(),
            Reply::Error(AgentError::new("GenericError", "boom"))
        );
    }

    #[test]
    fn malformed_envelopes_say_what_is_wrong() {
        let cases = [
            (json!({"id": 1}), "neither"),
            (json!({"return": 1, "error": {"class": "c", "desc": "d"}}), "both"),
            (json!({"error": {"desc": "no class"}}), "class"),
            (json!([1, 2]), "not a reply envelope"),
        ];
        for (value, expected) in cases {
            let message = Reply::from_envelope(value.clone()).unwrap_err();
            assert!(message.contains(expected), "{value}: {message}");
        }
    }

    #[test]
    fn a_refused_value_is_quoted_in_bounded_length() {
        let long = "7".repeat(1 << 20);
        let message = decode::<ExecWire>(json!({ "pid": long })).unwrap_err();
        assert!(message.starts_with("invalid type: string \"777"), "{message}");
        assert!(message.len() <= MAX_DETAIL_BYTES + "… [cut]".len(), "{}", message.len());
        let message = Reply::from_envelope(json!({"error": {"class": long, "desc": 1}})).unwrap_err();
        assert!(message.len() <= 300, "{}", message.len());
        assert_eq!(bounded("é".repeat(200)), format!("{}… [cut]", "é".repeat(128)));
    }

    #[test]
    fn reply_debug_shows_shape_not_contents() {
        let reply = Reply::Return(json!({"count": 7, "buf-b64": "c2VjcmV0IQ==", "eof": true}));
        let shown = format!("{reply:?}");
        assert!(!shown.contains("c2VjcmV0IQ=="), "{shown}");
        assert!(shown.contains("buf-b64"), "{shown}");
    }

    #[test]
    fn agent_error_display_keeps_class_and_description() {
        assert_eq!(
            AgentError::new("GenericError", "Invalid parameter 'pid'").to_string(),
            "GenericError: Invalid parameter 'pid'"
        );
        assert_eq!(AgentError::without_class("agent said no").to_string(), "agent said no");
    }
}
