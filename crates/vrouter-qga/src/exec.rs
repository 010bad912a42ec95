//! Running processes in the guest: the `guest-exec` request, the decoded
//! `guest-exec-status`, and a run-and-poll loop on top.

use std::fmt;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

use crate::agent::Agent;
use crate::command::Pid;
use crate::error::QgaError;
use crate::reply::ExecStatusWire;
use crate::transport::Transport;

/// What to run with `guest-exec`.
#[derive(Clone, PartialEq, Eq)]
pub struct ExecRequest {
    /// Executable path (or a name looked up on the agent's `PATH`).
    pub path: String,
    pub args: Vec<String>,
    /// `NAME=value` entries. When set, the process gets only these, not
    /// the agent's environment.
    pub env: Option<Vec<String>>,
    /// Bytes fed to the process's stdin.
    pub input: Option<Vec<u8>>,
    /// Whether the agent keeps stdout and stderr for `guest-exec-status`.
    pub capture_output: bool,
}

impl ExecRequest {
    /// A request for `path` with no arguments, capturing output (every
    /// caller in the operator reads the output).
    pub fn new(path: impl Into<String>) -> Self {
        ExecRequest {
            path: path.into(),
            args: Vec::new(),
            env: None,
            input: None,
            capture_output: true,
        }
    }

    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    pub fn env<I, S>(mut self, env: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.env = Some(env.into_iter().map(Into::into).collect());
        self
    }

    pub fn input(mut self, input: Vec<u8>) -> Self {
        self.input = Some(input);
        self
    }

    pub fn capture_output(mut self, capture: bool) -> Self {
        self.capture_output = capture;
        self
    }
}

impl fmt::Debug for ExecRequest {
    /// Leaves out stdin contents, which may carry secrets.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecRequest")
            .field("path", &self.path)
            .field("args", &self.args)
            .field("env", &self.env)
            .field("input", &self.input.as_ref().map(|i| format!("<{} bytes>", i.len())))
            .field("capture_output", &self.capture_output)
            .finish()
    }
}

/// What `guest-exec-status` says about a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecStatus {
    Running,
    /// The process ended. The agent has now forgotten the pid: asking again
    /// yields [`crate::QgaError::UnknownPid`].
    Exited(ExecOutput),
}

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// It exited with this code.
    Code(i64),
    /// A signal ended it.
    Signal(i64),
}

impl ExitStatus {
    /// The code a shell would report: the exit code, or 128 + the signal
    /// number, so callers that keep one integer (the provider's
    /// `ExecStatus.ExitCode`) still see a non-zero value for a killed script.
    pub fn shell_code(self) -> i64 {
        match self {
            ExitStatus::Code(code) => code,
            // The agent chose the number: saturate rather than overflow.
            ExitStatus::Signal(signal) => signal.saturating_add(128),
        }
    }
}

/// The result of a finished process, with its output decoded. `Debug`
/// shows the output's size, not its text, which may echo secrets; callers
/// decide what of it to show.
#[derive(Clone, PartialEq, Eq)]
pub struct ExecOutput {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// The agent keeps at most 16 MiB per stream; these say it dropped more.
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
}

impl fmt::Debug for ExecOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecOutput")
            .field("status", &self.status)
            .field("stdout", &format_args!("<{} bytes>", self.stdout.len()))
            .field("stderr", &format_args!("<{} bytes>", self.stderr.len()))
            .field("stdout_truncated", &self.stdout_truncated)
            .field("stderr_truncated", &self.stderr_truncated)
            .finish()
    }
}

impl ExecOutput {
    pub fn success(&self) -> bool {
        self.status == ExitStatus::Code(0)
    }

    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

/// How [`crate::Agent::run`] waits for a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollOptions {
    /// Pause between two `guest-exec-status` calls.
    pub interval: Duration,
    /// Give up (the process keeps running) after this long.
    pub timeout: Duration,
}

impl Default for PollOptions {
    /// 250 ms between polls, 10 s in all: the spec's own bound for a quick
    /// guest command (`cat /proc/uptime`, §7.3); each poll over KubeVirt is a
    /// new pod exec, so polling faster buys little.
    fn default() -> Self {
        PollOptions {
            interval: Duration::from_millis(250),
            timeout: Duration::from_secs(10),
        }
    }
}

impl<T: Transport> Agent<T> {
    /// Starts `request` and polls `guest-exec-status` until it exits or
    /// `poll.timeout` passes ([`QgaError::ExecTimeout`]: the process keeps
    /// running and its pid stays valid for [`Agent::exec_status`]).
    pub async fn run(&self, request: &ExecRequest, poll: PollOptions) -> Result<ExecOutput, QgaError> {
        let pid = self.exec(request).await?;
        self.wait(pid, poll).await
    }

    /// Polls an already started process until it exits (see [`Agent::run`]).
    pub async fn wait(&self, pid: Pid, poll: PollOptions) -> Result<ExecOutput, QgaError> {
        let started = Instant::now();
        loop {
            if let ExecStatus::Exited(output) = self.exec_status(pid).await? {
                return Ok(output);
            }
            let waited = started.elapsed();
            if waited >= poll.timeout {
                return Err(QgaError::ExecTimeout { pid, waited });
            }
            tokio::time::sleep(poll.interval.min(poll.timeout - waited)).await;
        }
    }
}

/// Turns the wire shape into an [`ExecStatus`], decoding the output.
pub(crate) fn decode_status(wire: ExecStatusWire) -> Result<ExecStatus, String> {
    if !wire.exited {
        return Ok(ExecStatus::Running);
    }
    let status = match (wire.exitcode, wire.signal) {
        (Some(code), None) => ExitStatus::Code(code),
        (None, Some(signal)) => ExitStatus::Signal(signal),
        (Some(code), Some(signal)) => {
            return Err(format!("exited process has both exitcode {code} and signal {signal}"));
        }
        (None, None) => return Err("exited process has neither exitcode nor signal".into()),
    };
    Ok(ExecStatus::Exited(ExecOutput {
        status,
        stdout: decode_stream("out-data", wire.out_data)?,
        stderr: decode_stream("err-data", wire.err_data)?,
        stdout_truncated: wire.out_truncated,
        stderr_truncated: wire.err_truncated,
    }))
}

/// The agent leaves a stream out when it was empty or not captured.
fn decode_stream(field: &str, data: Option<String>) -> Result<Vec<u8>, String> {
    match data {
        None => Ok(Vec::new()),
        Some(b64) => BASE64
            .decode(b64.as_bytes())
            .map_err(|e| format!("{field} is not valid base64: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reply::decode;
    use serde_json::json;

    fn status(value: serde_json::Value) -> Result<ExecStatus, String> {
        decode_status(decode(value)?)
    }

    #[test]
    fn status_shapes_decode() {
        assert_eq!(status(json!({"exited": false})), Ok(ExecStatus::Running));
        assert_eq!(
            status(
                json!({"exited": true, "exitcode": 3, "out-data": "b3V0Cg==", "err-data": "ZXJyCg==",
                "out-truncated": false, "err-truncated": true})
            ),
            Ok(ExecStatus::Exited(ExecOutput {
                status: ExitStatus::Code(3),
                stdout: b"out\n".to_vec(),
                stderr: b"err\n".to_vec(),
                stdout_truncated: false,
                stderr_truncated: true,
            }))
        );
        assert_eq!(
            status(json!({"exited": true, "signal": 9})),
            Ok(ExecStatus::Exited(ExecOutput {
                status: ExitStatus::Signal(9),
                stdout: vec![],
                stderr: vec![],
                stdout_truncated: false,
                stderr_truncated: false,
            }))
        );
    }

    #[test]
    fn bad_status_shapes_say_what_is_wrong() {
        let cases = [
            (json!({"exited": true}), "neither exitcode nor signal"),
            (json!({"exited": true, "exitcode": 0, "signal": 9}), "both"),
            (
                json!({"exited": true, "exitcode": 0, "out-data": "%%%"}),
                "out-data is not valid base64",
            ),
            (json!({"exitcode": 0}), "missing field `exited`"),
            (json!({"exited": "yes"}), "invalid type"),
        ];
        for (value, expected) in cases {
            let message = status(value.clone()).unwrap_err();
            assert!(message.contains(expected), "{value}: {message}");
        }
    }

    #[test]
    fn shell_code_follows_the_shell_convention() {
        assert_eq!(ExitStatus::Code(3).shell_code(), 3);
        assert_eq!(ExitStatus::Signal(9).shell_code(), 137);
        assert_eq!(ExitStatus::Signal(i64::MAX).shell_code(), i64::MAX);
        assert_eq!(ExitStatus::Signal(i64::MIN).shell_code(), i64::MIN + 128);
    }

    #[test]
    fn output_debug_shows_sizes_not_text() {
        let output = ExecOutput {
            status: ExitStatus::Code(0),
            stdout: b"plaintext-password hunter2".to_vec(),
            stderr: vec![],
            stdout_truncated: false,
            stderr_truncated: false,
        };
        let shown = format!("{output:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("<26 bytes>"), "{shown}");
    }

    #[test]
    fn request_debug_hides_stdin() {
        let shown = format!("{:?}", ExecRequest::new("/bin/cat").input(b"hunter2".to_vec()));
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("<7 bytes>"), "{shown}");
    }
}
