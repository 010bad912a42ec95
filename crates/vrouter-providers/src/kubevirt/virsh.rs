//! The guest-agent transport of KubeVirt: each command runs as
//! `virsh qemu-agent-command <namespace>_<name> '<json>'` in the `compute`
//! container of the virt-launcher pod, over the pods/exec websocket.
//!
//! The command travels on the exec's **stdin**, never in its URL: a
//! pods/exec request names its argv in the query string, which API-server
//! audit logs, proxies and the kubelet's logs record, and agent commands
//! carry whole files (the apply script with every password and key of the
//! router's config) and file contents read back. So the exec runs a fixed
//! POSIX shell one-liner ([`AGENT_COMMAND_FROM_STDIN`]) that reads one line
//! from stdin and hands it to `virsh` as its argument; the URL holds only
//! that script and the domain name. The compute container of KubeVirt's
//! virt-launcher image has `/bin/sh` (bash) beside `virsh` (libvirt-client);
//! the shell's own `read` needs no other program.
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
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use vrouter_qga::{AgentError, CallFuture, Command, QgaError, Reply, Transport, TransportError};

use crate::error::{KubeAccess, ProviderError};
use crate::memory_budget::{Deadline, LARGE_ANSWERS, Lease};

/// The container of a virt-launcher pod that has `virsh` and the domain.
pub const COMPUTE_CONTAINER: &str = "compute";

/// What `virsh` prints before the agent's description when the agent
/// answered with an error.
const AGENT_ERROR_MARKER: &str = "unable to execute QEMU agent command";

/// The shell run in the compute container: one line of stdin (the agent
/// command, JSON without a raw newline) becomes `virsh`'s argument. `$1` is
/// the domain. Reading a line rather than to end-of-file means the command
/// does not depend on the exec protocol's stdin close (`v5.channel.k8s.io`
/// only): an API server speaking `v4` works the same.
pub const AGENT_COMMAND_FROM_STDIN: &str = "IFS= read -r command || { echo 'error: no agent command arrived on stdin' >&2; exit 1; }; exec virsh qemu-agent-command \"$1\" \"$command\"";

/// `$0` of that shell, shown by `ps` in the container.
const SHELL_NAME: &str = "vrouter-agent-command";

/// Linux caps one argv string at 32 pages (`MAX_ARG_STRLEN`, 128 KiB with
/// its NUL): the command becomes `virsh`'s argument, so this bounds it.
pub const MAX_AGENT_COMMAND_BYTES: usize = 128 * 1024 - 1;

/// The most of `virsh`'s stdout read (16 MiB): libvirt refuses an agent
/// reply over 10 MiB (`QEMU_AGENT_MAX_RESPONSE`), so a real virsh never
/// prints more, and anything longer is not an answer to trust or to hold.
pub const MAX_VIRSH_STDOUT_BYTES: usize = 16 * 1024 * 1024;

/// The most of `virsh`'s stderr read (64 KiB): its messages are one line,
/// and what is kept of them goes into a status message.
pub const MAX_VIRSH_STDERR_BYTES: usize = 64 * 1024;

/// A stdout longer than this is large and reserves its cost from the
/// process's budget of large answers ([`crate::memory_budget`]) before it
/// is read further (2 MiB: an answer to one `guest-file-read` of
/// `vrouter_qga`'s read chunk, 1 MiB as base64, stays under it).
pub const LARGE_STDOUT_BYTES: usize = 2 * 1024 * 1024;

/// What reading a stdout of `len` bytes may cost at once: the bytes and
/// the JSON value parsed from them (its strings no longer than their JSON).
pub const fn stdout_cost(len: usize) -> usize {
    len.saturating_mul(2)
}

/// Reads `stream` to its end, refusing it as soon as it holds more than
/// `limit` bytes: only `limit + 1` bytes are ever held. Past `large` bytes
/// it leases `cost(limit)` of the budget before reading on, given back
/// down to `cost` of its length once whole; the lease comes back with the
/// bytes, to be dropped with what is made of them.
async fn read_capped(
    stream: impl tokio::io::AsyncRead + Unpin,
    which: &str,
    limit: usize,
    large: usize,
    deadline: &Deadline,
) -> Result<(Vec<u8>, Option<Lease<'static>>), TransportError> {
    let mut stream = stream.take(u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1));
    let mut out = Vec::new();
    let mut lease = None;
    loop {
        if lease.is_none() && out.len() > large {
            lease = Some(deadline.reserve(&LARGE_ANSWERS, stdout_cost(limit)).await);
            // Sized once for the rest: no doubling past the cap.
            out.reserve_exact(limit + 1 - out.len());
        }
        if stream.read_buf(&mut out).await.map_err(TransportError::Io)? == 0 {
            break;
        }
    }
    if out.len() > limit {
        return Err(TransportError::backend(
            format!("virsh printed more than {limit} bytes on {which}; refusing the rest"),
            None,
        ));
    }
    if let Some(lease) = lease.as_mut() {
        out.shrink_to_fit();
        lease.shrink_to(stdout_cost(out.len()));
    }
    Ok((out, lease))
}

/// libvirt's domain name for a KubeVirt VMI.
pub fn domain_name(namespace: &str, vmi: &str) -> String {
    format!("{namespace}_{vmi}")
}

/// The argv of the exec for one command: the shell above and the domain,
/// nothing of the command itself.
pub fn exec_argv(domain: &str) -> Vec<String> {
    vec![
        "/bin/sh".into(),
        "-c".into(),
        AGENT_COMMAND_FROM_STDIN.into(),
        SHELL_NAME.into(),
        domain.into(),
    ]
}

/// What the exec's stdin carries for one command: its JSON and a newline.
/// `Err` when it cannot travel as one line of one argument.
pub fn stdin_line(command_json: &str) -> Result<Vec<u8>, TransportError> {
    if command_json.len() > MAX_AGENT_COMMAND_BYTES {
        return Err(TransportError::RequestTooLarge {
            size: command_json.len(),
            limit: MAX_AGENT_COMMAND_BYTES,
        });
    }
    // serde_json writes control characters escaped, so this is a bug guard.
    if command_json.contains(['\n', '\0']) {
        return Err(TransportError::Garbled(
            "an agent command holds a raw newline or NUL and cannot be sent as one line".into(),
        ));
    }
    let mut line = Vec::with_capacity(command_json.len() + 1);
    line.extend_from_slice(command_json.as_bytes());
    line.push(b'\n');
    Ok(line)
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

    async fn run(&self, command: &Command, deadline: &Deadline) -> Result<Reply, TransportError> {
        let line = stdin_line(&command.to_json())?;
        let params = AttachParams::default()
            .container(COMPUTE_CONTAINER)
            .stdin(true)
            .stdout(true)
            .stderr(true)
            .max_stdin_buf_size(line.len())
            .max_stdout_buf_size(1024 * 1024);
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let mut process = match pods.exec(&self.pod, exec_argv(&self.domain), &params).await {
            Ok(process) => process,
            Err(e) => return Err(self.exec_failed(e).await),
        };
        let status = process
            .take_status()
            .ok_or_else(|| TransportError::backend("the exec stream has no status channel", None))?;
        let mut stdin = process
            .stdin()
            .ok_or_else(|| TransportError::backend("the exec stream has no stdin", None))?;
        let stdout = process
            .stdout()
            .ok_or_else(|| TransportError::backend("the exec stream has no stdout", None))?;
        let stderr = process
            .stderr()
            .ok_or_else(|| TransportError::backend("the exec stream has no stderr", None))?;
        // The command goes in while the output is read: kube-rs buffers each
        // stream in a small pipe, so an unread stdout would stall the status.
        // Stdin stays open until the status is in (a v4 stream has no
        // stdin close and would end whole); the shell stops at the newline.
        // Output past its cap ends the exec at once (dropping the process
        // closes the stream) instead of being read on.
        let sent_and_status = async { Ok::<_, TransportError>(tokio::join!(stdin.write_all(&line), status)) };
        let ((sent, status), out, err) = tokio::try_join!(
            sent_and_status,
            read_capped(stdout, "stdout", MAX_VIRSH_STDOUT_BYTES, LARGE_STDOUT_BYTES, deadline),
            read_capped(stderr, "stderr", MAX_VIRSH_STDERR_BYTES, usize::MAX, deadline),
        )?;
        // Held until the reply is made from the output.
        let ((out, _lease), (err, _)) = (out, err);
        drop(stdin);
        let status = status.ok_or_else(|| {
            TransportError::backend(format!("exec into pod {} ended without an exit status", self.pod), None)
        })?;
        // A command that did not all arrive shows in the exit status (the
        // shell's own message), which says more than the broken pipe.
        if let Err(error) = sent
            && exit_ok(&status)
        {
            return Err(TransportError::Io(error));
        }
        interpret(exit_ok(&status), &out, &err)
    }
}

impl Transport for VirshTransport {
    fn call<'a>(&'a self, command: &'a Command) -> CallFuture<'a> {
        Box::pin(async move {
            // The limit stands still while a large output waits for the budget.
            let deadline = Deadline::new(self.timeout);
            match deadline.run(self.run(command, &deadline)).await {
                Some(result) => result,
                None => Err(TransportError::Timeout(self.timeout)),
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
    fn the_exec_url_carries_the_domain_and_never_the_command() {
        let json = Command::file_write(vrouter_qga::FileHandle(7), b"pre-shared-secret s3cr3t").to_json();
        let argv = exec_argv("prod_r1");
        assert_eq!(argv[..3], ["/bin/sh", "-c", AGENT_COMMAND_FROM_STDIN]);
        assert_eq!(argv.last().unwrap(), "prod_r1");
        assert!(
            argv.iter()
                .all(|a| !a.contains("guest-file-write") && !a.contains(&json))
        );
        assert_eq!(stdin_line(&json).unwrap(), format!("{json}\n").into_bytes());
    }

    #[test]
    fn the_largest_write_chunk_fits_one_argument_and_more_is_refused() {
        let worst = vec![0xffu8; vrouter_qga::constants::WRITE_CHUNK_BYTES];
        let json = Command::file_write(vrouter_qga::FileHandle(1_000_000), &worst).to_json();
        assert!(stdin_line(&json).is_ok(), "{} bytes", json.len());
        let too_long = "x".repeat(MAX_AGENT_COMMAND_BYTES + 1);
        assert!(matches!(
            stdin_line(&too_long),
            Err(TransportError::RequestTooLarge {
                limit: MAX_AGENT_COMMAND_BYTES,
                ..
            })
        ));
        assert!(matches!(stdin_line("{\"a\":\n1}"), Err(TransportError::Garbled(_))));
    }

    /// A deadline no test reaches.
    fn no_limit() -> Deadline {
        Deadline::new(Duration::from_secs(3600))
    }

    #[tokio::test]
    async fn output_is_read_up_to_its_cap_and_refused_past_it() {
        let cases: [(usize, usize, bool); 4] = [(0, 4, true), (3, 4, true), (4, 4, true), (5, 4, false)];
        for (len, limit, fits) in cases {
            let bytes = vec![b'x'; len];
            let read = read_capped(&bytes[..], "stdout", limit, usize::MAX, &no_limit()).await;
            match read {
                Ok((out, lease)) => assert!(fits && out == bytes && lease.is_none(), "{len} of {limit}"),
                Err(e) => assert!(
                    !fits && e.to_string().contains(&format!("more than {limit} bytes on stdout")),
                    "{len} of {limit}: {e}"
                ),
            }
        }
    }

    #[tokio::test]
    async fn a_large_output_comes_with_a_lease_of_its_cost() {
        use crate::memory_budget::{MIB, weight_mib};
        let bytes = vec![b'x'; 3 * MIB + 1];
        let (out, lease) = read_capped(&bytes[..], "stdout", 8 * MIB, MIB, &no_limit())
            .await
            .unwrap();
        assert_eq!(out, bytes);
        let lease = lease.expect("an output past the large threshold is leased");
        assert_eq!(
            lease.mib(),
            weight_mib(stdout_cost(bytes.len()), LARGE_ANSWERS.total_mib())
        );
        let small = read_capped(&bytes[..MIB], "stdout", 8 * MIB, MIB, &no_limit())
            .await
            .unwrap();
        assert!(small.1.is_none(), "an output under the threshold never waits");
    }

    #[test]
    fn domain_names_follow_kubevirt() {
        assert_eq!(domain_name("prod", "r1"), "prod_r1");
    }

    /// The one-liner under a real POSIX shell (dash here; bash in the
    /// launcher image): the line becomes one argument, byte for byte.
    #[test]
    fn the_shell_hands_the_line_to_virsh_as_one_argument() {
        use std::io::Write;
        let dir = std::env::temp_dir().join(format!("vrouter-virsh-stdin-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fake = dir.join("virsh");
        std::fs::write(&fake, "#!/bin/sh\nprintf '%s\\0' \"$@\"\n").unwrap();
        std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let json = r#"{"execute":"guest-file-write","arguments":{"buf-b64":"JCgpIGAnIiBcXA==","x":"a b\\t*?[]$HOME"}}"#;
        let argv = exec_argv("ns_vm");
        let mut child = std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .env("PATH", format!("{}:/usr/bin:/bin", dir.display()))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .as_mut()
            .unwrap()
            .write_all(&stdin_line(json).unwrap())
            .unwrap();
        let output = child.wait_with_output().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(output.status.success());
        let words: Vec<&[u8]> = output.stdout.split(|b| *b == 0).filter(|w| !w.is_empty()).collect();
        assert_eq!(words, [&b"qemu-agent-command"[..], b"ns_vm", json.as_bytes()]);
    }
}
