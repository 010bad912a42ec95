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

use k8s_openapi::api::authorization::v1::{ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, AttachParams, PostParams};
use tokio::io::AsyncReadExt;
use vrouter_qga::{AgentError, CallFuture, Command, QgaError, Reply, Transport, TransportError};

use crate::error::{KubeAccess, ProviderError};

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

/// The RBAC verbs on `pods/exec` an exec needs. kube-rs execs over a
/// websocket, an HTTP GET with `Upgrade`: the authoriser checks `get`, and
/// Kubernetes 1.35+ (`AuthorizePodWebsocketUpgradeCreatePermission`) checks
/// `create` as well, so a role granting only `create` is refused.
pub const EXEC_VERBS: [&str; 2] = ["get", "create"];

/// The exec verbs the client's identity is not allowed in `namespace`, asked
/// of the API server (SelfSubjectAccessReview, which every authenticated
/// identity may create). A refused upgrade carries only its status code, so
/// this is the one way to name what is missing; when the review itself
/// fails, both verbs are named.
async fn denied_exec_verbs(client: &kube::Client, namespace: &str, pod: &str) -> Vec<&'static str> {
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let mut denied = Vec::new();
    for verb in EXEC_VERBS {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    namespace: Some(namespace.to_string()),
                    verb: Some(verb.to_string()),
                    group: Some(String::new()),
                    resource: Some("pods".to_string()),
                    subresource: Some("exec".to_string()),
                    name: Some(pod.to_string()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        match reviews.create(&PostParams::default(), &review).await {
            Ok(answer) if answer.status.as_ref().is_some_and(|s| s.allowed) => {}
            Ok(_) => denied.push(verb),
            Err(_) => return EXEC_VERBS.to_vec(),
        }
    }
    if denied.is_empty() {
        // Allowed now: the role changed since, or something other than RBAC
        // refused. Name what the exec needs.
        EXEC_VERBS.to_vec()
    } else {
        denied
    }
}

/// The missing permission carried by a transport error of
/// [`VirshTransport`], when the exec was refused by the authoriser; any
/// other error is handed back unchanged.
pub fn exec_refusal(error: QgaError) -> Result<ProviderError, QgaError> {
    match error {
        QgaError::Transport {
            command,
            source:
                TransportError::Backend {
                    message,
                    source: Some(source),
                },
        } => match source.downcast::<ProviderError>() {
            Ok(refused) => Ok(*refused),
            Err(source) => Err(QgaError::Transport {
                command,
                source: TransportError::Backend {
                    message,
                    source: Some(source),
                },
            }),
        },
        other => Err(other),
    }
}

/// The exit status kube-rs reports on the exec's status channel.
fn exit_ok(status: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Status) -> bool {
    status.status.as_deref() == Some("Success")
}

pub struct VirshTransport {
    client: kube::Client,
    namespace: String,
    pod: String,
    domain: String,
    timeout: Duration,
}

impl VirshTransport {
    pub fn new(client: kube::Client, namespace: &str, pod: String, domain: String, timeout: Duration) -> Self {
        VirshTransport {
            client,
            namespace: namespace.to_string(),
            pod,
            domain,
            timeout,
        }
    }

    /// The error of an exec the API server did not start.
    async fn exec_failed(&self, error: kube::Error) -> TransportError {
        let access = KubeAccess {
            verbs: EXEC_VERBS.to_vec(),
            resource: "pods/exec",
            namespace: self.namespace.clone(),
        };
        let operation = format!("exec into pod {}", self.pod);
        match ProviderError::kube(access, operation.clone(), error) {
            ProviderError::Forbidden { mut access, detail } => {
                access.verbs = denied_exec_verbs(&self.client, &self.namespace, &self.pod).await;
                let refused = ProviderError::Forbidden { access, detail };
                TransportError::backend(refused.to_string(), Some(Box::new(refused)))
            }
            ProviderError::Kube { source, .. } => {
                TransportError::backend(format!("{operation} failed: {source}"), Some(source))
            }
            other => TransportError::backend(other.to_string(), Some(Box::new(other))),
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
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let mut process = match pods.exec(&self.pod, argv, &params).await {
            Ok(process) => process,
            Err(e) => return Err(self.exec_failed(e).await),
        };
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
                assert!(vrouter_qga::is_unknown_pid(
                    vrouter_qga::command::names::EXEC_STATUS,
                    &e
                ));
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
