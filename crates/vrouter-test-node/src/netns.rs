//! The network namespace the whole node lives in. Every non-loopback
//! address of the node (its node IP, the pod bridge, pod IPs, Service IPs
//! in kube-proxy's rules) exists only here, and nothing routes out: the
//! namespace has no link to the host's.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::Error;
use crate::programs::{Programs, run};

/// The node's IP, on the namespace's `lo`: the kubelet refuses a loopback
/// node IP, and dummy links cannot be created on this machine kind.
pub const NODE_IP: &str = "10.99.0.1";

/// A named network namespace (`ip netns add`), deleted on drop.
pub(crate) struct NetNs {
    name: String,
    ip: PathBuf,
    nsenter: PathBuf,
}

impl NetNs {
    /// Creates the namespace, brings its `lo` up and gives it [`NODE_IP`].
    pub fn create(programs: &Programs) -> Result<NetNs, Error> {
        let name = format!("vrouter-test-node-{}", std::process::id());
        // A namespace of a previous run of this process id is stale.
        let _ = Command::new(&programs.ip).args(["netns", "del", &name]).output();
        run(Command::new(&programs.ip).args(["netns", "add", &name]))?;
        let netns = NetNs {
            name,
            ip: programs.ip.clone(),
            nsenter: programs.nsenter.clone(),
        };
        run(Command::new(&netns.ip).args(["-n", &netns.name, "link", "set", "lo", "up"]))?;
        run(Command::new(&netns.ip).args(["-n", &netns.name, "addr", "add", &format!("{NODE_IP}/32"), "dev", "lo"]))?;
        Ok(netns)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The bind mount that names the namespace.
    pub fn path(&self) -> PathBuf {
        Path::new("/run/netns").join(&self.name)
    }

    /// The command prefix that runs a program inside the namespace. Only
    /// the network namespace is entered (`ip netns exec` would also give
    /// the program a mount namespace of its own, and containerd must see
    /// the volumes the kubelet mounts).
    pub fn prefix(&self) -> Vec<String> {
        vec![
            self.nsenter.to_string_lossy().into_owned(),
            format!("--net={}", self.path().display()),
            "--".to_owned(),
        ]
    }

    /// `program` as a command that runs inside the namespace.
    pub fn command(&self, program: &Path) -> Command {
        let mut command = Command::new(&self.nsenter);
        command
            .arg(format!("--net={}", self.path().display()))
            .arg("--")
            .arg(program);
        command
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        let _ = Command::new(&self.ip).args(["netns", "del", &self.name]).output();
    }
}
