//! What can go wrong while starting or using a test node.

use std::path::PathBuf;

/// Why a test node could not be started or used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The control plane (etcd, kube-apiserver) or a node binary is missing
    /// or would not start; its message names the fix.
    #[error(transparent)]
    ControlPlane(#[from] vrouter_test_apiserver::Error),
    /// The quick loop (`cargo xtask test --quick`) runs no test that needs the node.
    #[error(transparent)]
    HeavyInQuickLoop(#[from] vrouter_test_vm::quick_loop::HeavyInQuickLoop),
    /// A program of a Debian package the node runs is not installed.
    #[error(
        "{program} not found at {}: run `cargo xtask test` (which installs it) or \
         `apt-get install -y {package}`",
        path.display()
    )]
    ProgramMissing {
        program: &'static str,
        package: &'static str,
        path: PathBuf,
    },
    /// Network namespaces, cgroups and containers need root.
    #[error("the test node needs root (network namespaces, containerd, the kubelet); this process runs as uid {0}")]
    NotRoot(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// A helper program ran and failed.
    #[error("`{command}` failed ({status}): {output}")]
    Command {
        command: String,
        status: std::process::ExitStatus,
        output: String,
    },
    /// A node process exited while it should run.
    #[error("{name} exited ({status}); last log lines:\n{log_tail}")]
    Exited {
        name: String,
        status: std::process::ExitStatus,
        log_tail: String,
    },
    #[error("{what} not reached after {seconds}s; {details}")]
    Timeout {
        what: String,
        seconds: u64,
        details: String,
    },
    #[error("generating the kubelet client certificate: {0}")]
    Certs(#[from] rcgen::Error),
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("no task for container {0} in containerd")]
    NoSuchTask(String),
    /// [`crate::TestNode::expose`] was asked for a port it already serves.
    #[error("port {0} is already exposed to the node's pods")]
    AlreadyExposed(u16),
}

impl Error {
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let context = context.into();
        move |source| Error::Io { context, source }
    }
}
