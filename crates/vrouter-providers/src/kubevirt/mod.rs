//! KubeVirt: the guest agent reached through `virsh` in the VMI's
//! virt-launcher pod (see [`virsh`]), in this cluster or, with a kubeconfig
//! Secret, in another one.

pub mod launcher;
pub mod virsh;

use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use tokio::sync::OnceCell;
use vrouter_api::ProviderType;
use vrouter_qga::{Agent, ExecRequest, ExitStatus, Pid, QgaError, TransportError};

use crate::error::{KubeAccess, ProviderError};
use crate::guest::{AgentProvider, GuestAgent, GuestPaths, GuestTiming};
use crate::provider::{ExecOutcome, ExecStatus};
use launcher::{LABEL_VM_NAME, VmiView};
use virsh::VirshTransport;

/// Tuning of the KubeVirt provider.
#[derive(Clone, Debug)]
pub struct KubeVirtOptions {
    /// Longest one `virsh qemu-agent-command` exec may take.
    pub call_timeout: Duration,
    /// Longest any other Kubernetes API call (get the VMI, list its
    /// virt-launcher pods) may take. kube-client sets no read timeout — a
    /// client-wide one would also cut exec websockets — so an API server
    /// that accepts the connection and never answers would otherwise hold
    /// the reconcile forever.
    pub api_timeout: Duration,
}

impl Default for KubeVirtOptions {
    fn default() -> Self {
        KubeVirtOptions {
            call_timeout: Duration::from_secs(30),
            api_timeout: Duration::from_secs(30),
        }
    }
}

/// `kubevirt.io/v1` VirtualMachineInstance, read as a dynamic object: the
/// provider needs three status fields, not KubeVirt's whole API.
pub fn vmi_resource() -> ApiResource {
    ApiResource {
        group: "kubevirt.io".into(),
        version: "v1".into(),
        api_version: "kubevirt.io/v1".into(),
        kind: "VirtualMachineInstance".into(),
        plural: "virtualmachineinstances".into(),
    }
}

/// VMI phases in which the VM is over.
const FINAL_PHASES: [&str; 2] = ["Succeeded", "Failed"];

fn vmi_phase(vmi: &DynamicObject) -> Option<&str> {
    vmi.data.get("status")?.get("phase")?.as_str()
}

fn vmi_view(vmi: &DynamicObject) -> VmiView {
    VmiView {
        uid: vmi.metadata.uid.clone(),
        node: vmi
            .data
            .get("status")
            .and_then(|s| s.get("nodeName"))
            .and_then(|n| n.as_str())
            .filter(|n| !n.is_empty())
            .map(str::to_string),
    }
}

pub struct KubeVirtProvider {
    client: kube::Client,
    vm: String,
    namespace: String,
    paths: GuestPaths,
    timing: GuestTiming,
    options: KubeVirtOptions,
    agent: OnceCell<Agent<VirshTransport>>,
}

impl std::fmt::Debug for KubeVirtProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeVirtProvider")
            .field("vm", &self.vm)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl KubeVirtProvider {
    pub fn new(
        client: kube::Client,
        vm: &str,
        namespace: &str,
        paths: GuestPaths,
        timing: GuestTiming,
        options: KubeVirtOptions,
    ) -> Result<Self, ProviderError> {
        if vm.is_empty() || namespace.is_empty() {
            return Err(ProviderError::InvalidTarget {
                target: format!("KubeVirt VMI {namespace}/{vm}"),
                reason: "the VMI name and namespace must both be set".into(),
            });
        }
        Ok(KubeVirtProvider {
            client,
            vm: vm.to_string(),
            namespace: namespace.to_string(),
            paths,
            timing,
            options,
            agent: OnceCell::new(),
        })
    }

    fn vmi_name(&self) -> String {
        format!("VirtualMachineInstance {}/{}", self.namespace, self.vm)
    }

    /// One Kubernetes API call, bounded by `api_timeout`.
    async fn api_call<T>(
        &self,
        access: KubeAccess,
        operation: String,
        call: impl std::future::Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, ProviderError> {
        let after = self.options.api_timeout;
        match tokio::time::timeout(after, call).await {
            Ok(result) => result.map_err(|e| ProviderError::kube(access, operation, e)),
            Err(_) => Err(ProviderError::Timeout {
                operation: format!("Kubernetes API call {operation}"),
                after,
            }),
        }
    }

    async fn get_vmi(&self) -> Result<Option<DynamicObject>, ProviderError> {
        let vmis = Api::<DynamicObject>::namespaced_with(self.client.clone(), &self.namespace, &vmi_resource());
        self.api_call(
            KubeAccess::new("get", "virtualmachineinstances.kubevirt.io", &self.namespace),
            format!("get {}", self.vmi_name()),
            vmis.get_opt(&self.vm),
        )
        .await
    }

    /// The agent behind the pod that serves the VMI now; resolved once per
    /// provider (a provider lives for one reconcile).
    async fn agent(&self) -> Result<&Agent<VirshTransport>, ProviderError> {
        self.agent
            .get_or_try_init(|| async {
                let vmi = self
                    .get_vmi()
                    .await?
                    .ok_or_else(|| ProviderError::VmNotFound { what: self.vmi_name() })?;
                let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
                let selector = ListParams::default().labels(&format!("{LABEL_VM_NAME}={}", self.vm));
                let list = self
                    .api_call(
                        KubeAccess::new("list", "pods", &self.namespace),
                        format!("list virt-launcher pods of {}", self.vmi_name()),
                        pods.list(&selector),
                    )
                    .await?;
                let pod = launcher::choose_launcher(&list.items, &vmi_view(&vmi)).map_err(|reason| {
                    ProviderError::AgentUnavailable {
                        reason: format!("{}: {reason}", self.vmi_name()),
                    }
                })?;
                let domain = virsh::domain_name(&self.namespace, &self.vm);
                Ok::<_, ProviderError>(Agent::new(VirshTransport::new(
                    self.client.clone(),
                    &self.namespace,
                    pod,
                    domain,
                    self.options.call_timeout,
                )))
            })
            .await
    }

    fn map_qga(&self, error: QgaError) -> ProviderError {
        // An exec the authoriser refused is a missing permission, not a
        // guest-agent failure: the transport says which one.
        let error = match virsh::exec_refusal(error) {
            Ok(refused) => return refused,
            Err(other) => other,
        };
        match error {
            QgaError::UnknownPid { pid, error } => ProviderError::ExecResultLost {
                handle: pid.0,
                reason: format!(
                    "the guest agent of {} does not know pid {pid}: {error}",
                    self.vmi_name()
                ),
            },
            QgaError::Agent { command, error } => ProviderError::Agent {
                command: command.to_string(),
                class: error.class.unwrap_or_default(),
                desc: error.desc,
            },
            QgaError::Transport {
                source: TransportError::Timeout(after),
                command,
            } => ProviderError::Timeout {
                operation: format!("{command} via virsh in the virt-launcher pod of {}", self.vmi_name()),
                after,
            },
            QgaError::Transport { source, .. }
                if source.to_string().contains("not connected") || source.to_string().contains("not responding") =>
            {
                ProviderError::AgentUnavailable {
                    reason: format!("{}: {source}", self.vmi_name()),
                }
            }
            QgaError::FileTooLarge { path, limit } => ProviderError::TooLarge {
                what: path,
                size: limit + 1,
                limit,
                why: "the provider reads".into(),
            },
            other => ProviderError::GuestAgentCall {
                peer: self.vmi_name(),
                source: other,
            },
        }
    }
}

fn outcome_of(output: vrouter_qga::ExecOutput) -> ExecOutcome {
    let (error, signal) = match output.status {
        ExitStatus::Signal(signal) => (
            Some(format!("apply script was terminated by signal {signal}")),
            Some(signal),
        ),
        ExitStatus::Code(_) => (None, None),
    };
    let mut stdout = output.stdout_text();
    let mut stderr = output.stderr_text();
    if output.stdout_truncated {
        stdout.push_str("\n[stdout truncated by the guest agent]");
    }
    if output.stderr_truncated {
        stderr.push_str("\n[stderr truncated by the guest agent]");
    }
    ExecOutcome {
        exit_code: output.status.shell_code(),
        stdout,
        stderr,
        error,
        stdout_truncated: output.stdout_truncated,
        signal,
    }
}

#[async_trait]
impl GuestAgent for KubeVirtProvider {
    async fn os_id(&self, os_release: &str) -> Result<(String, String), ProviderError> {
        match self.agent().await?.os_id_from(os_release).await {
            Ok(id) => Ok((id, format!("guest-get-osinfo or {os_release}"))),
            Err(QgaError::NoOsId { source_name }) => Err(ProviderError::UnknownGuestOs {
                id: String::new(),
                source_name: source_name.to_string(),
            }),
            Err(e) => Err(self.map_qga(e)),
        }
    }

    async fn exec(&self, argv: &[String]) -> Result<i64, ProviderError> {
        let (path, args) = argv
            .split_first()
            .ok_or_else(|| ProviderError::protocol("guest", "empty command line"))?;
        let request = ExecRequest::new(path.as_str()).args(args.iter().cloned());
        let pid = self.agent().await?.exec(&request).await.map_err(|e| self.map_qga(e))?;
        Ok(pid.0)
    }

    async fn exec_status(&self, pid: i64) -> Result<ExecStatus, ProviderError> {
        match self
            .agent()
            .await?
            .exec_status(Pid(pid))
            .await
            .map_err(|e| self.map_qga(e))?
        {
            vrouter_qga::ExecStatus::Running => Ok(ExecStatus::Running),
            vrouter_qga::ExecStatus::Exited(output) => Ok(ExecStatus::Exited(outcome_of(output))),
        }
    }

    async fn write_file(&self, path: &str, content: &[u8]) -> Result<(), ProviderError> {
        self.agent()
            .await?
            .write_file(path, content)
            .await
            .map_err(|e| self.map_qga(e))
    }

    async fn read_file(&self, path: &str) -> Result<Vec<u8>, ProviderError> {
        self.agent().await?.read_file(path).await.map_err(|e| self.map_qga(e))
    }
}

#[async_trait]
impl AgentProvider for KubeVirtProvider {
    const KIND: ProviderType = ProviderType::KubeVirt;

    fn paths(&self) -> &GuestPaths {
        &self.paths
    }

    fn timing(&self) -> GuestTiming {
        self.timing
    }

    /// A missing VMI, or one in a final phase, is not running.
    async fn vm_running(&self) -> Result<bool, ProviderError> {
        Ok(match self.get_vmi().await? {
            None => false,
            Some(vmi) => !vmi_phase(&vmi).is_some_and(|p| FINAL_PHASES.contains(&p)),
        })
    }

    /// The VMI's creation time: a VMI is one run of its VM, and the API
    /// server stamps it once, so it names that run for as long as it lasts
    /// (a live migration keeps it; a restart makes a new VMI).
    async fn vm_run_started(&self) -> Result<Option<k8s_openapi::jiff::Timestamp>, ProviderError> {
        Ok(self
            .get_vmi()
            .await?
            .and_then(|vmi| vmi.metadata.creation_timestamp)
            .map(|created| created.0))
    }
}
