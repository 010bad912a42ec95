//! The one interface the controllers use to reach a router, whatever hosts it.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::jiff::Timestamp;
use vrouter_api::ProviderType;

use crate::error::ProviderError;
use vrouter_qga::{ApplyId, GuestFlavor};
use vrouter_render::{Commit, CommitComment};

/// Identifies one dispatched apply, to be polled with
/// [`Provider::get_exec_status`]. It is what `VRouterConfig.status.execPID`
/// stores: the guest pid for KubeVirt and Proxmox, an in-process ticket for
/// vrouter-daemon.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExecHandle(pub i64);

impl ExecHandle {
    pub fn get(self) -> i64 {
        self.0
    }
}

impl fmt::Display for ExecHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl From<i64> for ExecHandle {
    fn from(v: i64) -> Self {
        ExecHandle(v)
    }
}

/// What the router recorded about an apply id
/// ([`Provider::apply_record`]): the router is the arbiter of whether an
/// apply ran, not the operator's memory of a handle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApplyRecord {
    /// The router never started it: dispatching it is safe.
    Unknown,
    /// It runs (or waits for the router's lock); poll this handle. A guest
    /// router reports its script running while the script lives, even
    /// when the handle's process (the wrapper) was killed: that handle's
    /// poll is then a lost result, which leads back here.
    Running(ExecHandle),
    /// It ended; this is its result.
    Finished(ExecOutcome),
    /// It started but ended without a result (on a guest router: its
    /// wrapper was killed before the script started, or both the wrapper
    /// and the runner holding the router's lock were, and the script has
    /// ended since): it may have run in part, and only a new apply makes
    /// the router known.
    Vanished,
}

/// Where a dispatched apply stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExecStatus {
    Running,
    Exited(ExecOutcome),
}

/// What a finished apply left behind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecOutcome {
    pub exit_code: i64,
    pub stdout: String,
    pub stderr: String,
    /// Set when the remote side could not run the script at all (the
    /// vrouter-daemon agent's own error) or was killed by a signal.
    pub error: Option<String>,
    /// The guest agent kept only the start of stdout (a marker line is
    /// appended to `stdout` too, for people reading a failed apply).
    pub stdout_truncated: bool,
    /// The signal that ended the process the guest agent started, when one
    /// did (`exit_code` is then 128 + it). For an apply that process is the
    /// router's wrapper ([`vrouter_qga::arbiter`]), which no signal of the
    /// apply's own reaches: one that ended it says nothing of the script.
    pub signal: Option<i64>,
}

impl ExecOutcome {
    /// Why this apply must be reported as failed, if it must: a non-zero exit
    /// code, an error from the remote side, or a router failure marker in
    /// the output (a failed `set` still lets `commit` exit 0).
    pub fn failure(&self) -> Option<String> {
        if let Some(e) = &self.error {
            return Some(e.clone());
        }
        if self.exit_code != 0 {
            return Some(format!("apply script exited with code {}", self.exit_code));
        }
        crate::outcome::failure_marker(&self.stdout, &self.stderr)
    }

    pub fn succeeded(&self) -> bool {
        self.failure().is_none()
    }
}

/// One router, reached through its provider. An instance is bound to one
/// target when the factory builds it; controllers build a fresh one per
/// reconcile, so a changed target or Secret takes effect on the next one.
#[async_trait]
pub trait Provider: Send + Sync + fmt::Debug {
    fn kind(&self) -> ProviderType;

    /// Whether the VM (or the daemon agent) is up. A VM that does not exist
    /// is `Ok(false)`, not an error.
    async fn is_vm_running(&self) -> Result<bool, ProviderError>;

    /// [`Provider::is_vm_running`] for a periodic poll (the VRouterTarget's
    /// `status.vmRunning`): the answer may come from a view of the whole
    /// platform shared by every target polled within a few seconds, where
    /// the platform has one (Proxmox: `/cluster/resources`). Callers about
    /// to act on the VM (an apply) ask [`Provider::is_vm_running`] instead.
    async fn is_vm_running_polled(&self) -> Result<bool, ProviderError> {
        self.is_vm_running().await
    }

    /// Whether the router can take a configuration now: the guest agent
    /// answers, the guest OS is known, and its boot-time configuration unit
    /// has finished (`SubState=exited`). A no-op for vrouter-daemon.
    async fn check_ready(&self) -> Result<(), ProviderError>;

    /// [`Provider::check_ready`] for a router whose OS an earlier check
    /// found to be `known` since the router last booted: that OS is taken
    /// and not asked again (an OS changes only across a boot). Returns the
    /// OS the check found or took, for the next; `None` from a provider
    /// that does not tell guest OSes apart.
    async fn check_ready_knowing(&self, known: Option<GuestFlavor>) -> Result<Option<GuestFlavor>, ProviderError> {
        let _ = known;
        self.check_ready().await.map(|()| None)
    }

    /// [`Provider::check_ready_knowing`], then the running config
    /// ([`Provider::read_running_config`]) of the router found ready, in
    /// one round trip where the provider can (one guest command): a drift
    /// read, which needs both, is what a router costs while nothing
    /// changes. Not ready is the error; a running config that could not be
    /// read is the inner one, since the check itself passed.
    async fn check_ready_reading_running(
        &self,
        known: Option<GuestFlavor>,
    ) -> Result<(Option<GuestFlavor>, Result<Vec<u8>, ProviderError>), ProviderError> {
        let os = self.check_ready_knowing(known).await?;
        Ok((os, self.read_running_config().await))
    }

    /// Starts applying `config` (a config.boot fragment, may be empty) then
    /// `commands` (configure-mode lines, may be empty), committing and, when
    /// `save`, saving, as apply `apply`. Returns at once with a handle to
    /// poll. An id the router knows already is never started again: the
    /// router refuses it, and the handle's poll reports the result lost
    /// ([`ProviderError::ExecResultLost`]; [`Provider::apply_record`] has
    /// it), or, where the router is asked first, a running one's handle is
    /// returned and a finished one is [`ProviderError::AlreadyDispatched`].
    async fn exec_script(
        &self,
        apply: &ApplyId,
        config: &str,
        commands: &str,
        save: bool,
    ) -> Result<ExecHandle, ProviderError>;

    /// What the router recorded about `apply`: asked before a dispatch that
    /// may have happened already, and whenever a handle is lost.
    async fn apply_record(&self, apply: &ApplyId) -> Result<ApplyRecord, ProviderError>;

    /// Stops `apply` on the router if it still runs (an apply that timed
    /// out), so the next one does not wait for it. Best effort: the router's
    /// lock keeps the next one from overlapping it either way.
    async fn stop_apply(&self, apply: &ApplyId) -> Result<(), ProviderError> {
        let _ = apply;
        Ok(())
    }

    /// Whether this provider can carry a confirmed apply (`spec.confirm`) to
    /// its end: start it, check the router, confirm. The error says why not.
    fn confirm_supported(&self) -> Result<(), ProviderError> {
        Err(ProviderError::NotSupported {
            provider: self.kind().as_str(),
            what: "confirmed applies (spec.confirm)".into(),
        })
    }

    /// Starts a confirmed apply (`spec.confirm`): like [`Provider::exec_script`],
    /// but committing with `commit-confirm <minutes>` and never saving; the
    /// router rolls the commit back unless [`Provider::confirm_apply`] runs
    /// within `minutes`. Poll it with [`Provider::get_exec_status`].
    ///
    /// The default refuses: a provider that cannot run `confirm` later, or
    /// check the router in between, must not start what it cannot finish.
    async fn exec_confirmed_script(
        &self,
        apply: &ApplyId,
        config: &str,
        commands: &str,
        minutes: u32,
    ) -> Result<ExecHandle, ProviderError> {
        let _ = (apply, config, commands, minutes);
        self.confirm_supported()?;
        Err(ProviderError::NotSupported {
            provider: self.kind().as_str(),
            what: "confirmed applies (spec.confirm)".into(),
        })
    }

    /// Starts an apply that ends as `commit` says ([`Provider::exec_script`]
    /// for a plain commit, [`Provider::exec_confirmed_script`] for
    /// `commit-confirm`), its commit carrying `comment` (VyOS `commit
    /// comment`) so the router's commit log names who changed it.
    ///
    /// The default drops the comment: a provider whose router builds its own
    /// script from the config and commands (vrouter-daemon's agent ends it
    /// with a bare `commit`) has no way to pass one.
    async fn exec_commented_script(
        &self,
        apply: &ApplyId,
        config: &str,
        commands: &str,
        commit: Commit,
        comment: &CommitComment,
    ) -> Result<ExecHandle, ProviderError> {
        let _ = comment;
        match commit {
            Commit::Plain { save } => self.exec_script(apply, config, commands, save).await,
            Commit::Confirmed { minutes } => self.exec_confirmed_script(apply, config, commands, minutes).await,
        }
    }

    /// Runs a confirmed apply's check (`argv[0]` is the program) in the guest
    /// to its end, within `timeout`, and returns how it ended.
    async fn run_check(&self, argv: &[String], timeout: Duration) -> Result<ExecOutcome, ProviderError> {
        let _ = (argv, timeout);
        Err(ProviderError::NotSupported {
            provider: self.kind().as_str(),
            what: "confirmed applies (spec.confirm)".into(),
        })
    }

    /// Confirms a confirmed apply: runs `confirm` (the router's rollback timer
    /// stops), then `save` when `save`, and waits for them. An error when the
    /// script did not exit 0 or printed a failure marker.
    async fn confirm_apply(&self, save: bool) -> Result<(), ProviderError> {
        let _ = save;
        Err(ProviderError::NotSupported {
            provider: self.kind().as_str(),
            what: "confirmed applies (spec.confirm)".into(),
        })
    }

    /// Polls an apply started by `exec_script`.
    async fn get_exec_status(&self, handle: ExecHandle) -> Result<ExecStatus, ProviderError>;

    /// The bytes of a file in the guest, e.g. `/config/config.boot`.
    async fn read_file(&self, path: &str) -> Result<Vec<u8>, ProviderError>;

    /// Runs a command that only reads (`argv[0]` is the program) and returns
    /// its standard output once it exits 0, e.g. VyOS's
    /// `cli-shell-api showConfig --show-active-only` for the running config,
    /// which has no single file. A non-zero exit is an error carrying its
    /// stderr.
    async fn read_command_output(&self, argv: &[String]) -> Result<Vec<u8>, ProviderError>;

    /// The router's startup configuration (`/config/config.boot` on VyOS),
    /// byte for byte: drift detection hashes it.
    async fn read_startup_config(&self) -> Result<Vec<u8>, ProviderError>;

    /// The router's running (committed, possibly unsaved) configuration, for
    /// people to compare with the startup one.
    async fn read_running_config(&self) -> Result<Vec<u8>, ProviderError>;

    /// How long the guest has been up by its own clock (`/proc/uptime`): a
    /// reboot inside the guest starts it over while the VM process stays.
    async fn guest_uptime(&self) -> Result<Duration, ProviderError>;

    /// When the VM's current run began, where the platform keeps a record of
    /// it: KubeVirt runs a VM as one VirtualMachineInstance per start, so a
    /// restarted VM is a new VMI with a later creation time. `None` without
    /// such a record (a Proxmox VM's boots are read from uptimes by the
    /// ProxmoxCluster sync; vrouter-daemon has none) or without a VM.
    async fn vm_started_at(&self) -> Result<Option<Timestamp>, ProviderError> {
        Ok(None)
    }
}
