//! The guest-agent transport of KubeVirt: each command runs as
//! `virsh qemu-agent-command <namespace>_<name> '<json>'` in the `compute`
//! container of the virt-launcher pod, over the pods/exec websocket.
//!
//! `virsh` prints the agent's reply envelope on stdout and exits 0; when the
//! agent answers with an error it exits 1 and prints
//! `error: internal error: unable to execute QEMU agent command '<cmd>': <desc>`
//! (the class is dropped). Any other failure (agent not connected, domain
//! unknown, exec refused) is a transport failure.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, AttachParams};
use tokio::io::AsyncReadExt;
use vrouter_qga::{AgentError, CallFuture, Command, Reply, Transport, TransportError};

/// The container of a virt-launcher pod that has `virsh` and the domain.
pub const COMPUTE_CONTAINER: &str = "compute";

/// What `virsh` prints before the agent's description when the agent
/// answered with an error.
const AGENT_ERROR_MARKER: &str = "unable to execute QEMU agent command";

/// The longest URI the `http` crate (and so kube-rs) builds: 65 534 bytes.
/// The exec command travels in the query string, percent-encoded, so this —
/// not the 128 KiB Linux allows one argument — bounds one agent command.
pub const MAX_EXEC_URI_BYTES: usize = u16::MAX as usize - 1;

/// Room for the path, container, the other command words and flags.
const URI_OVERHEAD_ALLOWANCE: usize = 2048;

/// Raw bytes per `guest-file-write` over virsh. Base64 of 12 KiB is 16 384
/// characters; percent-encoding at most triples that (a chunk of nothing but
/// `+` and `/`), 49 152 bytes, which leaves room for the JSON around it
/// under [`MAX_EXEC_URI_BYTES`].
pub const WRITE_CHUNK_BYTES: usize = 12 * 1024;

/// The length of `s` once form-urlencoded into the exec query string.
pub fn query_encoded_len(s: &str) -> usize {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"*-._ ".contains(&b) {
                1
            } else {
                3
            }
        })
        .sum()
}

/// libvirt's domain name for a KubeVirt VMI.
pub fn domain_name(namespace: &str, vmi: &str) -> String {
    format!("{namespace}_{vmi}")
}

/// The argv run in the compute container for one command.
pub fn virsh_argv(domain: &str, command_json: &str) -> Vec<String> {
    vec![
        "virsh".into(),
        "qemu-agent-command".into(),
        domain.into(),
        command_json.into(),
    ]
}

/// How one virsh run ended, from its output and exit status.
pub fn interpret(exit_ok: bool, stdout: &[u8], stderr: &[u8]) -> Result<Reply, TransportError> {
    let err_text = String::from_utf8_lossy(stderr).trim().to_string();
    if exit_ok {
        let value: serde_json::Value = serde_json::from_slice(stdout).map_err(|e| {
            TransportError::Garbled(format!("virsh printed {} bytes that are not JSON ({e})", stdout.len()))
        })?;
        return Reply::from_envelope(value).map_err(TransportError::Garbled);
    }
    let message = err_text.strip_prefix("error: ").unwrap_or(&err_text);
    if message.contains(AGENT_ERROR_MARKER) {
        return Ok(Reply::Error(AgentError::without_class(message)));
    }
    Err(TransportError::backend(
        if message.is_empty() {
            "virsh qemu-agent-command failed without a message".to_string()
        } else {
            format!("virsh qemu-agent-command failed: {message}")
        },
        None,
    ))
}

/// The exit status kube-rs reports on the exec's status channel.
fn exit_ok(status: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Status) -> bool {
    status.status.as_deref() == Some("Success")
}

pub struct VirshTransport {
    pods: Api<Pod>,
    pod: String,
    domain: String,
    timeout: Duration,
}

impl VirshTransport {
    pub fn new(pods: Api<Pod>, pod: String, domain: String, timeout: Duration) -> Self {
        VirshTransport {
            pods,
            pod,
            domain,
            timeout,
        }
    }

    async fn run(&self, command: &Command) -> Result<Reply, TransportError> {
        let json = command.to_json();
        let size = query_encoded_len(&json) + URI_OVERHEAD_ALLOWANCE;
        if size > MAX_EXEC_URI_BYTES {
            return Err(TransportError::RequestTooLarge {
                size,
                limit: MAX_EXEC_URI_BYTES,
            });
        }
        let argv = virsh_argv(&self.domain, &json);
        let params = AttachParams::default()
            .container(COMPUTE_CONTAINER)
            .stdin(false)
            .stdout(true)
            .stderr(true)
            .max_stdout_buf_size(1024 * 1024);
        let mut process = self.pods.exec(&self.pod, argv, &params).await.map_err(|e| {
            TransportError::backend(format!("exec into pod {} failed: {e}", self.pod), Some(Box::new(e)))
        })?;
        let status = process
            .take_status()
            .ok_or_else(|| TransportError::backend("the exec stream has no status channel", None))?;
        let mut stdout = process
            .stdout()
            .ok_or_else(|| TransportError::backend("the exec stream has no stdout", None))?;
        let mut stderr = process
            .stderr()
            .ok_or_else(|| TransportError::backend("the exec stream has no stderr", None))?;
        // All three are read together: kube-rs buffers each stream in a
        // small pipe, so an unread stdout would stall the status.
        let mut out = Vec::new();
        let mut err = Vec::new();
        let (out_read, err_read, status) =
            tokio::join!(stdout.read_to_end(&mut out), stderr.read_to_end(&mut err), status);
        out_read.map_err(TransportError::Io)?;
        err_read.map_err(TransportError::Io)?;
        let status = status.ok_or_else(|| {
            TransportError::backend(format!("exec into pod {} ended without an exit status", self.pod), None)
        })?;
        interpret(exit_ok(&status), &out, &err)
    }
}

impl Transport for VirshTransport {
    fn call<'a>(&'a self, command: &'a Command) -> CallFuture<'a> {
        Box::pin(async move {
            match tokio::time::timeout(self.timeout, self.run(command)).await {
                Ok(result) => result,
                Err(_) => Err(TransportError::Timeout(self.timeout)),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn virsh_outcomes() {
        assert_eq!(
            interpret(true, br#"{"return":{}}"#, b"").unwrap(),
            Reply::Return(serde_json::json!({}))
        );
        let agent = interpret(
            false,
            b"",
            b"error: internal error: unable to execute QEMU agent command 'guest-exec-status': Invalid parameter 'pid'\n",
        )
        .unwrap();
        match agent {
            Reply::Error(e) => {
                assert_eq!(e.class, None);
                assert!(e.desc.ends_with("Invalid parameter 'pid'"), "{}", e.desc);
                assert!(vrouter_qga::is_unknown_pid(vrouter_qga::names::EXEC_STATUS, &e));
            }
            other => panic!("{other:?}"),
        }
        let down = interpret(
            false,
            b"",
            b"error: Guest agent is not responding: QEMU guest agent is not connected\n",
        )
        .unwrap_err();
        assert!(down.to_string().contains("not connected"), "{down}");
        assert!(matches!(
            interpret(true, b"not json", b""),
            Err(TransportError::Garbled(_))
        ));
        assert!(
            interpret(false, b"", b"")
                .unwrap_err()
                .to_string()
                .contains("without a message")
        );
    }

    #[test]
    fn the_worst_write_chunk_fits_the_exec_uri() {
        // Bytes whose base64 is all '/' — each of which percent-encodes to 3 bytes.
        let worst = vec![0xffu8; WRITE_CHUNK_BYTES];
        let json = Command::file_write(vrouter_qga::FileHandle(1_000_000), &worst).to_json();
        assert!(query_encoded_len(&json) + URI_OVERHEAD_ALLOWANCE <= MAX_EXEC_URI_BYTES);
        assert_eq!(query_encoded_len("a b+c/{"), 1 + 1 + 1 + 3 + 1 + 3 + 3);
    }

    #[test]
    fn domain_and_argv() {
        assert_eq!(domain_name("prod", "r1"), "prod_r1");
        assert_eq!(
            virsh_argv("prod_r1", r#"{"execute":"guest-ping"}"#),
            ["virsh", "qemu-agent-command", "prod_r1", r#"{"execute":"guest-ping"}"#]
        );
    }
}
