//! An in-process vrouter-daemon ControlService with the published server's
//! semantics: `IsConnected` answers from a set of connected agents,
//! `ApplyConfig` requires a connected agent and a payload, waits at most
//! `timeout_seconds` (30 s when 0) and then answers `DEADLINE_EXCEEDED`.
//! What the "agent" answers is set per agent id.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tonic::{Request, Response, Status};
use vrouter_providers::daemon::proto::control_service_server::{ControlService, ControlServiceServer};
use vrouter_providers::daemon::proto::{
    ApplyConfigRequest, ApplyConfigResponse, GetStatusRequest, GetStatusResponse, IsConnectedRequest,
    IsConnectedResponse,
};

/// How the agent behind the fake daemon answers an apply.
#[derive(Clone, Debug)]
pub enum Apply {
    /// The agent ran the script and reported this.
    Answer(ApplyConfigResponse),
    /// The agent never answers: the server times out.
    Hang,
}

impl Apply {
    pub fn exited(exit_code: i32, stdout: &str, stderr: &str) -> Self {
        Apply::Answer(ApplyConfigResponse {
            success: exit_code == 0,
            exit_code,
            stdout: stdout.into(),
            stderr: stderr.into(),
            error_message: String::new(),
        })
    }
}

#[derive(Default)]
struct State {
    connected: Mutex<HashSet<String>>,
    behavior: Mutex<HashMap<String, Apply>>,
    applies: Mutex<Vec<ApplyConfigRequest>>,
    connections: AtomicUsize,
}

#[derive(Clone)]
struct Service(Arc<State>);

const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

#[tonic::async_trait]
impl ControlService for Service {
    async fn is_connected(&self, req: Request<IsConnectedRequest>) -> Result<Response<IsConnectedResponse>, Status> {
        let id = req.into_inner().agent_id;
        if id.is_empty() {
            return Err(Status::invalid_argument("agent_id is required"));
        }
        let connected = self.0.connected.lock().unwrap().contains(&id);
        Ok(Response::new(IsConnectedResponse { connected }))
    }

    async fn get_status(&self, req: Request<GetStatusRequest>) -> Result<Response<GetStatusResponse>, Status> {
        let id = req.into_inner().agent_id;
        if !self.0.connected.lock().unwrap().contains(&id) {
            return Err(Status::not_found(format!("agent {id:?} not connected")));
        }
        Ok(Response::new(GetStatusResponse {
            has_status: false,
            status_json: Vec::new(),
            agent_version: "fake".into(),
        }))
    }

    async fn apply_config(&self, req: Request<ApplyConfigRequest>) -> Result<Response<ApplyConfigResponse>, Status> {
        let req = req.into_inner();
        if req.agent_id.is_empty() {
            return Err(Status::invalid_argument("agent_id is required"));
        }
        if req.config_payload.is_empty() {
            return Err(Status::invalid_argument("config_payload is required"));
        }
        if !self.0.connected.lock().unwrap().contains(&req.agent_id) {
            return Err(Status::not_found(format!("agent {:?} not connected", req.agent_id)));
        }
        self.0.applies.lock().unwrap().push(req.clone());
        let timeout = if req.timeout_seconds > 0 {
            Duration::from_secs(req.timeout_seconds.unsigned_abs().into())
        } else {
            DEFAULT_TIMEOUT
        };
        let behavior = self.0.behavior.lock().unwrap().get(&req.agent_id).cloned();
        match behavior.unwrap_or_else(|| Apply::exited(0, "", "")) {
            Apply::Answer(resp) => Ok(Response::new(resp)),
            Apply::Hang => {
                tokio::time::sleep(timeout).await;
                Err(Status::deadline_exceeded(format!(
                    "apply_config timed out for agent {:?}",
                    req.agent_id
                )))
            }
        }
    }
}

/// A running fake daemon; stops when dropped.
pub struct FakeDaemon {
    addr: SocketAddr,
    state: Arc<State>,
    _shutdown: oneshot::Sender<()>,
}

impl FakeDaemon {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a loopback port");
        let addr = listener.local_addr().expect("local address");
        let state = Arc::new(State::default());
        let counted = state.clone();
        let incoming = futures::stream::unfold(listener, move |listener| {
            let counted = counted.clone();
            async move {
                let accepted = listener.accept().await.map(|(stream, _)| {
                    counted.connections.fetch_add(1, Ordering::SeqCst);
                    stream
                });
                Some((accepted, listener))
            }
        })
        .boxed();
        let (tx, rx) = oneshot::channel::<()>();
        let service = ControlServiceServer::new(Service(state.clone()));
        tokio::spawn(async move {
            let result = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = rx.await;
                })
                .await;
            if let Err(e) = result {
                tracing::warn!(error = %e, "fake daemon stopped with an error");
            }
        });
        FakeDaemon {
            addr,
            state,
            _shutdown: tx,
        }
    }

    /// `host:port` as a VRouterTarget's `daemon.address` holds it.
    pub fn address(&self) -> String {
        self.addr.to_string()
    }

    pub fn connect_agent(&self, agent_id: &str) {
        self.state.connected.lock().unwrap().insert(agent_id.to_string());
    }

    pub fn disconnect_agent(&self, agent_id: &str) {
        self.state.connected.lock().unwrap().remove(agent_id);
    }

    pub fn on_apply(&self, agent_id: &str, behavior: Apply) {
        self.state
            .behavior
            .lock()
            .unwrap()
            .insert(agent_id.to_string(), behavior);
    }

    /// Every `ApplyConfig` request accepted so far.
    pub fn applies(&self) -> Vec<ApplyConfigRequest> {
        self.state.applies.lock().unwrap().clone()
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> usize {
        self.state.connections.load(Ordering::SeqCst)
    }
}
