//! Proxmox VE: the guest agent reached through the cluster's REST API
//! (`/nodes/{node}/qemu/{vmid}/agent/...`), authenticated with an API token.

pub mod api;
mod clients;
mod http;
mod large_answers;
mod tls;
mod trust;
mod verifier;
mod vm_list;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ::http::Method;
use async_trait::async_trait;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::de::DeserializeOwned;
use serde_json::json;
use vrouter_api::ProviderType;

use crate::error::ProviderError;
use crate::guest::{self, AgentProvider, GuestAgent, GuestPaths, GuestTiming};
use crate::provider::{ExecOutcome, ExecStatus};
use api::ErrorKind;
pub use clients::{ProxmoxClients, SharedClient};
pub(crate) use http::token_part_is_valid;
use http::{Answer, Client, Endpoint, Timeouts};
pub use http::{ApiToken, redact};
pub use trust::{TrustError, TrustSettings};
// The vrouter-daemon client decides and verifies its trust with these.
pub(crate) use tls::{RootsNamed, provider as crypto_provider, verifier as certificate_verifier};
pub(crate) use trust::{Trust, decide as decide_trust};
pub(crate) use verifier::refusal as certificate_refusal;
use vm_list::VmList;
pub use vm_list::{FRESH_FOR as VM_LIST_FRESH_FOR, VmState, state_of};

/// Everything needed to reach one VM on one Proxmox cluster.
#[derive(Clone, Debug)]
pub struct ProxmoxSettings {
    pub endpoints: Vec<String>,
    pub token: ApiToken,
    /// Which server certificates are accepted (`trust`).
    pub trust: TrustSettings,
    pub vmid: i64,
    /// The node `status.proxmoxNode` last recorded; empty means "look it up".
    pub cached_node: String,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    pub paths: GuestPaths,
    pub timing: GuestTiming,
    /// The cluster's client kept across providers, with its open
    /// connections; `None` builds one for this provider alone.
    pub shared_client: Option<SharedClient>,
}

impl ProxmoxSettings {
    pub fn new(endpoints: Vec<String>, token: ApiToken, vmid: i64) -> Self {
        let timeouts = Timeouts::default();
        ProxmoxSettings {
            endpoints,
            token,
            trust: TrustSettings::default(),
            vmid,
            cached_node: String::new(),
            connect_timeout: timeouts.connect,
            request_timeout: timeouts.request,
            paths: GuestPaths::default(),
            timing: GuestTiming::default(),
            shared_client: None,
        }
    }
}

/// One VM as `/cluster/resources?type=vm` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterVm {
    pub vmid: i64,
    pub node: String,
    pub running: bool,
    /// Seconds since the QEMU process started (0 when stopped).
    pub uptime: u64,
}

/// Cluster-wide calls, for the ProxmoxCluster controller's node and reboot
/// tracking (spec §7.3): one `/cluster/resources` read per sync.
#[derive(Debug)]
pub struct ClusterClient {
    client: Arc<Client>,
    /// Kept to take the token out of any message a server sends back.
    token: ApiToken,
}

impl ClusterClient {
    pub fn new(
        endpoints: &[String],
        token: ApiToken,
        insecure_skip_tls_verify: bool,
        connect_timeout: Duration,
        request_timeout: Duration,
    ) -> Result<Self, ProviderError> {
        Self::sharing(
            None,
            endpoints,
            token,
            &TrustSettings::insecure(insecure_skip_tls_verify),
            connect_timeout,
            request_timeout,
        )
    }

    /// Like [`ClusterClient::new`], on the cluster's client in `shared`
    /// (the one its VMs' providers use) when given.
    pub fn sharing(
        shared: Option<&SharedClient>,
        endpoints: &[String],
        token: ApiToken,
        trust: &TrustSettings,
        connect_timeout: Duration,
        request_timeout: Duration,
    ) -> Result<Self, ProviderError> {
        let invalid = |reason: String| ProviderError::InvalidTarget {
            target: "ProxmoxCluster".into(),
            reason,
        };
        if endpoints.is_empty() {
            return Err(invalid("the ProxmoxCluster lists no endpoints".into()));
        }
        let endpoints = endpoints
            .iter()
            .map(|e| Endpoint::parse(e))
            .collect::<Result<Vec<_>, _>>()
            .map_err(invalid)?;
        let timeouts = Timeouts {
            connect: connect_timeout,
            request: request_timeout,
        };
        let client = clients::client_for(shared, &endpoints, &token, trust, timeouts)?.client;
        Ok(ClusterClient { token, client })
    }

    /// Every QEMU VM of the cluster with its node and uptime. An error whose
    /// text would show the token (a server that echoed the request) comes
    /// back with the token redacted.
    pub async fn vms(&self) -> Result<Vec<ClusterVm>, ProviderError> {
        list_vms(&self.client, &self.token).await
    }
}

/// Every QEMU VM of the cluster `client` reaches (endpoints in order), with
/// any echo of `token` taken out of an error.
async fn list_vms(client: &Client, token: &ApiToken) -> Result<Vec<ClusterVm>, ProviderError> {
    list_vms_once(client).await.map_err(|error| {
        let text = error.to_string();
        let redacted = token.redact(&text);
        if redacted == text {
            error
        } else {
            ProviderError::protocol("the Proxmox VE API", redacted)
        }
    })
}

async fn list_vms_once(client: &Client) -> Result<Vec<ClusterVm>, ProviderError> {
    let path = "/api2/json/cluster/resources?type=vm";
    let answer = client.send(Method::GET, path, None, true).await?;
    if !answer.status.is_success() {
        let message = api::error_message(&answer.reason, &answer.body);
        let status = answer.status.as_u16();
        return Err(match api::classify_error(status, &message) {
            ErrorKind::Unauthorized => ProviderError::Unauthorized {
                endpoint: answer.endpoint,
                status,
                message,
            },
            _ => ProviderError::Http {
                endpoint: answer.endpoint,
                method: "GET".into(),
                path: "/api2/json/cluster/resources".into(),
                status,
                message,
            },
        });
    }
    let envelope: api::Envelope<Vec<api::ClusterResource>> = serde_json::from_slice(&answer.body)
        .map_err(|e| ProviderError::protocol(answer.endpoint.clone(), format!("GET {path}: {e}")))?;
    Ok(envelope
        .data
        .into_iter()
        .filter(|r| r.kind.as_deref().is_none_or(|k| k == "qemu"))
        .filter_map(|r| {
            Some(ClusterVm {
                vmid: r.vmid?,
                node: r.node?,
                running: r.status.as_deref() == Some("running"),
                uptime: r.uptime.unwrap_or(0),
            })
        })
        .collect())
}

#[derive(Debug)]
pub struct ProxmoxProvider {
    client: Arc<Client>,
    /// The cluster's shared VM listing snapshot, for [`crate::Provider::is_vm_running_polled`].
    vms: Arc<VmList>,
    /// Kept to take the token out of a listing error's message.
    token: ApiToken,
    vmid: i64,
    node: Mutex<Option<String>>,
    paths: GuestPaths,
    timing: GuestTiming,
}

/// A node-scoped request that found the VM absent from the node asked.
struct NotOnNode(ProviderError);

impl ProxmoxProvider {
    pub fn new(settings: ProxmoxSettings) -> Result<Self, ProviderError> {
        let invalid = |reason: String| ProviderError::InvalidTarget {
            target: format!("Proxmox VM {}", settings.vmid),
            reason,
        };
        if settings.vmid <= 0 {
            return Err(invalid(format!("vmid must be positive, got {}", settings.vmid)));
        }
        if settings.endpoints.is_empty() {
            return Err(invalid("the ProxmoxCluster lists no endpoints".into()));
        }
        let endpoints = settings
            .endpoints
            .iter()
            .map(|e| Endpoint::parse(e))
            .collect::<Result<Vec<_>, _>>()
            .map_err(invalid)?;
        if !http::token_part_is_valid(settings.token.id()) {
            return Err(invalid(
                "the API token id is empty or contains spaces or control characters".into(),
            ));
        }
        let timeouts = Timeouts {
            connect: settings.connect_timeout,
            request: settings.request_timeout,
        };
        let kept = clients::client_for(
            settings.shared_client.as_ref(),
            &endpoints,
            &settings.token,
            &settings.trust,
            timeouts,
        )?;
        let cached = settings.cached_node.trim();
        Ok(ProxmoxProvider {
            client: kept.client,
            vms: kept.vms,
            token: settings.token,
            vmid: settings.vmid,
            node: Mutex::new((!cached.is_empty()).then(|| cached.to_string())),
            paths: settings.paths,
            timing: settings.timing,
        })
    }

    /// The node this provider currently talks to (after any re-lookup).
    pub fn current_node(&self) -> Option<String> {
        self.node.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn vm_name(&self) -> String {
        format!("Proxmox VM {}", self.vmid)
    }

    fn error_of(&self, method: &Method, path: &str, answer: &Answer) -> ProviderError {
        let message = api::error_message(&answer.reason, &answer.body);
        let status = answer.status.as_u16();
        match api::classify_error(status, &message) {
            ErrorKind::Unauthorized => ProviderError::Unauthorized {
                endpoint: answer.endpoint.clone(),
                status,
                message,
            },
            ErrorKind::AgentUnavailable => ProviderError::AgentUnavailable {
                reason: format!("{}: {message}", self.vm_name()),
            },
            ErrorKind::Agent(desc) => ProviderError::Agent {
                command: path
                    .split('?')
                    .next()
                    .unwrap_or(path)
                    .rsplit('/')
                    .next()
                    .unwrap_or(path)
                    .to_string(),
                class: String::new(),
                desc,
            },
            ErrorKind::VmNotOnNode | ErrorKind::Other => ProviderError::Http {
                endpoint: answer.endpoint.clone(),
                method: method.to_string(),
                path: path.split('?').next().unwrap_or(path).to_string(),
                status,
                message,
            },
        }
    }

    async fn request<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<serde_json::Value>,
        idempotent: bool,
    ) -> Result<Result<T, NotOnNode>, ProviderError> {
        let answer = match self.request_answer(method.clone(), path, body, idempotent).await? {
            Ok(answer) => answer,
            Err(not_on_node) => return Ok(Err(not_on_node)),
        };
        Ok(Ok(decode(&answer.endpoint, &answer.body, &method, path)?))
    }

    /// A successful answer to `method path`, not yet decoded.
    async fn request_answer(
        &self,
        method: Method,
        path: &str,
        body: Option<serde_json::Value>,
        idempotent: bool,
    ) -> Result<Result<Answer, NotOnNode>, ProviderError> {
        let body = body.map(|b| b.to_string().into_bytes());
        let answer = self.client.send(method.clone(), path, body, idempotent).await?;
        if !answer.status.is_success() {
            let message = api::error_message(&answer.reason, &answer.body);
            let error = self.error_of(&method, path, &answer);
            if api::classify_error(answer.status.as_u16(), &message) == ErrorKind::VmNotOnNode {
                return Ok(Err(NotOnNode(error)));
            }
            return Err(error);
        }
        Ok(Ok(answer))
    }

    /// The node hosting the VM, from `/cluster/resources`.
    async fn lookup_node(&self) -> Result<String, ProviderError> {
        let resources: Vec<api::ClusterResource> = self
            .request(Method::GET, "/api2/json/cluster/resources?type=vm", None, true)
            .await?
            .map_err(|NotOnNode(e)| e)?;
        let node = resources
            .into_iter()
            .find(|r| r.vmid == Some(self.vmid) && r.kind.as_deref().is_none_or(|k| k == "qemu"))
            .and_then(|r| r.node)
            .ok_or_else(|| ProviderError::VmNotFound {
                what: format!("{} (absent from /cluster/resources)", self.vm_name()),
            })?;
        *self.node.lock().unwrap_or_else(|e| e.into_inner()) = Some(node.clone());
        Ok(node)
    }

    async fn node(&self) -> Result<String, ProviderError> {
        let cached = self.current_node();
        match cached {
            Some(node) => Ok(node),
            None => self.lookup_node().await,
        }
    }

    /// A request under `/nodes/{node}/qemu/{vmid}/`, decoded as `T`; see
    /// [`ProxmoxProvider::on_node_answer`].
    async fn on_node<T: DeserializeOwned>(
        &self,
        method: Method,
        suffix: &str,
        body: Option<serde_json::Value>,
        idempotent: bool,
    ) -> Result<T, ProviderError> {
        let answer = self.on_node_answer(method.clone(), suffix, body, idempotent).await?;
        decode(&answer.endpoint, &answer.body, &method, suffix)
    }

    /// A request under `/nodes/{node}/qemu/{vmid}/`. When the VM is not on
    /// the node asked (it migrated, or `status.proxmoxNode` is stale) the
    /// node is looked up again and the request repeated once there; a VM on
    /// no node at all is [`ProviderError::VmNotFound`].
    async fn on_node_answer(
        &self,
        method: Method,
        suffix: &str,
        body: Option<serde_json::Value>,
        idempotent: bool,
    ) -> Result<Answer, ProviderError> {
        let node = self.node().await?;
        let path = |node: &str| {
            format!(
                "/api2/json/nodes/{}/qemu/{}/{suffix}",
                api::encode_query_value(node),
                self.vmid
            )
        };
        match self
            .request_answer(method.clone(), &path(&node), body.clone(), idempotent)
            .await?
        {
            Ok(v) => Ok(v),
            Err(NotOnNode(first)) => {
                let fresh = self.lookup_node().await?;
                if fresh == node {
                    tracing::debug!(error = %first, "VM reported absent by the node /cluster/resources names");
                    return Err(ProviderError::VmNotFound {
                        what: format!("{} on node {node}", self.vm_name()),
                    });
                }
                tracing::info!(vmid = self.vmid, from = %node, to = %fresh, "Proxmox VM moved; retrying on its new node");
                self.request_answer(method, &path(&fresh), body, idempotent)
                    .await?
                    .map_err(|NotOnNode(_)| ProviderError::VmNotFound {
                        what: format!("{} on node {fresh}", self.vm_name()),
                    })
            }
        }
    }

    async fn write_one(&self, path: &str, content: &[u8]) -> Result<(), ProviderError> {
        // encode=0 with our own base64: Proxmox's own encoding would re-encode
        // the JSON text (wide characters break it) and shrink the payload limit.
        let body = json!({"file": path, "content": BASE64.encode(content), "encode": 0});
        let _: serde_json::Value = self.on_node(Method::POST, "agent/file-write", Some(body), true).await?;
        Ok(())
    }
}

#[async_trait]
impl GuestAgent for ProxmoxProvider {
    /// `agent/get-osinfo` first (no process to start); when the agent
    /// refuses it, the os-release file through `agent/file-read`.
    async fn os_id(&self, os_release: &str) -> Result<(String, String), ProviderError> {
        match self
            .on_node::<api::OsInfoData>(Method::GET, "agent/get-osinfo", None, true)
            .await
        {
            Ok(info) => Ok((info.result.id.unwrap_or_default(), "guest-get-osinfo".to_string())),
            Err(ProviderError::Agent { desc, .. }) => {
                tracing::debug!(%desc, "get-osinfo refused; reading os-release instead");
                let content = GuestAgent::read_file(self, os_release).await?;
                let id = vrouter_qga::os_release_id(&String::from_utf8_lossy(&content)).unwrap_or_default();
                Ok((id, os_release.to_string()))
            }
            Err(e) => Err(e),
        }
    }

    async fn exec(&self, argv: &[String]) -> Result<i64, ProviderError> {
        let started: api::ExecStarted = self
            .on_node(Method::POST, "agent/exec", Some(json!({"command": argv})), false)
            .await?;
        Ok(started.pid)
    }

    async fn exec_status(&self, pid: i64) -> Result<ExecStatus, ProviderError> {
        let suffix = format!("agent/exec-status?pid={pid}");
        let result = match self.on_node_answer(Method::GET, &suffix, None, true).await {
            Ok(answer) => status_off_runtime(answer, suffix.clone()).await,
            Err(e) => Err(e),
        };
        match result {
            Ok(status) => Ok(status),
            Err(ProviderError::Agent { desc, .. })
                if vrouter_qga::is_unknown_pid(
                    vrouter_qga::command::names::EXEC_STATUS,
                    &vrouter_qga::AgentError::without_class(desc.clone()),
                ) =>
            {
                Err(ProviderError::ExecResultLost {
                    handle: pid,
                    reason: format!("the guest agent of {} does not know pid {pid}: {desc}", self.vm_name()),
                })
            }
            Err(e) => Err(e),
        }
    }

    /// One `file-write` when it fits; otherwise parts assembled by a shell
    /// in the guest, because `file-write` always truncates (no append).
    async fn write_file(&self, path: &str, content: &[u8]) -> Result<(), ProviderError> {
        if content.len() <= api::FILE_WRITE_MAX_RAW_BYTES {
            return self.write_one(path, content).await;
        }
        if content.len() > api::MAX_WRITE_BYTES {
            return Err(ProviderError::TooLarge {
                what: format!("the file for {path}"),
                size: content.len(),
                limit: api::MAX_WRITE_BYTES,
                why: "the Proxmox provider writes".into(),
            });
        }
        let plan = api::write_plan(path, content.len());
        for (part, range) in &plan {
            self.write_one(part, &content[range.clone()]).await?;
        }
        let mut argv = vec![
            self.paths.shell.clone(),
            "-c".to_string(),
            api::ASSEMBLE_PROGRAM.to_string(),
            "assemble".to_string(),
            path.to_string(),
        ];
        argv.extend(plan.into_iter().map(|(part, _)| part));
        let outcome = guest::run_to_exit(self, &argv, self.timing).await?;
        if outcome.exit_code != 0 {
            return Err(ProviderError::GuestCommand {
                command: format!("assembling {path} from parts"),
                exit_code: outcome.exit_code,
                stderr: outcome.stderr.trim().to_string(),
            });
        }
        Ok(())
    }

    async fn read_file(&self, path: &str) -> Result<Vec<u8>, ProviderError> {
        let suffix = format!("agent/file-read?file={}", api::encode_query_value(path));
        let answer = self.on_node_answer(Method::GET, &suffix, None, true).await?;
        // Decoded off the async workers (`crate::off_runtime`): the file is
        // the guest's to choose, up to the read cap.
        let path = path.to_owned();
        crate::off_runtime::run(move || file_content(&answer, &suffix, &path)).await
    }
}

/// The bytes of `path` from its `agent/file-read` answer. Decoded in place:
/// the content is borrowed from the body unless it holds escapes, so a
/// 16 MiB file is not held a second time as text.
fn file_content(answer: &Answer, suffix: &str, path: &str) -> Result<Vec<u8>, ProviderError> {
    let data: api::FileRead<'_> = decode(&answer.endpoint, &answer.body, &Method::GET, suffix)?;
    if api::truthy(&data.truncated) {
        return Err(ProviderError::TooLarge {
            what: path.to_string(),
            size: data.content.chars().count(),
            limit: vrouter_qga::constants::MAX_READ_FILE_BYTES,
            why: "Proxmox VE's agent/file-read returns (it truncated the file)".into(),
        });
    }
    Ok(api::latin1_to_bytes(&data.content))
}

#[async_trait]
impl AgentProvider for ProxmoxProvider {
    const KIND: ProviderType = ProviderType::Proxmox;

    fn paths(&self) -> &GuestPaths {
        &self.paths
    }

    fn timing(&self) -> GuestTiming {
        self.timing
    }

    async fn vm_running(&self) -> Result<bool, ProviderError> {
        match self
            .on_node::<api::VmStatus>(Method::GET, "status/current", None, true)
            .await
        {
            Ok(status) => Ok(status.status == "running"),
            Err(ProviderError::VmNotFound { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// From the cluster's shared listing, at most [`VM_LIST_FRESH_FOR`]
    /// old: one request for every VM polled within that time, instead of
    /// one `status/current` each. A VMID the listing lacks is not running.
    async fn vm_running_polled(&self) -> Result<bool, ProviderError> {
        let vms = self.vms.get(|| list_vms(&self.client, &self.token)).await?;
        Ok(state_of(&vms, self.vmid).is_running())
    }
}

/// What an `agent/exec-status` answer says ([`status_of`]), made off the
/// async workers (`crate::off_runtime`): the output streams are the guest's
/// to choose, up to the response cap. The answer is kept until the outcome
/// is made: a large one holds its lease of the budget (`large_answers`)
/// for as long as its copies live.
async fn status_off_runtime(answer: Answer, suffix: String) -> Result<ExecStatus, ProviderError> {
    crate::off_runtime::run(move || {
        let Answer {
            endpoint, body, _large, ..
        } = answer;
        let data = decode::<api::ExecStatusData>(&endpoint, &body, &Method::GET, &suffix)?;
        // The body is no longer needed; its lease is, until the text is
        // made and its size checked.
        drop(body);
        bounded(status_of(data)?)
    })
    .await
}

/// `status`, unless an output stream's text is longer than
/// [`api::MAX_OUTPUT_TEXT_BYTES`]: only bytes that are not UTF-8 (each
/// shown as U+FFFD, three bytes) take it there, and text that large would
/// outlive the answer's place at the gate.
fn bounded(status: ExecStatus) -> Result<ExecStatus, ProviderError> {
    if let ExecStatus::Exited(outcome) = &status {
        for (stream, text) in [("stdout", &outcome.stdout), ("stderr", &outcome.stderr)] {
            if text.len() > api::MAX_OUTPUT_TEXT_BYTES {
                return Err(text_too_large(stream, text.len()));
            }
        }
    }
    Ok(status)
}

/// What an `agent/exec-status` answer says, with the output streams as
/// text; a stream whose text would be longer than
/// [`api::MAX_OUTPUT_TEXT_BYTES`] is refused before that text is made.
fn status_of(data: api::ExecStatusData) -> Result<ExecStatus, ProviderError> {
    if !api::truthy(&data.exited) {
        return Ok(ExecStatus::Running);
    }
    let mut stdout = output_text("stdout", data.out_data)?;
    let mut stderr = output_text("stderr", data.err_data)?;
    if api::truthy(&data.out_truncated) {
        stdout.push_str("\n[stdout truncated by the guest agent]");
    }
    if api::truthy(&data.err_truncated) {
        stderr.push_str("\n[stderr truncated by the guest agent]");
    }
    let (exit_code, error) = exit_of(data.exitcode, data.signal);
    Ok(ExecStatus::Exited(ExecOutcome {
        exit_code,
        stdout,
        stderr,
        error,
        stdout_truncated: api::truthy(&data.out_truncated),
        signal: data.exitcode.is_none().then_some(data.signal).flatten(),
    }))
}

/// One output stream as text. Its decoded string is dropped once its bytes
/// are made, and bytes that are UTF-8 become text without a copy; others
/// show each bad sequence as U+FFFD (three bytes), so their text's length
/// is counted first and a text past the bound is never made.
fn output_text(stream: &str, data: Option<String>) -> Result<String, ProviderError> {
    let bytes = api::latin1_to_bytes(&data.unwrap_or_default());
    let bytes = match String::from_utf8(bytes) {
        Ok(text) => return Ok(text),
        Err(not_utf8) => not_utf8.into_bytes(),
    };
    let size = lossy_len(&bytes);
    if size > api::MAX_OUTPUT_TEXT_BYTES {
        return Err(text_too_large(stream, size));
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The length of `String::from_utf8_lossy(bytes)`, without making it.
fn lossy_len(bytes: &[u8]) -> usize {
    bytes
        .utf8_chunks()
        .map(|chunk| chunk.valid().len() + if chunk.invalid().is_empty() { 0 } else { 3 })
        .sum()
}

fn text_too_large(stream: &str, size: usize) -> ProviderError {
    ProviderError::TooLarge {
        what: format!("the {stream} of a guest command as text"),
        size,
        limit: api::MAX_OUTPUT_TEXT_BYTES,
        why: "the Proxmox provider keeps (bytes that are not UTF-8 count three each)".into(),
    }
}

/// The `data` of `answer`'s envelope, borrowing from its body where `T`
/// can; a body that does not decode is a protocol error naming the call.
fn decode<'a, T: serde::Deserialize<'a>>(
    endpoint: &str,
    body: &'a [u8],
    method: &Method,
    path: &str,
) -> Result<T, ProviderError> {
    let envelope: api::Envelope<T> = serde_json::from_slice(body).map_err(|e| {
        ProviderError::protocol(
            endpoint.to_owned(),
            format!("{method} {}: {e}", path.split('?').next().unwrap_or(path)),
        )
    })?;
    Ok(envelope.data)
}

/// The exit code of a finished process as the agent reported it, and an
/// error when it was not a plain exit. The numbers are the guest's: a
/// signal number is added to 128 without overflowing.
fn exit_of(exitcode: Option<i64>, signal: Option<i64>) -> (i64, Option<String>) {
    match (exitcode, signal) {
        (Some(code), _) => (code, None),
        (None, Some(signal)) => (
            signal.saturating_add(128),
            Some(format!("apply script was terminated by signal {signal}")),
        ),
        (None, None) => (
            -1,
            Some("the guest agent reported an exit without a code or signal".to_string()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exited(stdout: String) -> ExecStatus {
        ExecStatus::Exited(ExecOutcome {
            exit_code: 0,
            stdout,
            stderr: String::new(),
            error: None,
            stdout_truncated: false,
            signal: None,
        })
    }

    #[test]
    fn output_text_past_the_bound_is_refused_naming_it() {
        let at_bound = exited("a".repeat(api::MAX_OUTPUT_TEXT_BYTES));
        assert!(bounded(at_bound).is_ok());
        assert!(bounded(ExecStatus::Running).is_ok());
        let inflated = status_of(api::ExecStatusData {
            exited: serde_json::json!(1),
            exitcode: Some(0),
            signal: None,
            // Bytes that are not UTF-8 as Proxmox sends them: one
            // character each, three bytes each as U+FFFD.
            out_data: Some("\u{80}".repeat(api::MAX_OUTPUT_TEXT_BYTES / 3 + 1)),
            err_data: None,
            out_truncated: serde_json::json!(0),
            err_truncated: serde_json::json!(0),
        });
        let error = inflated.unwrap_err().to_string();
        // Output at the agent's own cap, truncated by it, keeps its note.
        let truncated = status_of(api::ExecStatusData {
            exited: serde_json::json!(1),
            exitcode: Some(0),
            signal: None,
            out_data: Some("a".repeat(vrouter_qga::constants::MAX_READ_FILE_BYTES)),
            err_data: None,
            out_truncated: serde_json::json!(1),
            err_truncated: serde_json::json!(0),
        });
        assert!(bounded(truncated.unwrap()).is_ok());
        assert!(error.contains("the stdout of a guest command as text"), "{error}");
        assert!(error.contains(&api::MAX_OUTPUT_TEXT_BYTES.to_string()), "{error}");
    }

    #[test]
    fn the_length_of_lossy_text_is_counted_without_making_it() {
        for bytes in [
            &b""[..],
            b"abc",
            b"\x80",
            b"a\x80\x80b",
            b"\xe2\x82",
            "é€".as_bytes(),
            b"\xff\xfe\xfd",
        ] {
            assert_eq!(lossy_len(bytes), String::from_utf8_lossy(bytes).len(), "{bytes:?}");
        }
    }

    #[test]
    fn exits_of_any_reported_numbers() {
        let cases: [(Option<i64>, Option<i64>, i64, bool); 6] = [
            (Some(0), None, 0, false),
            (Some(3), Some(9), 3, false),
            (None, Some(9), 137, true),
            (None, Some(i64::MAX), i64::MAX, true),
            (None, Some(i64::MIN), i64::MIN + 128, true),
            (None, None, -1, true),
        ];
        for (code, signal, want, errs) in cases {
            let (got, error) = exit_of(code, signal);
            assert_eq!((got, error.is_some()), (want, errs), "{code:?} {signal:?}");
        }
    }
}
