//! The two processes, their data directory and the watchdog that removes them
//! when the test process goes away without dropping them.

use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom, Write};
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};

use crate::certs::Certs;
use crate::{Binaries, Error};

/// The service CIDR: only a label for ClusterIP allocation, except inside
/// a test node's network namespace, where kube-proxy routes it.
pub const SERVICE_CLUSTER_IP_RANGE: &str = "10.0.0.0/24";
/// The `kubernetes` Service's ClusterIP: the range's first address.
pub const KUBERNETES_SERVICE_IP: &str = "10.0.0.1";

/// How a control plane is started beyond the defaults.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Record every request in an audit log ([`AUDIT_LOG`] in the data
    /// directory): metadata for all, request bodies of writes except those
    /// that carry credentials (Secrets, ConfigMaps, tokens).
    pub audit: bool,
    /// Admission plugins to enable besides the API server's defaults, e.g.
    /// `OwnerReferencesPermissionEnforcement` (which some distributions
    /// turn on): it checks `update` on an owner's `finalizers` for every
    /// owner reference that blocks its owner's deletion.
    pub admission_plugins: Vec<String>,
    /// etcd's client port, when the test must know it before the start
    /// (to put a fault proxy in front of it); a free port otherwise.
    pub etcd_client_port: Option<u16>,
    /// The etcd URL the API server dials instead of etcd's own, e.g.
    /// `http://127.0.0.1:PORT` of a fault proxy forwarding to
    /// [`Options::etcd_client_port`].
    pub apiserver_etcd_url: Option<String>,
    /// Runs etcd and kube-apiserver through this command, e.g. `nsenter
    /// --net=/run/netns/NAME --`, so that they live in a network namespace
    /// the caller made; empty runs them directly.
    pub command_prefix: Vec<String>,
    /// Where the API server serves, when not on a free loopback port of
    /// the test's own network namespace.
    pub serving: Option<Serving>,
    /// Nodes join this cluster: see [`NodeAccess`].
    pub nodes: Option<NodeAccess>,
    /// Start with none of this operator's CRDs: the test installs whose it
    /// wants (the Go operator's, for the move from it). [`TestEnv::restart`]
    /// then waits for the API server alone.
    ///
    /// [`TestEnv::restart`]: crate::TestEnv::restart
    pub without_crds: bool,
    /// Turn off the admission plugins that call webhooks: the webhook
    /// configurations a test installs are stored but never called. For a
    /// cluster without nodes, where no pod could serve them, when the test
    /// is about the objects rather than their admission.
    pub without_webhook_admission: bool,
    /// `--runtime-config` entries, e.g.
    /// `admissionregistration.k8s.io/v1/validatingadmissionpolicies=false`
    /// to serve without an API that older Kubernetes versions lack.
    pub runtime_config: Vec<String>,
    /// Admission plugins to turn off besides those the harness turns off,
    /// e.g. `ValidatingAdmissionPolicy` with its API switched off by
    /// [`Options::runtime_config`] (the plugin cannot start without it).
    pub disabled_admission_plugins: Vec<String>,
}

/// The API server's addresses when it runs in a network namespace of the
/// caller's ([`Options::command_prefix`]) and the test reaches it through a
/// forwarder on a loopback port of its own.
#[derive(Clone, Debug)]
pub struct Serving {
    /// `--bind-address`, inside the namespace.
    pub bind_address: String,
    /// `--advertise-address`: the `kubernetes` Service's endpoint, which
    /// pods reach through kube-proxy.
    pub advertise_address: String,
    /// `--secure-port`, inside the namespace.
    pub secure_port: u16,
    /// The port on 127.0.0.1 of the test's namespace that forwards to the
    /// API server: what the kubeconfig names.
    pub client_port: u16,
    /// Names and addresses the serving certificate covers besides loopback
    /// (the advertised address, the Service IP, `kubernetes.default.svc`).
    pub extra_names: Vec<String>,
}

/// What a cluster with kubelets needs of its API server: `Node,RBAC`
/// authorization, the `ServiceAccount` and `NodeRestriction` admission
/// plugins, webhooks and aggregated APIs called on the endpoint (pod) IP,
/// and the kubelet dialled on its InternalIP.
#[derive(Clone, Debug)]
pub struct NodeAccess {
    /// Bearer tokens for the node's components (kubelet, controller
    /// manager, scheduler, kube-proxy), besides the admin's.
    pub tokens: Vec<StaticToken>,
    /// The client certificate and key (PEM files) the API server presents
    /// to kubelets (exec, logs), which their `clientCAFile` trusts.
    pub kubelet_client_cert: PathBuf,
    pub kubelet_client_key: PathBuf,
}

/// One line of the API server's `--token-auth-file`.
#[derive(Clone, Debug)]
pub struct StaticToken {
    pub token: String,
    pub user: String,
    pub groups: Vec<String>,
}

impl StaticToken {
    fn csv_line(&self) -> String {
        let line = format!("{},{},{}", self.token, self.user, self.user);
        if self.groups.is_empty() {
            format!("{line}\n")
        } else {
            format!("{line},\"{}\"\n", self.groups.join(","))
        }
    }
}

/// The CA certificate's file name in the data directory.
pub const CA_FILE: &str = "ca.crt";
/// The service-account signing key's file name in the data directory
/// (a controller manager signs tokens with it too).
pub const SERVICE_ACCOUNT_KEY_FILE: &str = "service-account.key";

/// The audit log's file name in the data directory.
pub const AUDIT_LOG: &str = "audit.log";

/// Metadata (who, what, which object, the answer) of every request, and the
/// body of writes, whose owner references RBAC checks need; never the body
/// of a request that may carry a credential.
const AUDIT_POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    resources:
      - group: ""
        resources: ["secrets", "configmaps", "serviceaccounts/token"]
      - group: "authentication.k8s.io"
        resources: ["tokenreviews"]
  - level: Request
    verbs: ["create", "update", "patch"]
  - level: Metadata
"#;

/// Runs `etcd` and `kube-apiserver`; stops them and removes the data directory on drop.
pub(crate) struct ControlPlane {
    dir: PathBuf,
    /// `None` only while starting or killed; a half-started plane is
    /// cleaned up by `Drop` too.
    etcd: Option<Child>,
    apiserver: Option<Child>,
    /// How each was started, to start it again on the same data and ports.
    launches: Vec<Launch>,
    apiserver_port: u16,
    etcd_url: String,
    /// [`Options::command_prefix`].
    prefix: Vec<String>,
    watchdog: Option<Watchdog>,
}

/// One process of the plane: its program, arguments and log file.
#[derive(Clone, Debug)]
struct Launch {
    name: &'static str,
    program: PathBuf,
    args: Vec<String>,
    log: &'static str,
}

/// The certificates, keys and token file the API server reads, written
/// into its data directory.
struct KeyFiles {
    apiserver_crt: PathBuf,
    apiserver_key: PathBuf,
    sa_key: PathBuf,
    sa_pub: PathBuf,
    tokens: PathBuf,
}

impl KeyFiles {
    fn write(dir: &Path, certs: &Certs, options: &Options) -> Result<KeyFiles, Error> {
        let mut tokens = format!(
            "{},vrouter-test-apiserver-admin,vrouter-test-apiserver-admin,system:masters\n",
            certs.admin_token
        );
        for token in options.nodes.iter().flat_map(|n| &n.tokens) {
            tokens.push_str(&token.csv_line());
        }
        let write = |name: &str, text: &str| -> Result<PathBuf, Error> {
            let path = dir.join(name);
            fs::write(&path, text).map_err(Error::io(format!("writing {}", path.display())))?;
            Ok(path)
        };
        // Not read by the API server: for the caller's node components.
        write(CA_FILE, &certs.ca_pem)?;
        Ok(KeyFiles {
            apiserver_crt: write("apiserver.crt", &certs.apiserver.cert_pem)?,
            apiserver_key: write("apiserver.key", &certs.apiserver.key_pem)?,
            sa_key: write(SERVICE_ACCOUNT_KEY_FILE, &certs.service_account_key_pem)?,
            sa_pub: write("service-account.pub", &certs.service_account_pub_pem)?,
            tokens: write("tokens.csv", &tokens)?,
        })
    }
}

/// The API server's arguments for what `options` turn on; writes the audit
/// policy into `dir` when auditing.
fn optional_apiserver_args(dir: &Path, options: &Options) -> Result<Vec<String>, Error> {
    let mut args = Vec::new();
    if options.audit {
        let policy = dir.join("audit-policy.yaml");
        fs::write(&policy, AUDIT_POLICY).map_err(Error::io(format!("writing {}", policy.display())))?;
        args.extend([
            format!("--audit-policy-file={}", policy.display()),
            format!("--audit-log-path={}", dir.join(AUDIT_LOG).display()),
            "--audit-log-format=json".to_owned(),
            // Written before the response, so a test that saw an answer
            // finds its request in the log.
            "--audit-log-mode=blocking".to_owned(),
            "--audit-log-maxbackup=0".to_owned(),
        ]);
    }
    let mut plugins = options.admission_plugins.clone();
    if options.nodes.is_some() {
        plugins.push("NodeRestriction".to_owned());
    }
    if !plugins.is_empty() {
        args.push(format!("--enable-admission-plugins={}", plugins.join(",")));
    }
    if !options.runtime_config.is_empty() {
        args.push(format!("--runtime-config={}", options.runtime_config.join(",")));
    }
    Ok(args)
}

/// Who may do what: RBAC alone, with no ServiceAccount admission (no
/// controller manager creates `default` ServiceAccounts); or, with nodes,
/// what a kubelet and its pods need.
fn access_args(options: &Options) -> Vec<String> {
    let Some(nodes) = &options.nodes else {
        let mut disabled = vec!["ServiceAccount"];
        if options.without_webhook_admission {
            disabled.extend(["MutatingAdmissionWebhook", "ValidatingAdmissionWebhook"]);
        }
        disabled.extend(options.disabled_admission_plugins.iter().map(String::as_str));
        return vec![
            "--authorization-mode=RBAC".to_owned(),
            format!("--disable-admission-plugins={}", disabled.join(",")),
        ];
    };
    let mut args = vec![
        "--authorization-mode=Node,RBAC".to_owned(),
        format!("--kubelet-client-certificate={}", nodes.kubelet_client_cert.display()),
        format!("--kubelet-client-key={}", nodes.kubelet_client_key.display()),
        "--kubelet-preferred-address-types=InternalIP".to_owned(),
        // Webhooks and aggregated APIs are called on the pod IP, which the
        // API server reaches inside the node's network namespace; the
        // Service IP exists only in kube-proxy's rules.
        "--enable-aggregator-routing=true".to_owned(),
    ];
    if !options.disabled_admission_plugins.is_empty() {
        args.push(format!(
            "--disable-admission-plugins={}",
            options.disabled_admission_plugins.join(",")
        ));
    }
    args
}

/// Where the API server listens and what it advertises.
fn serving_args(options: &Options, loopback_port: u16) -> Vec<String> {
    match &options.serving {
        None => vec![
            "--bind-address=127.0.0.1".to_owned(),
            "--advertise-address=127.0.0.1".to_owned(),
            format!("--secure-port={loopback_port}"),
            // Loopback may not back the `kubernetes` Service's endpoints.
            "--endpoint-reconciler-type=none".to_owned(),
        ],
        Some(serving) => vec![
            format!("--bind-address={}", serving.bind_address),
            format!("--advertise-address={}", serving.advertise_address),
            format!("--secure-port={}", serving.secure_port),
        ],
    }
}

/// etcd serving clients at `etcd_url`, its data in `dir`.
fn etcd_launch(binaries: &Binaries, dir: &Path, etcd_url: &str, peer_port: u16) -> Launch {
    let peer_url = format!("http://127.0.0.1:{peer_port}");
    Launch {
        name: "etcd",
        program: binaries.etcd.clone(),
        args: vec![
            "--name=testenv".to_owned(),
            format!("--data-dir={}", dir.join("etcd").display()),
            format!("--listen-client-urls={etcd_url}"),
            format!("--advertise-client-urls={etcd_url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster=testenv={peer_url}"),
            // The data is thrown away; fsync only costs time.
            "--unsafe-no-fsync".to_owned(),
            "--log-level=warn".to_owned(),
        ],
        log: "etcd.log",
    }
}

/// kube-apiserver on `port`, reaching etcd at `etcd_url`, with the key
/// material of `keys`.
fn apiserver_launch(binaries: &Binaries, dir: &Path, keys: &KeyFiles, etcd_url: &str, port: u16) -> Launch {
    Launch {
        name: "kube-apiserver",
        program: binaries.kube_apiserver.clone(),
        args: vec![
            format!("--etcd-servers={etcd_url}"),
            format!("--cert-dir={}", dir.join("apiserver-certs").display()),
            format!("--tls-cert-file={}", keys.apiserver_crt.display()),
            format!("--tls-private-key-file={}", keys.apiserver_key.display()),
            format!("--token-auth-file={}", keys.tokens.display()),
            format!("--service-account-issuer=https://127.0.0.1:{port}"),
            format!("--service-account-key-file={}", keys.sa_pub.display()),
            format!("--service-account-signing-key-file={}", keys.sa_key.display()),
            format!("--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}"),
            "--allow-privileged=true".to_owned(),
            "--enable-priority-and-fairness=false".to_owned(),
            "--profiling=false".to_owned(),
        ],
        log: "kube-apiserver.log",
    }
}

impl ControlPlane {
    /// Writes the key material into a new temporary directory and starts both
    /// processes on free loopback ports. Does not wait for readiness.
    pub fn spawn(binaries: &Binaries, certs: &Certs, options: &Options) -> Result<ControlPlane, Error> {
        let dir = tempfile::Builder::new()
            .prefix("vrouter-test-apiserver-")
            .tempdir()
            .map_err(Error::io("creating the testenv data directory"))?
            .keep();
        let watchdog = match Watchdog::spawn(&dir) {
            Ok(watchdog) => watchdog,
            Err(e) => {
                let _ = fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        // From here on, an early return drops `plane`, which cleans up.
        let mut plane = ControlPlane {
            dir,
            etcd: None,
            apiserver: None,
            launches: Vec::new(),
            apiserver_port: 0,
            etcd_url: String::new(),
            prefix: Vec::new(),
            watchdog: Some(watchdog),
        };
        let dir = plane.dir.clone();
        let keys = KeyFiles::write(&dir, certs, options)?;
        let [free_etcd_port, peer_port, apiserver_port] = free_ports()?;
        let etcd_port = options.etcd_client_port.unwrap_or(free_etcd_port);
        plane.apiserver_port = options.serving.as_ref().map_or(apiserver_port, |s| s.client_port);
        plane.prefix = options.command_prefix.clone();
        plane.etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let etcd = etcd_launch(binaries, &dir, &plane.etcd_url, peer_port);
        let apiserver_etcd_url = options.apiserver_etcd_url.as_deref().unwrap_or(&plane.etcd_url);
        let mut apiserver = apiserver_launch(binaries, &dir, &keys, apiserver_etcd_url, apiserver_port);
        apiserver.args.extend(serving_args(options, apiserver_port));
        apiserver.args.extend(access_args(options));
        apiserver.args.extend(optional_apiserver_args(&dir, options)?);
        plane.launches = vec![etcd, apiserver];
        plane.start_processes()?;
        Ok(plane)
    }

    /// Starts etcd, then the API server, as launched first (same data
    /// directory, same ports). Does not wait for readiness.
    fn start_processes(&mut self) -> Result<(), Error> {
        let [etcd, apiserver] = [self.launches[0].clone(), self.launches[1].clone()];
        self.etcd = Some(self.spawn_logged(&etcd)?);
        self.apiserver = Some(self.spawn_logged(&apiserver)?);
        Ok(())
    }

    /// Kills both processes with SIGKILL, as a node failure would stop
    /// them (no graceful shutdown, nothing flushed), and reaps them.
    pub fn kill(&mut self) {
        for child in [self.apiserver.take(), self.etcd.take()].into_iter().flatten() {
            kill_and_reap(child);
        }
    }

    /// After [`ControlPlane::kill`]: both processes again, on the data and
    /// ports they had. Does not wait for readiness.
    pub fn restart(&mut self) -> Result<(), Error> {
        self.kill();
        self.start_processes()
    }

    /// Starts `launch` in a process group of its own, output appended to its
    /// log in the data directory, and puts the group under the watchdog.
    fn spawn_logged(&mut self, launch: &Launch) -> Result<Child, Error> {
        let log = self.dir.join(launch.log);
        let out = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(Error::io(format!("opening {}", log.display())))?;
        let err = out
            .try_clone()
            .map_err(Error::io(format!("opening {}", log.display())))?;
        let mut command = match self.prefix.split_first() {
            None => Command::new(&launch.program),
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(&launch.program);
                command
            }
        };
        let child = command
            .args(&launch.args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            // Own group: a terminal's Ctrl-C reaches the test runner, not these,
            // and the watchdog can kill the group as a whole.
            .process_group(0)
            .spawn()
            .map_err(Error::io(format!(
                "starting {} ({})",
                launch.name,
                launch.program.display()
            )))?;
        let watchdog = self.watchdog.as_mut().expect("the watchdog lives as long as the plane");
        if let Err(e) = watchdog.guard_group(child.id()) {
            kill_and_reap(child);
            return Err(e);
        }
        Ok(child)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn apiserver_port(&self) -> u16 {
        self.apiserver_port
    }

    /// etcd's own client URL, `http://127.0.0.1:PORT`.
    pub fn etcd_url(&self) -> &str {
        &self.etcd_url
    }

    /// The process ids of etcd and kube-apiserver.
    pub fn pids(&self) -> (u32, u32) {
        let pid = |c: &Option<Child>| c.as_ref().map_or(0, Child::id);
        (pid(&self.etcd), pid(&self.apiserver))
    }

    /// Fails with the log tail when either process has exited.
    pub fn check_running(&mut self) -> Result<(), Error> {
        for (name, child, log) in [
            ("etcd", &mut self.etcd, "etcd.log"),
            ("kube-apiserver", &mut self.apiserver, "kube-apiserver.log"),
        ] {
            if let Some(Ok(Some(status))) = child.as_mut().map(Child::try_wait) {
                return Err(Error::ExitedEarly {
                    name,
                    status,
                    log_tail: log_tail(&self.dir.join(log)),
                });
            }
        }
        Ok(())
    }

    pub fn apiserver_log_tail(&self) -> String {
        log_tail(&self.dir.join("kube-apiserver.log"))
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        // The API server first, so it does not log a storm of etcd errors.
        self.kill();
        let _ = fs::remove_dir_all(&self.dir);
        if let Some(watchdog) = self.watchdog.take() {
            watchdog.release();
        }
    }
}

fn kill_and_reap(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Three distinct free loopback ports. They are free when returned, not
/// reserved: a start that loses a race for one is retried by the caller.
fn free_ports() -> Result<[u16; 3], Error> {
    let bind = || TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(Error::io("finding a free loopback port"));
    let listeners = [bind()?, bind()?, bind()?];
    let mut ports = [0u16; 3];
    for (port, listener) in ports.iter_mut().zip(&listeners) {
        *port = listener.local_addr().map_err(Error::io("reading a bound port"))?.port();
    }
    Ok(ports)
}

/// The last lines of a log file, for error messages.
fn log_tail(path: &Path) -> String {
    const TAIL_BYTES: u64 = 4096;
    let Ok(mut file) = File::open(path) else {
        return format!("(no log at {})", path.display());
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(TAIL_BYTES)));
    let mut bytes = Vec::new();
    let _ = file.read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(25)..].join("\n")
}

/// Kills the guarded process groups and removes the directory when its stdin
/// reaches end-of-file without a `release` line first — that is, when the test
/// process has gone away, however it ended. Arguments: `$1` the directory.
const WATCHDOG_SCRIPT: &str = r#"
dir=$1
groups=
while read -r word arg; do
    case $word in
        group) groups="$groups $arg" ;;
        release) exit 0 ;;
    esac
done
for g in $groups; do kill -9 -"$g" 2>/dev/null; done
n=0
while [ "$n" -lt 50 ]; do
    alive=
    for g in $groups; do kill -0 -"$g" 2>/dev/null && alive=1; done
    [ -z "$alive" ] && break
    sleep 0.1
    n=$((n + 1))
done
rm -rf -- "$dir"
"#;

/// The `sh` process running [`WATCHDOG_SCRIPT`]. Only this process holds the
/// pipe's write end (std opens pipes close-on-exec), so the children we start
/// later do not keep it open.
struct Watchdog {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Watchdog {
    fn spawn(dir: &Path) -> Result<Watchdog, Error> {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(WATCHDOG_SCRIPT)
            .arg("vrouter-test-apiserver-watchdog")
            .arg(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own group, so Ctrl-C on the test run leaves it alive to clean up.
            .process_group(0)
            .spawn()
            .map_err(Error::io("starting the testenv watchdog (sh)"))?;
        let stdin = child.stdin.take();
        Ok(Watchdog { child, stdin })
    }

    fn guard_group(&mut self, pgid: u32) -> Result<(), Error> {
        let stdin = self.stdin.as_mut().expect("stdin is held until release");
        writeln!(stdin, "group {pgid}")
            .and_then(|()| stdin.flush())
            .map_err(Error::io("registering a process group with the watchdog"))
    }

    /// Tells the watchdog the cleanup is done and waits for it to exit.
    fn release(mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = writeln!(stdin, "release");
        }
        let _ = self.child.wait();
    }
}
