//! Typed errors of every provider. Callers branch on the variant (the
//! controller re-dispatches on [`ProviderError::ExecResultLost`], reports a
//! stopped VM on [`ProviderError::VmNotFound`], …); the message names what was
//! wrong and never carries a credential.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

/// The most of one text a peer chose (an agent's description, a guest
/// command's stderr, the reason phrase of an HTTP answer, an answer that
/// does not parse) an error shows, in bytes. A guest may send megabytes;
/// its error goes into logs and, cut again, into a status message.
pub const MAX_PEER_TEXT_BYTES: usize = 512;

/// `text` cut to [`MAX_PEER_TEXT_BYTES`], marked when cut.
fn peer_text(text: &str) -> Cow<'_, str> {
    vrouter_api::text::cut(text, MAX_PEER_TEXT_BYTES)
}

/// One failed attempt to reach one Proxmox endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointFailure {
    pub endpoint: String,
    pub reason: String,
}

impl fmt::Display for EndpointFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.endpoint, self.reason)
    }
}

/// What one Kubernetes request needs the authoriser to allow: enough to name
/// a missing permission in a role (`get pods/exec in namespace "prod"`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeAccess {
    /// The RBAC verbs the request is authorised with (a websocket exec
    /// needs two, see `kubevirt::virsh`).
    pub verbs: Vec<&'static str>,
    /// `resource[/subresource][.group]`, as a role rule spells it.
    pub resource: &'static str,
    pub namespace: String,
}

impl KubeAccess {
    pub fn new(verb: &'static str, resource: &'static str, namespace: &str) -> Self {
        KubeAccess {
            verbs: vec![verb],
            resource,
            namespace: namespace.to_string(),
        }
    }
}

impl fmt::Display for KubeAccess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verbs = self.verbs.join(" and ");
        if self.namespace.is_empty() {
            write!(f, "{verbs} {} (cluster-scoped)", self.resource)
        } else {
            write!(f, "{verbs} {} in namespace {:?}", self.resource, self.namespace)
        }
    }
}

/// The API server's reason when `error` is an authorisation refusal (403).
/// A refused websocket upgrade (exec) carries only the status code: kube-rs
/// drops the body of a failed protocol switch.
fn refusal(error: &kube::Error) -> Option<String> {
    match error {
        kube::Error::Api(status) if status.code == 403 => Some(status.message.clone()),
        kube::Error::UpgradeConnection(kube::client::UpgradeConnectionError::ProtocolSwitch(code))
            if code.as_u16() == 403 =>
        {
            Some("the API server refused the exec upgrade with 403 Forbidden".to_string())
        }
        _ => None,
    }
}

/// The attempts of one request, in endpoint order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempts(pub Vec<EndpointFailure>);

impl fmt::Display for Attempts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, a) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{a}")?;
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderError {
    /// The handle of an earlier `exec_script` can no longer be looked up: the
    /// operator restarted (vrouter-daemon keeps handles in memory) or the guest
    /// agent no longer knows the pid. Polling it again can never succeed; the
    /// caller asks the router about the apply id ([`crate::Provider::apply_record`]).
    #[error("result of exec handle {handle} is lost: {reason}")]
    ExecResultLost { handle: i64, reason: String },

    /// The router knows this apply id already (an earlier dispatch of it
    /// started, its answer lost): nothing was started again. Its record,
    /// from [`crate::Provider::apply_record`], has the result.
    #[error("apply {apply} was dispatched to the router before; its record there decides")]
    AlreadyDispatched { apply: String },

    /// The VM does not exist (any more). `is_vm_running` reports this as
    /// `Ok(false)`; the other operations need a VM and return it.
    #[error("{what} not found")]
    VmNotFound { what: String },

    /// The peer rejected the credentials (HTTP 401/403).
    #[error("{endpoint} rejected the API token (HTTP {status}): {message}")]
    Unauthorized {
        endpoint: String,
        status: u16,
        message: String,
    },

    #[error("{operation} timed out after {after:?}")]
    Timeout { operation: String, after: Duration },

    #[error("{provider} provider does not support {what}")]
    NotSupported { provider: &'static str, what: String },

    /// The router's boot-time configuration unit has not finished yet.
    #[error("router not ready: {unit} has SubState {:?}, ready means \"exited\"", peer_text(.substate))]
    NotReady { unit: String, substate: String },

    #[error("unknown guest OS id {:?} (from {source_name}); known ids: vyos, dozenos", peer_text(.id))]
    UnknownGuestOs { id: String, source_name: String },

    /// The guest agent answered with an error.
    #[error("guest agent refused {command}: {}: {}", peer_text(.class), peer_text(.desc))]
    Agent {
        command: String,
        class: String,
        desc: String,
    },

    /// The guest agent is not running or not answering.
    #[error("guest agent unavailable: {}", peer_text(.reason))]
    AgentUnavailable { reason: String },

    /// A payload exceeds what the transport can carry; nothing was written.
    #[error("{what} is {size} bytes, more than the {limit} bytes {why}")]
    TooLarge {
        what: String,
        size: usize,
        limit: usize,
        why: String,
    },

    /// A command in the guest failed where the provider needed it to succeed.
    #[error("{command} in the guest failed (exit code {exit_code}): {}", peer_text(.stderr))]
    GuestCommand {
        command: String,
        exit_code: i64,
        stderr: String,
    },

    #[error("{method} {path} on {endpoint} answered HTTP {status}: {}", peer_text(.message))]
    Http {
        endpoint: String,
        method: String,
        path: String,
        status: u16,
        message: String,
    },

    /// No endpoint could be reached (refused, timed out, TLS failure).
    #[error("no Proxmox endpoint could be reached: {attempts}")]
    Unreachable { attempts: Attempts },

    /// No endpoint answered, and at least one presented a certificate the
    /// ProxmoxCluster's trust settings refuse (not pinned, not issued by a
    /// trusted root, wrong name). Nothing was sent to it: the refusal comes
    /// before any request, so the token never left. Needs a person.
    #[error("no Proxmox endpoint presented a trusted certificate: {attempts}")]
    CertificateNotTrusted { attempts: Attempts },

    /// A ProxmoxCluster's trust settings cannot be used (a malformed
    /// fingerprint, a CA bundle that is missing or not PEM, a check both
    /// asked for and turned off). No connection was made.
    #[error("invalid TLS settings: {reason}")]
    InvalidTls { reason: String },

    /// An `https://` vrouter-daemon endpoint did not complete a trusted TLS
    /// handshake: its certificate is not trusted (`untrusted`), or it spoke
    /// no TLS. Nothing was sent, and plaintext is never tried instead.
    /// Needs a person.
    #[error("the vrouter-daemon at {endpoint} {reason}")]
    DaemonTls {
        endpoint: String,
        untrusted: bool,
        reason: String,
    },

    #[error("vrouter-daemon {operation} failed: {code:?}: {message}")]
    Grpc {
        operation: &'static str,
        code: tonic::Code,
        message: String,
    },

    /// The Kubernetes identity the provider uses (the operator's service
    /// account, or a remote cluster's kubeconfig user) may not make a request
    /// the provider needs: HTTP 403. Never transient: a person must widen the
    /// role, so the message names the missing permission exactly.
    #[error(
        "forbidden (HTTP 403): the operator's Kubernetes identity may not {access}; \
         the shipped role grants it (deploy/operator/rbac.yaml and the Helm chart): {detail}"
    )]
    Forbidden { access: KubeAccess, detail: String },

    #[error("Kubernetes API call {operation} failed: {source}")]
    Kube {
        operation: String,
        #[source]
        source: Box<kube::Error>,
    },

    /// The target or an object it references is malformed.
    #[error("invalid provider configuration for {target}: {reason}")]
    InvalidTarget { target: String, reason: String },

    /// The target names a KubeVirt VM in another namespace that has not
    /// granted the target's namespace access (`vrouter_api::vm_access`).
    /// Nothing was sent to the VM.
    #[error("{target} may not reach its VM: {denied}")]
    VmAccessDenied {
        target: String,
        denied: vrouter_api::vm_access::VmAccessDenied,
    },

    /// The target names a vrouter-daemon agent its namespace has not been
    /// granted (`vrouter_api::daemon_access`). Nothing was sent to the daemon.
    #[error("{target} may not reach its vrouter-daemon agent: {denied}")]
    DaemonAccessDenied {
        target: String,
        denied: Box<vrouter_api::daemon_access::DaemonAccessDenied>,
    },

    #[error("{kind} {namespace}/{name} (referenced by {referrer}) not found")]
    ReferenceNotFound {
        kind: &'static str,
        namespace: String,
        name: String,
        referrer: String,
    },

    #[error("rendering the apply script failed: {0}")]
    Render(String),

    /// Any other failure of a guest-agent call; the typed source tells which.
    #[error("guest agent call to {peer} failed: {}", peer_text(&.source.to_string()))]
    GuestAgentCall {
        peer: String,
        #[source]
        source: vrouter_qga::QgaError,
    },

    /// The peer answered something this client cannot interpret.
    #[error("unexpected answer from {peer}: {}", peer_text(.detail))]
    Protocol { peer: String, detail: String },

    /// An apply run in the background (vrouter-daemon's `ApplyConfig`) is
    /// over without an outcome: its call ended in `source`. Unlike a failed
    /// look at an apply that may still be running, polling again changes
    /// nothing, so the controller can report it at once.
    #[error("{source}")]
    ApplyEnded { source: Box<ProviderError> },
}

impl ProviderError {
    pub fn is_exec_result_lost(&self) -> bool {
        matches!(self, ProviderError::ExecResultLost { .. })
    }

    pub fn is_vm_not_found(&self) -> bool {
        matches!(self, ProviderError::VmNotFound { .. })
    }

    pub fn is_unauthorized(&self) -> bool {
        matches!(self, ProviderError::Unauthorized { .. })
    }

    pub fn is_forbidden(&self) -> bool {
        matches!(self, ProviderError::Forbidden { .. })
    }

    /// An error only a person can end (a missing permission, an untrusted
    /// certificate, unusable TLS settings): reported as the target being
    /// unavailable rather than retried as if it were transient.
    pub fn needs_a_person(&self) -> bool {
        matches!(
            self,
            ProviderError::Forbidden { .. }
                | ProviderError::CertificateNotTrusted { .. }
                | ProviderError::InvalidTls { .. }
                | ProviderError::DaemonTls { .. }
        )
    }

    pub fn is_timeout(&self) -> bool {
        match self {
            ProviderError::Timeout { .. } => true,
            ProviderError::ApplyEnded { source } => source.is_timeout(),
            _ => false,
        }
    }

    /// How a finished apply ended when it has no outcome to report (see
    /// [`ProviderError::ApplyEnded`]); `None` for every other error.
    pub fn apply_ended(&self) -> Option<&ProviderError> {
        match self {
            ProviderError::ApplyEnded { source } => Some(source),
            _ => None,
        }
    }

    /// A failed Kubernetes request that asked the authoriser for `access`:
    /// a 403 becomes [`ProviderError::Forbidden`] naming that permission.
    pub(crate) fn kube(access: KubeAccess, operation: impl Into<String>, source: kube::Error) -> Self {
        let operation = operation.into();
        match refusal(&source) {
            Some(detail) => ProviderError::Forbidden {
                access,
                detail: format!("{operation}: {detail}"),
            },
            None => ProviderError::Kube {
                operation,
                source: Box::new(source),
            },
        }
    }

    pub(crate) fn protocol(peer: impl Into<String>, detail: impl Into<String>) -> Self {
        ProviderError::Protocol {
            peer: peer.into(),
            detail: detail.into(),
        }
    }
}
