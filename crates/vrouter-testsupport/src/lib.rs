//! Real peers for the provider tests, in-process on loopback:
//!
//! - [`proxmox::FakeProxmox`]: the Proxmox VE REST endpoints the provider
//!   uses, over HTTPS with a self-signed certificate, forwarding every agent
//!   call to a real `qemu-ga` per VM;
//! - [`kube::FakeKubeApi`]: the Kubernetes API calls of the KubeVirt
//!   provider, including pods/exec over the websocket subprotocol kube-rs
//!   speaks, where `virsh qemu-agent-command` is carried out against a real
//!   `qemu-ga`;
//! - [`daemon::FakeDaemon`]: a tonic `vrouter.control.v1.ControlService`;
//! - [`guest::GuestSandbox`]: the guest-side seams (os-release, a stub
//!   `systemctl`, a bash that plays vbash) in a temporary directory.
//!
//! Knobs let tests break things on purpose: refuse or stall an endpoint,
//! reject the token, move or remove a VM, reset uptime, stall an exec.

pub mod daemon;
pub mod guest;
mod http_util;
pub mod kube;
pub mod proxmox;
pub mod tls;

pub use vrouter_qga::testing::{AgentOptions, AgentProcess, HOW_TO_GET_QEMU_GA};

/// Starts a real qemu-ga for a guest. `guest-get-osinfo` is blocked so the
/// guest OS is read from the sandbox's os-release file, not the host's.
pub fn start_agent() -> AgentProcess {
    AgentProcess::start_with(AgentOptions {
        blocked_rpcs: vec!["guest-get-osinfo".into()],
    })
    .unwrap_or_else(|e| panic!("cannot start qemu-ga for the test guest: {e}"))
}
