//! The Go vrouter-operator (the original this project reimplements) as a
//! process: the binary `cargo xtask testenv` builds from
//! `shared/peers/vrouter-operator-go`, run as its Deployment runs it, with
//! leader election on, webhooks off, its log in a file.
//!
//! controller-runtime takes the leader-election namespace from the file a
//! pod's ServiceAccount volume holds
//! (`/var/run/secrets/kubernetes.io/serviceaccount/namespace`) and has no
//! flag or variable for it. So the binary runs in a private mount namespace
//! (`unshare --mount`) with a tmpfs on `/run` holding that one file, as the
//! kubelet mounts it into the pod; nothing outside that namespace changes.
//! Its API server comes from `KUBECONFIG` (no `KUBERNETES_SERVICE_HOST`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use vrouter_test_apiserver::TestEnv;

use super::https::{free_port, http_get};

/// How to get the binary, for the message of a failed start.
const HOW_TO_GET_IT: &str = "the Go vrouter-operator is built by `cargo xtask testenv` (or `cargo xtask test`) \
     from ../shared/peers/vrouter-operator-go, with ../shared/peers/vrouter-daemon as its daemon package";

/// The Go operator's leader-election Lease (its `LeaderElectionID`).
pub const LEASE: &str = "d9121dda.kojuro.date";

/// Where the Go operator's webhook server listens: controller-runtime's
/// default port, on every address; its `main.go` has no flag for it.
pub const WEBHOOK_PORT: u16 = 9443;

/// The directory of one run: its log (and certificates).
fn private_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("vrouter-go-operator-")
        .tempdir()
        .unwrap()
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

pub struct GoOperator {
    child: Child,
    dir: tempfile::TempDir,
    pub health: SocketAddr,
}

impl Drop for GoOperator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = self.log();
            let tail: Vec<&str> = log.lines().rev().take(200).collect();
            eprintln!("--- the Go operator's log, last {} lines ---", tail.len());
            for line in tail.into_iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

impl GoOperator {
    /// Starts the Go operator as a replica in `namespace` (where its Lease
    /// lives), with the admin kubeconfig of `env`: leader election on (a
    /// bare `--leader-elect`, as its chart passes it), webhooks off
    /// (`ENABLE_WEBHOOKS=false`, which its `main.go` reads), metrics over
    /// plain HTTP and probes on free loopback ports.
    pub fn start(env: &TestEnv, namespace: &str) -> GoOperator {
        let (metrics, health) = (loopback(free_port()), loopback(free_port()));
        let args = [
            "--leader-elect".to_owned(),
            format!("--metrics-bind-address={metrics}"),
            "--metrics-secure=false".to_owned(),
            format!("--health-probe-bind-address={health}"),
        ];
        let vars = [("ENABLE_WEBHOOKS", "false")];
        Self::spawn(private_dir(), namespace, env.kubeconfig_path(), &args, &vars, health)
    }

    /// Starts the Go operator as the pod of its kustomize Deployment in
    /// `namespace` runs it: that Deployment's `args` (webhooks on), with
    /// `kubeconfig` (its ServiceAccount's token). What the pod gets from
    /// its own network namespace and volumes is given on the loopback
    /// instead: each `:PORT` address becomes a free loopback port, and the
    /// `--webhook-cert-path` directory (the mounted Secret cert-manager
    /// fills) holds the harness's serving certificate for 127.0.0.1. The
    /// webhook server listens on [`WEBHOOK_PORT`].
    pub fn start_as_deployment(env: &TestEnv, namespace: &str, kubeconfig: &Path, args: &[String]) -> GoOperator {
        let dir = private_dir();
        let certs = dir.path().join("serving-certs");
        std::fs::create_dir(&certs).unwrap();
        std::fs::write(certs.join("tls.crt"), env.webhook_tls().cert_pem()).unwrap();
        std::fs::write(certs.join("tls.key"), env.webhook_tls().key_pem()).unwrap();
        let mut health = None;
        let args: Vec<String> = args
            .iter()
            .map(|arg| match arg.split_once('=') {
                Some((flag, address)) if address.starts_with(':') => {
                    let local = loopback(free_port());
                    if flag == "--health-probe-bind-address" {
                        health = Some(local);
                    }
                    format!("{flag}={local}")
                }
                Some(("--webhook-cert-path", _)) => format!("--webhook-cert-path={}", certs.display()),
                _ => arg.clone(),
            })
            .collect();
        let health = health.unwrap_or_else(|| panic!("the Deployment's args name no probe address: {args:?}"));
        Self::spawn(dir, namespace, kubeconfig, &args, &[], health)
    }

    fn spawn(
        dir: tempfile::TempDir,
        namespace: &str,
        kubeconfig: &Path,
        args: &[String],
        vars: &[(&str, &str)],
        health: SocketAddr,
    ) -> Self {
        vrouter_test_vm::quick_loop::refuse_heavy("the Go vrouter-operator").unwrap_or_else(|e| panic!("{e}"));
        let binary = vrouter_test_apiserver::go_operator()
            .unwrap_or_else(|e| panic!("cannot start the Go vrouter-operator: {e}; {HOW_TO_GET_IT}"));
        let log = std::fs::File::create(dir.path().join("operator.log")).unwrap();
        let child = in_pod_namespace(namespace)
            .arg(&binary)
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .envs(vars.iter().copied())
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {} under unshare: {e}; {HOW_TO_GET_IT}", binary.display()));
        GoOperator { child, dir, health }
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("operator.log")
    }

    /// Everything it has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Waits until `/readyz` answers 200; panics with the log if the
    /// process exits or it takes longer than `limit`.
    pub async fn wait_ready(&mut self, limit: Duration) {
        let started = std::time::Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("the Go operator exited with {status}:\n{}", self.log());
            }
            if http_get(self.health, "/readyz").await.is_ok_and(|a| a.status == 200) {
                return;
            }
            assert!(
                started.elapsed() < limit,
                "the Go operator was not ready within {limit:?}:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// SIGKILL, as a crashed or evicted pod ends: it neither releases its
    /// Lease nor finishes anything it was doing.
    pub fn kill(&mut self) {
        self.child.kill().expect("SIGKILL the Go operator");
        let _ = self.child.wait();
    }

    /// SIGTERM, as the kubelet stops the pod of a deleted Deployment, and
    /// waits for it to exit. (The process is the Go binary itself: `unshare`
    /// and the shell exec it.)
    pub fn terminate(&mut self) {
        let status = Command::new("kill").arg(self.child.id().to_string()).status();
        assert!(status.is_ok_and(|s| s.success()), "SIGTERM the Go operator");
        let _ = self.child.wait();
    }
}

/// `unshare` running the program that follows in a private mount namespace
/// where `/run/secrets/kubernetes.io/serviceaccount/namespace` (reached as
/// `/var/run/...`) reads `namespace`.
fn in_pod_namespace(namespace: &str) -> Command {
    let mut command = Command::new(program_on_path("unshare"));
    command
        .args(["--mount", "--propagation", "private", "--", "/bin/sh", "-c"])
        .arg(
            "mount -t tmpfs tmpfs /run || exit 97\n\
             mkdir -p /run/secrets/kubernetes.io/serviceaccount || exit 97\n\
             printf %s \"$1\" > /run/secrets/kubernetes.io/serviceaccount/namespace || exit 97\n\
             shift\n\
             exec \"$@\"",
        )
        .arg("vrouter-go-operator-pod")
        .arg(namespace);
    command
}

fn program_on_path(name: &str) -> PathBuf {
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join(name))
                .find(|p| p.is_file())
        })
        .unwrap_or_else(|| panic!("{name} is not on PATH (util-linux); the Go operator runs under it"))
}

/// The Go operator's snapshot (`shared/peers/vrouter-operator-go`), found
/// from any ancestor of this crate; its CRDs and manifests are read from it.
pub fn source() -> PathBuf {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    crate_dir
        .ancestors()
        .map(|dir| dir.join("shared/peers/vrouter-operator-go"))
        .find(|dir| dir.join("go.mod").is_file())
        .unwrap_or_else(|| {
            panic!(
                "the Go vrouter-operator's source is missing: expected shared/peers/vrouter-operator-go beside the \
                 repository (above {})",
                crate_dir.display()
            )
        })
}
