//! An operator replica as its own process: the `vrouter-operator` binary as
//! released, with leader election on, reaching the API server at the URL a
//! test chooses (directly, or through a fault proxy), its log in a file.

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};

use vrouter_test_apiserver::TestEnv;

pub struct ReplicaProcess {
    child: Child,
    dir: tempfile::TempDir,
    pub identity: String,
    /// Where it serves `/metrics` (plain HTTP when started with
    /// `--metrics-secure=false`).
    pub metrics: SocketAddr,
}

impl Drop for ReplicaProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // A failing test shows what the replica said.
        if std::thread::panicking() {
            let log = self.log();
            let tail: Vec<&str> = log.lines().rev().take(200).collect();
            eprintln!("--- replica {}'s log, last {} lines ---", self.identity, tail.len());
            for line in tail.into_iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

impl ReplicaProcess {
    /// Starts `vrouter-operator` as replica `identity`, competing for the
    /// Lease `lease` in `namespace` and watching only that namespace, with
    /// the admin kubeconfig pointed at `server` (`https://host:port`) and
    /// `args` added. Webhooks are off: every replica serves them, they play
    /// no part in the election.
    pub fn start(env: &TestEnv, identity: &str, namespace: &str, lease: &str, server: &str, args: &[&str]) -> Self {
        Self::start_with_env(env, identity, namespace, lease, server, args, &[])
    }

    /// [`ReplicaProcess::start`] with `vars` added to its environment (a
    /// crash point, `vrouter_operator::runtime::crash_point::ENV`).
    pub fn start_with_env(
        env: &TestEnv,
        identity: &str,
        namespace: &str,
        lease: &str,
        server: &str,
        args: &[&str],
        vars: &[(&str, &str)],
    ) -> Self {
        let dir = tempfile::Builder::new().prefix("vrouter-replica-").tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        let admin = std::fs::read_to_string(env.kubeconfig_path()).unwrap();
        let direct = format!("server: {}\n", env.apiserver_url());
        assert!(admin.contains(&direct), "the harness kubeconfig names {direct}");
        std::fs::write(&kubeconfig, admin.replace(&direct, &format!("server: {server}\n"))).unwrap();
        let log = std::fs::File::create(dir.path().join("operator.log")).unwrap();
        let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let health = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let child = Command::new(env!("CARGO_BIN_EXE_vrouter-operator"))
            .arg("--enable-webhooks=false")
            .arg(format!("--metrics-addr={metrics}"))
            .arg(format!("--health-probe-addr={health}"))
            .arg("--leader-elect=true")
            .arg(format!("--identity={identity}"))
            .arg(format!("--lease-name={lease}"))
            .arg(format!("--lease-namespace={namespace}"))
            .arg(format!("--watch-namespace={namespace}"))
            .args(args)
            .env("KUBECONFIG", &kubeconfig)
            .env("RUST_LOG", "info")
            .envs(vars.iter().copied())
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start the vrouter-operator binary");
        ReplicaProcess {
            child,
            dir,
            identity: identity.to_owned(),
            metrics,
        }
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("operator.log")
    }

    /// Everything the replica has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Its process id, for reading its own CPU time and memory in /proc.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// How it exited, once it has.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("wait for the replica")
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a loopback port")
        .port()
}
