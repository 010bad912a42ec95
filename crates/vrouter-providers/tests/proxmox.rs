//! The Proxmox VE provider against an in-test HTTPS Proxmox API whose agent
//! endpoints drive a real qemu-ga; the apply script runs in that agent with
//! bash and stub config-mode functions.

mod common;

use std::time::Duration;

use vrouter_providers::ApplyId;
use vrouter_providers::proxmox::{ApiToken, ClusterClient, ClusterVm, ProxmoxClients, ProxmoxProvider, SharedClient};
use vrouter_providers::{ExecStatus, Provider, ProviderError};
use vrouter_test_peers::proxmox::{SilentEndpoint, refusing_endpoint};
use vrouter_test_peers::wait_for_exit;

use common::CONFIG;
use common::proxmox::{TOKEN_ID, TOKEN_SECRET, VMID, guest};

#[tokio::test]
async fn read_command_output_returns_stdout_and_names_a_failed_command() {
    let g = guest("vyos").await;
    let p = g.provider();
    let outcome = wait_for_exit(
        &p,
        p.exec_script(&ApplyId::fresh(1), CONFIG, "set system host-name r1", true)
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(outcome.failure(), None, "{outcome:?}");
    let show = g.sandbox.show_config_command();
    let running = p.read_command_output(&show).await.unwrap();
    assert_eq!(running, format!("{CONFIG}set system host-name r1\n").as_bytes());
    assert_eq!(running, g.sandbox.running_config());

    let mut wrong = show.clone();
    wrong[2] = "--bogus".into();
    let err = p.read_command_output(&wrong).await.unwrap_err();
    match &err {
        ProviderError::GuestCommand {
            command,
            exit_code,
            stderr,
        } => {
            assert!(command.ends_with("showConfig --bogus"), "{command}");
            assert_eq!(*exit_code, 2);
            assert!(stderr.contains("unexpected cli-shell-api call"), "{stderr}");
        }
        other => panic!("expected GuestCommand, got {other:?}"),
    }
}

#[tokio::test]
async fn save_false_and_empty_config_load_the_default() {
    let g = guest("vyos").await;
    let p = g.provider();
    let outcome = wait_for_exit(
        &p,
        p.exec_script(&ApplyId::fresh(1), "", "set system host-name r2", false)
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(outcome.failure(), None, "{outcome:?}");
    let calls = g.sandbox.calls();
    assert!(
        calls.contains(&"load /opt/vyatta/etc/config.boot.default".to_string()),
        "{calls:?}"
    );
    assert_eq!(
        calls.last().map(String::as_str),
        Some("commit"),
        "no save when save=false: {calls:?}"
    );
}

#[tokio::test]
async fn a_file_larger_than_one_file_read_or_missing_is_refused() {
    let g = guest("vyos").await;
    let p = g.provider();
    let path = g.sandbox.put_file("config.boot", CONFIG.as_bytes());
    // Bigger than what Proxmox returns in one file-read: refused, not truncated.
    g.pve.set_max_read(64);
    let err = p.read_file(&path).await.unwrap_err();
    assert!(matches!(err, ProviderError::TooLarge { .. }), "{err}");

    let err = p.read_file(&g.agent.guest_path("missing")).await.unwrap_err();
    assert!(matches!(err, ProviderError::Agent { .. }), "{err}");
}

#[tokio::test]
async fn unreachable_endpoints_are_skipped_in_order() {
    let g = guest("vyos").await;
    let silent = SilentEndpoint::start().await;
    let refused = refusing_endpoint().await;
    let p = ProxmoxProvider::new(g.settings(vec![refused.clone(), silent.url(), g.pve.url(0)])).unwrap();
    assert!(p.is_vm_running().await.unwrap());
    p.check_ready().await.unwrap();

    let down = ProxmoxProvider::new(g.settings(vec![refused.clone(), silent.url()])).unwrap();
    let err = down.is_vm_running().await.unwrap_err();
    match &err {
        ProviderError::Unreachable { attempts } => {
            assert_eq!(attempts.0.len(), 2, "{err}");
            assert!(attempts.0[0].reason.contains("TCP connect failed"), "{err}");
            assert!(attempts.0[1].reason.contains("within"), "{err}");
        }
        other => panic!("expected Unreachable, got {other}"),
    }
}

#[tokio::test]
async fn an_http_error_answer_is_not_a_failover() {
    let mut g = guest("vyos").await;
    let second = g.pve.add_endpoint().await;
    let mut settings = g.settings(vec![g.pve.url(0), second]);
    settings.token = ApiToken::new(TOKEN_ID, "wrong-secret");
    let p = ProxmoxProvider::new(settings).unwrap();
    let err = p.is_vm_running().await.unwrap_err();
    assert!(err.is_unauthorized(), "{err}");
    assert!(err.to_string().contains("401"), "{err}");
    assert!(g.pve.seen().iter().all(|s| s.endpoint == 0), "{:?}", g.pve.seen());
}

#[tokio::test]
async fn tls_verification_is_on_unless_skipped() {
    let g = guest("vyos").await;
    let mut settings = g.settings(vec![g.pve.url(0)]);
    settings.trust.insecure_skip_verify = false;
    let p = ProxmoxProvider::new(settings).unwrap();
    let err = p.is_vm_running().await.unwrap_err();
    assert!(matches!(err, ProviderError::CertificateNotTrusted { .. }), "{err}");
    assert!(
        err.to_string().contains("certificate refused") && err.to_string().contains("system roots"),
        "{err}"
    );
    assert!(
        g.pve.seen().is_empty(),
        "no request may be sent over an unverified connection"
    );
}

#[tokio::test]
async fn missing_vm_is_not_running() {
    let g = guest("vyos").await;
    let p = g.provider();
    g.pve.set_absent_status(404);
    g.pve.remove_vm(VMID);
    assert!(!p.is_vm_running().await.unwrap());

    // The same without a cached node, and with Proxmox's own 500 answer.
    let g = guest("vyos").await;
    g.pve.remove_vm(VMID);
    let mut settings = g.settings(vec![g.pve.url(0)]);
    settings.cached_node = String::new();
    let p = ProxmoxProvider::new(settings).unwrap();
    assert!(!p.is_vm_running().await.unwrap());
    let err = p.check_ready().await.unwrap_err();
    assert!(err.is_vm_not_found(), "{err}");
}

#[tokio::test]
async fn stopped_vm_is_not_running_and_not_ready() {
    let g = guest("vyos").await;
    g.pve.set_running(VMID, false);
    let p = g.provider();
    assert!(!p.is_vm_running().await.unwrap());
    let err = p.check_ready().await.unwrap_err();
    assert!(matches!(err, ProviderError::AgentUnavailable { .. }), "{err}");
}

#[tokio::test]
async fn vm_that_moved_is_found_on_its_new_node() {
    let g = guest("vyos").await;
    let p = g.provider();
    g.pve.move_vm(VMID, "pve2");
    assert!(p.is_vm_running().await.unwrap());
    assert_eq!(p.current_node().as_deref(), Some("pve2"));
    g.pve.move_vm(VMID, "pve3");
    let outcome = wait_for_exit(&p, p.exec_script(&ApplyId::fresh(1), CONFIG, "", true).await.unwrap()).await;
    assert_eq!(outcome.failure(), None, "{outcome:?}");
    assert_eq!(p.current_node().as_deref(), Some("pve3"));
}

#[tokio::test]
async fn apply_that_never_exits_stays_running() {
    let g = guest("vyos").await;
    let p = g.provider();
    let handle = p
        .exec_script(&ApplyId::fresh(1), "", "set system host-name r1", true)
        .await
        .unwrap();
    g.pve.stall_exec_status(VMID, true);
    for _ in 0..20 {
        assert_eq!(p.get_exec_status(handle).await.unwrap(), ExecStatus::Running);
    }
    g.pve.stall_exec_status(VMID, false);
    assert_eq!(wait_for_exit(&p, handle).await.failure(), None);
}

/// Collects everything the provider prints, says or logs on its failure
/// paths, and checks the token secret is in none of it.
#[tokio::test]
async fn the_token_secret_never_appears_in_errors_debug_or_logs() {
    let logs = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
    let writer = {
        let logs = logs.clone();
        move || LogWriter(logs.clone())
    };
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(writer)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    // reqwest logs with `log` (its connections, by URL): bring those in too.
    let _ = tracing_log::LogTracer::init();

    let g = guest("vyos").await;
    let silent = SilentEndpoint::start().await;
    let mut texts = Vec::new();
    let mut settings = g.settings(vec![refusing_endpoint().await, silent.url(), g.pve.url(0)]);
    settings.cached_node = "elsewhere".into();
    let p = ProxmoxProvider::new(settings.clone()).unwrap();
    texts.push(format!("{p:?} {settings:?}"));
    assert!(p.is_vm_running().await.unwrap());
    g.pve.set_token(TOKEN_ID, "rotated");
    for err in [
        p.is_vm_running().await.unwrap_err(),
        p.read_file("/nonexistent").await.unwrap_err(),
        p.check_ready().await.unwrap_err(),
    ] {
        texts.push(format!("{err} {err:?}"));
    }
    let down = ProxmoxProvider::new(g.settings(vec![silent.url()])).unwrap();
    let err = down.is_vm_running().await.unwrap_err();
    texts.push(format!("{err} {err:?}"));
    // A TLS failure, and a request sent that never got its answer: error
    // paths where reqwest's own error (which names the URL) is read.
    let mut verified = g.settings(vec![g.pve.url(0)]);
    verified.trust.insecure_skip_verify = false;
    let err = ProxmoxProvider::new(verified)
        .unwrap()
        .is_vm_running()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("certificate refused"), "{err}");
    texts.push(format!("{err} {err:?}"));
    let mut stalled = g.settings(vec![g.pve.url(0)]);
    stalled.request_timeout = Duration::from_millis(300);
    g.pve.set_token(TOKEN_ID, TOKEN_SECRET);
    g.pve.stall_endpoint(0, true);
    let err = ProxmoxProvider::new(stalled)
        .unwrap()
        .exec_script(&ApplyId::fresh(1), "", "set system host-name r1", true)
        .await
        .unwrap_err();
    g.pve.stall_endpoint(0, false);
    // An apply starts by asking the router about its id, an `agent/exec`
    // that is never sent elsewhere once sent: it times out as itself.
    let message = err.to_string();
    assert!(
        message.contains("agent/exec") && message.contains("timed out after"),
        "{err}"
    );
    texts.push(format!("{err} {err:?}"));
    texts.push(String::from_utf8_lossy(&logs.lock().unwrap()).into_owned());
    for text in &texts {
        assert!(!text.contains(TOKEN_SECRET), "the token secret leaked into: {text}");
        assert!(
            !text.contains("5f1c0b1e"),
            "part of the token secret leaked into: {text}"
        );
    }
    assert!(
        texts.iter().any(|t| t.contains("Proxmox VM moved")),
        "the log capture saw nothing"
    );
    assert!(
        texts.iter().any(|t| t.contains("starting new connection")),
        "the log capture did not see reqwest's records"
    );
}

struct LogWriter(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn cluster_listing_and_guest_uptime_for_node_and_reboot_tracking() {
    let mut g = guest("vyos").await;
    let refused = refusing_endpoint().await;
    let second = g.pve.add_endpoint().await;
    let cluster = ClusterClient::new(
        &[refused, second],
        ApiToken::new(TOKEN_ID, TOKEN_SECRET),
        true,
        Duration::from_millis(500),
        Duration::from_secs(10),
    )
    .unwrap();
    g.pve.add_vm(101, "pve2", g.agent.socket_path());
    g.pve.set_uptime(101, 42);
    g.pve.set_running(101, false);
    assert_eq!(
        cluster.vms().await.unwrap(),
        [
            ClusterVm {
                vmid: 100,
                node: "pve1".into(),
                running: true,
                uptime: 3600
            },
            ClusterVm {
                vmid: 101,
                node: "pve2".into(),
                running: false,
                uptime: 0
            },
        ]
    );
    g.pve.set_uptime(VMID, 12);
    g.pve.move_vm(VMID, "pve3");
    let vm = cluster
        .vms()
        .await
        .unwrap()
        .into_iter()
        .find(|v| v.vmid == VMID)
        .unwrap();
    assert_eq!((vm.node.as_str(), vm.uptime), ("pve3", 12));

    let uptime = g.provider().guest_uptime().await.unwrap();
    assert!(uptime > Duration::ZERO, "{uptime:?}");

    g.pve.set_token(TOKEN_ID, "rotated");
    assert!(cluster.vms().await.unwrap_err().is_unauthorized());
}

#[tokio::test]
async fn a_sent_exec_is_never_repeated_on_another_endpoint() {
    let mut g = guest("vyos").await;
    let second = g.pve.add_endpoint().await;
    let mut settings = g.settings(vec![g.pve.url(0), second]);
    settings.request_timeout = Duration::from_millis(300);
    let p = ProxmoxProvider::new(settings).unwrap();
    g.pve.stall_endpoint(0, true);

    // Reads are safe to repeat: the second endpoint answers.
    assert!(p.is_vm_running().await.unwrap());
    // The script write is idempotent and fails over too; the exec that would
    // start it may already have run on the first endpoint, so it is not re-sent.
    let err = p
        .exec_script(&ApplyId::fresh(1), "", "set system host-name r1", true)
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert_exec_sent_once_to(&g.pve, 0);
}

#[tokio::test]
async fn one_connection_serves_every_request_and_provider_of_a_cluster_until_its_token_changes() {
    let g = guest("vyos").await;
    let clients = ProxmoxClients::default();
    let shared = |token: ApiToken| {
        let mut settings = g.settings(vec![g.pve.url(0)]);
        settings.token = token;
        settings.shared_client = Some(SharedClient {
            clients: clients.clone(),
            cluster: "site/pve".into(),
        });
        settings
    };
    // One reconcile: readiness, the apply and its exec-status polls.
    let first = ProxmoxProvider::new(shared(ApiToken::new(TOKEN_ID, TOKEN_SECRET))).unwrap();
    first.check_ready().await.unwrap();
    let outcome = wait_for_exit(
        &first,
        first
            .exec_script(&ApplyId::fresh(1), CONFIG, "set system host-name r1", true)
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(outcome.failure(), None, "{outcome:?}");
    // The next reconcile builds its provider again.
    let next = ProxmoxProvider::new(shared(ApiToken::new(TOKEN_ID, TOKEN_SECRET))).unwrap();
    assert!(next.is_vm_running().await.unwrap());
    let requests = g.pve.seen().len();
    assert!(requests >= 8, "{requests} requests");
    assert_eq!(g.pve.tls_handshakes(), 1, "one handshake for {requests} requests");

    // A rotated token is a new client: the old one is not used again.
    g.pve.set_token(TOKEN_ID, "rotated");
    let rotated = ProxmoxProvider::new(shared(ApiToken::new(TOKEN_ID, "rotated"))).unwrap();
    assert!(rotated.is_vm_running().await.unwrap());
    assert_eq!(g.pve.tls_handshakes(), 2);
    assert_eq!(clients.len(), 1, "the cluster's old client is dropped");

    // A provider without a shared client keeps its own connection.
    let mut own = g.settings(vec![g.pve.url(0)]);
    own.token = ApiToken::new(TOKEN_ID, "rotated");
    let alone = ProxmoxProvider::new(own).unwrap();
    assert!(alone.is_vm_running().await.unwrap());
    assert!(alone.is_vm_running().await.unwrap());
    assert_eq!(g.pve.tls_handshakes(), 3);
}

#[tokio::test]
async fn a_pooled_connection_to_a_stalled_endpoint_is_not_a_way_around_the_failover() {
    let mut g = guest("vyos").await;
    let second = g.pve.add_endpoint().await;
    let clients = ProxmoxClients::default();
    let mut settings = g.settings(vec![g.pve.url(0), second]);
    settings.request_timeout = Duration::from_millis(300);
    settings.shared_client = Some(SharedClient {
        clients: clients.clone(),
        cluster: "site/pve".into(),
    });
    let p = ProxmoxProvider::new(settings.clone()).unwrap();
    // A connection to the first endpoint is open and idle in the pool.
    assert!(p.is_vm_running().await.unwrap());
    g.pve.stall_endpoint(0, true);
    // Reads fail over; the exec sent over the first endpoint is not re-sent.
    let p = ProxmoxProvider::new(settings).unwrap();
    assert!(p.is_vm_running().await.unwrap());
    let err = p
        .exec_script(&ApplyId::fresh(1), "", "set system host-name r1", true)
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert_exec_sent_once_to(&g.pve, 0);
    // Endpoint 0 answers again: requests go back to it first.
    g.pve.stall_endpoint(0, false);
    let before = g.pve.seen().len();
    assert!(p.is_vm_running().await.unwrap());
    assert_eq!(g.pve.seen()[before].endpoint, 0);
}

#[tokio::test]
async fn concurrent_polls_of_a_cluster_s_vms_cost_one_listing_and_read_stopped_and_absent_vms() {
    let g = guest("vyos").await;
    for vmid in 101..=104 {
        g.pve.add_vm(vmid, "pve2", g.agent.socket_path());
    }
    g.pve.set_running(102, false);
    let refused = refusing_endpoint().await;
    let clients = ProxmoxClients::default();
    let provider_of = |vmid: i64, secret: &str| {
        // The first endpoint refuses: the listing keeps the failover order.
        let mut settings = g.settings(vec![refused.clone(), g.pve.url(0)]);
        settings.vmid = vmid;
        settings.token = ApiToken::new(TOKEN_ID, secret);
        settings.shared_client = Some(SharedClient {
            clients: clients.clone(),
            cluster: "site/pve".into(),
        });
        ProxmoxProvider::new(settings).unwrap()
    };
    let listings = |from: usize| {
        let seen = g.pve.seen();
        assert!(
            seen[from..].iter().all(|s| s.path == "/api2/json/cluster/resources"),
            "only listings, no status/current: {:?}",
            &seen[from..]
        );
        seen.len() - from
    };
    // 105 never existed; 102 is stopped.
    let vmids = [VMID, 101, 102, 103, 104, 105];
    let polls = |secret: &'static str| {
        let providers: Vec<_> = vmids.iter().map(|&vmid| provider_of(vmid, secret)).collect();
        async move {
            futures::future::join_all(providers.iter().map(|p| p.is_vm_running_polled()))
                .await
                .into_iter()
                .map(|r| r.unwrap())
                .collect::<Vec<bool>>()
        }
    };

    let before = g.pve.seen().len();
    assert_eq!(polls(TOKEN_SECRET).await, [true, true, false, true, true, false]);
    assert_eq!(listings(before), 1, "six concurrent polls, one listing");

    // A rotated token is a new client and a new snapshot: the next polls
    // ask again and see the VM destroyed meanwhile as not running.
    g.pve.remove_vm(101);
    g.pve.set_token(TOKEN_ID, "rotated");
    let before = g.pve.seen().len();
    assert_eq!(polls("rotated").await, [true, false, false, true, true, false]);
    assert_eq!(listings(before), 1);

    // A listing that fails is an error, not "not running".
    let stale = provider_of(VMID, TOKEN_SECRET);
    let err = stale.is_vm_running_polled().await.unwrap_err();
    assert!(err.is_unauthorized(), "{err}");
    assert!(!err.to_string().contains(TOKEN_SECRET), "{err}");
}

/// One `agent/exec` was sent in all, to `endpoint`: an exec whose answer may
/// be lost is never sent again, on that endpoint or another.
fn assert_exec_sent_once_to(pve: &vrouter_test_peers::proxmox::FakeProxmox, endpoint: usize) {
    let execs: Vec<_> = pve
        .seen()
        .into_iter()
        .filter(|s| s.path.ends_with("/agent/exec"))
        .collect();
    assert_eq!(execs.len(), 1, "{execs:?}");
    assert_eq!(execs[0].endpoint, endpoint);
}
