//! [`TestNode`]: a control plane and one kubelet, started together in a
//! network namespace of their own, and everything undone on drop.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, ServiceAccount};
use kube::{Api, Client};
use vrouter_test_apiserver::{NodeAccess, NodeBinaries, Options, Serving, TestEnv, TestNamespace};

use crate::Error;
use crate::components::Components;
use crate::config::NODE_NAME;
use crate::containerd::Containerd;
use crate::credentials::Credentials;
use crate::forward::{self, APISERVER_PORT};
use crate::host_state::{HostState, unmount_under};
use crate::image;
use crate::netns::{NODE_IP, NetNs};
use crate::process::Processes;
use crate::programs::{Programs, require_root, run};
use crate::watchdog::Watchdog;

/// Node Ready takes about 10 s on an idle machine; the margin is for one
/// busy compiling.
const READY_TIMEOUT: Duration = Duration::from_secs(180);
const POLL: Duration = Duration::from_millis(500);
/// How long [`TestNode::until`] waits: a pod scheduled, its image
/// unpacked and its container Ready take seconds, more on a busy machine.
pub const WAIT_TIMEOUT: Duration = Duration::from_secs(120);
/// One node per machine at a time: the kubelet hard-codes host paths
/// (`/var/lib/kubelet/device-plugins`) and the `kubepods` cgroups.
const LOCK_FILE: &str = "/tmp/vrouter-test-node.lock";

/// A single-node cluster: etcd, kube-apiserver, kube-controller-manager,
/// kube-scheduler, containerd, the kubelet and kube-proxy, all inside a
/// network namespace the node made. See the crate documentation.
pub struct TestNode {
    env: Option<TestEnv>,
    processes: Processes,
    containerd: Containerd,
    netns: Option<NetNs>,
    host: HostState,
    dir: PathBuf,
    _lock: File,
}

impl TestNode {
    /// Starts the node and waits until it is Ready, with the pause and
    /// test images ([`crate::BUSYBOX_IMAGE`]) imported.
    pub async fn start() -> Result<TestNode, Error> {
        vrouter_test_vm::quick_loop::refuse_heavy("the test node")?;
        require_root()?;
        vrouter_test_apiserver::Binaries::locate()?;
        let binaries = NodeBinaries::locate()?;
        let programs = Programs::locate()?;
        let lock = File::create(LOCK_FILE).map_err(Error::io(format!("creating {LOCK_FILE}")))?;
        lock.lock().map_err(Error::io(format!("locking {LOCK_FILE}")))?;
        let host = HostState::record();
        let dir = tempfile::Builder::new()
            .prefix("vrouter-test-node-")
            .tempdir()
            .map_err(Error::io("creating the node's directory"))?
            .keep();
        // From here on an early return drops `node`, which undoes it all.
        let mut node = TestNode {
            env: None,
            processes: Processes::new(&dir),
            containerd: Containerd::configure(&dir, &programs)?,
            netns: None,
            host,
            dir,
            _lock: lock,
        };
        let netns = node.netns.insert(NetNs::create(&programs)?);
        let watchdog = Watchdog::spawn(&node.dir, netns.name(), node.containerd.socket(), &programs.ip)?;
        node.processes.watch(watchdog, &node.host.watchdog_lines())?;
        node.start_all(&binaries, &programs).await?;
        Ok(node)
    }

    async fn start_all(&mut self, binaries: &NodeBinaries, programs: &Programs) -> Result<(), Error> {
        let netns = self.netns.as_ref().expect("created before start_all");
        let credentials = Credentials::generate(&self.dir)?;
        let client_port = forward::start(&self.dir, netns, programs, &mut self.processes)?;
        let env = TestEnv::start_with(control_plane_options(netns, &credentials, client_port)).await?;
        let components = Components {
            dir: &self.dir,
            netns,
            binaries,
            credentials: &credentials,
            ca: env.ca_path(),
            service_account_key: env.service_account_key_path(),
        };
        self.env = Some(env);
        self.containerd.start(netns, programs, &mut self.processes).await?;
        self.containerd.import(&image::pause(&self.dir, programs)?)?;
        self.containerd.import(&image::busybox(&self.dir, programs)?)?;
        self.processes
            .start("kube-controller-manager", components.controller_manager()?)?;
        self.processes.start("kube-scheduler", components.scheduler()?)?;
        self.processes
            .start("kubelet", components.kubelet(self.containerd.socket())?)?;
        self.processes.start("kube-proxy", components.kube_proxy()?)?;
        self.wait_ready().await
    }

    /// Polls the Node until its Ready condition is True.
    async fn wait_ready(&mut self) -> Result<(), Error> {
        let nodes: Api<Node> = Api::all(self.client());
        let started = Instant::now();
        loop {
            self.processes.check_running()?;
            let ready = nodes.get_opt(NODE_NAME).await?.is_some_and(|node| {
                node.status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            });
            if ready {
                return Ok(());
            }
            if started.elapsed() > READY_TIMEOUT {
                return Err(Error::Timeout {
                    what: format!("node {NODE_NAME} Ready"),
                    seconds: READY_TIMEOUT.as_secs(),
                    details: format!("last kubelet log lines:\n{}", self.processes.log_tail("kubelet")),
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The control plane: clients, kubeconfig, namespaces.
    pub fn env(&self) -> &TestEnv {
        self.env.as_ref().expect("the control plane runs while the node does")
    }

    /// A new admin client (see [`TestEnv::client`]).
    pub fn client(&self) -> Client {
        self.env().client()
    }

    /// The Node's name.
    pub fn node_name(&self) -> &'static str {
        NODE_NAME
    }

    /// A fresh namespace whose `default` ServiceAccount exists, so pods
    /// created in it are admitted at once.
    pub async fn namespace(&self, hint: &str) -> Result<TestNamespace, Error> {
        let namespace = self.env().namespace(hint).await;
        let accounts: Api<ServiceAccount> = namespace.api();
        let started = Instant::now();
        while accounts.get_opt("default").await?.is_none() {
            if started.elapsed() > READY_TIMEOUT {
                return Err(Error::Timeout {
                    what: format!("ServiceAccount default in {}", namespace.name()),
                    seconds: READY_TIMEOUT.as_secs(),
                    details: self.processes.log_tail("kube-controller-manager"),
                });
            }
            tokio::time::sleep(POLL).await;
        }
        Ok(namespace)
    }

    /// Builds [`crate::CURL_IMAGE`] from the host's curl and imports it;
    /// returns its name. Only the tests that scrape need curl installed.
    pub fn import_curl_image(&self) -> Result<&'static str, Error> {
        let programs = Programs::locate()?;
        self.containerd.import(&image::curl(&self.dir, &programs)?)?;
        Ok(crate::CURL_IMAGE)
    }

    /// Builds [`crate::VIRSH_IMAGE`] from the host's virsh and imports it;
    /// returns its name.
    pub fn import_virsh_image(&self) -> Result<&'static str, Error> {
        let programs = Programs::locate()?;
        self.containerd.import(&image::virsh(&self.dir, &programs)?)?;
        Ok(crate::VIRSH_IMAGE)
    }

    /// Imports an OCI image archive (e.g. the operator's) for pods with
    /// `imagePullPolicy: Never`.
    pub fn import_image(&self, archive: &Path) -> Result<(), Error> {
        self.containerd.import(archive)
    }

    /// Makes a service listening on the test's `127.0.0.1:<port>` (a peer
    /// of the operator: the vrouter-daemon server, a Proxmox API) reachable
    /// from pods at the returned `NODE_IP:port`, an address inside the
    /// node's namespace only. Fails, naming the port, when nothing listens
    /// there within seconds (the port is taken inside the namespace).
    pub fn expose(&mut self, port: u16) -> Result<String, Error> {
        let netns = self.netns.as_ref().expect("a started node has its namespace");
        let programs = Programs::locate()?;
        forward::expose(&self.dir, netns, &programs, &mut self.processes, port)
    }

    /// The host process id of a running container, from the
    /// `containerID` of its pod status.
    pub fn container_pid(&self, container_id: &str) -> Result<u32, Error> {
        self.containerd.task_pid(container_id)
    }

    /// SIGKILLs a running container's main process from the host, as a
    /// crash would end it (`containerID` of its pod status); the kubelet
    /// decides what follows.
    pub fn kill_container(&self, container_id: &str) -> Result<(), Error> {
        let pid = self.container_pid(container_id)?;
        run(Command::new(&Programs::locate()?.kill).args(["-9", &pid.to_string()]))?;
        Ok(())
    }

    /// Polls `check` every half second until it gives a value.
    ///
    /// # Panics
    /// After [`WAIT_TIMEOUT`], naming `what`, with the kubelet's last log
    /// lines.
    pub async fn until<T, F, Fut>(&self, what: &str, mut check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        let started = Instant::now();
        loop {
            if let Some(value) = check().await {
                return value;
            }
            assert!(
                started.elapsed() < WAIT_TIMEOUT,
                "{what}: not within {WAIT_TIMEOUT:?}; last kubelet log lines:\n{}",
                self.log_tail("kubelet")
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// The last lines a component logged (`kubelet`, `containerd`, …).
    pub fn log_tail(&self, component: &str) -> String {
        self.processes.log_tail(component)
    }

    /// The node's working directory (configuration, state, logs).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Stops everything, the kubelet first so it restarts nothing, and
    /// undoes what the node changed on the host.
    fn teardown(&mut self) {
        self.processes.stop("kube-proxy");
        self.processes.stop("kubelet");
        self.host.kill_pod_processes();
        self.processes.stop("containerd");
        self.containerd.kill_shims();
        self.processes.stop("kube-scheduler");
        self.processes.stop("kube-controller-manager");
        self.env = None;
        self.processes.stop_all();
        unmount_under(&self.dir);
        self.netns = None;
        self.host.restore();
        let _ = fs::remove_dir_all(&self.dir);
        self.processes.release_watchdog();
    }
}

impl Drop for TestNode {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// The control plane inside the namespace, served on all its addresses
/// (the kubelet and kube-proxy dial its loopback, pods its node IP through
/// the `kubernetes` Service), reached by the test through the forwarder.
fn control_plane_options(netns: &NetNs, credentials: &Credentials, client_port: u16) -> Options {
    let mut extra_names = vec![
        NODE_IP.to_owned(),
        vrouter_test_apiserver::KUBERNETES_SERVICE_IP.to_owned(),
    ];
    for suffix in ["", ".default", ".default.svc", ".default.svc.cluster.local"] {
        extra_names.push(format!("kubernetes{suffix}"));
    }
    Options {
        command_prefix: netns.prefix(),
        serving: Some(Serving {
            bind_address: "0.0.0.0".to_owned(),
            advertise_address: NODE_IP.to_owned(),
            secure_port: APISERVER_PORT,
            client_port,
            extra_names,
        }),
        nodes: Some(NodeAccess {
            tokens: credentials.tokens(),
            kubelet_client_cert: credentials.kubelet_client_cert.clone(),
            kubelet_client_key: credentials.kubelet_client_key.clone(),
        }),
        ..Options::default()
    }
}
