//! Real guests for tests: QEMU VMs with the QEMU guest agent on a
//! virtio-serial port, attached the way the hypervisors attach it.
//!
//! - [`image`]: the guest (a Debian kernel, busybox, bash, qemu-ga), built
//!   once per machine by `cargo xtask guest-image`, plus per-guest overlays;
//! - [`qemu::QemuGuest`]: Proxmox VE's way, a QEMU chardev socket the host
//!   (qemu-server) connects to, one client at a time;
//! - [`libvirt::Libvirt`]: KubeVirt's way, a libvirtd (in its own mount and
//!   PID namespaces, like a virt-launcher pod's `compute` container) that
//!   owns the channel, so only `virsh qemu-agent-command` reaches the agent;
//! - [`shared::SharedGuest`]: one guest per test binary, lent to one test at
//!   a time, so boot time (4–10 s under TCG) is paid per binary, not per test.
//!
//! Every QEMU and libvirtd started here dies with the test process, however
//! it ends ([`process`]). The crate speaks no QGA beyond the handshake that
//! tells a booted agent from a booting one.

pub mod image;
pub mod libvirt;
pub mod probe;
pub mod process;
pub mod qemu;
pub mod quick_loop;
pub mod shared;

use std::path::PathBuf;

pub use image::{Archive, GuestImage, KERNEL_CMDLINE};

#[derive(Debug, thiserror::Error)]
pub enum VmError {
    #[error(transparent)]
    Image(#[from] image::Error),
    #[error("{program} not found: {how}")]
    Missing { program: &'static str, how: &'static str },
    #[error("{context}: {source}")]
    Io { context: String, source: std::io::Error },
    #[error("{what} exited ({status}); its log:\n{log}")]
    Exited { what: String, status: String, log: String },
    #[error("timed out waiting for {what}; log:\n{log}")]
    Timeout { what: String, log: String },
    #[error("{command} failed: {detail}")]
    Command { command: String, detail: String },
    #[error("{0} does not exist")]
    NoSuchPath(PathBuf),
    #[error(transparent)]
    HeavyInQuickLoop(#[from] quick_loop::HeavyInQuickLoop),
}

impl VmError {
    fn io(context: &str) -> impl FnOnce(std::io::Error) -> VmError + '_ {
        move |source| VmError::Io {
            context: context.to_owned(),
            source,
        }
    }
}

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
