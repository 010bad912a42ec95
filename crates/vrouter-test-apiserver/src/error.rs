//! What can go wrong while starting a control plane.

use std::path::PathBuf;

/// Why a test control plane could not be started or used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A binary is neither where its environment variable says nor in the cache.
    #[error(
        "{name} not found at {}: run `cargo xtask testenv` (or `cargo xtask test`) to build it, \
         or set {env_var} to an existing binary",
        path.display()
    )]
    BinaryMissing {
        name: &'static str,
        env_var: &'static str,
        path: PathBuf,
    },
    /// Neither `VROUTER_TESTENV_CACHE` nor `HOME` is set.
    #[error("cannot find the testenv cache: set VROUTER_TESTENV_CACHE or HOME")]
    NoCacheDir,
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("generating test certificates: {0}")]
    Certs(#[from] rcgen::Error),
    /// A process exited before the API server became ready; its log tail says why.
    #[error("{name} exited during startup ({status}); last log lines:\n{log_tail}")]
    ExitedEarly {
        name: &'static str,
        status: std::process::ExitStatus,
        log_tail: String,
    },
    #[error("{what} not ready after {seconds}s; last kube-apiserver log lines:\n{log_tail}")]
    Timeout {
        what: String,
        seconds: u64,
        log_tail: String,
    },
    #[error("kube client configuration: {0}")]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The TokenRequest API answered without a token.
    #[error("the API server issued no token for ServiceAccount {0}")]
    NoToken(String),
    #[error("etcd: {0}")]
    Etcd(String),
    #[error("webhook TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
}

impl Error {
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let context = context.into();
        move |source| Error::Io { context, source }
    }
}
