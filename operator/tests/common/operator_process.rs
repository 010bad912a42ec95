//! The operator binary as a process of its own, as a Deployment runs it:
//! a kubeconfig holding a ServiceAccount token, the webhook and metrics
//! certificates in a directory, every listener on a loopback port, and its
//! log captured to a file.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use vrouter_test_apiserver::TestEnv;

use super::https::{free_port, http_get};
use super::shipped_rbac::kubeconfig_with_token;

pub struct OperatorProcess {
    child: Child,
    dir: tempfile::TempDir,
    pub webhook: SocketAddr,
    pub metrics: SocketAddr,
    pub health: SocketAddr,
}

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // A failing test shows what the operator said (the file goes with
        // the directory).
        if std::thread::panicking() {
            let log = self.log();
            let tail: Vec<&str> = log.lines().rev().take(300).collect();
            eprintln!("--- the operator's log, last {} lines ---", tail.len());
            for line in tail.into_iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

impl OperatorProcess {
    /// Starts `vrouter-operator` authenticated by `token`, serving its
    /// webhook and metrics with the harness's serving certificate, with
    /// `args` added (e.g. `--watch-namespace`, `--leader-elect=false`).
    pub fn start(env: &TestEnv, token: &str, args: &[&str]) -> OperatorProcess {
        Self::start_with_env(env, token, args, &[])
    }

    /// [`OperatorProcess::start`] with `vars` in its environment, as a
    /// Deployment's `env` sets them (the listeners' flags above take
    /// precedence over their variables).
    pub fn start_with_env(env: &TestEnv, token: &str, args: &[&str], vars: &[(String, String)]) -> OperatorProcess {
        Self::start_on_host(env, token, args, vars, "127.0.0.1")
    }

    /// [`OperatorProcess::start_with_env`] with every listener's flag
    /// `{host}:{port}`: `host` as a listen address writes it (empty for
    /// every interface, `[::]` bracketed). The fields still name
    /// 127.0.0.1, which reaches each listener whatever `host` binds.
    pub fn start_on_host(
        env: &TestEnv,
        token: &str,
        args: &[&str],
        vars: &[(String, String)],
        host: &str,
    ) -> OperatorProcess {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        kubeconfig_with_token(env, token, &kubeconfig);
        let certs = dir.path().join("certs");
        std::fs::create_dir(&certs).unwrap();
        std::fs::write(certs.join("tls.crt"), env.webhook_tls().cert_pem()).unwrap();
        std::fs::write(certs.join("tls.key"), env.webhook_tls().key_pem()).unwrap();
        let (webhook, metrics, health) = (loopback(free_port()), loopback(free_port()), loopback(free_port()));
        let log = std::fs::File::create(dir.path().join("operator.log")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_vrouter-operator"))
            .arg(format!("--webhook-addr={host}:{}", webhook.port()))
            .arg(format!("--webhook-cert-dir={}", certs.display()))
            .arg(format!("--metrics-addr={host}:{}", metrics.port()))
            .arg(format!("--metrics-cert-dir={}", certs.display()))
            .arg(format!("--health-probe-addr={host}:{}", health.port()))
            .args(args)
            .envs(vars.iter().map(|(k, v)| (k, v)))
            .env("KUBECONFIG", &kubeconfig)
            .env("RUST_LOG", "info")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start the vrouter-operator binary");
        OperatorProcess {
            child,
            dir,
            webhook,
            metrics,
            health,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("operator.log")
    }

    /// Everything the operator has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Waits until `/readyz` answers 200; panics with the log if the
    /// process exits or it takes longer than `limit`.
    pub async fn wait_ready(&mut self, limit: Duration) {
        let started = std::time::Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("the operator exited with {status}:\n{}", self.log());
            }
            if http_get(self.health, "/readyz").await.is_ok_and(|a| a.status == 200) {
                return;
            }
            assert!(
                started.elapsed() < limit,
                "the operator was not ready within {limit:?}:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Stops it as the kubelet does (SIGTERM) and waits for it to exit.
    pub fn terminate(&mut self) {
        let _ = Command::new("kill").arg(self.child.id().to_string()).status();
        let _ = self.child.wait();
    }
}
