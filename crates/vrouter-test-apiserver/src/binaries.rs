//! Finding the binaries that `cargo xtask testenv` builds: `etcd`,
//! `kube-apiserver`, `kubectl`, `helm`, `vrouter-server`, `vrouter-agent`, `toxiproxy-server`,
//! the Go vrouter-operator (`vrouter-operator-go`), and the Go oracles of our own tests (`gotemplate`, `kstatus`).

use std::path::PathBuf;

use crate::Error;

/// The two binaries a control plane runs.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub kube_apiserver: PathBuf,
    pub etcd: PathBuf,
}

impl Binaries {
    /// `VROUTER_KUBE_APISERVER` / `VROUTER_ETCD` when set, else the cache's `bin/`.
    /// Fails, naming the fix, when a binary is missing.
    pub fn locate() -> Result<Binaries, Error> {
        Ok(Binaries {
            kube_apiserver: locate_one("kube-apiserver", "VROUTER_KUBE_APISERVER")?,
            etcd: locate_one("etcd", "VROUTER_ETCD")?,
        })
    }
}

/// The binaries of a test node, which `cargo xtask testenv` builds in the
/// same `go build` as `kube-apiserver`.
#[derive(Debug, Clone)]
pub struct NodeBinaries {
    pub kubelet: PathBuf,
    pub kube_controller_manager: PathBuf,
    pub kube_scheduler: PathBuf,
    pub kube_proxy: PathBuf,
}

impl NodeBinaries {
    /// `VROUTER_KUBELET`, `VROUTER_KUBE_CONTROLLER_MANAGER`,
    /// `VROUTER_KUBE_SCHEDULER`, `VROUTER_KUBE_PROXY` when set, else the
    /// cache's `bin/`. Fails, naming the fix, when a binary is missing.
    pub fn locate() -> Result<NodeBinaries, Error> {
        Ok(NodeBinaries {
            kubelet: locate_one("kubelet", "VROUTER_KUBELET")?,
            kube_controller_manager: locate_one("kube-controller-manager", "VROUTER_KUBE_CONTROLLER_MANAGER")?,
            kube_scheduler: locate_one("kube-scheduler", "VROUTER_KUBE_SCHEDULER")?,
            kube_proxy: locate_one("kube-proxy", "VROUTER_KUBE_PROXY")?,
        })
    }
}

/// `helm` (`VROUTER_HELM` when set, else the cache's `bin/`), which
/// `cargo xtask testenv` builds too, for tests that render the chart.
pub fn helm() -> Result<PathBuf, Error> {
    locate_one("helm", "VROUTER_HELM")
}

/// `kubectl` of the API server's release (`VROUTER_KUBECTL` when set,
/// else the cache's `bin/`), which `cargo xtask testenv` builds too.
pub fn kubectl() -> Result<PathBuf, Error> {
    locate_one("kubectl", "VROUTER_KUBECTL")
}

/// The real vrouter-daemon's server and agent (`VROUTER_DAEMON_SERVER` /
/// `VROUTER_DAEMON_AGENT` when set, else the cache's `bin/`), which
/// `cargo xtask testenv` builds from the vendored source.
pub fn vrouter_daemon() -> Result<(PathBuf, PathBuf), Error> {
    Ok((
        locate_one("vrouter-server", "VROUTER_DAEMON_SERVER")?,
        locate_one("vrouter-agent", "VROUTER_DAEMON_AGENT")?,
    ))
}

/// The Go vrouter-operator this project reimplements (`VROUTER_GO_OPERATOR`
/// when set, else the cache's `bin/`), which `cargo xtask testenv` builds
/// from the snapshot in `shared/peers/vrouter-operator-go`, for the tests of
/// the move from it.
pub fn go_operator() -> Result<PathBuf, Error> {
    locate_one("vrouter-operator-go", "VROUTER_GO_OPERATOR")
}

/// The Go template oracle (`VROUTER_GO_TEMPLATE_ORACLE` when set, else the cache's
/// `bin/`): Go `text/template` + sprig as the Go operator renders, which
/// `cargo xtask testenv` builds from `xtask/oracles/gotemplate`.
pub fn go_template_oracle() -> Result<PathBuf, Error> {
    locate_one("gotemplate", "VROUTER_GO_TEMPLATE_ORACLE")
}

/// The kstatus oracle (`VROUTER_KSTATUS_ORACLE` when set, else the cache's
/// `bin/`): sigs.k8s.io/cli-utils' kstatus, which Flux reads health with,
/// built by `cargo xtask testenv` from `xtask/oracles/kstatus`.
pub fn kstatus_oracle() -> Result<PathBuf, Error> {
    locate_one("kstatus", "VROUTER_KSTATUS_ORACLE")
}

/// Toxiproxy's server (`VROUTER_TOXIPROXY` when set, else the cache's
/// `bin/`): the fault proxy tests put between an operator and the API
/// server, which `cargo xtask testenv` builds from
/// `github.com/Shopify/toxiproxy/v2`.
pub fn toxiproxy_server() -> Result<PathBuf, Error> {
    locate_one("toxiproxy-server", "VROUTER_TOXIPROXY")
}

/// `promtool` of Prometheus (`VROUTER_PROMTOOL` when set, else the cache's
/// `bin/`), which `cargo xtask testenv` builds from
/// `github.com/prometheus/prometheus`, for `promtool test rules` on the
/// chart's alerting rules.
pub fn promtool() -> Result<PathBuf, Error> {
    locate_one("promtool", "VROUTER_PROMTOOL")
}

/// The PromQL oracle (`VROUTER_PROMQL_ORACLE` when set, else the cache's
/// `bin/`): Prometheus's own parser naming the metrics a query selects,
/// built by `cargo xtask testenv` from `xtask/oracles/promql`.
pub fn promql_oracle() -> Result<PathBuf, Error> {
    locate_one("promql", "VROUTER_PROMQL_ORACLE")
}

fn locate_one(name: &'static str, env_var: &'static str) -> Result<PathBuf, Error> {
    let path = match std::env::var_os(env_var).filter(|v| !v.is_empty()) {
        Some(path) => PathBuf::from(path),
        None => cache_dir()?.join("bin").join(name),
    };
    if path.is_file() {
        Ok(path)
    } else {
        Err(Error::BinaryMissing { name, env_var, path })
    }
}

/// The cache `cargo xtask testenv` builds into: `$VROUTER_TESTENV_CACHE`, else
/// `$HOME/.cache/vrouter-operator/testenv`.
pub fn cache_dir() -> Result<PathBuf, Error> {
    if let Some(dir) = std::env::var_os("VROUTER_TESTENV_CACHE").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .ok_or(Error::NoCacheDir)?;
    Ok(PathBuf::from(home).join(".cache/vrouter-operator/testenv"))
}
