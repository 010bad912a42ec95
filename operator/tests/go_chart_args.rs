//! The operator binary started with exactly the args of the Go operator's
//! chart, as real helm renders its Deployment, and only what that pod's
//! environment would give it (no POD_NAME or POD_NAMESPACE: the Go chart
//! sets neither): it serves the probes where the Deployment's
//! kubelet probes look, its metrics and webhook where the Deployment's ports
//! say (webhook certificate from the directory the args name), takes the
//! Lease and reconciles. A Go flag refused ends the process: the test fails
//! with its message.
//!
//! The Go args name fixed ports (`:8443`, `:8081`, and the webhook's 9443)
//! on every interface. So that they neither collide with anything else on
//! the machine nor listen beyond loopback, the test runs itself again in a
//! network namespace of its own (only `lo`, brought up) and a mount
//! namespace with a private `/tmp` (the args' certificate path is under
//! `/tmp`, shared by every other process otherwise). Its API server runs in
//! that namespace too, on loopback.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use vrouter_api::VRouterConfig;
use vrouter_test_apiserver::TestEnv;

use common::https::{connect_tls, http_get};
use common::wait_for;

/// Set in the run of this test inside its namespaces.
const INSIDE: &str = "VROUTER_GO_CHART_ARGS_NAMESPACED";
const TEST: &str = "the_go_charts_deployment_args_run_this_binary";
/// The Go operator's Lease (its `LeaderElectionID`), which ours shares.
const GO_LEASE: &str = "d9121dda.kojuro.date";

#[test]
fn the_go_charts_deployment_args_run_this_binary() {
    if std::env::var_os(INSIDE).is_some() {
        return tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(inside_the_namespaces());
    }
    let exe = std::env::current_exe().unwrap();
    let output = Command::new(tool("unshare"))
        .args(["--net", "--mount", "--propagation", "private", "--"])
        .arg(exe)
        .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(INSIDE, "1")
        .output()
        .expect("run unshare");
    let (status, said) = (
        output.status,
        String::from_utf8_lossy(&[output.stdout, output.stderr].concat()).into_owned(),
    );
    // The test harness exits 101 when a test fails; anything else is
    // unshare itself failing to make the namespaces.
    match status.code() {
        Some(0) => {}
        Some(101) => panic!("the test inside its network and mount namespaces failed:\n{said}"),
        _ => panic!(
            "unshare --net --mount could not run this test in namespaces of its own ({status}): \
             it needs root (CAP_SYS_ADMIN):\n{said}"
        ),
    }
}

/// A system tool the namespaces need, or a failure saying how to get it.
fn tool(name: &str) -> PathBuf {
    ["/usr/bin", "/usr/sbin", "/bin", "/sbin"]
        .iter()
        .map(|dir| Path::new(dir).join(name))
        .find(|path| path.is_file())
        .unwrap_or_else(|| {
            panic!(
                "`{name}` is needed to give this test namespaces of its own: apt-get install util-linux iproute2 mount"
            )
        })
}

fn run(command: &mut Command) {
    let status = command.status().unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(status.success(), "{command:?}: {status}");
}

async fn inside_the_namespaces() {
    run(Command::new(tool("ip")).args(["link", "set", "lo", "up"]));
    run(Command::new(tool("mount")).args(["-t", "tmpfs", "go-chart-args", "/tmp"]));
    // A private /run too: the pod's ServiceAccount mount names its namespace.
    run(Command::new(tool("mount")).args(["-t", "tmpfs", "go-chart-args", "/run"]));
    let env = TestEnv::start().await.expect("start the test API server");
    let ns = env.namespace("go-chart").await;
    let manager = rendered_manager(ns.name());
    let account = Path::new(vrouter_operator::cli::IN_CLUSTER_NAMESPACE_FILE);
    std::fs::create_dir_all(account.parent().unwrap()).unwrap();
    std::fs::write(account, ns.name()).unwrap();

    let cert_dir = manager.arg_value("--webhook-cert-path");
    std::fs::create_dir_all(&cert_dir).unwrap();
    std::fs::write(Path::new(&cert_dir).join("tls.crt"), env.webhook_tls().cert_pem()).unwrap();
    std::fs::write(Path::new(&cert_dir).join("tls.key"), env.webhook_tls().key_pem()).unwrap();

    // What the Go chart's pod has: its host name (the pod's name), the
    // Deployment's env, the ServiceAccount mount; a kubeconfig stands for
    // the ServiceAccount's token and the API server's address.
    let pod = "vrouter-operator-controller-manager-7d9f8-abcde";
    let mut environment = vec![
        (
            "KUBECONFIG".to_owned(),
            env.kubeconfig_path().to_str().unwrap().to_owned(),
        ),
        ("HOSTNAME".to_owned(), pod.to_owned()),
    ];
    environment.extend(manager.env.iter().cloned());
    let mut operator = Operator::start(&manager.args, &environment);
    for path in &manager.probe_paths {
        let probe = SocketAddr::from(([127, 0, 0, 1], manager.probe_port));
        operator.wait_for_200(probe, path).await;
    }

    // `:PORT` listens on both families: the metrics port answers on both
    // loopbacks, and the webhook serves the certificate from the args' path.
    for metrics in [
        SocketAddr::from(([127, 0, 0, 1], manager.metrics_port)),
        format!("[::1]:{}", manager.metrics_port).parse().unwrap(),
    ] {
        tokio::net::TcpStream::connect(metrics)
            .await
            .unwrap_or_else(|e| panic!("metrics on {metrics}: {e}\n{}", operator.log()));
    }
    let webhook = SocketAddr::from(([127, 0, 0, 1], manager.webhook_port));
    connect_tls(webhook, env.webhook_tls().ca_pem())
        .await
        .unwrap_or_else(|e| {
            panic!(
                "the webhook on {webhook} with the certificate of {cert_dir}: {e}\n{}",
                operator.log()
            )
        });

    let leases: Api<Lease> = Api::namespaced(env.client(), ns.name());
    let holder = wait_for("the Lease to be taken", Duration::from_secs(60), || async {
        let lease = leases.get_opt(GO_LEASE).await.ok()??;
        lease.spec?.holder_identity.filter(|h| !h.is_empty())
    })
    .await;
    assert_eq!(holder, pod, "{}", operator.log());

    let configs: Api<VRouterConfig> = Api::namespaced(env.client(), ns.name());
    let config = serde_json::from_value(json!({
        "metadata": {"name": "c"},
        "spec": {"targetRef": {"name": "missing"}, "commands": "set system host-name c\n"},
    }))
    .unwrap();
    configs.create(&PostParams::default(), &config).await.unwrap();
    let message = wait_for("the config to be reconciled", Duration::from_secs(60), || async {
        Some(configs.get_opt("c").await.ok()??.status?.message).filter(|m| !m.is_empty())
    })
    .await;
    assert!(message.contains("missing"), "{message}\n{}", operator.log());
    operator.check_running();
}

/// The Go operator's source: `VROUTER_GO_OPERATOR_SRC`, else the vendored
/// copy next to the repository (`../shared/peers/vrouter-operator-go`).
fn go_operator_source() -> PathBuf {
    match std::env::var_os("VROUTER_GO_OPERATOR_SRC").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/peers/vrouter-operator-go"),
    }
}

/// What the Go chart's Deployment gives its `manager` container.
struct Manager {
    args: Vec<String>,
    /// Its `env` entries with a plain `value`.
    env: Vec<(String, String)>,
    probe_port: u16,
    probe_paths: Vec<String>,
    metrics_port: u16,
    webhook_port: u16,
}

impl Manager {
    /// The value of `--name=value` in the args.
    fn arg_value(&self, name: &str) -> String {
        let prefix = format!("{name}=");
        self.args
            .iter()
            .find_map(|arg| arg.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("the Go chart's args have no {name}: {:?}", self.args))
            .to_owned()
    }
}

/// `helm template` of the Go chart, released in `namespace`: its manager
/// container, and the metrics Service's target port.
fn rendered_manager(namespace: &str) -> Manager {
    let helm = vrouter_test_apiserver::helm().unwrap_or_else(|e| panic!("{e}"));
    let chart = go_operator_source().join("charts/vrouter-operator");
    assert!(
        chart.join("Chart.yaml").is_file(),
        "the Go operator's chart is not at {}",
        chart.display()
    );
    let output = Command::new(helm)
        .args(["template", "vrouter-operator"])
        .arg(&chart)
        .args(["--namespace", namespace])
        .output()
        .expect("run helm");
    assert!(
        output.status.success(),
        "helm template: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).unwrap();
    let objects: Vec<serde_json::Value> = serde_yaml::Deserializer::from_str(&text)
        .map(|doc| serde::Deserialize::deserialize(doc).unwrap())
        .filter(|o: &serde_json::Value| !o.is_null())
        .collect();
    let of_kind = |kind: &str, name_part: &str| {
        objects
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"].as_str().is_some_and(|n| n.contains(name_part)))
            .unwrap_or_else(|| panic!("no {kind} *{name_part}* in the Go chart"))
    };
    let containers = of_kind("Deployment", "controller-manager")["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap();
    let manager = containers
        .iter()
        .find(|c| c["name"] == "manager")
        .expect("a manager container");
    let probes = [
        &manager["livenessProbe"]["httpGet"],
        &manager["readinessProbe"]["httpGet"],
    ];
    assert_eq!(probes[0]["port"], probes[1]["port"]);
    let port =
        |v: &serde_json::Value| u16::try_from(v.as_u64().unwrap_or_else(|| panic!("a numeric port: {v}"))).unwrap();
    let webhook = manager["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "webhook-server")
        .expect("the webhook port");
    Manager {
        args: serde_json::from_value(manager["args"].clone()).unwrap(),
        env: manager["env"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| Some((e["name"].as_str()?.to_owned(), e["value"].as_str()?.to_owned())))
            .collect(),
        probe_port: port(&probes[0]["port"]),
        probe_paths: probes.iter().map(|p| p["path"].as_str().unwrap().to_owned()).collect(),
        metrics_port: port(&of_kind("Service", "metrics")["spec"]["ports"][0]["targetPort"]),
        webhook_port: port(&webhook["containerPort"]),
    }
}

/// The operator binary with nothing but `args` and `env`.
struct Operator {
    child: Child,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Operator {
    fn start(args: &[String], env: &[(String, String)]) -> Operator {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("operator.log");
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_vrouter-operator"))
            .args(args)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("start the vrouter-operator binary");
        Operator { child, log, _dir: dir }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Fails with the log when the process has exited (a refused flag).
    fn check_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("the operator exited with {status}:\n{}", self.log());
        }
    }

    async fn wait_for_200(&mut self, addr: SocketAddr, path: &str) {
        let started = std::time::Instant::now();
        loop {
            self.check_running();
            if http_get(addr, path).await.is_ok_and(|a| a.status == 200) {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "{path} on {addr} never answered 200:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- the operator's log ---\n{}", self.log());
        }
    }
}
