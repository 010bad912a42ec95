//! The vrouter-daemon provider against an in-test tonic ControlService with
//! the published server's semantics.

use std::sync::Arc;
use std::time::Duration;

use vrouter_api::DaemonConfig;
use vrouter_providers::daemon::proto::ApplyConfigResponse;
use vrouter_providers::daemon::{DaemonOptions, DaemonProvider, ExecRegistry};
use vrouter_providers::{ExecHandle, ExecOutcome, ExecStatus, Provider, ProviderError};
use vrouter_test_peers::daemon::{Apply, FakeDaemon};

fn config(daemon: &FakeDaemon, agent: &str, timeout_seconds: i32) -> DaemonConfig {
    DaemonConfig {
        address: daemon.address(),
        agent_id: agent.into(),
        timeout_seconds,
    }
}

fn options(registry: Arc<ExecRegistry>) -> DaemonOptions {
    DaemonOptions {
        grace: Duration::from_millis(500),
        call_timeout: Duration::from_secs(5),
        registry,
    }
}

/// Polls until the apply is no longer running (bounded by an iteration count).
async fn wait(provider: &DaemonProvider, handle: ExecHandle) -> Result<ExecOutcome, ProviderError> {
    for _ in 0..200 {
        match provider.get_exec_status(handle).await? {
            ExecStatus::Running => tokio::time::sleep(Duration::from_millis(25)).await,
            ExecStatus::Exited(outcome) => return Ok(outcome),
        }
    }
    panic!("apply {handle} still running after 200 polls");
}

#[tokio::test]
async fn connected_agent_is_running_and_ready() {
    let daemon = FakeDaemon::start().await;
    daemon.connect_agent("router-a");
    let registry = Arc::new(ExecRegistry::new());
    let up = DaemonProvider::new(&config(&daemon, "router-a", 60), options(registry.clone())).unwrap();
    let down = DaemonProvider::new(&config(&daemon, "router-b", 60), options(registry)).unwrap();
    assert!(up.is_vm_running().await.unwrap());
    assert!(!down.is_vm_running().await.unwrap());
    up.check_ready().await.unwrap();
    let err = up.read_file("/config/config.boot").await.unwrap_err();
    assert!(matches!(err, ProviderError::NotSupported { .. }), "{err}");
    let err = up
        .read_command_output(&["/bin/cli-shell-api".into(), "showConfig".into()])
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::NotSupported { .. }), "{err}");
    assert!(err.to_string().contains("cli-shell-api showConfig"), "{err}");
}

#[tokio::test]
async fn successful_apply_sends_config_commands_and_save() {
    let daemon = FakeDaemon::start().await;
    daemon.connect_agent("r1");
    daemon.on_apply("r1", Apply::exited(0, "Configuration committed\n", ""));
    let provider = DaemonProvider::new(&config(&daemon, "r1", 45), options(Arc::new(ExecRegistry::new()))).unwrap();
    let handle = provider
        .exec_script("interfaces {\n}\n", "set system host-name r1", false)
        .await
        .unwrap();
    assert!(handle.get() > 0);
    let outcome = wait(&provider, handle).await.unwrap();
    assert_eq!(outcome.exit_code, 0);
    assert_eq!(outcome.stdout, "Configuration committed\n");
    assert_eq!(outcome.failure(), None);

    let applies = daemon.applies();
    assert_eq!(applies.len(), 1);
    assert_eq!(applies[0].agent_id, "r1");
    assert_eq!(applies[0].timeout_seconds, 45);
    let payload: serde_json::Value = serde_json::from_slice(&applies[0].config_payload).unwrap();
    assert_eq!(
        payload,
        serde_json::json!({"config": "interfaces {\n}\n", "commands": "set system host-name r1", "save": false})
    );
    // Polling a finished apply again gives the same answer.
    assert_eq!(
        provider.get_exec_status(handle).await.unwrap(),
        ExecStatus::Exited(outcome)
    );
}

#[tokio::test]
async fn non_zero_exit_fails_the_apply() {
    let daemon = FakeDaemon::start().await;
    daemon.connect_agent("r1");
    daemon.on_apply("r1", Apply::exited(1, "", "commit: configuration error\n"));
    let provider = DaemonProvider::new(&config(&daemon, "r1", 60), options(Arc::new(ExecRegistry::new()))).unwrap();
    let handle = provider.exec_script("", "set x", true).await.unwrap();
    let outcome = wait(&provider, handle).await.unwrap();
    assert_eq!(outcome.exit_code, 1);
    assert_eq!(outcome.stderr, "commit: configuration error\n");
    assert!(outcome.failure().unwrap().contains("code 1"));
}

#[tokio::test]
async fn failure_marker_fails_an_apply_that_exited_zero() {
    let daemon = FakeDaemon::start().await;
    daemon.connect_agent("r1");
    daemon.on_apply(
        "r1",
        Apply::exited(0, "[edit]\nset interfaces ethernet eth9 address x\nSet failed\n", ""),
    );
    let provider = DaemonProvider::new(&config(&daemon, "r1", 60), options(Arc::new(ExecRegistry::new()))).unwrap();
    let handle = provider
        .exec_script("", "set interfaces ethernet eth9 address x", true)
        .await
        .unwrap();
    let outcome = wait(&provider, handle).await.unwrap();
    assert_eq!(outcome.exit_code, 0);
    assert!(outcome.failure().unwrap().contains("Set failed"), "{outcome:?}");
    assert!(!outcome.succeeded());
}

#[tokio::test]
async fn agent_error_message_fails_the_apply() {
    let daemon = FakeDaemon::start().await;
    daemon.connect_agent("r1");
    daemon.on_apply(
        "r1",
        Apply::Answer(ApplyConfigResponse {
            success: false,
            exit_code: -1,
            stdout: String::new(),
            stderr: String::new(),
            error_message: "render: template error".into(),
        }),
    );
    let provider = DaemonProvider::new(&config(&daemon, "r1", 60), options(Arc::new(ExecRegistry::new()))).unwrap();
    let handle = provider.exec_script("x", "", true).await.unwrap();
    let outcome = wait(&provider, handle).await.unwrap();
    assert_eq!(
        outcome.failure().as_deref(),
        Some("vrouter-daemon agent: render: template error")
    );
}

#[tokio::test]
async fn apply_that_never_answers_times_out() {
    let daemon = FakeDaemon::start().await;
    daemon.connect_agent("r1");
    daemon.on_apply("r1", Apply::Hang);
    let provider = DaemonProvider::new(&config(&daemon, "r1", 1), options(Arc::new(ExecRegistry::new()))).unwrap();
    let handle = provider.exec_script("x", "", true).await.unwrap();
    assert_eq!(provider.get_exec_status(handle).await.unwrap(), ExecStatus::Running);
    let err = wait(&provider, handle).await.unwrap_err();
    assert!(err.is_timeout(), "{err}");
    // The apply is over, not merely unreadable: nothing more will come.
    assert!(err.apply_ended().is_some_and(|cause| cause.is_timeout()), "{err:?}");
    assert_eq!(err.to_string(), "vrouter-daemon ApplyConfig timed out after 1s");
    // The timeout stays the answer for this handle.
    assert!(provider.get_exec_status(handle).await.unwrap_err().is_timeout());
}

#[tokio::test]
async fn handle_from_before_a_restart_is_lost() {
    let daemon = FakeDaemon::start().await;
    daemon.connect_agent("r1");
    let before = DaemonProvider::new(&config(&daemon, "r1", 60), options(Arc::new(ExecRegistry::new()))).unwrap();
    let handle = before.exec_script("x", "", true).await.unwrap();
    wait(&before, handle).await.unwrap();

    // A restarted operator has a new, empty registry; it also dispatches its
    // own applies, whose handles must not collide with the old one.
    let after = DaemonProvider::new(&config(&daemon, "r1", 60), options(Arc::new(ExecRegistry::new()))).unwrap();
    let own = after.exec_script("y", "", true).await.unwrap();
    assert_ne!(own, handle);
    let err = after.get_exec_status(handle).await.unwrap_err();
    assert!(err.is_exec_result_lost(), "{err}");
    assert!(err.to_string().contains("restarted"), "{err}");
}

#[tokio::test]
async fn unreachable_daemon_and_bad_address_are_typed_errors() {
    let daemon = FakeDaemon::start().await;
    let address = daemon.address();
    drop(daemon);
    let provider = DaemonProvider::new(
        &DaemonConfig {
            address,
            agent_id: "r1".into(),
            timeout_seconds: 60,
        },
        options(Arc::new(ExecRegistry::new())),
    )
    .unwrap();
    let err = provider.is_vm_running().await.unwrap_err();
    assert!(
        matches!(
            err,
            ProviderError::Grpc {
                code: tonic::Code::Unavailable,
                ..
            }
        ),
        "{err}"
    );

    let bad = DaemonProvider::new(
        &DaemonConfig {
            address: "no-port.example".into(),
            agent_id: "r1".into(),
            timeout_seconds: 60,
        },
        DaemonOptions::default(),
    )
    .unwrap_err();
    assert!(bad.to_string().contains("needs a port"), "{bad}");
}

#[tokio::test]
async fn one_connection_per_address_is_shared() {
    let daemon = FakeDaemon::start().await;
    daemon.connect_agent("r1");
    daemon.connect_agent("r2");
    let registry = Arc::new(ExecRegistry::new());
    for round in 0..3 {
        for agent in ["r1", "r2"] {
            // A fresh provider per call, as controllers build one per reconcile.
            let p = DaemonProvider::new(&config(&daemon, agent, 60), options(registry.clone())).unwrap();
            assert!(p.is_vm_running().await.unwrap(), "round {round} {agent}");
            let h = p.exec_script("c", "", true).await.unwrap();
            wait(&p, h).await.unwrap();
        }
    }
    assert_eq!(daemon.applies().len(), 6);
    assert_eq!(daemon.connections(), 1, "every provider must reuse the one channel");
}
