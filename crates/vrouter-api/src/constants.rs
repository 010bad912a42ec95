//! Names shared by every controller, webhook and tool: the API group, labels,
//! annotations, finalizer, phases, condition types and condition reasons.

/// API group of every custom resource of the operator.
pub const GROUP: &str = "vrouter.kojuro.date";
/// The one served and stored version.
pub const VERSION: &str = "v1";

/// Finalizer put on objects whose deletion the operator must observe.
pub const FINALIZER: &str = "vrouter.kojuro.date/finalizer";
/// Label on a generated VRouterConfig naming the VRouterBinding that owns it.
pub const LABEL_BINDING: &str = "vrouter.kojuro.date/binding";
/// Label on a generated VRouterConfig naming the VRouterTarget it configures.
pub const LABEL_TARGET: &str = "vrouter.kojuro.date/target";
/// Annotation on a VRouterConfig: `"true"` stops applies and drift repair
/// (drift stays visible on the VRouterStatus) so a person can debug the router.
pub const ANNOTATION_PAUSED: &str = "vrouter.kojuro.date/paused";
/// Label on a generated VRouterConfig while its VRouterBinding is paused
/// (`spec.paused`): `"true"` stops new applies and drift repair, but lets an
/// apply in flight finish. The binding controller alone sets and removes it.
pub const LABEL_BINDING_PAUSED: &str = "vrouter.kojuro.date/binding-paused";

/// Condition types.
pub mod condition {
    /// VRouterConfig: the config was applied for the generation it names.
    pub const APPLIED: &str = "Applied";
    /// Every kind: done for the generation in `status.observedGeneration`.
    /// VRouterBinding: every generated config is written (and, for
    /// `WaitForApplied`, applied); VRouterConfig: applied.
    pub const READY: &str = "Ready";
    /// kstatus's abnormal-true condition: work for the object is under way
    /// and ends by itself. Absent otherwise.
    pub const RECONCILING: &str = "Reconciling";
    /// kstatus's abnormal-true condition: the object cannot progress without
    /// a change (its spec, a reference, the router). Absent otherwise.
    pub const STALLED: &str = "Stalled";
    /// VRouterStatus and ProxmoxCluster: the last read from the router or
    /// the Proxmox API succeeded.
    pub const SYNCED: &str = "Synced";
}

/// Condition reasons. Each one is documented in `docs/operations.md` with what
/// to do about it. Where the Go vrouter-operator has a reason for the same
/// outcome, it is its name (automation written for it keeps working); more
/// detail goes in the condition's message.
pub mod reason {
    pub const RECONCILE_SUCCEEDED: &str = "ReconcileSucceeded";
    pub const RECONCILE_ERROR: &str = "ReconcileError";
    pub const ROLLOUT_IN_PROGRESS: &str = "RolloutInProgress";
    pub const ROLLOUT_HALTED: &str = "RolloutHalted";
    /// VRouterBinding in mode Waves: between two waves, for `pause` or until resumed.
    pub const ROLLOUT_PAUSED: &str = "RolloutPaused";
    /// VRouterBinding: `spec.paused` is true; its configs start no new apply.
    pub const PAUSED: &str = "Paused";
    /// An apply has been dispatched and is running.
    pub const APPLYING: &str = "Applying";
    /// The apply script exited 0 with no failure marker.
    pub const CONFIG_APPLIED: &str = "ConfigApplied";
    /// The apply script exited non-zero or printed a failure marker, or the
    /// script could not be built or delivered.
    pub const CONFIG_FAILED: &str = "ConfigFailed";
    /// The apply did not finish within the apply timeout.
    pub const APPLY_TIMEOUT: &str = "ApplyTimeout";
    /// A previously applied router stopped answering readiness checks.
    pub const ROUTER_NOT_READY: &str = "RouterNotReady";
    /// A confirmed apply (`spec.confirm`) is committed with `commit-confirm`
    /// and the operator is checking the router before it confirms.
    pub const CONFIRMING: &str = "Confirming";
    /// A confirmed apply was not confirmed (a check failed, the router fell
    /// silent, or the script failed) and the router's own rollback brought
    /// the previous running config back; the message says what failed.
    pub const ROLLED_BACK: &str = "RolledBack";
    /// A confirmed apply was not confirmed, but the previous running config
    /// was not back once the rollback was due: the router needs a person.
    pub const ROLLBACK_FAILED: &str = "RollbackFailed";
    pub const SYNC_SUCCEEDED: &str = "SyncSucceeded";
    /// VRouterStatus: the router's config could not be read.
    pub const SYNC_FAILED: &str = "SyncFailed";
    /// ProxmoxCluster: the credentials Secret could not be read.
    pub const CREDENTIALS_NOT_FOUND: &str = "CredentialsNotFound";
    /// ProxmoxCluster: the Secret lacks a token key, or a value is not a token.
    pub const INVALID_CREDENTIALS: &str = "InvalidCredentials";
    /// ProxmoxCluster: `/cluster/resources` could not be read (no endpoint
    /// answered, or the token was refused).
    pub const FETCH_FAILED: &str = "FetchFailed";
    /// ProxmoxCluster: no endpoint answered, and one presented a certificate
    /// the cluster's trust settings refuse (the message names its SHA-256
    /// fingerprint, and the pinned ones); the token was not sent.
    /// VRouterConfig: its target's endpoint (Proxmox, or an `https://`
    /// vrouter-daemon) presented such a certificate; nothing was sent.
    pub const CERTIFICATE_NOT_TRUSTED: &str = "CertificateNotTrusted";
    /// ProxmoxCluster: the trust settings cannot be used (the CA bundle's
    /// Secret or key is missing, it is not PEM, a fingerprint is malformed).
    /// VRouterConfig: the same of its target's CA bundle.
    pub const INVALID_TLS_CONFIG: &str = "InvalidTLSConfig";
    /// VRouterConfig: its target's `https://` vrouter-daemon endpoint did not
    /// complete a TLS handshake (it speaks no TLS); nothing was sent.
    pub const TLS_HANDSHAKE_FAILED: &str = "TLSHandshakeFailed";
    /// The router's startup config changed outside the operator; the
    /// VRouterConfig is applied again (also a warning event).
    pub const DRIFT_DETECTED: &str = "DriftDetected";
    /// VRouterConfig: not applied yet, and no apply started.
    pub const PENDING: &str = "Pending";
    /// VRouterConfig: its target is missing or cannot be reached as
    /// configured (a Secret, a ProxmoxCluster, a permission).
    pub const TARGET_UNAVAILABLE: &str = "TargetUnavailable";
    /// VRouterTarget: the VM runs (or the vrouter-daemon agent is connected).
    pub const VM_RUNNING: &str = "VMRunning";
    /// VRouterTarget: the VM is not running.
    pub const VM_NOT_RUNNING: &str = "VMNotRunning";
    /// VRouterTarget: whether the VM runs could not be told; asked again at the next poll.
    pub const VM_STATE_UNKNOWN: &str = "VMStateUnknown";
    /// VRouterTarget: its provider cannot be built as configured (a missing
    /// Secret or ProxmoxCluster, a forbidden read).
    pub const PROVIDER_UNAVAILABLE: &str = "ProviderUnavailable";
}

/// Reasons of events that are not also condition reasons.
pub mod event {
    /// A VRouterConfig's target cannot be reached or built.
    pub const TARGET_UNAVAILABLE: &str = "TargetUnavailable";
    /// A binding's rollout reached its last target.
    pub const ROLLOUT_COMPLETED: &str = "RolloutCompleted";
    /// A binding's `spec.paused` was set back to false: its configs apply again.
    pub const RESUMED: &str = "Resumed";
    /// A binding in mode Waves wrote the configs of a wave.
    pub const WAVE_STARTED: &str = "WaveStarted";
    /// The VRouterStatus of an applied config could not be created (it is
    /// tried again): its router is not watched for drift meanwhile.
    pub const STATUS_NOT_CREATED: &str = "StatusNotCreated";
}

/// The type of the Secrets the operator writes: a router's stored configs
/// (drift detection) and a config's revision history. The operator's
/// admission policy lets it write Secrets of this type only.
pub const ROUTER_CONFIG_SECRET_TYPE: &str = "vrouter.kojuro.date/router-config";
