//! An in-process Proxmox VE API: the endpoints the provider and the
//! ProxmoxCluster controller use, over HTTPS with a self-signed certificate,
//! with every `agent/*` call carried out against the VM's real `qemu-ga`
//! the way qemu-server does it ([`crate::qemu_server`]): a `guest-ping` to
//! check the agent, then the command, each on a connection of its own to
//! the VM's agent socket — a real guest's virtio-serial chardev, or a
//! `qemu-ga -m unix-listen` for the fast tests. A VM backed by a
//! [`QemuGuest`] reports the uptime of its QEMU process, as Proxmox VE does
//! (a reboot inside the guest keeps it).
//!
//! Behaviour follows Proxmox VE where it matters to a client: errors travel
//! in the HTTP reason phrase; a VM that is not on the node asked answers
//! `500 Configuration file 'nodes/N/qemu-server/ID.conf' does not exist`;
//! `file-write` caps `content` at 61 440 characters and always truncates;
//! agent output and file contents are sent as one character per byte.
//!
//! Several endpoints (listeners) can share one cluster state, for failover.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::Map;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

use crate::instant_guest::InstantGuest;
use crate::qemu_server::{self, COMMAND_TIMEOUT, PING_TIMEOUT, QgaSocket};
use crate::tls::ServerIdentity;
use crate::vm::QemuGuest;

use crate::http_util::{parse_query, query_value, response};

/// `agent/file-write`'s `content` limit.
pub const FILE_WRITE_MAX_CONTENT: usize = 60 * 1024;
/// The API server's POST body limit.
pub const MAX_POST_BODY: usize = 64 * 1024;
/// `agent/file-read`'s default read cap.
pub const MAX_READ_SIZE: usize = 16 * 1024 * 1024;

/// What answers a VM's agent calls.
#[derive(Clone)]
enum VmAgent {
    /// A real `qemu-ga`, reached on its socket.
    Socket(QgaSocket),
    /// A guest played in memory, for the scale benchmark only.
    Instant(Arc<InstantGuest>),
}

struct Vm {
    node: String,
    agent: Option<VmAgent>,
    running: bool,
    uptime: u64,
    /// A real guest: running and uptime come from its QEMU process.
    guest: Option<Arc<QemuGuest>>,
    stall_exec_status: bool,
}

impl Vm {
    fn running(&self) -> bool {
        match &self.guest {
            Some(guest) => self.running && guest.is_running(),
            None => self.running,
        }
    }

    fn uptime(&self) -> u64 {
        match &self.guest {
            Some(guest) => guest.process_uptime().as_secs(),
            None => self.uptime,
        }
    }
}

/// One request as the fake saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    /// Index of the endpoint (listener) that served it.
    pub endpoint: usize,
    pub method: String,
    /// Path without the query.
    pub path: String,
    pub authorized: bool,
}

struct State {
    auth_header: Mutex<String>,
    vms: Mutex<BTreeMap<i64, Vm>>,
    seen: Mutex<Vec<Seen>>,
    absent_status: AtomicU16,
    max_read: AtomicUsize,
    /// Large file-read answers wait here to go together (see
    /// [`FakeProxmox::gather_large_reads`]).
    large_reads: Mutex<Option<Gathering>>,
    /// `agent/file-read` answers of more than 1 MiB sent.
    large_answers: AtomicUsize,
    /// One turn per agent socket: the agent serves one connection at a time,
    /// so VMs sharing an agent (scale tests) take turns on it.
    agents: Mutex<HashMap<PathBuf, QgaSocket>>,
    /// Endpoints that read requests and never answer.
    stalled: Mutex<Vec<usize>>,
    /// TLS handshakes completed, on every endpoint: each is a connection a
    /// client opened (and pveproxy would have to set up).
    handshakes: AtomicUsize,
    /// The connections being served: a client keeps them open, so they
    /// close with the fake (as with a pveproxy that stops), not only its
    /// listeners.
    connections: Mutex<Vec<tokio::task::AbortHandle>>,
    /// How many more apply dispatches (`agent/exec` of the operator's apply
    /// wrapper) run in the guest but are answered with Proxmox's
    /// `got timeout` error instead of their pid.
    lost_apply_answers: AtomicUsize,
}

/// A fake Proxmox VE cluster; its listeners stop when it is dropped.
pub struct FakeProxmox {
    state: Arc<State>,
    endpoints: Vec<(SocketAddr, JoinHandle<()>)>,
    /// The certificate every endpoint presents; `None`: a fresh self-signed
    /// one each.
    identity: Option<ServerIdentity>,
}

impl Drop for FakeProxmox {
    fn drop(&mut self) {
        for (_, task) in &self.endpoints {
            task.abort();
        }
        for connection in self.state.connections.lock().unwrap().drain(..) {
            connection.abort();
        }
    }
}

impl FakeProxmox {
    /// A cluster accepting the token `token_id` / `token_secret`, with one endpoint.
    pub async fn start(token_id: &str, token_secret: &str) -> Self {
        Self::start_inner(token_id, token_secret, None).await
    }

    /// Like [`FakeProxmox::start`], every endpoint presenting `identity`.
    pub async fn start_with_identity(token_id: &str, token_secret: &str, identity: ServerIdentity) -> Self {
        Self::start_inner(token_id, token_secret, Some(identity)).await
    }

    async fn start_inner(token_id: &str, token_secret: &str, identity: Option<ServerIdentity>) -> Self {
        let state = Arc::new(State {
            auth_header: Mutex::new(format!("PVEAPIToken={token_id}={token_secret}")),
            vms: Mutex::new(BTreeMap::new()),
            seen: Mutex::new(Vec::new()),
            absent_status: AtomicU16::new(500),
            max_read: AtomicUsize::new(MAX_READ_SIZE),
            large_reads: Mutex::new(None),
            large_answers: AtomicUsize::new(0),
            agents: Mutex::new(HashMap::new()),
            stalled: Mutex::new(Vec::new()),
            handshakes: AtomicUsize::new(0),
            connections: Mutex::new(Vec::new()),
            lost_apply_answers: AtomicUsize::new(0),
        });
        let mut fake = FakeProxmox {
            state,
            endpoints: Vec::new(),
            identity,
        };
        fake.add_endpoint().await;
        fake
    }

    /// Starts one more listener serving the same cluster; returns its URL.
    pub async fn add_endpoint(&mut self) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a loopback port");
        let addr = listener.local_addr().expect("local address");
        let index = self.endpoints.len();
        let acceptor = TlsAcceptor::from(match &self.identity {
            Some(identity) => identity.server_config(),
            None => crate::tls::self_signed_server_config(),
        });
        let state = self.state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let acceptor = acceptor.clone();
                let served = state.clone();
                let connection = tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else { return };
                    served.handshakes.fetch_add(1, Ordering::SeqCst);
                    let service = service_fn(move |req| {
                        let state = served.clone();
                        async move { Ok::<_, std::convert::Infallible>(handle(&state, index, req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
                let mut connections = state.connections.lock().unwrap();
                connections.retain(|c| !c.is_finished());
                connections.push(connection.abort_handle());
            }
        });
        self.endpoints.push((addr, task));
        self.url(index)
    }

    pub fn url(&self, index: usize) -> String {
        format!("https://{}", self.endpoints[index].0)
    }

    /// Adds a running VM on `node` whose guest agent listens on `socket`.
    /// Several VMs may share one agent. The fake keeps a connection to each
    /// agent, so an agent given to this fake must not also serve another
    /// client (qemu-ga serves one connection at a time).
    pub fn add_vm(&self, vmid: i64, node: &str, socket: PathBuf) {
        let agent = self
            .state
            .agents
            .lock()
            .unwrap()
            .entry(socket.clone())
            .or_insert_with(|| QgaSocket::new(socket))
            .clone();
        self.insert_vm(vmid, node, VmAgent::Socket(agent), None);
    }

    /// Adds a running VM on `node` whose agent answers at once from
    /// `guest`, played in memory ([`InstantGuest`]): the scale benchmark's
    /// "apply time ≈ 0" workload, never a test of guest behaviour.
    pub fn add_instant_vm(&self, vmid: i64, node: &str, guest: Arc<InstantGuest>) {
        self.insert_vm(vmid, node, VmAgent::Instant(guest), None);
    }

    /// Adds a VM played by a real QEMU guest: its agent chardev is the VM's
    /// agent socket (taking turns with the test's own looks into the guest),
    /// and it runs and has uptime as long as its QEMU process does.
    pub fn add_guest_vm(&self, vmid: i64, node: &str, guest: Arc<QemuGuest>) {
        let agent = QgaSocket {
            path: guest.agent_socket(),
            turn: guest.channel_lock(),
        };
        self.insert_vm(vmid, node, VmAgent::Socket(agent), Some(guest));
    }

    fn insert_vm(&self, vmid: i64, node: &str, agent: VmAgent, guest: Option<Arc<QemuGuest>>) {
        self.state.vms.lock().unwrap().insert(
            vmid,
            Vm {
                node: node.into(),
                agent: Some(agent),
                running: true,
                uptime: 3600,
                guest,
                stall_exec_status: false,
            },
        );
    }

    /// The VM migrates to `node`.
    pub fn move_vm(&self, vmid: i64, node: &str) {
        self.vm_mut(vmid, |vm| vm.node = node.into());
    }

    /// The VM is destroyed: gone from every node and from `/cluster/resources`.
    pub fn remove_vm(&self, vmid: i64) {
        self.state.vms.lock().unwrap().remove(&vmid);
    }

    pub fn set_running(&self, vmid: i64, running: bool) {
        self.vm_mut(vmid, |vm| vm.running = running);
    }

    /// What `/cluster/resources` reports as uptime (a reset means a reboot);
    /// ignored for a VM backed by a real guest.
    pub fn set_uptime(&self, vmid: i64, seconds: u64) {
        self.vm_mut(vmid, |vm| vm.uptime = seconds);
    }

    /// `exec-status` keeps answering "not exited" without asking the agent:
    /// an apply that never finishes.
    /// The next `count` apply dispatches start in the guest, but their
    /// answer is lost: Proxmox reports `got timeout` (HTTP 500), as it does
    /// when qemu-ga answers `guest-exec` later than its QMP timeout.
    pub fn lose_apply_answers(&self, count: usize) {
        self.state.lost_apply_answers.store(count, Ordering::SeqCst);
    }

    /// How many of the answers [`FakeProxmox::lose_apply_answers`] asked
    /// for are still to be lost.
    pub fn apply_answers_to_lose(&self) -> usize {
        self.state.lost_apply_answers.load(Ordering::SeqCst)
    }

    pub fn stall_exec_status(&self, vmid: i64, stall: bool) {
        self.vm_mut(vmid, |vm| vm.stall_exec_status = stall);
    }

    /// The token the cluster accepts from now on.
    pub fn set_token(&self, token_id: &str, token_secret: &str) {
        *self.state.auth_header.lock().unwrap() = format!("PVEAPIToken={token_id}={token_secret}");
    }

    /// The status answered for a VM that is not on the node asked: 500
    /// (what Proxmox VE answers) or 404.
    pub fn set_absent_status(&self, status: u16) {
        self.state.absent_status.store(status, Ordering::SeqCst);
    }

    /// `agent/file-read` answers of more than 1 MiB are held until `count`
    /// of them are ready, then sent at once, so the client meets them
    /// together (a memory benchmark's worst case) however its calls happen
    /// to be spread in time. None is held longer than [`GATHER_WINDOW`]:
    /// the client's request timeout must not end the wait first.
    pub fn gather_large_reads(&self, count: usize) {
        *self.state.large_reads.lock().unwrap() = Some(Gathering {
            wanted: count,
            arrived: Arc::new(AtomicUsize::new(0)),
            released: Arc::new(tokio::sync::Notify::new()),
        });
    }

    /// `agent/file-read` answers of more than 1 MiB sent so far.
    pub fn large_answers(&self) -> usize {
        self.state.large_answers.load(Ordering::SeqCst)
    }

    /// `agent/file-read` reads at most this many bytes (Proxmox: 16 MiB).
    pub fn set_max_read(&self, bytes: usize) {
        self.state.max_read.store(bytes, Ordering::SeqCst);
    }

    /// Endpoint `index` accepts and reads requests but never answers them.
    pub fn stall_endpoint(&self, index: usize, stall: bool) {
        let mut stalled = self.state.stalled.lock().unwrap();
        stalled.retain(|&i| i != index);
        if stall {
            stalled.push(index);
        }
    }

    /// TLS handshakes completed so far, on all endpoints.
    pub fn tls_handshakes(&self) -> usize {
        self.state.handshakes.load(Ordering::SeqCst)
    }

    /// Every request served so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().unwrap().clone()
    }

    fn vm_mut(&self, vmid: i64, f: impl FnOnce(&mut Vm)) {
        let mut vms = self.state.vms.lock().unwrap();
        f(vms
            .get_mut(&vmid)
            .unwrap_or_else(|| panic!("no VM {vmid} in the fake cluster")));
    }
}

/// A URL on loopback where nothing listens: connections are refused.
pub async fn refusing_endpoint() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a loopback port");
    let addr = listener.local_addr().expect("local address");
    drop(listener);
    format!("https://{addr}")
}

/// A listener that accepts connections and never says a word: clients time
/// out in the TLS handshake. Stops when dropped.
pub struct SilentEndpoint {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl SilentEndpoint {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a loopback port");
        let addr = listener.local_addr().expect("local address");
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((tcp, _)) = listener.accept().await {
                held.push(tcp);
            }
        });
        SilentEndpoint { addr, task }
    }

    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }
}

impl Drop for SilentEndpoint {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type Answer = Response<Full<Bytes>>;

fn ok(data: Value) -> Answer {
    response(
        StatusCode::OK,
        None,
        "application/json",
        json!({ "data": data }).to_string().into_bytes(),
    )
}

fn fail(status: u16, reason: &str) -> Answer {
    response(
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        Some(reason),
        "application/json",
        br#"{"data":null}"#.to_vec(),
    )
}

fn param_error(param: &str, message: &str) -> Answer {
    response(
        StatusCode::BAD_REQUEST,
        Some("Parameter verification failed."),
        "application/json",
        json!({"data": null, "errors": {param: message}})
            .to_string()
            .into_bytes(),
    )
}

/// Bytes as Proxmox serialises a Perl byte string: one character per byte.
fn latin1(bytes: &[u8]) -> String {
    bytes.iter().map(|&b| char::from(b)).collect()
}

/// Characters back to bytes, as Perl's `encode_base64` sees a string; a
/// character above U+00FF makes it die (`None`).
fn from_latin1(s: &str) -> Option<Vec<u8>> {
    s.chars().map(|c| u8::try_from(u32::from(c)).ok()).collect()
}

fn wide_character() -> Answer {
    fail(500, "Wide character in subroutine entry")
}

/// What an API call that reaches the agent answers when it fails; Proxmox
/// VE sends the message in the reason phrase.
enum AgentFailure {
    /// The `guest-ping` before the call got no answer.
    NotRunning,
    /// The command's own transport failed.
    Transport { execute: String, detail: String },
    /// The agent answered with an error.
    Agent(String),
}

impl AgentFailure {
    fn answer(self, vmid: i64) -> Answer {
        match self {
            AgentFailure::NotRunning => fail(500, "QEMU guest agent is not running"),
            AgentFailure::Transport { execute, detail } => {
                fail(500, &format!("VM {vmid} qmp command '{execute}' failed - {detail}"))
            }
            AgentFailure::Agent(desc) => fail(500, &format!("Agent error: {desc}")),
        }
    }
}

/// qemu-server's `mon_cmd` for a `guest-*` command: the reply object.
async fn mon_cmd(agent: &VmAgent, execute: &str, arguments: Value) -> Result<Value, AgentFailure> {
    let agent = match agent {
        VmAgent::Socket(socket) => socket,
        VmAgent::Instant(guest) => {
            return Ok(match guest.command(execute, &arguments) {
                Ok(answer) => json!({ "return": answer }),
                Err(desc) => json!({ "error": { "class": "GenericError", "desc": desc } }),
            });
        }
    };
    let timeout = if execute == "guest-shutdown" {
        Duration::from_secs(600)
    } else {
        COMMAND_TIMEOUT
    };
    qemu_server::command(agent, execute, arguments, timeout)
        .await
        .map_err(|detail| AgentFailure::Transport {
            execute: execute.to_owned(),
            detail,
        })
}

/// The `return` of a reply, or its error as `check_agent_error` words it.
fn checked(reply: Value) -> Result<Value, AgentFailure> {
    if let Some(desc) = reply.get("error").and_then(|e| e.get("desc")).and_then(Value::as_str) {
        return Err(AgentFailure::Agent(desc.to_owned()));
    }
    reply
        .get("return")
        .cloned()
        .ok_or_else(|| AgentFailure::Agent("no return in the agent's reply".into()))
}

/// qemu-server's `agent_cmd`: a ping to see the agent runs, then the command.
async fn agent_cmd(agent: &VmAgent, execute: &str, arguments: Value) -> Result<Value, AgentFailure> {
    if let VmAgent::Socket(socket) = agent
        && qemu_server::command(socket, "guest-ping", json!({}), PING_TIMEOUT)
            .await
            .is_err()
    {
        return Err(AgentFailure::NotRunning);
    }
    checked(mon_cmd(agent, execute, arguments).await?)
}

async fn handle(state: &State, endpoint: usize, req: Request<Incoming>) -> Answer {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let query = parse_query(req.uri().query().unwrap_or(""));
    let expected = state.auth_header.lock().unwrap().clone();
    let authorized = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .is_some_and(|v| v.as_bytes() == expected.as_bytes());
    state.seen.lock().unwrap().push(Seen {
        endpoint,
        method: method.to_string(),
        path: path.clone(),
        authorized,
    });
    if !authorized {
        return fail(401, "authentication failure");
    }
    if state.stalled.lock().unwrap().contains(&endpoint) {
        std::future::pending::<()>().await;
    }
    let body = match Limited::new(req.into_body(), MAX_POST_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return fail(413, "Request Entity Too Large"),
    };
    let params: Value = if body.is_empty() {
        json!({})
    } else {
        match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(_) => return fail(400, "invalid JSON body"),
        }
    };
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match (method.clone(), segments.as_slice()) {
        (Method::GET, ["api2", "json", "cluster", "resources"]) => cluster_resources(state, &query),
        (_, ["api2", "json", "nodes", node, "qemu", vmid, rest @ ..]) => {
            let Ok(vmid) = vmid.parse::<i64>() else {
                return param_error("vmid", "invalid format - value does not look like a valid VM ID");
            };
            node_request(state, &method, node, vmid, &rest.join("/"), &query, &params).await
        }
        _ => fail(501, &format!("Method '{method} {path}' not implemented")),
    }
}

fn cluster_resources(state: &State, query: &[(String, String)]) -> Answer {
    let only_vms = query_value(query, "type").is_none_or(|t| t == "vm");
    let vms = state.vms.lock().unwrap();
    let data: Vec<Value> = if only_vms {
        vms.iter()
            .map(|(vmid, vm)| {
                let running = vm.running();
                json!({
                    "id": format!("qemu/{vmid}"), "type": "qemu", "vmid": vmid, "node": vm.node,
                    "status": if running { "running" } else { "stopped" },
                    "uptime": if running { vm.uptime() } else { 0 }, "name": format!("vm{vmid}"),
                })
            })
            .collect()
    } else {
        Vec::new()
    };
    ok(Value::Array(data))
}

async fn node_request(
    state: &State,
    method: &Method,
    node: &str,
    vmid: i64,
    rest: &str,
    query: &[(String, String)],
    params: &Value,
) -> Answer {
    let (running, agent, uptime, stall) = {
        let vms = state.vms.lock().unwrap();
        match vms.get(&vmid).filter(|vm| vm.node == node) {
            Some(vm) => (vm.running(), vm.agent.clone(), vm.uptime(), vm.stall_exec_status),
            None => {
                let status = state.absent_status.load(Ordering::SeqCst);
                return fail(
                    status,
                    &format!("Configuration file 'nodes/{node}/qemu-server/{vmid}.conf' does not exist"),
                );
            }
        }
    };
    if rest == "status/current" && *method == Method::GET {
        return ok(json!({
            "vmid": vmid, "status": if running { "running" } else { "stopped" },
            "qmpstatus": if running { "running" } else { "stopped" },
            "uptime": if running { uptime } else { 0 }, "agent": 1,
        }));
    }
    let Some(command) = rest.strip_prefix("agent/") else {
        return fail(
            501,
            &format!("Method '{method} /nodes/{node}/qemu/{vmid}/{rest}' not implemented"),
        );
    };
    if !running {
        return fail(500, &format!("VM {vmid} is not running"));
    }
    let Some(agent) = agent else {
        return fail(500, "QEMU guest agent is not running");
    };
    let answer = match (method.clone(), command) {
        (Method::POST, "ping") => agent_cmd(&agent, "guest-ping", json!({}))
            .await
            .map(|r| ok(json!({ "result": r }))),
        (Method::GET, "get-osinfo") => agent_cmd(&agent, "guest-get-osinfo", json!({}))
            .await
            .map(|r| ok(json!({ "result": r }))),
        (Method::POST, "file-write") => file_write(&agent, params).await,
        (Method::POST, "exec") => exec_maybe_losing_the_answer(state, &agent, params, vmid).await,
        (Method::GET, "exec-status") => {
            let Some(pid) = query_value(query, "pid").and_then(|p| p.parse::<i64>().ok()) else {
                return param_error("pid", "property is missing and it is not optional");
            };
            if stall {
                return ok(json!({"exited": 0}));
            }
            exec_status(&agent, pid).await
        }
        (Method::GET, "file-read") => {
            let Some(file) = query_value(query, "file") else {
                return param_error("file", "property is missing and it is not optional");
            };
            let answer = file_read(&agent, &file, state.max_read.load(Ordering::SeqCst)).await;
            gather_if_large(state, &answer).await;
            answer
        }
        _ => return fail(501, &format!("Method '{method} agent/{command}' not implemented")),
    };
    answer.unwrap_or_else(|failure| failure.answer(vmid))
}

async fn file_write(agent: &VmAgent, params: &Value) -> Result<Answer, AgentFailure> {
    let Some(file) = params.get("file").and_then(Value::as_str) else {
        return Ok(param_error("file", "property is missing and it is not optional"));
    };
    let Some(content) = params.get("content").and_then(Value::as_str) else {
        return Ok(param_error("content", "property is missing and it is not optional"));
    };
    if content.chars().count() > FILE_WRITE_MAX_CONTENT {
        return Ok(param_error(
            "content",
            &format!("value may only be {FILE_WRITE_MAX_CONTENT} characters long"),
        ));
    }
    let encode = params
        .get("encode")
        .is_none_or(|e| matches!(e, Value::Bool(true)) || e.as_i64() == Some(1) || e.as_str() == Some("1"));
    let buf = if encode {
        match from_latin1(content) {
            Some(bytes) => BASE64.encode(bytes),
            None => return Ok(wide_character()),
        }
    } else {
        content.to_owned()
    };
    let handle = agent_cmd(agent, "guest-file-open", json!({"path": file, "mode": "wb"})).await?;
    agent_cmd(agent, "guest-file-write", json!({"handle": handle, "buf-b64": buf})).await?;
    agent_cmd(agent, "guest-file-close", json!({"handle": handle})).await?;
    Ok(ok(Value::Null))
}

/// `agent/exec`; an apply dispatch's answer is replaced by Proxmox's `got
/// timeout` while [`FakeProxmox::lose_apply_answers`] asks for it, after the
/// guest started the command.
async fn exec_maybe_losing_the_answer(
    state: &State,
    agent: &VmAgent,
    params: &Value,
    vmid: i64,
) -> Result<Answer, AgentFailure> {
    let answer = exec(agent, params).await;
    // The wrapper's argv names the staged script, which ends so.
    let is_apply = match &params["command"] {
        Value::Array(argv) => argv.iter().any(|a| a.as_str().is_some_and(|a| a.ends_with(".staged"))),
        Value::String(argv) => argv.split('\0').any(|a| a.ends_with(".staged")),
        _ => false,
    };
    let lose = is_apply
        && state
            .lost_apply_answers
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
    if lose && answer.is_ok() {
        return Ok(fail(
            500,
            &format!("VM {vmid} qmp command 'guest-exec' failed - got timeout"),
        ));
    }
    answer
}

async fn exec(agent: &VmAgent, params: &Value) -> Result<Answer, AgentFailure> {
    let command: Vec<String> = match params.get("command") {
        Some(Value::Array(items)) => items.iter().filter_map(|i| i.as_str().map(str::to_string)).collect(),
        Some(Value::String(s)) => s.split('\0').map(str::to_string).collect(),
        _ => Vec::new(),
    };
    let mut arguments = Map::new();
    arguments.insert("capture-output".into(), Value::Bool(true));
    if let Some((path, args)) = command.split_first() {
        arguments.insert("path".into(), json!(path));
        arguments.insert("arg".into(), json!(args));
    }
    if let Some(input) = params.get("input-data").and_then(Value::as_str) {
        if input.chars().count() > 64 * 1024 {
            return Ok(param_error("input-data", "value may only be 65536 characters long"));
        }
        match from_latin1(input) {
            Some(bytes) => {
                arguments.insert("input-data".into(), json!(BASE64.encode(bytes)));
            }
            None => return Ok(wide_character()),
        }
    }
    if !arguments.contains_key("path") && !arguments.contains_key("input-data") {
        return Ok(fail(500, "command or input-data (or both) required"));
    }
    let reply = agent_cmd(agent, "guest-exec", Value::Object(arguments)).await?;
    Ok(ok(reply))
}

/// `exec-status` as qemu-server returns it: the output streams decoded from
/// base64 (sent on as one character per byte), booleans as 1/0.
async fn exec_status(agent: &VmAgent, pid: i64) -> Result<Answer, AgentFailure> {
    let mut status = agent_cmd(agent, "guest-exec-status", json!({"pid": pid})).await?;
    if let Some(fields) = status.as_object_mut() {
        for stream in ["out-data", "err-data"] {
            let decoded = fields
                .get(stream)
                .and_then(Value::as_str)
                .and_then(|b64| BASE64.decode(b64).ok());
            if let Some(bytes) = decoded {
                fields.insert(stream.into(), json!(latin1(&bytes)));
            }
        }
        for value in fields.values_mut() {
            if let Value::Bool(b) = value {
                *value = json!(i32::from(*b));
            }
        }
    }
    Ok(ok(status))
}

/// The longest a large answer is held for the others.
pub const GATHER_WINDOW: Duration = Duration::from_secs(4);

/// Large answers gathering to go together.
#[derive(Clone)]
struct Gathering {
    wanted: usize,
    arrived: Arc<AtomicUsize>,
    released: Arc<tokio::sync::Notify>,
}

/// Waits with the other large answers, while [`FakeProxmox::gather_large_reads`] asks.
async fn gather_if_large(state: &State, answer: &Result<Answer, AgentFailure>) {
    let large = matches!(answer, Ok(a) if hyper::body::Body::size_hint(a.body()).exact().is_some_and(|n| n > 1 << 20));
    if !large {
        return;
    }
    state.large_answers.fetch_add(1, Ordering::SeqCst);
    let Some(gathering) = state.large_reads.lock().unwrap().clone() else {
        return;
    };
    let released = gathering.released.notified();
    tokio::pin!(released);
    released.as_mut().enable();
    if gathering.arrived.fetch_add(1, Ordering::SeqCst) + 1 >= gathering.wanted {
        *state.large_reads.lock().unwrap() = None;
        gathering.released.notify_waiters();
        return;
    }
    let _ = tokio::time::timeout(GATHER_WINDOW, released).await;
}

async fn file_read(agent: &VmAgent, file: &str, max: usize) -> Result<Answer, AgentFailure> {
    let handle = agent_cmd(agent, "guest-file-open", json!({"path": file})).await?;
    let mut content = Vec::new();
    let mut eof = false;
    let mut left = max;
    while left > 0 && !eof {
        let read = checked(
            mon_cmd(
                agent,
                "guest-file-read",
                json!({"handle": handle, "count": left.min(1024 * 1024)}),
            )
            .await?,
        )?;
        let bytes = read
            .get("buf-b64")
            .and_then(Value::as_str)
            .and_then(|b| BASE64.decode(b).ok())
            .unwrap_or_default();
        left = left.saturating_sub(read.get("count").and_then(Value::as_u64).unwrap_or(0) as usize);
        content.extend_from_slice(&bytes);
        eof = read.get("eof").and_then(Value::as_bool).unwrap_or(false);
    }
    let _ = mon_cmd(agent, "guest-file-close", json!({"handle": handle})).await;
    let mut data = json!({"content": latin1(&content), "bytes-read": max - left});
    if !eof {
        data["truncated"] = json!(1);
    }
    Ok(ok(data))
}
