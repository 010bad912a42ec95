#![doc = include_str!("../README.md")]

mod agent;
mod apply;
pub mod arbiter;
pub mod command;
pub mod constants;
mod error;
mod exec;
mod files;
mod flavor;
pub mod framing;
mod reply;
mod transport;
pub mod unix_socket;

#[cfg(feature = "testing")]
pub mod testing;

pub use agent::{Agent, FileChunk};
pub use apply::{ApplyPaths, Dispatch};
pub use arbiter::{ApplyId, ApplyRecord};
pub use command::{Command, FileHandle, OpenMode, Pid};
pub use error::{QgaError, TransportError, is_unknown_pid};
pub use exec::{ExecOutput, ExecRequest, ExecStatus, ExitStatus, PollOptions};
pub use files::FileLimits;
pub use flavor::{GuestFlavor, SUBSTATE_EXITED, os_release_id, service_substate_request};
pub use reply::{AgentError, OsInfo, Reply};
pub use transport::{CallFuture, Transport};
pub use unix_socket::{DEFAULT_CALL_TIMEOUT, UnixSocketTransport};
