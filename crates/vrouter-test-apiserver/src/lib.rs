//! A real Kubernetes API server for tests: `etcd` and `kube-apiserver` started
//! on free loopback ports, with a temporary data directory and certificates made
//! for the occasion, the operator's CRDs installed and Established.
//!
//! ```no_run
//! # async fn example() {
//! use vrouter_test_apiserver::TestEnv;
//!
//! let env = TestEnv::shared().await; // one control plane per test binary
//! let ns = env.namespace("my-test").await; // a fresh namespace per test
//! let configs: kube::Api<vrouter_api::VRouterConfig> = ns.api();
//! # let _ = configs;
//! # }
//! ```
//!
//! # Binaries
//!
//! `cargo xtask testenv` (and `cargo xtask test`, which calls it) builds both
//! from Go modules into `$VROUTER_TESTENV_CACHE/bin` (default
//! `$HOME/.cache/vrouter-operator/testenv/bin`). `VROUTER_KUBE_APISERVER` and
//! `VROUTER_ETCD` name other binaries. A test that finds neither fails with a
//! message saying how to get them; it never passes without a server.
//!
//! # Lifetime and cleanup
//!
//! [`TestEnv::shared`] starts one control plane per test binary, on first use,
//! and keeps it in a static: starting one costs a few seconds of two CPUs, so
//! tests share it and isolate themselves by namespace instead. Rust never drops
//! statics, so cleanup cannot rely on `Drop`. Every control plane therefore
//! has a watchdog: a small `sh` process holding the read end of a pipe whose
//! write end only the test process has. When the test process ends — normally,
//! by a panic, by `abort`, or killed with SIGKILL — the kernel closes the pipe,
//! the watchdog reads end-of-file, kills the process groups of `etcd` and
//! `kube-apiserver` and removes the data directory. The watchdog runs in its own
//! process group so that a Ctrl-C aimed at the test run does not kill it before
//! it has cleaned up.
//!
//! [`TestEnv::start`] gives a private control plane that is stopped and removed
//! when dropped (including while a panicking test unwinds), with the same
//! watchdog behind it.
//!
//! # Faults
//!
//! A control plane of the test's own ([`TestEnv::start_with`]) can be broken
//! for real: [`TestEnv::kill`] SIGKILLs etcd and kube-apiserver and
//! [`TestEnv::restart`] starts them again on the same data and ports;
//! [`Options::etcd_client_port`] and [`Options::apiserver_etcd_url`] put a
//! fault proxy between the two; [`TestEnv::etcd_put`] and
//! [`TestEnv::etcd_compact`] move etcd's revision on and compact it.
//!
//! # Admission webhooks
//!
//! [`TestEnv::webhook_tls`] hands out a serving certificate for `127.0.0.1` and
//! `localhost`, signed by the harness's CA, so a test can serve admission
//! requests over HTTPS and register them with a `url:` client config.

mod binaries;
mod certs;
mod control_plane;
mod env;
mod error;
mod etcd;
mod kubevirt;
mod webhook;

pub use binaries::{
    Binaries, NodeBinaries, cache_dir, go_operator, go_template_oracle, helm, kstatus_oracle, kubectl, promql_oracle,
    promtool, toxiproxy_server, vrouter_daemon,
};
pub use control_plane::{KUBERNETES_SERVICE_IP, NodeAccess, Options, SERVICE_CLUSTER_IP_RANGE, Serving, StaticToken};
pub use env::{TestEnv, TestNamespace};
pub use error::Error;
pub use kubevirt::install_vmi_crd;
pub use webhook::WebhookTls;
