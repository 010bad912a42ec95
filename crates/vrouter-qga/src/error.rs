//! Typed errors: what went wrong on the way to the agent
//! ([`TransportError`]) is kept apart from what the agent itself answered
//! ([`QgaError::Agent`], [`QgaError::UnknownPid`]), so callers can branch.

use std::error::Error as StdError;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use crate::command::{Pid, names};
use crate::exec::ExitStatus;
use crate::reply::AgentError;

/// The path to the agent failed: no answer can be trusted for this call.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("cannot connect to the guest agent socket {path}: {source}")]
    Connect { path: PathBuf, source: io::Error },
    /// The agent went away (killed, restarted, socket closed) before its
    /// reply was complete.
    #[error("the guest agent closed the connection before its reply was complete")]
    Closed,
    #[error("I/O error talking to the guest agent: {0}")]
    Io(#[from] io::Error),
    #[error("no reply from the guest agent within {0:?}")]
    Timeout(Duration),
    #[error("a guest agent reply exceeds {limit} bytes")]
    ReplyTooLarge { limit: usize },
    #[error("the request is {size} bytes, more than the {limit} bytes one agent message may have")]
    RequestTooLarge { size: usize, limit: usize },
    /// Bytes arrived that are not a reply envelope.
    #[error("the guest agent sent something that is not a reply: {0}")]
    Garbled(String),
    /// A failure in a provider's own transport (a pod exec, an HTTP call).
    #[error("{message}")]
    Backend {
        message: String,
        #[source]
        source: Option<Box<dyn StdError + Send + Sync>>,
    },
}

impl TransportError {
    /// For transports built on other clients: `message` says which step
    /// failed; it must not contain credentials.
    pub fn backend(message: impl Into<String>, source: Option<Box<dyn StdError + Send + Sync>>) -> Self {
        TransportError::Backend {
            message: message.into(),
            source,
        }
    }
}

/// Everything a call through [`crate::Agent`] can fail with.
#[derive(Debug, thiserror::Error)]
pub enum QgaError {
    /// The command may or may not have run in the guest: the reply was lost.
    #[error("{command}: {source}")]
    Transport {
        command: &'static str,
        #[source]
        source: TransportError,
    },
    /// The agent answered with an error; class and description are kept.
    #[error("{command} failed in the guest agent: {error}")]
    Agent { command: &'static str, error: AgentError },
    /// `guest-exec-status` for a pid the agent does not know (see
    /// [`is_unknown_pid`] for the rule). The agent forgets a pid once it has
    /// reported `exited: true`, and a restarted agent knows none of the old
    /// ones, so the result of that process can never be fetched again.
    #[error("the guest agent does not know pid {pid} (already reaped, or the agent restarted): {error}")]
    UnknownPid { pid: Pid, error: AgentError },
    /// The agent answered, but not in the shape the command promises.
    #[error("{command} returned a reply that does not parse: {detail}")]
    UnexpectedReply { command: &'static str, detail: String },
    #[error("writing {path}: the agent wrote {written} of {expected} bytes of a chunk")]
    ShortWrite {
        path: String,
        expected: usize,
        written: u64,
    },
    #[error("reading {path}: the file is larger than the {limit}-byte limit")]
    FileTooLarge { path: String, limit: usize },
    /// The agent answered each read in time, but the whole file did not
    /// arrive within the read's deadline.
    #[error(
        "reading {path}: the guest agent sent {read} bytes in {deadline:?}, the most one read may take; refusing a file that arrives this slowly"
    )]
    ReadTooSlow {
        path: String,
        deadline: Duration,
        read: usize,
    },
    /// The process is still running in the guest; its pid stays valid.
    #[error("pid {pid} was still running after {waited:?}")]
    ExecTimeout { pid: Pid, waited: Duration },
    /// A helper command run in the guest did not succeed.
    #[error("`{command}` failed in the guest ({status:?}): {stderr}")]
    GuestCommandFailed {
        command: String,
        status: ExitStatus,
        stderr: String,
    },
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("unknown guest OS id {id:?}: expected \"vyos\" or \"dozenos\"")]
    UnknownFlavor { id: String },
    #[error("the guest does not report an OS id (no ID= in {source_name})")]
    NoOsId { source_name: &'static str },
}

impl QgaError {
    /// Whether the agent no longer knows the pid asked about.
    pub fn is_unknown_pid(&self) -> bool {
        matches!(self, QgaError::UnknownPid { .. })
    }

    /// Whether the path to the agent failed (as opposed to the agent
    /// answering with an error).
    pub fn is_transport(&self) -> bool {
        matches!(self, QgaError::Transport { .. })
    }

    /// The agent's own error, for [`QgaError::Agent`] and
    /// [`QgaError::UnknownPid`].
    pub fn agent_error(&self) -> Option<&AgentError> {
        match self {
            QgaError::Agent { error, .. } | QgaError::UnknownPid { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// The description qemu-ga gives when `guest-exec-status` is asked about a
/// pid it has no record of (QEMU's `QERR_INVALID_PARAMETER` for `pid`).
pub const UNKNOWN_PID_DESC: &str = "Invalid parameter 'pid'";

/// The unknown-pid rule: an error reply to `guest-exec-status` whose
/// description contains `Invalid parameter 'pid'`, whatever its class.
///
/// qemu-ga answers exactly that (class `GenericError`) for any pid missing
/// from its table: one it already reported as exited, one started by an
/// agent that has since restarted, one it never started. The class is not
/// required and the match is on a substring because the paths to the agent
/// rewrap the message: `virsh` drops the class and prefixes `internal error:
/// unable to execute QEMU agent command 'guest-exec-status': `, Proxmox VE
/// prefixes `Agent error: `. The description is the agent's fixed wording,
/// not a translation, so the match is stable.
pub fn is_unknown_pid(command: &str, error: &AgentError) -> bool {
    command == names::EXEC_STATUS && error.desc.contains(UNKNOWN_PID_DESC)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_pid_rule_table() {
        let status = names::EXEC_STATUS;
        let cases = [
            // (command, class, desc, expected)
            (status, Some("GenericError"), "Invalid parameter 'pid'", true),
            (
                status,
                None,
                "internal error: unable to execute QEMU agent command 'guest-exec-status': Invalid parameter 'pid'",
                true,
            ),
            (status, None, "Agent error: Invalid parameter 'pid'", true),
            (status, Some("GenericError"), "Invalid parameter 'handle'", false),
            (
                status,
                Some("CommandNotFound"),
                "The command guest-exec-status has not been found",
                false,
            ),
            (
                names::FILE_CLOSE,
                Some("GenericError"),
                "Invalid parameter 'pid'",
                false,
            ),
            (names::EXEC, Some("GenericError"), "Invalid parameter 'pid'", false),
        ];
        for (command, class, desc, expected) in cases {
            let error = AgentError {
                class: class.map(str::to_owned),
                desc: desc.to_owned(),
            };
            assert_eq!(is_unknown_pid(command, &error), expected, "{command}: {desc}");
        }
    }

    #[test]
    fn messages_name_the_command() {
        let error = QgaError::UnexpectedReply {
            command: names::FILE_READ,
            detail: "missing field `eof`".into(),
        };
        assert_eq!(
            error.to_string(),
            "guest-file-read returned a reply that does not parse: missing field `eof`"
        );
        let error = QgaError::Transport {
            command: names::EXEC_STATUS,
            source: TransportError::Closed,
        };
        assert!(error.is_transport());
        assert!(error.to_string().starts_with("guest-exec-status: "), "{error}");
    }
}
