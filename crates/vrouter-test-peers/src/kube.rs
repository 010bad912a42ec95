//! An in-process Kubernetes API for the KubeVirt provider, on plain HTTP at
//! 127.0.0.1: `GET` of a VirtualMachineInstance, `LIST` of pods by label,
//! and pods/exec over the websocket channel subprotocol
//! (`v5.channel.k8s.io`/`v4.channel.k8s.io`, what kube-rs asks for), with
//! stdin (channel 0, closed by a `v5` close frame or the end of the stream),
//! stdout, stderr and the status channel.
//!
//! A launcher pod's `compute` container is one of two things:
//! - a real libvirtd ([`FakeKubeApi::put_libvirt_launcher_pod`]): the exec
//!   runs the real `virsh` with exactly the argv the client sent, in the
//!   daemon's mount namespace and with the pod's `LIBVIRT_DEFAULT_URI`, and
//!   its stdout, stderr and exit code travel back as the kubelet sends them;
//! - for the fast tests, a `qemu-ga -m unix-listen` socket, where the fake
//!   plays virsh: the JSON goes to the agent, the reply is printed on stdout
//!   with exit 0, an agent error is printed as `error: internal error:
//!   unable to execute QEMU agent command '<cmd>': <desc>` on stderr with
//!   exit 1. A domain other than the pod's `<namespace>_<vmi>` or a pod
//!   without an agent fail as virsh would.
//!
//! In front of a real API server ([`FakeKubeApi::start_in_front_of`]) it is
//! the whole API to a process that has only a kubeconfig (the released
//! operator binary): what KubeVirt adds is served here, every other request
//! goes on to the real server.

mod forward;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use http::{Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::{Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, UnixStream};
use tokio::task::JoinHandle;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;

use crate::http_util::{parse_query, query_value, response};
use crate::vm::Libvirt;

/// One exec the fake carried out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecSeen {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    pub command: Vec<String>,
    /// The request's path and query as the API server would log them.
    pub uri: String,
    /// What the client sent on stdin so far: each chunk is recorded before
    /// the command reads it.
    pub stdin: Vec<u8>,
}

struct LauncherPod {
    pod: Pod,
    compute: Compute,
}

/// What runs in a launcher pod's `compute` container.
#[derive(Clone)]
enum Compute {
    /// A unix-listen qemu-ga (or none), with virsh played by the fake.
    Agent(Option<PathBuf>),
    /// A real libvirtd; execs run real programs in its container.
    Libvirt {
        libvirt: Arc<Libvirt>,
        default_uri: Option<String>,
    },
}

#[derive(Default)]
struct State {
    vmis: Mutex<HashMap<(String, String), Value>>,
    /// Where VMIs are read instead of `vmis`: a real API server.
    vmi_source: Option<kube::Client>,
    /// `(namespace, name, resourceVersion)` of each VMI read from it.
    vmi_reads: Mutex<Vec<(String, String, String)>>,
    pods: Mutex<Vec<LauncherPod>>,
    execs: Mutex<Vec<ExecSeen>>,
    /// One agent connection at a time per socket, as qemu-ga serves them.
    agent_locks: Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>,
    /// Where requests for anything but KubeVirt's objects go.
    upstream: Option<kube::Client>,
    /// Apply dispatches whose exec stream is to be cut before their answer.
    lost_apply_answers: AtomicUsize,
}

/// The fake API server; stops when dropped.
pub struct FakeKubeApi {
    addr: SocketAddr,
    state: Arc<State>,
    task: JoinHandle<()>,
}

impl Drop for FakeKubeApi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeKubeApi {
    pub async fn start() -> Self {
        Self::start_with(State::default()).await
    }

    /// A fake whose VMI reads go to `api_server` (a real one, where the
    /// operator watches the same VMIs): their uid, creation time and status
    /// are the API server's. Launcher pods and exec stay the fake's, and
    /// `put_vmi`/`remove_vmi` have no effect on what it serves.
    pub async fn start_with_vmis_from(api_server: kube::Client) -> Self {
        Self::start_with(State {
            vmi_source: Some(api_server),
            ..State::default()
        })
        .await
    }

    /// The fake in front of `api_server`: VMIs (as [`FakeKubeApi::put_vmi`]
    /// puts them), launcher pods and pods/exec are served here, every other
    /// request is sent on to `api_server` with its credentials, and its
    /// answer streamed back (watches included). A kubeconfig naming
    /// [`FakeKubeApi::url`] is then all a process needs.
    pub async fn start_in_front_of(api_server: kube::Client) -> Self {
        Self::start_with(State {
            upstream: Some(api_server),
            ..State::default()
        })
        .await
    }

    /// The next `count` apply dispatches (a `guest-exec` of the staged
    /// script) run in the guest, and then their exec stream is cut before
    /// any output or exit status goes back, as when the connection to the
    /// kubelet breaks: the guest started the script, its answer is lost.
    pub fn lose_apply_answers(&self, count: usize) {
        self.state.lost_apply_answers.store(count, Ordering::SeqCst);
    }

    /// How many of the answers [`FakeKubeApi::lose_apply_answers`] asked
    /// for are still to be lost.
    pub fn apply_answers_to_lose(&self) -> usize {
        self.state.lost_apply_answers.load(Ordering::SeqCst)
    }

    async fn start_with(state: State) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a loopback port");
        let addr = listener.local_addr().expect("local address");
        let state = Arc::new(state);
        let shared = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let state = shared.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| {
                        let state = state.clone();
                        async move { Ok::<_, std::convert::Infallible>(route(state, req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), service)
                        .with_upgrades()
                        .await;
                });
            }
        });
        FakeKubeApi { addr, state, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kube client talking to this server.
    pub fn client(&self) -> kube::Client {
        let config = kube::Config::new(self.url().parse().expect("a valid URL"));
        kube::Client::try_from(config).expect("a kube client for the fake API")
    }

    /// Creates or replaces a VMI.
    pub fn put_vmi(&self, namespace: &str, name: &str, uid: &str, phase: &str, node: &str) {
        let vmi = json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": name, "namespace": namespace, "uid": uid, "resourceVersion": "1"},
            "status": {"phase": phase, "nodeName": node},
        });
        self.state
            .vmis
            .lock()
            .unwrap()
            .insert((namespace.into(), name.into()), vmi);
    }

    pub fn remove_vmi(&self, namespace: &str, name: &str) {
        self.state
            .vmis
            .lock()
            .unwrap()
            .remove(&(namespace.to_string(), name.to_string()));
    }

    /// Adds a virt-launcher pod for VMI `vmi` (uid `vmi_uid`) on `node`;
    /// `agent_socket` is the qemu-ga its virsh reaches (`None`: no agent).
    /// Each virsh call opens its own agent connection, so the agent must not
    /// be held by another client (such as a `FakeProxmox`) at the same time.
    #[allow(clippy::too_many_arguments)]
    pub fn put_launcher_pod(
        &self,
        namespace: &str,
        pod: &str,
        vmi: &str,
        vmi_uid: &str,
        node: &str,
        phase: &str,
        agent_socket: Option<PathBuf>,
    ) {
        self.put_pod(namespace, pod, vmi, vmi_uid, node, phase, Compute::Agent(agent_socket));
    }

    /// Adds a virt-launcher pod whose `compute` container is `libvirt`'s:
    /// execs run the real programs there, `virsh` with
    /// `LIBVIRT_DEFAULT_URI=default_uri` when given (KubeVirt sets it for
    /// non-root launchers) or its own default (`qemu:///system` as root).
    /// The VMI's domain must be named `<namespace>_<vmi>`.
    #[allow(clippy::too_many_arguments)]
    pub fn put_libvirt_launcher_pod(
        &self,
        namespace: &str,
        pod: &str,
        vmi: &str,
        vmi_uid: &str,
        node: &str,
        libvirt: Arc<Libvirt>,
        default_uri: Option<&str>,
    ) {
        let compute = Compute::Libvirt {
            libvirt,
            default_uri: default_uri.map(str::to_owned),
        };
        self.put_pod(namespace, pod, vmi, vmi_uid, node, "Running", compute);
    }

    #[allow(clippy::too_many_arguments)]
    fn put_pod(&self, namespace: &str, pod: &str, vmi: &str, vmi_uid: &str, node: &str, phase: &str, compute: Compute) {
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some(pod.into()),
                namespace: Some(namespace.into()),
                labels: Some(
                    [
                        ("kubevirt.io".to_string(), "virt-launcher".to_string()),
                        ("vm.kubevirt.io/name".to_string(), vmi.to_string()),
                        ("kubevirt.io/created-by".to_string(), vmi_uid.to_string()),
                    ]
                    .into(),
                ),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some(node.into()),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some(phase.into()),
                ..Default::default()
            }),
        };
        let mut pods = self.state.pods.lock().unwrap();
        pods.retain(|p| p.pod.metadata.name != pod.metadata.name || p.pod.metadata.namespace != pod.metadata.namespace);
        pods.push(LauncherPod { pod, compute });
    }

    /// Whether a client read VMI `namespace/name` at `resource_version`
    /// through this fake (with [`FakeKubeApi::start_with_vmis_from`]).
    pub fn served_vmi(&self, namespace: &str, name: &str, resource_version: &str) -> bool {
        self.state
            .vmi_reads
            .lock()
            .unwrap()
            .iter()
            .any(|(ns, n, v)| ns == namespace && n == name && v == resource_version)
    }

    /// Every exec carried out so far.
    pub fn execs(&self) -> Vec<ExecSeen> {
        self.state.execs.lock().unwrap().clone()
    }
}

type Answer = Response<Full<Bytes>>;

fn status(code: u16, reason: &str, message: &str) -> Answer {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code,
    });
    response(
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        None,
        "application/json",
        body.to_string().into_bytes(),
    )
}

fn json_ok(value: &Value) -> Answer {
    response(StatusCode::OK, None, "application/json", value.to_string().into_bytes())
}

/// The fake's own answer, or the upstream's for what the fake does not serve.
async fn route(state: Arc<State>, req: Request<Incoming>) -> forward::Streamed {
    if let Some(upstream) = &state.upstream
        && !served_here(req.uri().path())
    {
        return forward::send(upstream, req).await;
    }
    forward::whole(handle(state, req).await)
}

/// Whether `path` is one the fake answers itself (see [`handle`]).
fn served_here(path: &str) -> bool {
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    matches!(
        segs.as_slice(),
        [
            "apis",
            "kubevirt.io",
            "v1",
            "namespaces",
            _,
            "virtualmachineinstances",
            _
        ] | ["api", "v1", "namespaces", _, "pods"]
            | ["api", "v1", "namespaces", _, "pods", _, "exec"]
    )
}

async fn handle(state: Arc<State>, req: Request<Incoming>) -> Answer {
    let path = req.uri().path().to_string();
    let query = parse_query(req.uri().query().unwrap_or(""));
    let segments: Vec<String> = path.trim_start_matches('/').split('/').map(str::to_string).collect();
    let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
    match segs.as_slice() {
        [
            "apis",
            "kubevirt.io",
            "v1",
            "namespaces",
            ns,
            "virtualmachineinstances",
            name,
        ] => {
            if let Some(api_server) = &state.vmi_source {
                return vmi_from(&state, api_server, ns, name).await;
            }
            let vmi = state
                .vmis
                .lock()
                .unwrap()
                .get(&(ns.to_string(), name.to_string()))
                .cloned();
            match vmi {
                Some(v) => json_ok(&v),
                None => status(
                    404,
                    "NotFound",
                    &format!("virtualmachineinstances.kubevirt.io \"{name}\" not found"),
                ),
            }
        }
        ["api", "v1", "namespaces", ns, "pods"] => {
            let selector = query_value(&query, "labelSelector").unwrap_or_default();
            let wanted: Vec<(String, String)> = selector
                .split(',')
                .filter(|s| !s.is_empty())
                .filter_map(|s| s.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
                .collect();
            let pods = state.pods.lock().unwrap();
            let items: Vec<&Pod> = pods
                .iter()
                .map(|p| &p.pod)
                .filter(|p| p.metadata.namespace.as_deref() == Some(*ns))
                .filter(|p| {
                    let labels = p.metadata.labels.clone().unwrap_or_default();
                    wanted.iter().all(|(k, v)| labels.get(k) == Some(v))
                })
                .collect();
            json_ok(
                &json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "1"}, "items": items}),
            )
        }
        ["api", "v1", "namespaces", ns, "pods", pod, "exec"] => exec(state, req, ns, pod, &query).await,
        _ => status(
            404,
            "NotFound",
            &format!("the server could not find the requested resource ({path})"),
        ),
    }
}

/// A VMI as the real API server has it, or its answer when it has none.
async fn vmi_from(state: &State, api_server: &kube::Client, ns: &str, name: &str) -> Answer {
    let resource = kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
        "kubevirt.io",
        "v1",
        "VirtualMachineInstance",
    ));
    let vmis: kube::Api<kube::core::DynamicObject> = kube::Api::namespaced_with(api_server.clone(), ns, &resource);
    match vmis.get(name).await {
        Ok(vmi) => {
            let version = vmi.metadata.resource_version.clone().unwrap_or_default();
            state.vmi_reads.lock().unwrap().push((ns.into(), name.into(), version));
            json_ok(&serde_json::to_value(vmi).expect("a VMI serialises"))
        }
        Err(kube::Error::Api(e)) => status(e.code, &e.reason, &e.message),
        Err(e) => status(502, "BadGateway", &format!("reading the VMI from the API server: {e}")),
    }
}

impl State {
    /// Records an exec; its index in `execs`.
    fn record_exec(&self, exec: ExecSeen) -> usize {
        let mut execs = self.execs.lock().unwrap();
        execs.push(exec);
        execs.len() - 1
    }

    /// Whether the answer to exec `seen` is to be lost: it dispatched an
    /// apply (its stdin asked for `guest-exec` of a staged script) while
    /// [`FakeKubeApi::lose_apply_answers`] asks for losses.
    fn loses_the_answer_to(&self, seen: usize) -> bool {
        let dispatched_an_apply = self.execs.lock().unwrap().get(seen).is_some_and(|exec| {
            let stdin = String::from_utf8_lossy(&exec.stdin);
            stdin.contains("\"guest-exec\"") && stdin.contains(".staged\"")
        });
        dispatched_an_apply
            && self
                .lost_apply_answers
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
    }

    /// The lock that keeps one agent's commands apart, as virsh does.
    fn agent_lock(&self, compute: &Compute) -> Option<Arc<tokio::sync::Mutex<()>>> {
        let Compute::Agent(Some(socket)) = compute else {
            return None;
        };
        Some(
            self.agent_locks
                .lock()
                .unwrap()
                .entry(socket.clone())
                .or_default()
                .clone(),
        )
    }
}

async fn exec(
    state: Arc<State>,
    req: Request<Incoming>,
    ns: &str,
    pod_name: &str,
    query: &[(String, String)],
) -> Answer {
    let container = query_value(query, "container").unwrap_or_default();
    let command: Vec<String> = query
        .iter()
        .filter(|(k, _)| k == "command")
        .map(|(_, v)| v.clone())
        .collect();
    let Some((vmi_name, compute)) = launcher(&state, ns, pod_name) else {
        return status(404, "NotFound", &format!("pods \"{pod_name}\" not found"));
    };
    if container != "compute" {
        return status(
            400,
            "BadRequest",
            &format!("container {container} is not valid for pod {pod_name}"),
        );
    }
    let seen = state.record_exec(ExecSeen {
        namespace: ns.into(),
        pod: pod_name.into(),
        container,
        command: command.clone(),
        uri: req.uri().to_string(),
        stdin: Vec::new(),
    });
    let Some(key) = req.headers().get(header::SEC_WEBSOCKET_KEY).cloned() else {
        return status(400, "BadRequest", "exec needs a websocket upgrade");
    };
    let offered = req
        .headers()
        .get(header::SEC_WEBSOCKET_PROTOCOL)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let Some(protocol) = ["v5.channel.k8s.io", "v4.channel.k8s.io"]
        .into_iter()
        .find(|p| offered.split(',').any(|o| o.trim() == *p))
    else {
        return status(400, "BadRequest", "no supported channel subprotocol offered");
    };
    let agent_lock = state.agent_lock(&compute);
    let domain = format!("{ns}_{vmi_name}");
    tokio::spawn(async move {
        let Ok(upgraded) = hyper::upgrade::on(req).await else {
            return;
        };
        let ws = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
        let (ws, from_client) = ws.split();
        // Each stdin chunk is recorded as it arrives, before the command
        // sees it: by the time an answer goes out, what it answered is in
        // the record.
        let recorder = state.clone();
        let (stdin, pump) = Stdin::pump(from_client, move |bytes| {
            if let Some(exec) = recorder.execs.lock().unwrap().get_mut(seen) {
                exec.stdin.extend_from_slice(bytes);
            }
        });
        let (stdout, stderr, code) = match compute {
            Compute::Agent(socket) => run_virsh(&command, &domain, socket, agent_lock, stdin).await,
            Compute::Libvirt { libvirt, default_uri } => run_in_container(&libvirt, &command, default_uri, stdin).await,
        };
        if state.loses_the_answer_to(seen) {
            // Both halves of the websocket go: the connection closes with
            // nothing sent, no close frame, no status.
            pump.abort();
            drop(ws);
            return;
        }
        send_exec_result(ws, &stdout, &stderr, code).await;
    });
    switching_protocols(key.as_bytes(), protocol)
}

/// The answer that turns an exec request into a websocket speaking `protocol`.
fn switching_protocols(key: &[u8], protocol: &str) -> Answer {
    let mut resp = response(StatusCode::SWITCHING_PROTOCOLS, None, "text/plain", Vec::new());
    let headers = resp.headers_mut();
    headers.insert(header::UPGRADE, "websocket".parse().unwrap());
    headers.insert(header::CONNECTION, "Upgrade".parse().unwrap());
    headers.insert(header::SEC_WEBSOCKET_ACCEPT, derive_accept_key(key).parse().unwrap());
    headers.insert(header::SEC_WEBSOCKET_PROTOCOL, protocol.parse().unwrap());
    headers.remove(header::CONTENT_TYPE);
    resp
}

/// The exec's stdin as the container sees it: the bytes of channel 0 in
/// order, ending when the client closes it (a `v5` close frame for channel
/// 0) or the stream.
struct Stdin(tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>);

impl Stdin {
    /// Reads the client's frames until the stream ends, handing each stdin
    /// chunk to `record` before the command can read it; the reader's
    /// handle aborts it (and drops its half of the stream).
    fn pump<S>(mut from_client: S, mut record: impl FnMut(&[u8]) + Send + 'static) -> (Stdin, tokio::task::AbortHandle)
    where
        S: futures::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin + Send + 'static,
    {
        let (data, stdin) = tokio::sync::mpsc::unbounded_channel();
        let reader = tokio::spawn(async move {
            let mut data = Some(data);
            while let Some(Ok(message)) = from_client.next().await {
                let Message::Binary(frame) = message else { continue };
                match frame.split_first() {
                    Some((0, bytes)) => {
                        record(bytes);
                        if let Some(data) = &data {
                            let _ = data.send(bytes.to_vec());
                        }
                    }
                    // v5: the client closed channel 0.
                    Some((255, [0])) => data = None,
                    _ => {}
                }
            }
        });
        (Stdin(stdin), reader.abort_handle())
    }

    /// The next chunk, `None` once stdin is closed.
    async fn next(&mut self) -> Option<Vec<u8>> {
        self.0.recv().await
    }

    /// Everything up to the first newline (without it), or to the close.
    async fn line(&mut self) -> Option<Vec<u8>> {
        let mut line = Vec::new();
        loop {
            match self.next().await {
                Some(chunk) => {
                    if let Some(end) = chunk.iter().position(|b| *b == b'\n') {
                        line.extend_from_slice(&chunk[..end]);
                        return Some(line);
                    }
                    line.extend_from_slice(&chunk);
                }
                None if line.is_empty() => return None,
                None => return Some(line),
            }
        }
    }
}

/// Runs `command` as sent in the libvirt container, its stdin fed from the
/// exec's: (stdout, stderr, exit code), as the kubelet reports them.
async fn run_in_container(
    libvirt: &Libvirt,
    command: &[String],
    default_uri: Option<String>,
    mut stdin: Stdin,
) -> (Vec<u8>, Vec<u8>, i32) {
    if command.is_empty() {
        return (Vec::new(), b"exec: no command\n".to_vec(), 127);
    }
    let argv = libvirt.in_container(command);
    let mut process = tokio::process::Command::new(&argv[0]);
    process
        .args(&argv[1..])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    match default_uri {
        Some(uri) => process.env("LIBVIRT_DEFAULT_URI", uri),
        None => process.env_remove("LIBVIRT_DEFAULT_URI"),
    };
    let mut child = match process.spawn() {
        Ok(child) => child,
        Err(e) => return (Vec::new(), format!("exec: {e}\n").into_bytes(), 127),
    };
    let mut to_child = child.stdin.take();
    let feed = async move {
        while let Some(chunk) = stdin.next().await {
            let Some(pipe) = to_child.as_mut() else { break };
            if pipe.write_all(&chunk).await.is_err() {
                break;
            }
        }
        // Closing the pipe is the process's end of file.
        drop(to_child);
    };
    // As the kubelet: the exec ends when the process does, whether or not
    // the client has closed stdin (one that keeps it open until the status
    // arrives would otherwise wait forever).
    let feeding = tokio::spawn(feed);
    let output = child.wait_with_output().await;
    feeding.abort();
    match output {
        Ok(output) => (output.stdout, output.stderr, output.status.code().unwrap_or(128)),
        Err(e) => (Vec::new(), format!("exec: {e}\n").into_bytes(), 127),
    }
}

/// The VMI a launcher pod runs and what its `compute` container reaches.
fn launcher(state: &State, ns: &str, pod_name: &str) -> Option<(String, Compute)> {
    let pods = state.pods.lock().unwrap();
    let found = pods.iter().find(|p| {
        p.pod.metadata.namespace.as_deref() == Some(ns) && p.pod.metadata.name.as_deref() == Some(pod_name)
    })?;
    let vmi = found
        .pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("vm.kubevirt.io/name"))
        .cloned()
        .unwrap_or_default();
    Some((vmi, found.compute.clone()))
}

/// Sends a finished command's output and exit status over the exec
/// websocket as the kubelet does (channel 1 stdout, 2 stderr, 3 status).
async fn send_exec_result<W>(mut ws: W, stdout: &[u8], stderr: &[u8], code: i32)
where
    W: futures::Sink<Message> + Unpin,
{
    // The kubelet streams output as it comes, in frames far below a
    // websocket client's frame limit (16 MiB in tungstenite): one frame per
    // 1 MiB keeps a long output deliverable as it would be.
    const FRAME: usize = 1024 * 1024;
    let mut frames = Vec::new();
    for chunk in stdout.chunks(FRAME) {
        frames.push([&[1u8][..], chunk].concat());
    }
    for chunk in stderr.chunks(FRAME) {
        frames.push([&[2u8][..], chunk].concat());
    }
    let status = if code == 0 {
        json!({"metadata": {}, "status": "Success"})
    } else {
        json!({"metadata": {}, "status": "Failure",
            "message": format!("command terminated with non-zero exit code: exit status {code}"),
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]}})
    };
    frames.push([&[3u8][..], status.to_string().as_bytes()].concat());
    for frame in frames {
        if ws.send(Message::binary(frame)).await.is_err() {
            return;
        }
    }
    // The stdin pump reads on until the client closes too.
    let _ = ws.close().await;
}

/// Whether `command` is `sh -c SCRIPT NAME DOMAIN` with a SCRIPT that
/// reads the agent command from a line of stdin and runs virsh with it.
fn agent_command_from_stdin(command: &[String]) -> Option<&str> {
    let [shell, dash_c, script, _name, domain] = command else {
        return None;
    };
    let reads_a_line = script.starts_with("IFS= read -r command ")
        && script.ends_with("exec virsh qemu-agent-command \"$1\" \"$command\"");
    (shell.ends_with("/sh") && dash_c == "-c" && reads_a_line).then_some(domain.as_str())
}

/// `virsh qemu-agent-command DOMAIN JSON`, or the same with the JSON read
/// from a line of stdin by a shell: (stdout, stderr, exit code).
async fn run_virsh(
    command: &[String],
    domain: &str,
    socket: Option<PathBuf>,
    lock: Option<Arc<tokio::sync::Mutex<()>>>,
    mut stdin: Stdin,
) -> (Vec<u8>, Vec<u8>, i32) {
    let fail = |msg: String| (Vec::new(), format!("error: {msg}\n").into_bytes(), 1);
    let from_stdin;
    let (asked_domain, json) = match (agent_command_from_stdin(command), command) {
        (Some(asked_domain), _) => {
            let Some(line) = stdin.line().await else {
                return fail("no agent command arrived on stdin".into());
            };
            from_stdin = String::from_utf8_lossy(&line).into_owned();
            (asked_domain, &from_stdin)
        }
        (None, [virsh, sub, asked_domain, json]) if virsh == "virsh" && sub == "qemu-agent-command" => {
            (asked_domain.as_str(), json)
        }
        (None, [program, ..]) => {
            return (
                Vec::new(),
                format!("exec: {program}: not supported by the fake\n").into_bytes(),
                127,
            );
        }
        (None, []) => return fail("no command".into()),
    };
    if asked_domain != domain {
        return fail(format!("failed to get domain '{asked_domain}'"));
    }
    let parsed: Value = match serde_json::from_str(json) {
        Ok(v) => v,
        Err(e) => return fail(format!("internal error: cannot parse json {json}: {e}")),
    };
    let execute = parsed.get("execute").and_then(Value::as_str).unwrap_or("").to_string();
    let (Some(socket), Some(lock)) = (socket, lock) else {
        return fail("Guest agent is not responding: QEMU guest agent is not connected".into());
    };
    let _guard = lock.lock().await;
    let reply = match agent_round_trip(&socket, json).await {
        Ok(r) => r,
        Err(e) => return fail(format!("Guest agent is not responding: {e}")),
    };
    let value: Value = serde_json::from_str(&reply).unwrap_or(Value::Null);
    if let Some(desc) = value.get("error").and_then(|e| e.get("desc")).and_then(Value::as_str) {
        return fail(format!(
            "internal error: unable to execute QEMU agent command '{execute}': {desc}"
        ));
    }
    (format!("{}\n", reply.trim_end()).into_bytes(), Vec::new(), 0)
}

async fn agent_round_trip(socket: &PathBuf, json: &str) -> std::io::Result<String> {
    let stream = UnixStream::connect(socket).await?;
    let (read, mut write) = stream.into_split();
    write.write_all(json.as_bytes()).await?;
    write.write_all(b"\n").await?;
    let mut line = String::new();
    BufReader::new(read).read_line(&mut line).await?;
    if line.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "the agent closed the connection",
        ));
    }
    Ok(line)
}
