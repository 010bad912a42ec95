//! The vrouter-daemon provider against the real vrouter-daemon: its server
//! (with Redis) and its agents, which run the pushed config with the stub
//! vbash. Each difference between what the provider sends or expects and
//! what the daemon does is proven here against the real thing
//! (docs/providers.md, "vrouter-daemon", lists them).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use vrouter_api::DaemonConfig;
use vrouter_providers::ApplyId;
use vrouter_providers::daemon::payload::largest_plain_config;
use vrouter_providers::daemon::proto::ApplyConfigRequest;
use vrouter_providers::daemon::{DaemonOptions, DaemonProvider, ExecRegistry};
use vrouter_providers::{ApplyRecord, ExecHandle, ExecStatus, Provider, ProviderError};
use vrouter_test_peers::daemon::{Agent, AgentFlags, Daemon};
use vrouter_test_peers::poll_until_exited as wait;

use common::daemon::{provider, provider_at};

/// Waits until the agent's stub log satisfies `done` (the router reached a
/// state), bounded by a generous limit.
async fn wait_for_calls(agent: &Agent, what: &str, done: impl Fn(&[String]) -> bool) -> Vec<String> {
    let started = Instant::now();
    loop {
        let calls = agent.sandbox().calls();
        if done(&calls) {
            return calls;
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "{what}: not seen; calls so far {calls:?}\nagent log:\n{}",
            agent.log()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Waits until the agent process has logged `text`: the server may answer
/// the caller before the agent has written why it dropped the connection.
async fn wait_for_log(agent: &Agent, text: &str) {
    let started = Instant::now();
    while !agent.log().contains(text) {
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "{text:?} not in the agent log:\n{}",
            agent.log()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Starts an apply with a fresh id that saves, as the operator does.
async fn apply(provider: &DaemonProvider, config: &str, commands: &str) -> ExecHandle {
    provider
        .exec_script(&ApplyId::fresh(1), config, commands, true)
        .await
        .unwrap()
}

fn count(calls: &[String], call: &str) -> usize {
    calls.iter().filter(|c| *c == call).count()
}

/// The calls of one complete run of the agent's script.
fn script_calls(load: &str, commands: &[&str]) -> Vec<String> {
    let mut calls = vec![
        "source /opt/vyatta/etc/functions/script-template".to_string(),
        "configure".into(),
        load.into(),
    ];
    calls.extend(commands.iter().map(|c| c.to_string()));
    calls.extend(["commit".into(), "save".into()]);
    calls
}

/// The calls of one run that loads the default config (no config pushed).
fn default_calls(commands: &[&str]) -> Vec<String> {
    script_calls("load /opt/vyatta/etc/config.boot.default", commands)
}

/// `ApplyConfig` sent as-is, bypassing the provider's checks, to show what
/// the daemon would do with it.
async fn raw_apply(
    daemon: &Daemon,
    agent: &str,
    payload: &serde_json::Value,
) -> Result<vrouter_providers::daemon::proto::ApplyConfigResponse, tonic::Status> {
    let mut client = daemon
        .control_client()
        .await
        .max_decoding_message_size(16 << 20)
        .max_encoding_message_size(16 << 20);
    client
        .apply_config(ApplyConfigRequest {
            agent_id: agent.into(),
            config_payload: serde_json::to_vec(payload).unwrap(),
            timeout_seconds: 60,
        })
        .await
        .map(tonic::Response::into_inner)
}

/// vrouter-daemon cannot carry `spec.confirm` (its agent always saves, and
/// nothing can run `confirm` afterwards): refused with the reason, before
/// anything is sent.
#[tokio::test]
async fn a_confirmed_apply_is_refused_with_the_reason() {
    let daemon = Daemon::start();
    let _agent = daemon.start_agent("router-a", AgentFlags::default()).await;
    let up = provider(&daemon, "router-a", 60);
    let err = up.confirm_supported().unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, ProviderError::NotSupported { .. }), "{message}");
    for needle in [
        "confirmed applies (spec.confirm)",
        "always saves",
        "disconnect_policy rollback",
    ] {
        assert!(message.contains(needle), "{message}");
    }
    let err = up
        .exec_confirmed_script(&ApplyId::fresh(1), "", "set system host-name r1\n", 5)
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), message);
    let err = up.confirm_apply(true).await.unwrap_err();
    assert!(matches!(err, ProviderError::NotSupported { .. }), "{err}");
}

#[tokio::test]
async fn a_connected_agent_is_running_and_an_unknown_one_is_not() {
    let daemon = Daemon::start();
    let _agent = daemon.start_agent("router-a", AgentFlags::default()).await;
    let up = provider(&daemon, "router-a", 60);
    let down = provider(&daemon, "router-b", 60);
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
async fn an_apply_runs_the_agents_script_with_the_config_and_commands_byte_for_byte() {
    let daemon = Daemon::start();
    let agent = daemon.start_agent("r1", AgentFlags::default()).await;
    let provider = provider(&daemon, "r1", 45);
    // A config with its final newline, and one without: `load` reads each
    // as the QGA providers' own script delivers it (one final newline).
    for (config, loaded) in [
        (
            "interfaces {\n    ethernet eth0 {\n        description \"a <b> & 'c'\"\n    }\n}\n",
            "interfaces {\n    ethernet eth0 {\n        description \"a <b> & 'c'\"\n    }\n}\n",
        ),
        ("system {\n    host-name r1\n}", "system {\n    host-name r1\n}\n"),
    ] {
        let before = agent.sandbox().calls().len();
        let handle = apply(
            &provider,
            config,
            "set system host-name r1\nset system ntp server 192.0.2.2\n",
        )
        .await;
        assert!(handle.get() > 0);
        let outcome = wait(&provider, handle).await.unwrap();
        assert_eq!(outcome.exit_code, 0, "{outcome:?}");
        assert_eq!(outcome.failure(), None);
        let calls = agent.sandbox().calls();
        assert_eq!(
            calls[before..],
            script_calls(
                "load /dev/stdin",
                &["set system host-name r1", "set system ntp server 192.0.2.2"]
            )[..]
        );
        let own_script = vrouter_render::render_apply_script(config, "", true).unwrap();
        let own_load = vrouter_render::testing::run_script_file(&own_script, "vyattacfg").unwrap();
        assert_eq!(own_load.loaded(), Some(loaded), "our own script, for comparison");
        assert_eq!(
            agent.sandbox().running_config(),
            [
                loaded.as_bytes(),
                b"set system host-name r1\nset system ntp server 192.0.2.2\n"
            ]
            .concat(),
            "the running config: the config loaded, then each set"
        );
        // Polling a finished apply again gives the same answer.
        assert_eq!(
            provider.get_exec_status(handle).await.unwrap(),
            ExecStatus::Exited(outcome)
        );
    }
}

/// One apply to a fresh agent "r1" through a provider with a 60 s timeout,
/// and what it leaves behind.
struct Case {
    name: &'static str,
    agent: AgentFlags,
    /// The agent's script directory is removed before the apply.
    script_dir_gone: bool,
    config: &'static str,
    commands: &'static str,
    exit_code: i64,
    /// `None`: the apply succeeds.
    failure: Option<Text>,
    /// Text the outcome's stdout contains.
    stdout: Option<&'static str>,
    calls: Calls,
    /// The config the agent loaded.
    loaded: Option<&'static [u8]>,
}

#[derive(Debug)]
enum Text {
    Contains(&'static str),
    StartsWith(&'static str),
}

impl Text {
    fn matches(&self, text: &str) -> bool {
        match self {
            Text::Contains(part) => text.contains(part),
            Text::StartsWith(prefix) => text.starts_with(prefix),
        }
    }
}

/// What the agent's stub vbash logged.
enum Calls {
    Exactly(Vec<String>),
    Including(&'static str),
    Unchecked,
}

impl Case {
    /// An apply of `commands` over an empty config to an agent with its
    /// default flags, that succeeds; a row overrides what it is about.
    fn new(name: &'static str, commands: &'static str) -> Case {
        Case {
            name,
            agent: AgentFlags::default(),
            script_dir_gone: false,
            config: "",
            commands,
            exit_code: 0,
            failure: None,
            stdout: None,
            calls: Calls::Unchecked,
            loaded: None,
        }
    }
}

async fn check(case: Case) {
    let name = case.name;
    let daemon = Daemon::start();
    let agent = daemon.start_agent("r1", case.agent).await;
    if case.script_dir_gone {
        std::fs::remove_dir_all(agent.script_dir()).unwrap();
    }
    let provider = provider(&daemon, "r1", 60);
    let handle = apply(&provider, case.config, case.commands).await;
    let outcome = wait(&provider, handle).await.unwrap();
    assert_eq!(outcome.exit_code, case.exit_code, "{name}: {outcome:?}");
    // The agent runs the script with its output and error in one stream.
    assert_eq!(outcome.stderr, "", "{name}: {outcome:?}");
    match (&case.failure, outcome.failure()) {
        (None, None) => {}
        (Some(expected), Some(failure)) if expected.matches(&failure) => {}
        (expected, got) => panic!("{name}: failure {got:?}, expected {expected:?}: {outcome:?}"),
    }
    if let Some(part) = case.stdout {
        assert!(outcome.stdout.contains(part), "{name}: {outcome:?}");
    }
    let calls = agent.sandbox().calls();
    match &case.calls {
        Calls::Exactly(expected) => assert_eq!(&calls, expected, "{name}"),
        Calls::Including(call) => assert!(calls.iter().any(|c| c == call), "{name}: {calls:?}"),
        Calls::Unchecked => {}
    }
    if let Some(loaded) = case.loaded {
        assert_eq!(
            agent.sandbox().loaded_config().unwrap(),
            loaded,
            "{name}: the config loaded"
        );
    }
}

#[tokio::test]
async fn an_empty_config_loads_the_default_config_and_the_commands_still_run() {
    check(Case {
        calls: Calls::Exactly(default_calls(&["set system host-name r1"])),
        ..Case::new("empty config", "set system host-name r1")
    })
    .await;
}

#[tokio::test]
async fn a_failing_script_reports_its_code_with_stderr_merged_into_stdout() {
    check(Case {
        exit_code: 3,
        failure: Some(Text::Contains("code 3")),
        stdout: Some("commit: configuration error"),
        ..Case::new("script exits 3", "echo 'commit: configuration error' >&2\nexit 3")
    })
    .await;
}

#[tokio::test]
async fn a_set_failure_that_exits_zero_fails_the_apply() {
    check(Case {
        failure: Some(Text::Contains("Set failed")),
        calls: Calls::Including("commit"),
        ..Case::new("set failed, exit 0", "set interfaces ethernet eth9 address INVALID")
    })
    .await;
}

#[tokio::test]
async fn an_agent_that_cannot_write_its_script_reports_why() {
    check(Case {
        script_dir_gone: true,
        exit_code: -1,
        failure: Some(Text::StartsWith("vrouter-daemon agent: create temp script:")),
        calls: Calls::Exactly(vec![]),
        ..Case::new("no script directory", "set x")
    })
    .await;
}

const INIT_CONFIG: &str =
    "config: |\n  system {\n      host-name from-init\n  }\ncommands: |\n  set system domain-name init.example\n";

#[tokio::test]
async fn an_agent_with_an_init_config_loads_it_instead_of_the_pushed_config() {
    check(Case {
        agent: AgentFlags {
            init_config: Some(INIT_CONFIG.into()),
            ..AgentFlags::default()
        },
        config: "system {\n    host-name pushed\n}\n",
        calls: Calls::Exactly(script_calls(
            "load /dev/stdin",
            &["set system domain-name init.example", "set system host-name pushed"],
        )),
        loaded: Some(b"system {\n    host-name from-init\n}\n\n"),
        ..Case::new("the init config wins over spec.config", "set system host-name pushed")
    })
    .await;
}

/// The daemon's API carries no apply id, so the provider keeps the record:
/// an id dispatched again by this process is not sent twice, and its result
/// is found by the id after the handle was lost; another process (a
/// registry of its own: the operator restarted) does not know the id.
#[tokio::test]
async fn an_apply_id_runs_once_per_process_and_its_record_outlives_the_handle() {
    let daemon = Daemon::start();
    let agent = daemon.start_agent("r1", AgentFlags::default()).await;
    let provider = provider(&daemon, "r1", 60);
    let apply = ApplyId::fresh(1);
    assert_eq!(provider.apply_record(&apply).await.unwrap(), ApplyRecord::Unknown);
    let handle = provider
        .exec_script(&apply, "", "set system host-name once", true)
        .await
        .unwrap();
    let again = provider
        .exec_script(&apply, "", "set system host-name once", true)
        .await
        .unwrap();
    assert_eq!(again, handle, "the same id is the same apply");
    let outcome = wait(&provider, handle).await.unwrap();
    assert!(outcome.succeeded());
    assert_eq!(
        provider.apply_record(&apply).await.unwrap(),
        ApplyRecord::Finished(outcome)
    );
    assert_eq!(count(&agent.sandbox().calls(), "commit"), 1);
    let restarted = provider_at(daemon.address(), "r1", 60, Arc::new(ExecRegistry::new()));
    assert_eq!(restarted.apply_record(&apply).await.unwrap(), ApplyRecord::Unknown);
}

#[tokio::test]
async fn what_the_agent_cannot_carry_is_refused_before_anything_is_sent() {
    let daemon = Daemon::start();
    let agent = daemon.start_agent("r1", AgentFlags::default()).await;
    let provider = provider(&daemon, "r1", 60);
    let refusals = [
        (
            "save: false",
            provider
                .exec_script(&ApplyId::fresh(1), "system {\n}\n", "", false)
                .await,
        ),
        (
            "the agent's delimiter",
            provider
                .exec_script(&ApplyId::fresh(1), "system {\n}\nVYOS_CONFIG_EOF\nset x", "", true)
                .await,
        ),
        (
            "a NUL byte",
            provider.exec_script(&ApplyId::fresh(1), "", "set a\0b", true).await,
        ),
        (
            "too large",
            provider
                .exec_script(&ApplyId::fresh(1), &"a".repeat(largest_plain_config() + 1), "", true)
                .await,
        ),
    ];
    for (what, result) in refusals {
        let err = result.unwrap_err();
        assert!(
            matches!(
                err,
                ProviderError::NotSupported { .. } | ProviderError::Render(_) | ProviderError::TooLarge { .. }
            ),
            "{what}: {err}"
        );
    }
    assert_eq!(
        agent.sandbox().calls(),
        Vec::<String>::new(),
        "nothing ran on the router"
    );
    assert!(
        !daemon.server_log().contains("apply_config agent="),
        "nothing reached the server"
    );
}

/// Why the delimiter check exists: sent as-is, the agent's script ends the
/// config at that line and runs the rest as commands.
#[tokio::test]
async fn a_config_line_equal_to_the_agents_delimiter_runs_the_rest_as_commands() {
    let daemon = Daemon::start();
    let agent = daemon.start_agent("r1", AgentFlags::default()).await;
    let response = raw_apply(
        &daemon,
        "r1",
        &serde_json::json!({"config": "system {\n}\nVYOS_CONFIG_EOF\nset injected by-the-config"}),
    )
    .await
    .unwrap();
    assert!(response.success, "{response:?}");
    let calls = agent.sandbox().calls();
    assert!(calls.contains(&"set injected by-the-config".to_string()), "{calls:?}");
    assert_eq!(agent.sandbox().loaded_config().unwrap(), b"system {\n}\n");
}

#[tokio::test]
async fn the_largest_config_the_agent_accepts_arrives_whole_and_one_byte_more_breaks_its_connection() {
    let daemon = Daemon::start();
    let agent = daemon.start_agent("r1", AgentFlags::default()).await;
    let provider = provider(&daemon, "r1", 120);
    let largest = largest_plain_config();
    let config = "a".repeat(largest);
    let handle = apply(&provider, &config, "").await;
    assert!(wait(&provider, handle).await.unwrap().succeeded());
    let loaded = agent.sandbox().loaded_config().unwrap();
    assert_eq!(loaded.len(), largest + 1);
    assert!(loaded.starts_with(config.as_bytes()) && loaded.ends_with(b"\n"));

    // One byte more, sent past the provider's check: the server takes it,
    // but the agent refuses the message and drops its connection, so the
    // apply never runs and the call comes back without a result.
    let response = raw_apply(&daemon, "r1", &serde_json::json!({"config": "a".repeat(largest + 1)}))
        .await
        .unwrap();
    assert!(!response.success && response.exit_code == 0, "{response:?}");
    assert_eq!(response.error_message, "context canceled");
    wait_for_log(&agent, "larger than max").await;
    assert_eq!(
        count(&agent.sandbox().calls(), "configure"),
        1,
        "the second apply never ran"
    );
}

#[tokio::test]
async fn a_timed_out_apply_still_runs_to_its_end_and_the_next_apply_waits_for_it() {
    let daemon = Daemon::start();
    let agent = daemon.start_agent("r1", AgentFlags::default()).await;
    let quick = provider(&daemon, "r1", 1);
    let handle = apply(
        &quick,
        "",
        &format!("{}\nset system host-name slow", agent.gate("slow")),
    )
    .await;
    let err = wait(&quick, handle).await.unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert!(err.apply_ended().is_some(), "{err:?}");
    assert_eq!(err.to_string(), "vrouter-daemon ApplyConfig timed out after 1s");
    let calls = agent.sandbox().calls();
    assert!(!calls.contains(&"save".to_string()), "the script still runs: {calls:?}");
    agent.open_gate("slow");

    // The next apply goes to the same agent, which runs one script at a time.
    let patient = provider(&daemon, "r1", 60);
    let next = apply(&patient, "", "set system host-name next").await;
    assert!(wait(&patient, next).await.unwrap().succeeded());
    let mut expected = default_calls(&["set system host-name slow"]);
    expected.extend(default_calls(&["set system host-name next"]));
    assert_eq!(agent.sandbox().calls(), expected);
}

#[tokio::test]
async fn a_frozen_agent_looks_connected_its_apply_times_out_and_runs_when_it_thaws() {
    let daemon = Daemon::start();
    let agent = daemon.start_agent("r1", AgentFlags::default()).await;
    let provider = provider(&daemon, "r1", 1);
    agent.freeze();
    assert!(
        provider.is_vm_running().await.unwrap(),
        "the server cannot tell a frozen agent"
    );
    let handle = apply(&provider, "", "set system host-name stale").await;
    let err = wait(&provider, handle).await.unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert_eq!(agent.sandbox().calls(), Vec::<String>::new());
    agent.thaw();
    let calls = wait_for_calls(&agent, "the timed-out apply, run after the thaw", |c| {
        c.contains(&"save".to_string())
    })
    .await;
    assert!(calls.contains(&"set system host-name stale".to_string()), "{calls:?}");
}

#[tokio::test]
async fn an_agent_killed_mid_apply_loses_the_result_and_is_no_longer_running() {
    let daemon = Daemon::start();
    let mut agent = daemon.start_agent("r1", AgentFlags::default()).await;
    let provider = provider(&daemon, "r1", 60);
    let handle = apply(&provider, "", "sleep 30\nset system host-name never").await;
    wait_for_calls(&agent, "the script started", |c| c.contains(&"configure".to_string())).await;
    agent.kill();
    let err = wait(&provider, handle).await.unwrap_err();
    assert!(err.is_exec_result_lost(), "{err}");
    assert!(err.to_string().contains("lost the agent"), "{err}");
    agent.wait_connected(&daemon, false).await;
    assert!(!provider.is_vm_running().await.unwrap());
}

#[tokio::test]
async fn an_apply_to_an_agent_that_is_not_connected_is_lost_and_nothing_runs() {
    let daemon = Daemon::start();
    let provider = provider(&daemon, "nobody", 60);
    assert!(!provider.is_vm_running().await.unwrap());
    let handle = apply(&provider, "", "set x").await;
    let err = wait(&provider, handle).await.unwrap_err();
    assert!(err.is_exec_result_lost(), "{err}");
    assert!(err.to_string().contains("not connected"), "{err}");
}

#[tokio::test]
async fn a_server_killed_mid_apply_loses_the_result_and_the_restarted_server_applies_again() {
    let mut daemon = Daemon::start();
    let agent = daemon.start_agent("r1", AgentFlags::default()).await;
    let provider = provider(&daemon, "r1", 60);
    let handle = apply(
        &provider,
        "",
        &format!("{}\nset system host-name first", agent.gate("first")),
    )
    .await;
    wait_for_calls(&agent, "the script started", |c| c.contains(&"configure".to_string())).await;
    daemon.kill_server();
    let err = wait(&provider, handle).await.unwrap_err();
    assert!(err.is_exec_result_lost(), "{err}");
    assert!(err.to_string().contains("broke during the apply"), "{err}");
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
    // The agent finishes the script all the same.
    agent.open_gate("first");
    wait_for_calls(&agent, "the first script's save", |c| c.contains(&"save".to_string())).await;

    daemon.restart_server();
    // The same provider (and its shared connection) reaches the new server;
    // the apply waits in Redis until the agent has reconnected.
    let handle = apply(&provider, "", "set system host-name second").await;
    assert!(wait(&provider, handle).await.unwrap().succeeded());
    let calls = agent.sandbox().calls();
    assert_eq!(count(&calls, "save"), 2, "{calls:?}");
    assert_eq!(calls.last().map(String::as_str), Some("save"));
    assert!(calls.contains(&"set system host-name second".to_string()), "{calls:?}");
}

#[tokio::test]
async fn after_a_server_crash_a_vanished_agent_looks_connected_and_its_apply_times_out() {
    let mut daemon = Daemon::start();
    let mut agent = daemon.start_agent("r1", AgentFlags::default()).await;
    daemon.kill_server();
    agent.kill();
    daemon.restart_server();
    // The crashed server could not remove the agent's entry from Redis: it
    // stays until its TTL (60 s after the last refresh) runs out.
    let provider = provider(&daemon, "r1", 1);
    assert!(provider.is_vm_running().await.unwrap());
    let handle = apply(&provider, "", "set x").await;
    let err = wait(&provider, handle).await.unwrap_err();
    assert!(err.is_timeout(), "{err}");
}

#[tokio::test]
async fn a_restarted_operator_loses_its_handle_and_its_new_apply_waits_for_the_old_one() {
    let daemon = Daemon::start();
    let agent = daemon.start_agent("r1", AgentFlags::default()).await;
    let before = provider_at(daemon.address(), "r1", 60, Arc::new(ExecRegistry::new()));
    let old = apply(&before, "", &format!("{}\nset system host-name old", agent.gate("old"))).await;
    wait_for_calls(&agent, "the old script started", |c| {
        c.contains(&"configure".to_string())
    })
    .await;

    // The restarted process has a new, empty registry.
    let after = provider_at(daemon.address(), "r1", 60, Arc::new(ExecRegistry::new()));
    let err = after.get_exec_status(old).await.unwrap_err();
    assert!(err.is_exec_result_lost(), "{err}");
    assert!(err.to_string().contains("restarted"), "{err}");
    let new = apply(&after, "", "set system host-name new").await;
    assert_ne!(new, old);
    agent.open_gate("old");
    assert!(wait(&after, new).await.unwrap().succeeded());
    let mut expected = default_calls(&["set system host-name old"]);
    expected.extend(default_calls(&["set system host-name new"]));
    assert_eq!(
        agent.sandbox().calls(),
        expected,
        "one script after the other, never both at once"
    );
}

#[tokio::test]
async fn with_the_rollback_policy_a_server_outage_loads_the_init_config_behind_the_operators_back() {
    let mut daemon = Daemon::start();
    let agent = daemon
        .start_agent(
            "r1",
            AgentFlags {
                init_config: Some("commands: |\n  set system host-name rolled-back\n".into()),
                disconnect_policy: Some("rollback".into()),
                init_max_retries: Some(1),
            },
        )
        .await;
    let provider = provider(&daemon, "r1", 60);
    let handle = apply(&provider, "system {\n    host-name pushed\n}\n", "").await;
    assert!(wait(&provider, handle).await.unwrap().succeeded());
    assert!(
        !agent.log().contains("overridden"),
        "the provider leaves the agent's policy alone"
    );

    daemon.kill_server();
    // The second failed reconnect (init-max-retries 1) applies the init config.
    let calls = wait_for_calls(&agent, "the init config applied", |c| count(c, "save") == 2).await;
    assert_eq!(
        calls[calls.len() - 6..],
        default_calls(&["set system host-name rolled-back"])[..]
    );
    // Once the server is back, the agent reconnects; the operator is told
    // nothing: the router now runs the init config.
    daemon.restart_server();
    agent.wait_connected(&daemon, true).await;
}

/// Counts the TCP connections it relays to `to`.
async fn counting_relay(to: std::net::SocketAddr) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                if let Ok(mut outbound) = TcpStream::connect(to).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    (address, accepted)
}

#[tokio::test]
async fn one_connection_per_address_is_shared() {
    let daemon = Daemon::start();
    let _a = daemon.start_agent("r1", AgentFlags::default()).await;
    let _b = daemon.start_agent("r2", AgentFlags::default()).await;
    let (address, accepted) = counting_relay(daemon.address().parse().unwrap()).await;
    let registry = Arc::new(ExecRegistry::new());
    for round in 0..3 {
        for agent in ["r1", "r2"] {
            // A fresh provider per call, as controllers build one per reconcile.
            let p = provider_at(address.clone(), agent, 60, registry.clone());
            assert!(p.is_vm_running().await.unwrap(), "round {round} {agent}");
            let h = apply(&p, "c", "").await;
            assert!(wait(&p, h).await.unwrap().succeeded());
        }
    }
    assert_eq!(
        accepted.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "every provider must reuse the one channel"
    );
}

#[tokio::test]
async fn a_bad_address_is_refused_when_the_provider_is_built() {
    let bad = DaemonProvider::new(
        &DaemonConfig {
            address: "no-port.example".into(),
            agent_id: "r1".into(),
            timeout_seconds: 60,
            ca_bundle: None,
        },
        DaemonOptions::default(),
    )
    .unwrap_err();
    assert!(bad.to_string().contains("needs a port"), "{bad}");
}
