//! Real peers for the provider tests, on loopback:
//!
//! - [`proxmox::FakeProxmox`]: the Proxmox VE REST endpoints the provider
//!   uses, over HTTPS with a self-signed certificate, forwarding every agent
//!   call to a real `qemu-ga` per VM;
//! - [`kube::FakeKubeApi`]: the Kubernetes API calls of the KubeVirt
//!   provider, including pods/exec over the websocket subprotocol kube-rs
//!   speaks, where `virsh qemu-agent-command` is carried out against a real
//!   `qemu-ga`;
//! - [`daemon::Daemon`]: the real vrouter-daemon server (with its Redis) and
//!   [`daemon::Agent`]s, real `vrouter-agent`s whose vbash is the stub one;
//! - [`stunnel::Stunnel`]: Debian's stunnel terminating TLS in front of a
//!   backend (the real daemon's ControlService, for `https://` addresses);
//! - [`toxiproxy::Toxiproxy`]: the real fault proxy, between a client and
//!   the API server, to partition one operator replica from it;
//! - [`guest::GuestSandbox`]: the guest-side seams (os-release, a stub
//!   `systemctl`, a bash that plays vbash) in a temporary directory.
//!
//! Knobs let tests break things on purpose: refuse or stall an endpoint,
//! reject the token, move or remove a VM, reset uptime, stall an exec.

pub mod daemon;
pub mod guest;
pub mod hostile_agent;
mod http_util;
pub mod instant_guest;
pub mod kube;
pub mod proxmox;
pub mod qemu_server;
pub mod stunnel;
pub mod tls;
pub mod toxiproxy;
pub mod vm;
pub mod vyos_parser;

pub use vrouter_qga::testing::{AgentOptions, AgentProcess, HOW_TO_GET_QEMU_GA};

/// Starts a real qemu-ga for a guest. `guest-get-osinfo` is blocked so the
/// guest OS is read from the sandbox's os-release file, not the host's.
pub fn start_agent() -> AgentProcess {
    AgentProcess::start_with(AgentOptions {
        blocked_rpcs: vec!["guest-get-osinfo".into()],
    })
    .unwrap_or_else(|e| panic!("cannot start qemu-ga for the test guest: {e}"))
}

/// Calls `check` every 200 ms until it returns `Some`, for at most
/// `limit`: the equivalent of `kubectl wait`. `None` when time ran out.
pub async fn eventually<T, F, Fut>(limit: std::time::Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return Some(value);
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// Polls an apply until it exits (bounded by an iteration count, not a
/// clock: 60 s of polls, generous for a loaded machine) and returns what it
/// left behind, or the error a poll ended with.
pub async fn poll_until_exited(
    provider: &dyn vrouter_providers::Provider,
    handle: vrouter_providers::ExecHandle,
) -> Result<vrouter_providers::ExecOutcome, vrouter_providers::ProviderError> {
    for _ in 0..3000 {
        match provider.get_exec_status(handle).await? {
            vrouter_providers::ExecStatus::Running => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
            vrouter_providers::ExecStatus::Exited(outcome) => return Ok(outcome),
        }
    }
    panic!("apply {handle} still running after 3000 polls");
}

/// [`poll_until_exited`] for an apply whose polls must all succeed.
pub async fn wait_for_exit(
    provider: &dyn vrouter_providers::Provider,
    handle: vrouter_providers::ExecHandle,
) -> vrouter_providers::ExecOutcome {
    poll_until_exited(provider, handle)
        .await
        .unwrap_or_else(|e| panic!("polling apply {handle}: {e}"))
}
