//! vrouter-daemon: routers on bare metal or any VM run an agent that holds a
//! gRPC stream to the daemon's server in the cluster; the operator asks that
//! server over its `vrouter.control.v1.ControlService`. The agent renders and
//! runs the apply script itself, so this provider sends raw config.

mod channels;
pub mod proto;
mod registry;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;
use tonic::transport::Channel;
use vrouter_api::{DaemonConfig, ProviderType};

use crate::error::ProviderError;
use crate::provider::{ExecHandle, ExecOutcome, ExecStatus, Provider};
use proto::control_service_client::ControlServiceClient;
pub use registry::ExecRegistry;
use registry::Failure;

/// Tuning of the daemon provider.
#[derive(Clone, Debug)]
pub struct DaemonOptions {
    /// Extra time the background call waits beyond the apply timeout it
    /// sends, so the server's own timeout answer arrives before ours fires.
    pub grace: Duration,
    /// Timeout of the quick calls (`IsConnected`).
    pub call_timeout: Duration,
    pub registry: Arc<ExecRegistry>,
}

impl Default for DaemonOptions {
    fn default() -> Self {
        DaemonOptions {
            grace: Duration::from_secs(10),
            call_timeout: Duration::from_secs(10),
            registry: ExecRegistry::global(),
        }
    }
}

/// The JSON `config_payload` of `ApplyConfig`. The published server reads
/// `config` and `commands`; `save` is sent for agents that honour it.
#[derive(Serialize)]
struct Payload<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    config: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    commands: &'a str,
    save: bool,
}

pub struct DaemonProvider {
    address: String,
    agent_id: String,
    timeout_seconds: i32,
    client: ControlServiceClient<Channel>,
    options: DaemonOptions,
}

impl std::fmt::Debug for DaemonProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DaemonProvider")
            .field("address", &self.address)
            .field("agent_id", &self.agent_id)
            .field("timeout_seconds", &self.timeout_seconds)
            .finish_non_exhaustive()
    }
}

/// The apply timeout when the target leaves it unset (the CRD default).
const DEFAULT_TIMEOUT_SECONDS: i32 = 60;

impl DaemonProvider {
    /// Binds to the router `config.agent_id` behind the daemon at
    /// `config.address`. Dials nothing: the shared channel connects on first use.
    pub fn new(config: &DaemonConfig, options: DaemonOptions) -> Result<Self, ProviderError> {
        if config.agent_id.trim().is_empty() {
            return Err(ProviderError::InvalidTarget {
                target: format!("vrouter-daemon at {}", config.address),
                reason: "daemon.agentID is empty".into(),
            });
        }
        let channel = channels::channel_for(&config.address)?;
        let timeout_seconds = if config.timeout_seconds > 0 {
            config.timeout_seconds
        } else {
            DEFAULT_TIMEOUT_SECONDS
        };
        Ok(DaemonProvider {
            address: config.address.trim().to_string(),
            agent_id: config.agent_id.clone(),
            timeout_seconds,
            client: ControlServiceClient::new(channel),
            options,
        })
    }

    fn owner(&self) -> String {
        format!("{}/{}", self.address, self.agent_id)
    }

    fn apply_deadline(&self) -> Duration {
        Duration::from_secs(self.timeout_seconds.unsigned_abs().into()) + self.options.grace
    }
}

fn grpc_error(operation: &'static str, status: tonic::Status) -> ProviderError {
    ProviderError::Grpc {
        operation,
        code: status.code(),
        message: status.message().to_string(),
    }
}

/// The outcome the agent reported. `success == false` with exit code 0
/// still fails: the agent could not run the script at all.
fn outcome_of(resp: proto::ApplyConfigResponse) -> ExecOutcome {
    let error = if !resp.error_message.is_empty() {
        Some(format!("vrouter-daemon agent: {}", resp.error_message))
    } else if !resp.success && resp.exit_code == 0 {
        Some("vrouter-daemon agent reported failure without an exit code".to_string())
    } else {
        None
    };
    ExecOutcome {
        exit_code: resp.exit_code.into(),
        stdout: resp.stdout,
        stderr: resp.stderr,
        error,
        stdout_truncated: false,
    }
}

#[async_trait]
impl Provider for DaemonProvider {
    fn kind(&self) -> ProviderType {
        ProviderType::VRouterDaemon
    }

    /// "Running" means the agent is connected to the daemon.
    async fn is_vm_running(&self) -> Result<bool, ProviderError> {
        let mut req = tonic::Request::new(proto::IsConnectedRequest {
            agent_id: self.agent_id.clone(),
        });
        req.set_timeout(self.options.call_timeout);
        let mut client = self.client.clone();
        match tokio::time::timeout(self.options.call_timeout, client.is_connected(req)).await {
            Ok(Ok(resp)) => Ok(resp.into_inner().connected),
            Ok(Err(status)) => Err(grpc_error("IsConnected", status)),
            Err(_) => Err(ProviderError::Timeout {
                operation: format!("vrouter-daemon IsConnected at {}", self.address),
                after: self.options.call_timeout,
            }),
        }
    }

    /// A connected agent is ready by definition.
    async fn check_ready(&self) -> Result<(), ProviderError> {
        Ok(())
    }

    async fn exec_script(&self, config: &str, commands: &str, save: bool) -> Result<ExecHandle, ProviderError> {
        let payload = serde_json::to_vec(&Payload { config, commands, save })
            .map_err(|e| ProviderError::Render(format!("encoding the daemon payload: {e}")))?;
        let request = proto::ApplyConfigRequest {
            agent_id: self.agent_id.clone(),
            config_payload: payload,
            timeout_seconds: self.timeout_seconds,
        };
        let (handle, completion) = self.options.registry.register(&self.owner());
        let mut client = self.client.clone();
        let deadline = self.apply_deadline();
        let timeout = Duration::from_secs(self.timeout_seconds.unsigned_abs().into());
        // The call outlives the reconcile that started it; its result waits
        // in the registry for the next poll.
        tokio::spawn(async move {
            let mut req = tonic::Request::new(request);
            req.set_timeout(deadline);
            let result = match tokio::time::timeout(deadline, client.apply_config(req)).await {
                Ok(Ok(resp)) => Ok(outcome_of(resp.into_inner())),
                Ok(Err(status)) if status.code() == tonic::Code::DeadlineExceeded => {
                    Err(Failure::Timeout { after: timeout })
                }
                Ok(Err(status)) => Err(Failure::Grpc {
                    code: status.code(),
                    message: status.message().to_string(),
                }),
                Err(_) => Err(Failure::Timeout { after: deadline }),
            };
            completion.finish(result);
        });
        Ok(handle)
    }

    async fn get_exec_status(&self, handle: ExecHandle) -> Result<ExecStatus, ProviderError> {
        self.options.registry.poll(handle, &self.owner())
    }

    async fn read_file(&self, path: &str) -> Result<Vec<u8>, ProviderError> {
        Err(ProviderError::NotSupported {
            provider: "vrouter-daemon",
            what: format!("reading guest files ({path}): the ControlService has no file API"),
        })
    }

    async fn read_command_output(&self, argv: &[String]) -> Result<Vec<u8>, ProviderError> {
        Err(ProviderError::NotSupported {
            provider: "vrouter-daemon",
            what: format!(
                "running `{}`: the ControlService only applies configurations",
                argv.join(" ")
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_carries_config_commands_and_save() {
        let json = serde_json::to_value(Payload {
            config: "interfaces {}",
            commands: "set system host-name r1",
            save: false,
        })
        .unwrap();
        assert_eq!(
            json,
            serde_json::json!({"config": "interfaces {}", "commands": "set system host-name r1", "save": false})
        );
        let empty = serde_json::to_value(Payload {
            config: "",
            commands: "",
            save: true,
        })
        .unwrap();
        assert_eq!(empty, serde_json::json!({"save": true}));
    }

    #[test]
    fn agent_errors_fail_even_with_exit_code_zero() {
        let base = proto::ApplyConfigResponse {
            success: true,
            exit_code: 0,
            stdout: "done".into(),
            stderr: String::new(),
            error_message: String::new(),
        };
        assert_eq!(outcome_of(base.clone()).error, None);
        let rendered = outcome_of(proto::ApplyConfigResponse {
            success: false,
            error_message: "render: bad template".into(),
            exit_code: -1,
            ..base.clone()
        });
        assert_eq!(
            rendered.error.as_deref(),
            Some("vrouter-daemon agent: render: bad template")
        );
        let silent = outcome_of(proto::ApplyConfigResponse { success: false, ..base });
        assert!(silent.error.is_some());
    }
}
