//! Real guests as routers: the VMs of `vrouter-test-vm` with the router's
//! files laid over them ([`router`]), and a way into a libvirt guest for the
//! test's own looks ([`VirshTransport`]).

pub mod router;

use std::time::Duration;

use std::path::PathBuf;
use std::sync::Arc;

use vrouter_qga::{CallFuture, Transport, TransportError, UnixSocketTransport};
pub use vrouter_test_vm::libvirt::{Domain, Libvirt};
pub use vrouter_test_vm::qemu::QemuGuest;
pub use vrouter_test_vm::shared::{Lease, SharedGuest};
pub use vrouter_test_vm::{Archive, VmError};

/// `virsh qemu-agent-command <domain> '<json>'` run in the domain's
/// container, for the test's own looks into a libvirt guest.
#[derive(Debug, Clone)]
pub struct VirshTransport {
    argv_prefix: Vec<String>,
    timeout: Duration,
}

impl VirshTransport {
    pub fn new(domain: &Domain, timeout: Duration) -> Self {
        VirshTransport {
            argv_prefix: domain.agent_command_argv(),
            timeout,
        }
    }
}

impl Transport for VirshTransport {
    fn call<'a>(&'a self, command: &'a vrouter_qga::Command) -> CallFuture<'a> {
        Box::pin(async move {
            let run = tokio::process::Command::new(&self.argv_prefix[0])
                .args(&self.argv_prefix[1..])
                .arg(command.to_json())
                .kill_on_drop(true)
                .output();
            match tokio::time::timeout(self.timeout, run).await {
                Ok(Ok(output)) => vrouter_providers::kubevirt::virsh::interpret(
                    output.status.success(),
                    &output.stdout,
                    &output.stderr,
                ),
                Ok(Err(e)) => Err(TransportError::Io(e)),
                Err(_) => Err(TransportError::Timeout(self.timeout)),
            }
        })
    }
}

/// The test's own way into a Proxmox-style guest: each call takes the
/// channel's turn (shared with the in-test Proxmox API, see
/// [`QemuGuest::channel_lock`]) and a connection of its own, closed after
/// the reply, so the API is never shut out.
#[derive(Debug, Clone)]
pub struct ChardevTransport {
    socket: PathBuf,
    turn: Arc<tokio::sync::Mutex<()>>,
    timeout: Duration,
}

impl ChardevTransport {
    pub fn new(guest: &QemuGuest, timeout: Duration) -> Self {
        ChardevTransport {
            socket: guest.agent_socket(),
            turn: guest.channel_lock(),
            timeout,
        }
    }
}

impl Transport for ChardevTransport {
    fn call<'a>(&'a self, command: &'a vrouter_qga::Command) -> CallFuture<'a> {
        Box::pin(async move {
            let _turn = self.turn.lock().await;
            let transport = UnixSocketTransport::new(&self.socket).with_timeout(self.timeout);
            let reply = transport.call(command).await;
            transport.close().await;
            reply
        })
    }
}
