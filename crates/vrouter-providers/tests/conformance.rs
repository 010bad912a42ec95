//! One contract, every provider: the promises of the `Provider` trait,
//! checked through `&dyn Provider` against KubeVirt (pods/exec and `virsh`
//! into a real qemu-ga), Proxmox VE (its REST API in front of a real
//! qemu-ga) and vrouter-daemon (the real server and agent). What only one
//! carrier does (pod choice, endpoint failover, the daemon's payload) is
//! tested in that provider's own file; `real_guests.rs` runs the guest
//! providers against QEMU guests.

mod common;

use std::time::Duration;

use vrouter_providers::ApplyId;
use vrouter_providers::{ApplyRecord, ExecStatus, Provider, ProviderError};
use vrouter_test_peers::daemon::{Agent, AgentFlags, Daemon};
use vrouter_test_peers::guest::GuestSandbox;
use vrouter_test_peers::poll_until_exited;

use common::{CONFIG, kubevirt, proxmox};

/// A router reached through one of the providers, with its peer.
enum Router {
    KubeVirt(kubevirt::Guest),
    Proxmox(proxmox::Guest),
    Daemon(Box<(Daemon, Agent)>),
}

const AGENT: &str = "router-a";

/// Two configure-mode lines, applied after `CONFIG` is loaded.
const COMMANDS: &str = "set system host-name r1\nset interfaces ethernet eth0 mtu 1500";

impl Router {
    /// One router per provider, each running and ready.
    async fn every_provider() -> Vec<Router> {
        let mut routers = Router::every_guest_provider().await;
        routers.push(Router::daemon().await);
        routers
    }

    /// The routers whose provider reaches a guest agent.
    async fn every_guest_provider() -> Vec<Router> {
        Router::every_guest_provider_of("vyos").await
    }

    /// The same, with guests of OS `os_id`.
    async fn every_guest_provider_of(os_id: &str) -> Vec<Router> {
        vec![
            Router::KubeVirt(kubevirt::guest(os_id).await),
            Router::Proxmox(proxmox::guest(os_id).await),
        ]
    }

    /// A router reached through the real vrouter-daemon.
    async fn daemon() -> Router {
        let daemon = Daemon::start();
        let agent = daemon.start_agent(AGENT, AgentFlags::default()).await;
        Router::Daemon(Box::new((daemon, agent)))
    }

    fn name(&self) -> &'static str {
        match self {
            Router::KubeVirt(_) => "kubevirt",
            Router::Proxmox(_) => "proxmox",
            Router::Daemon(..) => "vrouter-daemon",
        }
    }

    fn provider(&self) -> Box<dyn Provider> {
        match self {
            Router::KubeVirt(g) => Box::new(g.provider()),
            Router::Proxmox(g) => Box::new(g.provider()),
            Router::Daemon(peer) => Box::new(common::daemon::provider(&peer.0, AGENT, 60)),
        }
    }

    /// The router's side: its stand-ins for VyOS's commands (a `set`
    /// naming `INVALID` prints `Set failed` and `commit` still exits 0, as
    /// on VyOS), their call log and its config files.
    fn sandbox(&self) -> &GuestSandbox {
        match self {
            Router::KubeVirt(g) => &g.sandbox,
            Router::Proxmox(g) => &g.sandbox,
            Router::Daemon(peer) => peer.1.sandbox(),
        }
    }

    /// `guest-exec` commands the guest agent was sent so far: programs the
    /// provider started in the guest.
    fn guest_execs(&self) -> usize {
        match self {
            Router::KubeVirt(g) => g
                .api
                .execs()
                .iter()
                .filter(|e| {
                    serde_json::from_slice::<serde_json::Value>(&e.stdin).is_ok_and(|c| c["execute"] == "guest-exec")
                })
                .count(),
            Router::Proxmox(g) => g
                .pve
                .seen()
                .iter()
                .filter(|s| s.method == "POST" && s.path.ends_with("/agent/exec"))
                .count(),
            Router::Daemon(..) => unreachable!("not a guest provider"),
        }
    }

    /// Whether the provider reaches a guest agent (so it checks readiness
    /// and reads files), rather than the daemon's agent.
    fn is_guest(&self) -> bool {
        !matches!(self, Router::Daemon(..))
    }

    /// Stops the VM (for the daemon: its agent process dies).
    async fn stop(&mut self) {
        match self {
            Router::KubeVirt(g) => {
                let api = &g.api;
                api.put_vmi(kubevirt::NS, kubevirt::VM, kubevirt::UID, "Succeeded", "node-a")
            }
            Router::Proxmox(g) => g.pve.set_running(proxmox::VMID, false),
            Router::Daemon(peer) => {
                let (daemon, agent) = &mut **peer;
                agent.kill();
                agent.wait_connected(daemon, false).await;
            }
        }
    }
}

#[tokio::test]
async fn every_provider_applies_a_config_and_reports_the_outcome() {
    for router in Router::every_provider().await {
        let name = router.name();
        let p = router.provider();
        assert!(p.is_vm_running().await.unwrap(), "{name}");
        p.check_ready().await.unwrap_or_else(|e| panic!("{name}: {e}"));
        let handle = p.exec_script(&ApplyId::fresh(1), CONFIG, COMMANDS, true).await.unwrap();
        assert!(handle.get() > 0, "{name}");
        let outcome = poll_until_exited(&*p, handle).await.unwrap();
        assert_eq!(outcome.exit_code, 0, "{name}: {outcome:?}");
        assert_eq!(outcome.failure(), None, "{name}: {outcome:?}");
        assert!(outcome.succeeded(), "{name}");
        let sandbox = router.sandbox();
        assert_eq!(sandbox.loaded_config().as_deref(), Some(CONFIG.as_bytes()), "{name}");
        assert_eq!(
            sandbox.calls(),
            [
                "source /opt/vyatta/etc/functions/script-template",
                "configure",
                "load /dev/stdin",
                "set system host-name r1",
                "set interfaces ethernet eth0 mtu 1500",
                "commit",
                "save",
            ],
            "{name}"
        );
        let again = p.get_exec_status(handle).await;
        if router.is_guest() {
            // Ready means the router unit of the guest's flavor has run.
            assert_eq!(
                sandbox.systemctl_calls(),
                ["show -p SubState --value vyos-router.service"],
                "{name}"
            );
            // The guest agent forgets a pid once it reported the exit: a
            // later poll (say, after an operator restart) is a lost result,
            // not an error to retry.
            let err = again.unwrap_err();
            assert!(err.is_exec_result_lost(), "{name}: {err}");
        } else {
            // The daemon's result is kept: a poll can be repeated.
            assert_eq!(again.unwrap(), ExecStatus::Exited(outcome), "{name}");
        }
    }
}

/// The first apply on a router finds no state directory (after a boot
/// `/run` is empty): the router is asked, which creates it, root-only.
/// Later applies stage their script at once and start one program, the
/// wrapper; a second dispatch of an id still runs nothing.
#[tokio::test]
async fn every_guest_provider_asks_the_router_only_when_its_state_directory_is_missing() {
    use std::os::unix::fs::PermissionsExt;
    for router in Router::every_guest_provider().await {
        let name = router.name();
        let p = router.provider();
        let state = router.sandbox().state_dir();
        assert!(!state.exists(), "{name}: a fresh sandbox has no state directory");
        let before = router.guest_execs();
        let first = ApplyId::fresh(1);
        let outcome = poll_until_exited(&*p, p.exec_script(&first, "", COMMANDS, true).await.unwrap())
            .await
            .unwrap();
        assert!(outcome.succeeded(), "{name}: {outcome:?}");
        let mode = std::fs::metadata(&state).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{name}: the state directory is root-only");
        assert_eq!(router.guest_execs() - before, 2, "{name}: the query, then the wrapper");

        let before = router.guest_execs();
        let second = ApplyId::fresh(2);
        let outcome = poll_until_exited(&*p, p.exec_script(&second, "", COMMANDS, true).await.unwrap())
            .await
            .unwrap();
        assert!(outcome.succeeded(), "{name}: {outcome:?}");
        assert_eq!(router.guest_execs() - before, 1, "{name}: only the wrapper");

        // The same id again: staged, refused by the wrapper, and its poll
        // sends the caller to the router's record.
        let runs = router.sandbox().calls().len();
        let again = p.exec_script(&second, "", COMMANDS, true).await.unwrap();
        let lost = poll_until_exited(&*p, again).await.unwrap_err();
        assert!(lost.is_exec_result_lost(), "{name}: {lost}");
        assert_eq!(router.sandbox().calls().len(), runs, "{name}: nothing ran again");
        match p.apply_record(&second).await.unwrap() {
            vrouter_providers::ApplyRecord::Finished(o) => assert_eq!(o.exit_code, 0, "{name}"),
            other => panic!("{name}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn every_provider_fails_an_apply_whose_set_fails_though_it_exits_zero() {
    for router in Router::every_provider().await {
        let name = router.name();
        let p = router.provider();
        let handle = p
            .exec_script(&ApplyId::fresh(1), "", "set interfaces INVALID", true)
            .await
            .unwrap();
        let outcome = poll_until_exited(&*p, handle).await.unwrap();
        assert_eq!(
            outcome.exit_code, 0,
            "{name}: commit exits 0 after a failed set: {outcome:?}"
        );
        assert!(outcome.failure().unwrap().contains("Set failed"), "{name}: {outcome:?}");
        assert!(!outcome.succeeded(), "{name}");
    }
}

/// Texts VyOS's parser refuses, each with the line VyOS's `load` prints:
/// `ConfigTree`'s `Failed to parse config: ` and libvyosconfig's message.
const REFUSED_BY_VYOS: [(&str, &str); 3] = [
    (
        "system {\n    host-name r2\n",
        "Failed to parse config: Syntax error on line 3, character 1: Invalid syntax.",
    ),
    (
        "system {\n    host-name \"r2\n}\n",
        "Failed to parse config: Syntax error on line 2, character 21: Quoted string is missing the closing double quote",
    ),
    (
        "system {\n    host-name 'r2\n}\n",
        "Failed to parse config: Syntax error on line 2, character 21: Quoted string is missing the closing single quote",
    ),
];

/// The stub `load` of every test guest reads with VyOS's parser: a config
/// VyOS refuses reaches the apply's output with VyOS's message and changes
/// neither the running config nor the saved one; a good config still loads.
#[tokio::test]
async fn every_provider_reports_vyos_refusing_a_config_and_keeps_the_running_one() {
    for router in Router::every_provider().await {
        let name = router.name();
        let p = router.provider();
        let sandbox = router.sandbox();
        let good = poll_until_exited(&*p, p.exec_script(&ApplyId::fresh(1), CONFIG, "", true).await.unwrap())
            .await
            .unwrap();
        assert!(good.succeeded(), "{name}: {good:?}");
        assert_eq!(sandbox.running_config(), CONFIG.as_bytes(), "{name}");
        for (n, (config, message)) in (2..).zip(REFUSED_BY_VYOS) {
            let handle = p.exec_script(&ApplyId::fresh(n), config, "", true).await.unwrap();
            let outcome = poll_until_exited(&*p, handle).await.unwrap();
            // The daemon's agent runs the script with one output stream.
            let output = format!("{}{}", outcome.stdout, outcome.stderr);
            assert!(output.contains(message), "{name}: {config:?}: {outcome:?}");
            assert!(
                !outcome.succeeded(),
                "{name}: a config VyOS refused counted as applied: {outcome:?}"
            );
            assert_eq!(sandbox.running_config(), CONFIG.as_bytes(), "{name}: {config:?}");
            assert_eq!(
                std::fs::read(sandbox.config_boot_path()).unwrap(),
                CONFIG.as_bytes(),
                "{name}: {config:?}"
            );
        }
    }
}

/// `load` itself, in a guest's vbash: VyOS's refusal is status 1 and VyOS's
/// message on stderr, the running config untouched; what VyOS reads
/// replaces the running config with status 0.
#[test]
fn a_guests_load_fails_with_vyos_message_when_vyos_refuses_the_config() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = GuestSandbox::new(dir.path(), "vyos");
    let load = |config: &str| {
        let script = format!("load /dev/stdin <<'EOF'\n{config}EOF\n");
        std::process::Command::new(sandbox.dir().join("vbash"))
            .args(["-c", &script])
            .output()
            .unwrap()
    };
    let loaded = load(CONFIG);
    assert!(loaded.status.success(), "{loaded:?}");
    assert_eq!(loaded.stderr, b"");
    assert_eq!(sandbox.running_config(), CONFIG.as_bytes());
    for (config, message) in REFUSED_BY_VYOS {
        let refused = load(config);
        assert_eq!(refused.status.code(), Some(1), "{config:?}: {refused:?}");
        assert_eq!(
            String::from_utf8_lossy(&refused.stderr),
            format!("{message}\n"),
            "{config:?}"
        );
        assert_eq!(sandbox.running_config(), CONFIG.as_bytes(), "{config:?}");
    }
}

#[tokio::test]
async fn every_provider_fails_an_apply_that_exits_non_zero() {
    for router in Router::every_provider().await {
        let name = router.name();
        let p = router.provider();
        let handle = p
            .exec_script(&ApplyId::fresh(1), "", "echo broken >&2\nexit 3", true)
            .await
            .unwrap();
        let outcome = poll_until_exited(&*p, handle).await.unwrap();
        assert_eq!(outcome.exit_code, 3, "{name}: {outcome:?}");
        if router.is_guest() {
            assert_eq!(outcome.stderr, "broken\n", "{name}");
        } else {
            // The daemon's agent runs the script with one output stream.
            assert!(outcome.stdout.contains("broken"), "{name}: {outcome:?}");
            assert_eq!(outcome.stderr, "", "{name}");
        }
        assert!(outcome.failure().unwrap().contains("code 3"), "{name}: {outcome:?}");
    }
}

#[tokio::test]
async fn every_guest_provider_is_ready_only_when_its_flavors_router_unit_exited() {
    for router in Router::every_guest_provider_of("dozenos").await {
        let name = router.name();
        let p = router.provider();
        let sandbox = router.sandbox();
        p.check_ready().await.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            sandbox.systemctl_calls(),
            ["show -p SubState --value dozenos-router.service"],
            "{name}"
        );
        for substate in ["start", "running"] {
            sandbox.set_substate(substate);
            let err = p.check_ready().await.unwrap_err();
            assert!(
                matches!(&err, ProviderError::NotReady { unit, substate: s } if unit == "dozenos-router.service" && s == substate),
                "{name}: {err}"
            );
        }
        sandbox.set_os_id("debian");
        let err = p.check_ready().await.unwrap_err();
        assert!(
            matches!(&err, ProviderError::UnknownGuestOs { id, .. } if id == "debian"),
            "{name}: {err}"
        );
    }
}

#[tokio::test]
async fn every_guest_provider_reads_a_file_byte_for_byte() {
    let mut content = CONFIG.as_bytes().to_vec();
    content.extend_from_slice(b"/* binary tail: \x00\x01\xfe\xff */\n");
    for router in Router::every_guest_provider().await {
        let path = router.sandbox().put_file("config.boot", &content);
        let read = router.provider().read_file(&path).await;
        assert_eq!(read.unwrap(), content, "{}", router.name());
    }
}

#[tokio::test]
async fn a_stopped_vm_is_not_running() {
    for mut router in Router::every_provider().await {
        let p = router.provider();
        assert!(p.is_vm_running().await.unwrap(), "{}", router.name());
        router.stop().await;
        assert!(!p.is_vm_running().await.unwrap(), "{}", router.name());
    }
}

#[tokio::test]
async fn every_guest_provider_reads_the_startup_and_running_config() {
    for router in Router::every_guest_provider().await {
        let name = router.name();
        let p = router.provider();
        let outcome = poll_until_exited(&*p, p.exec_script(&ApplyId::fresh(1), CONFIG, "", true).await.unwrap())
            .await
            .unwrap();
        assert_eq!(outcome.failure(), None, "{name}: {outcome:?}");
        // The apply's save wrote the running config to config.boot, byte
        // for byte.
        assert_eq!(p.read_startup_config().await.unwrap(), CONFIG.as_bytes(), "{name}");
        assert_eq!(p.read_running_config().await.unwrap(), CONFIG.as_bytes(), "{name}");
        assert_eq!(p.guest_uptime().await.unwrap(), Duration::from_secs(3600), "{name}");
    }
    // vrouter-daemon has no file API: refused, never an empty answer.
    let p = Router::daemon().await.provider();
    for err in [
        p.read_startup_config().await.unwrap_err(),
        p.read_running_config().await.unwrap_err(),
        p.guest_uptime().await.unwrap_err(),
    ] {
        assert!(matches!(err, ProviderError::NotSupported { .. }), "{err}");
    }
}

#[tokio::test]
async fn every_guest_provider_delivers_a_script_larger_than_one_agent_write() {
    let config = common::large_config();
    for router in Router::every_guest_provider().await {
        let name = router.name();
        let p = router.provider();
        let outcome = poll_until_exited(&*p, p.exec_script(&ApplyId::fresh(1), &config, "", true).await.unwrap())
            .await
            .unwrap();
        assert_eq!(outcome.failure(), None, "{name}: {outcome:?}");
        let sandbox = router.sandbox();
        assert_eq!(sandbox.loaded_config().as_deref(), Some(config.as_bytes()), "{name}");
        match &router {
            // Each 48 KiB guest-file-write is one virsh exec, its agent
            // command on stdin.
            Router::KubeVirt(g) => {
                let writes = g
                    .api
                    .execs()
                    .iter()
                    .filter(|e| String::from_utf8_lossy(&e.stdin).contains("guest-file-write"))
                    .count();
                assert!(writes >= 4, "{writes} writes");
            }
            // Proxmox writes numbered parts the guest's shell joins and removes.
            Router::Proxmox(_) => {
                let leftovers: Vec<_> = std::fs::read_dir(sandbox.dir())
                    .unwrap()
                    .filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .filter(|n| n.contains(".part"))
                    .collect();
                assert!(leftovers.is_empty(), "part files left behind: {leftovers:?}");
            }
            Router::Daemon(..) => unreachable!("not a guest provider"),
        }
    }
}

/// A guest-agent pid whose wrapper was SIGKILLed while its script runs on
/// (the router's lock covers the script, `vrouter_qga::arbiter`): its poll
/// is a lost result, not the signal as the apply's failure, and the
/// router's record says the apply still runs; stopping it ends it with the
/// script's own signal exit, recorded.
#[tokio::test]
async fn every_guest_provider_sends_a_killed_wrappers_apply_to_the_routers_record() {
    for router in Router::every_guest_provider().await {
        let name = router.name();
        let p = router.provider();
        let sandbox = router.sandbox();
        sandbox.put_file("commit-delay", b"600");
        let apply = ApplyId::fresh(1);
        let handle = p.exec_script(&apply, CONFIG, COMMANDS, true).await.unwrap();
        let started = format!("{apply} started");
        for attempt in 0.. {
            if sandbox.apply_journal().contains(&started) {
                break;
            }
            assert!(attempt < 6000, "{name}: the apply never started");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let killed = std::process::Command::new("kill")
            .args(["-KILL", &handle.to_string()])
            .status()
            .unwrap();
        assert!(killed.success(), "{name}: kill -KILL {handle}: {killed}");
        let polled = loop {
            match p.get_exec_status(handle).await {
                Ok(ExecStatus::Running) => tokio::time::sleep(Duration::from_millis(20)).await,
                other => break other,
            }
        };
        assert!(
            matches!(&polled, Err(e) if e.is_exec_result_lost()),
            "{name}: the killed wrapper's poll sends the caller to the router: {polled:?}"
        );
        let record = p.apply_record(&apply).await.unwrap();
        assert_eq!(record, ApplyRecord::Running(handle), "{name}: its script runs on");
        p.stop_apply(&apply).await.unwrap();
        let record = loop {
            match p.apply_record(&apply).await.unwrap() {
                ApplyRecord::Running(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                other => break other,
            }
        };
        assert!(
            matches!(&record, ApplyRecord::Finished(outcome) if outcome.exit_code > 128),
            "{name}: the stopped script's exit is recorded: {record:?}"
        );
    }
}
