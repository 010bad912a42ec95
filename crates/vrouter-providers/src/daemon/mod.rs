//! vrouter-daemon: routers on bare metal or any VM run an agent that holds a
//! gRPC stream to the daemon's server in the cluster; the operator asks that
//! server over its `vrouter.control.v1.ControlService`. The agent renders and
//! runs the apply script itself, so this provider sends raw config
//! ([`payload`] says what the real daemon does with it).

pub(crate) mod ca_source;
mod channels;
pub mod payload;
pub mod proto;
mod registry;
mod tls;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tonic::transport::Channel;
use vrouter_api::{DaemonConfig, ProviderType};

use crate::error::ProviderError;
use crate::guest::GuestPaths;
use crate::provider::{ApplyRecord, ExecHandle, ExecOutcome, ExecStatus, Provider};
use proto::control_service_client::ControlServiceClient;
pub use registry::ExecRegistry;
use registry::Failure;
pub use tls::DaemonCaBundle;
use vrouter_qga::ApplyId;

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
    /// `config.address`, an `https://` one trusting the system roots.
    /// Dials nothing: the shared channel connects on first use. A config
    /// naming a CA bundle needs [`DaemonProvider::with_ca_bundle`].
    pub fn new(config: &DaemonConfig, options: DaemonOptions) -> Result<Self, ProviderError> {
        if config.ca_bundle.is_some() {
            return Err(ProviderError::InvalidTls {
                reason: "spec.provider.daemon.caBundle is set but its Secret was not read".into(),
            });
        }
        Self::with_ca_bundle(config, None, options)
    }

    /// As [`DaemonProvider::new`], an `https://` address trusting `bundle`
    /// (read from the Secret `config.ca_bundle` names) as its only roots.
    pub fn with_ca_bundle(
        config: &DaemonConfig,
        bundle: Option<&DaemonCaBundle>,
        options: DaemonOptions,
    ) -> Result<Self, ProviderError> {
        if config.agent_id.trim().is_empty() {
            return Err(ProviderError::InvalidTarget {
                target: format!("vrouter-daemon at {}", config.address),
                reason: "daemon.agentID is empty".into(),
            });
        }
        let channel = channels::channel_for(&config.address, bundle)?;
        let timeout_seconds = if config.timeout_seconds > 0 {
            config.timeout_seconds
        } else {
            DEFAULT_TIMEOUT_SECONDS
        };
        Ok(DaemonProvider {
            address: config.address.trim().to_string(),
            agent_id: config.agent_id.clone(),
            timeout_seconds,
            // The answer carries the script's output, which the agent may
            // send up to the server's own 4 MiB receive limit.
            client: ControlServiceClient::new(channel).max_decoding_message_size(2 * payload::GRPC_MAX_MESSAGE),
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

/// A failed call as a [`ProviderError`]: an `https://` endpoint that
/// failed its handshake is [`ProviderError::DaemonTls`] (nothing was sent).
fn call_error(operation: &'static str, address: &str, status: tonic::Status) -> ProviderError {
    match tls::tls_failure(&status) {
        Some(failure) => ProviderError::DaemonTls {
            endpoint: address.to_owned(),
            untrusted: matches!(failure, tls::TlsFailure::NotTrusted(_)),
            reason: vrouter_api::text::cut(&failure.to_string(), TLS_MESSAGE_LIMIT).into_owned(),
        },
        None => grpc_error(operation, status),
    }
}

/// The longest TLS failure kept in a message: a certificate's refusal
/// names its fingerprint and the roots, well within this.
const TLS_MESSAGE_LIMIT: usize = 1024;

fn grpc_error(operation: &'static str, status: tonic::Status) -> ProviderError {
    ProviderError::Grpc {
        operation,
        code: status.code(),
        message: status.message().to_string(),
    }
}

/// How the apply ended, from the server's answer. The server says
/// `success: false` with exit code 0 and an error only when it could not
/// get the apply to the agent or lost the agent before its answer (the
/// agent itself reports -1 or the script's code): whether the script ran is
/// then unknown, and only a fresh dispatch can tell.
fn outcome_of(resp: proto::ApplyConfigResponse) -> Result<ExecOutcome, Failure> {
    if !resp.success && resp.exit_code == 0 && !resp.error_message.is_empty() {
        return Err(Failure::Lost {
            reason: format!(
                "the vrouter-daemon server lost the agent during the apply ({}); whether it ran is unknown",
                resp.error_message
            ),
        });
    }
    let error = if !resp.error_message.is_empty() {
        Some(format!("vrouter-daemon agent: {}", resp.error_message))
    } else if !resp.success && resp.exit_code == 0 {
        Some("vrouter-daemon agent reported failure without an exit code".to_string())
    } else {
        None
    };
    Ok(ExecOutcome {
        exit_code: resp.exit_code.into(),
        stdout: resp.stdout,
        stderr: resp.stderr,
        error,
        stdout_truncated: false,
        signal: None,
    })
}

/// How a failed `ApplyConfig` call ended. `timeout` is what the server was
/// asked to wait.
fn failure_of(status: &tonic::Status, timeout: Duration) -> Failure {
    match status.code() {
        tonic::Code::DeadlineExceeded => Failure::Timeout { after: timeout },
        // The handshake comes before any request: nothing was sent.
        _ if tls::tls_failure(status).is_some() => Failure::Lost {
            reason: format!(
                "the TLS handshake with the vrouter-daemon server failed ({}); nothing ran",
                tls::tls_failure(status).map(ToString::to_string).unwrap_or_default()
            ),
        },
        // The server checks the agent before it queues the apply: nothing ran.
        tonic::Code::NotFound => Failure::Lost {
            reason: format!(
                "the agent was not connected to the vrouter-daemon when the apply was sent ({}); nothing ran",
                status.message()
            ),
        },
        // The connection to the server broke (it restarted, or the network
        // did) while the agent may have been running the script: tonic says
        // Unavailable, or Unknown with the HTTP/2 error as its source (a
        // status the server sent has no source).
        tonic::Code::Unavailable => connection_broke(status),
        tonic::Code::Unknown if std::error::Error::source(status).is_some() => connection_broke(status),
        code => Failure::Grpc {
            code,
            message: status.message().to_string(),
        },
    }
}

fn connection_broke(status: &tonic::Status) -> Failure {
    Failure::Lost {
        reason: format!(
            "the connection to the vrouter-daemon server broke during the apply ({}); whether it ran is unknown",
            status.message()
        ),
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
            Ok(Err(status)) => Err(call_error("IsConnected", &self.address, status)),
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

    /// The daemon's `ApplyConfig` carries no apply id and the router keeps
    /// no record of it, so the record is this process's: an id started
    /// here is never started again by this process, and its result
    /// survives a lost handle; after the operator restarts the id is
    /// unknown (docs/providers.md says what that leaves open).
    async fn exec_script(
        &self,
        apply: &ApplyId,
        config: &str,
        commands: &str,
        save: bool,
    ) -> Result<ExecHandle, ProviderError> {
        if let Some(handle) = self.options.registry.handle_of(&self.owner(), apply.as_str()) {
            return Ok(handle);
        }
        let request = payload::apply_request(&self.agent_id, config, commands, save, self.timeout_seconds)?;
        let (handle, completion) = self.options.registry.register(&self.owner());
        self.options.registry.name_apply(&self.owner(), apply.as_str(), handle);
        let mut client = self.client.clone();
        let deadline = self.apply_deadline();
        let timeout = Duration::from_secs(self.timeout_seconds.unsigned_abs().into());
        // The call outlives the reconcile that started it; its result waits
        // in the registry for the next poll.
        tokio::spawn(async move {
            let mut req = tonic::Request::new(request);
            req.set_timeout(deadline);
            let result = match tokio::time::timeout(deadline, client.apply_config(req)).await {
                Ok(Ok(resp)) => outcome_of(resp.into_inner()),
                Ok(Err(status)) => Err(failure_of(&status, timeout)),
                Err(_) => Err(Failure::Timeout { after: deadline }),
            };
            completion.finish(result);
        });
        Ok(handle)
    }

    async fn get_exec_status(&self, handle: ExecHandle) -> Result<ExecStatus, ProviderError> {
        self.options.registry.poll(handle, &self.owner())
    }

    async fn apply_record(&self, apply: &ApplyId) -> Result<ApplyRecord, ProviderError> {
        let Some(handle) = self.options.registry.handle_of(&self.owner(), apply.as_str()) else {
            return Ok(ApplyRecord::Unknown);
        };
        match self.options.registry.poll(handle, &self.owner()) {
            Ok(ExecStatus::Running) => Ok(ApplyRecord::Running(handle)),
            Ok(ExecStatus::Exited(outcome)) => Ok(ApplyRecord::Finished(outcome)),
            // The server went away mid-call: whether the agent ran the
            // script is unknown, and only a new apply says what runs now.
            Err(e) if e.is_exec_result_lost() => Ok(ApplyRecord::Vanished),
            // The call's own end (a timeout, a gRPC error) is polled as such.
            Err(_) => Ok(ApplyRecord::Running(handle)),
        }
    }

    /// Refused: the agent renders its own script, which always ends with
    /// `commit` and `save` and has no `confirm` step, and the ControlService
    /// cannot run a check or a `confirm` afterwards. Its
    /// `disconnect_policy: rollback` does not fit either: after
    /// `--init-max-retries` failed reconnects it applies the agent's fixed
    /// init config (vrouter-daemon `internal/agent/agent.go`,
    /// `shouldApplyInitConfig`/`applyInitConfig`), not the config the router
    /// had before this apply, and nothing tells the server it happened.
    fn confirm_supported(&self) -> Result<(), ProviderError> {
        Err(ProviderError::NotSupported {
            provider: "vrouter-daemon",
            what: "confirmed applies (spec.confirm): its agent always saves and has no confirm step, and its \
                   disconnect_policy rollback re-applies the agent's init config rather than the previous one; \
                   remove spec.confirm for this target"
                .into(),
        })
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

    async fn read_startup_config(&self) -> Result<Vec<u8>, ProviderError> {
        self.read_file(&GuestPaths::default().config_boot).await
    }

    async fn read_running_config(&self) -> Result<Vec<u8>, ProviderError> {
        self.read_command_output(&GuestPaths::default().running_config).await
    }

    async fn guest_uptime(&self) -> Result<Duration, ProviderError> {
        self.read_file(&GuestPaths::default().uptime)
            .await
            .map(|_| Duration::ZERO)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_errors_fail_and_lost_agents_are_lost() {
        let base = proto::ApplyConfigResponse {
            success: true,
            exit_code: 0,
            stdout: "done".into(),
            stderr: String::new(),
            error_message: String::new(),
        };
        assert_eq!(outcome_of(base.clone()).unwrap().error, None);
        let rendered = outcome_of(proto::ApplyConfigResponse {
            success: false,
            error_message: "render: bad template".into(),
            exit_code: -1,
            ..base.clone()
        })
        .unwrap();
        assert_eq!(
            rendered.error.as_deref(),
            Some("vrouter-daemon agent: render: bad template")
        );
        let silent = outcome_of(proto::ApplyConfigResponse {
            success: false,
            ..base.clone()
        })
        .unwrap();
        assert!(silent.error.is_some());
        let lost = outcome_of(proto::ApplyConfigResponse {
            success: false,
            stdout: String::new(),
            error_message: "context canceled".into(),
            ..base
        })
        .unwrap_err();
        assert!(
            matches!(&lost, Failure::Lost { reason } if reason.contains("context canceled")),
            "{lost:?}"
        );
    }

    #[test]
    fn call_failures_are_timeouts_losses_or_errors() {
        let after = Duration::from_secs(7);
        assert_eq!(
            failure_of(&tonic::Status::deadline_exceeded("x"), after),
            Failure::Timeout { after }
        );
        let broken = tonic::Status::from_error(Box::new(std::io::Error::other("connection reset")));
        for status in [
            tonic::Status::not_found("agent \"r\" not connected"),
            tonic::Status::unavailable("reset"),
            broken,
        ] {
            assert!(matches!(failure_of(&status, after), Failure::Lost { .. }), "{status:?}");
        }
        assert!(matches!(
            failure_of(&tonic::Status::internal("redis"), after),
            Failure::Grpc {
                code: tonic::Code::Internal,
                ..
            }
        ));
        // An Unknown the server itself sent is an answer, not a broken connection.
        assert!(matches!(
            failure_of(&tonic::Status::unknown("odd"), after),
            Failure::Grpc {
                code: tonic::Code::Unknown,
                ..
            }
        ));
    }
}
