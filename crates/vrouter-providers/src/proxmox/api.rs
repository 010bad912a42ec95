//! The Proxmox VE API as this provider uses it: wire shapes, limits, and the
//! pure rules for reading its answers.

use serde::Deserialize;
use serde_json::Value;

/// `agent/file-write`'s `content` is capped at 60 KiB (61 440 characters,
/// below the API server's 64 KiB POST limit). Content goes base64-encoded
/// with `encode=0`, so one request carries at most this many raw bytes.
pub const FILE_WRITE_MAX_CONTENT_CHARS: usize = 60 * 1024;
pub const FILE_WRITE_MAX_RAW_BYTES: usize = FILE_WRITE_MAX_CONTENT_CHARS / 4 * 3;

/// The largest file this provider writes in parts (16 MiB, the same cap
/// `agent/file-read` has). An apply script is tens of KiB.
pub const MAX_WRITE_BYTES: usize = 16 * 1024 * 1024;

/// The `{"data": ...}` envelope of every answer.
#[derive(Deserialize)]
pub(crate) struct Envelope<T> {
    pub data: T,
}

#[derive(Deserialize)]
pub(crate) struct ClusterResource {
    #[serde(default)]
    pub vmid: Option<i64>,
    #[serde(default)]
    pub node: Option<String>,
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub uptime: Option<u64>,
}

#[derive(Deserialize)]
pub(crate) struct VmStatus {
    #[serde(default)]
    pub status: String,
}

#[derive(Deserialize)]
pub(crate) struct ExecStarted {
    pub pid: i64,
}

/// `agent/exec-status`. Proxmox has already base64-decoded the output and
/// turned JSON booleans into 1/0.
#[derive(Deserialize)]
pub(crate) struct ExecStatusData {
    #[serde(default)]
    pub exited: Value,
    #[serde(default)]
    pub exitcode: Option<i64>,
    #[serde(default)]
    pub signal: Option<i64>,
    #[serde(default, rename = "out-data")]
    pub out_data: Option<String>,
    #[serde(default, rename = "err-data")]
    pub err_data: Option<String>,
    #[serde(default, rename = "out-truncated")]
    pub out_truncated: Value,
    #[serde(default, rename = "err-truncated")]
    pub err_truncated: Value,
}

/// `agent/get-osinfo` wraps the agent's return value in `result`.
#[derive(Deserialize)]
pub(crate) struct OsInfoData {
    pub result: vrouter_qga::OsInfo,
}

/// `agent/file-read`. The content borrows from the answer's body when it
/// holds no JSON escapes (a text file), so it is not copied to be read.
#[derive(Deserialize)]
pub(crate) struct FileRead<'a> {
    #[serde(default, borrow)]
    pub content: std::borrow::Cow<'a, str>,
    #[serde(default)]
    pub truncated: Value,
}

/// Proxmox's booleans arrive as `1`/`0`, `true`/`false` or `"1"`.
pub(crate) fn truthy(v: &Value) -> bool {
    match v {
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_i64().is_some_and(|n| n != 0),
        Value::String(s) => s == "1" || s.eq_ignore_ascii_case("true"),
        _ => false,
    }
}

/// The longest output stream the Proxmox provider keeps as text. A guest
/// agent sends at most 16 MiB of output per stream (qemu-ga's own cap), so
/// only output that is not UTF-8, each such byte shown as U+FFFD (three
/// bytes), makes longer text; the 1 KiB over it is room for the note the
/// provider adds to output the agent truncated.
pub(crate) const MAX_OUTPUT_TEXT_BYTES: usize = vrouter_qga::constants::MAX_READ_FILE_BYTES + 1024;

/// The bytes behind a string Proxmox decoded from base64.
///
/// Proxmox decodes agent data into a Perl byte string and serialises it as
/// JSON text, so each byte arrives as the character with that code point
/// (U+0000..U+00FF). Mapping characters back to bytes restores the guest's
/// bytes exactly. A character above U+00FF cannot come from that path; such
/// text is taken as already-decoded UTF-8.
pub fn latin1_to_bytes(s: &str) -> Vec<u8> {
    if s.chars().all(|c| u32::from(c) <= 0xff) {
        // Sized once: growing by doubling would hold the old and the new
        // buffer at once, up to three times the bytes.
        let mut bytes = Vec::with_capacity(s.chars().count());
        bytes.extend(s.chars().map(|c| u32::from(c) as u8));
        bytes
    } else {
        s.as_bytes().to_vec()
    }
}

/// Percent-encodes a query parameter value (RFC 3986 unreserved kept).
pub fn encode_query_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The parts a file larger than one `file-write` is written in, as
/// `(part path, byte range)`.
pub fn write_plan(path: &str, len: usize) -> Vec<(String, std::ops::Range<usize>)> {
    (0..len.div_ceil(FILE_WRITE_MAX_RAW_BYTES))
        .map(|i| {
            let start = i * FILE_WRITE_MAX_RAW_BYTES;
            let end = (start + FILE_WRITE_MAX_RAW_BYTES).min(len);
            (format!("{path}.part{i:04}"), start..end)
        })
        .collect()
}

/// The shell program that concatenates the parts into the target and
/// removes them. Paths travel as arguments, never inside the program text.
pub const ASSEMBLE_PROGRAM: &str = r#"target="$1"; shift; cat -- "$@" > "$target" && rm -f -- "$@""#;

/// How a Proxmox error answer reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ErrorKind {
    /// 401/403.
    Unauthorized,
    /// The VM is not on the node asked (404, or the 500 Proxmox gives when
    /// the VM's config file is not on that node).
    VmNotOnNode,
    /// The VM exists but is not running, or has no (running) guest agent.
    AgentUnavailable,
    /// The guest agent answered with an error (`Agent error: ...`).
    Agent(String),
    Other,
}

pub(crate) fn classify_error(status: u16, message: &str) -> ErrorKind {
    let lower = message.to_ascii_lowercase();
    match status {
        401 | 403 => ErrorKind::Unauthorized,
        404 => ErrorKind::VmNotOnNode,
        _ if lower.contains("does not exist") && lower.contains("conf") => ErrorKind::VmNotOnNode,
        _ if lower.contains("guest agent is not running")
            || lower.contains("no qemu guest agent configured")
            || lower.contains("is not running") =>
        {
            ErrorKind::AgentUnavailable
        }
        _ => match message.find("Agent error:") {
            Some(i) => ErrorKind::Agent(message[i + "Agent error:".len()..].trim().to_string()),
            None => ErrorKind::Other,
        },
    }
}

/// The message of an error answer: the reason phrase, plus the per-parameter
/// errors a 400 carries in its body.
pub(crate) fn error_message(reason: &str, body: &[u8]) -> String {
    let mut message = reason.trim().to_string();
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        if let Some(errors) = v.get("errors").and_then(Value::as_object) {
            let mut parts: Vec<String> = errors
                .iter()
                .map(|(k, e)| format!("{k}: {}", e.as_str().unwrap_or(&e.to_string()).trim()))
                .collect();
            parts.sort();
            if !parts.is_empty() {
                message = format!("{message} ({})", parts.join("; "));
            }
        } else if let Some(m) = v.get("message").and_then(Value::as_str) {
            message = format!("{message} {}", m.trim());
        }
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn error_answers_are_classified() {
        let cases = [
            (401, "authentication failure", ErrorKind::Unauthorized),
            (
                403,
                "Permission check failed (/vms/100, VM.GuestAgent.Unrestricted)",
                ErrorKind::Unauthorized,
            ),
            (404, "Not Found", ErrorKind::VmNotOnNode),
            (
                500,
                "Configuration file 'nodes/pve1/qemu-server/100.conf' does not exist",
                ErrorKind::VmNotOnNode,
            ),
            (500, "VM 100 is not running", ErrorKind::AgentUnavailable),
            (500, "QEMU guest agent is not running", ErrorKind::AgentUnavailable),
            (500, "No QEMU guest agent configured", ErrorKind::AgentUnavailable),
            (
                500,
                "Agent error: Invalid parameter 'pid'",
                ErrorKind::Agent("Invalid parameter 'pid'".into()),
            ),
            (596, "Connection timed out", ErrorKind::Other),
        ];
        for (status, message, kind) in cases {
            assert_eq!(classify_error(status, message), kind, "{status} {message}");
        }
    }

    #[test]
    fn parameter_errors_are_named() {
        let body = br#"{"data":null,"errors":{"content":"value may only be 61440 characters long"}}"#;
        assert_eq!(
            error_message("Parameter verification failed.", body),
            "Parameter verification failed. (content: value may only be 61440 characters long)"
        );
        assert_eq!(error_message("Not Found", b""), "Not Found");
    }

    #[test]
    fn booleans_in_every_spelling() {
        for (v, b) in [
            (serde_json::json!(1), true),
            (serde_json::json!(0), false),
            (serde_json::json!(true), true),
            (serde_json::json!("1"), true),
            (Value::Null, false),
        ] {
            assert_eq!(truthy(&v), b, "{v}");
        }
    }

    #[test]
    fn query_values_are_encoded() {
        assert_eq!(encode_query_value("/config/config.boot"), "/config/config.boot");
        assert_eq!(encode_query_value("/tmp/a b&c=d"), "/tmp/a%20b%26c%3Dd");
    }

    proptest! {
        /// Whatever bytes the guest had, the Latin-1 text Proxmox sends maps back to them.
        #[test]
        fn latin1_round_trips_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let text: String = bytes.iter().map(|&b| char::from(b)).collect();
            prop_assert_eq!(latin1_to_bytes(&text), bytes);
        }

        /// The parts cover the content exactly once, in order, each within one file-write.
        #[test]
        fn write_plan_covers_everything(len in 0usize..400_000) {
            let plan = write_plan("/tmp/x", len);
            let mut next = 0;
            for (i, (path, range)) in plan.iter().enumerate() {
                prop_assert_eq!(path, &format!("/tmp/x.part{i:04}"));
                prop_assert_eq!(range.start, next);
                prop_assert!(range.end > range.start);
                prop_assert!(range.len() <= FILE_WRITE_MAX_RAW_BYTES);
                prop_assert!((range.len().div_ceil(3) * 4) <= FILE_WRITE_MAX_CONTENT_CHARS);
                next = range.end;
            }
            prop_assert_eq!(next, len);
        }
    }
}
