//! Faults between the operator and the API server, while a real guest runs
//! an apply: the API server answering status writes with 500 and 429,
//! connections reset, answers that never come, the API server and etcd
//! killed and restarted, a watch expired (410 Gone) by etcd's compaction.
//!
//! The operator is the released binary as its own process, its kubeconfig
//! pointing at the real API server or at a real fault proxy (Toxiproxy) in
//! front of it; the guest is a QEMU VM reached through the in-test Proxmox
//! API, as in `real_guests.rs`, booted once for this file and lent to one
//! test at a time. Each fault hits mid-apply: the guest's `commit` is made
//! slow, so the script still runs when the fault begins and ends while it
//! lasts. For every fault the guarantee is the one of issue 21: every
//! generation ends `Applied` (none stays `Applying`), and the router's
//! journal shows exactly one run per generation, never two at once.

mod common;

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, WatchEvent, WatchParams};
use serde_json::json;
use vrouter_api::VRouterConfig;
use vrouter_test_apiserver::{Options, TestEnv};
use vrouter_test_peers::toxiproxy::Toxiproxy;
use vrouter_test_peers::vm::router::router_overlay;
use vrouter_test_peers::vm::{QemuGuest, SharedGuest};

use common::guest_rig::GuestRig;
use common::status_refusals::{Answer, StatusRefusals};
use common::wait_for;

static GUEST: SharedGuest<Arc<QemuGuest>> =
    SharedGuest::new(|| QemuGuest::boot("api-faults", router_overlay("vyos")).map(Arc::new));

/// Seconds each `commit` in the guest takes: the script is still running
/// when a fault begins right after its dispatch was recorded.
const SLOW_COMMIT: u32 = 4;

fn commands(label: &str) -> String {
    format!("set system host-name {label}\n")
}

/// The API server refuses status writes: first every write of a new
/// config (its write-ahead, so the guest must not be touched at all), then
/// the writes of an apply's result while the script ends, with 500 Internal
/// Error, then with 429 Too Many Requests and Retry-After 1.
#[tokio::test]
async fn status_writes_answered_500_and_429_mid_apply_end_applied_with_one_run_each() {
    let guest = GUEST.lease();
    let env = TestEnv::shared().await;
    let ns = env.namespace("api-refused").await;
    let refusals = StatusRefusals::register(env, &ns).await;
    let rig = GuestRig::start_in(env, ns, &guest, &env.apiserver_url()).await;
    let mut apply_ids = Vec::new();

    // 1. The write-ahead refused: no apply id is stored, so nothing starts.
    refusals.answer(Answer::Refuse {
        code: 500,
        retry_after: None,
    });
    let generation = rig.set_commands("edge", &commands("refused-ahead")).await;
    wait_for("two write-aheads refused", Duration::from_secs(120), || async {
        (refusals.refused("edge").len() >= 2).then_some(())
    })
    .await;
    assert!(
        rig.view.apply_journal().await.unwrap().is_empty(),
        "the guest was touched without a stored apply id"
    );
    assert!(
        refusals.refused("edge").iter().all(|r| r.phase == "Applying"),
        "only write-aheads were refused: {:?}",
        refusals.refused("edge")
    );
    refusals.answer(Answer::Allow);
    apply_ids.push(rig.applied("edge", generation).await.apply_id);

    // 2 and 3. The result's writes refused while the script ends.
    rig.view.set_commit_delay(SLOW_COMMIT).await.unwrap();
    for (code, retry_after) in [(500, None), (429, Some(1))] {
        let generation = rig.set_commands("edge", &commands(&format!("refused-{code}"))).await;
        let dispatched = rig.mid_apply("edge", generation).await;
        refusals.answer(Answer::Refuse { code, retry_after });
        rig.script_ended(&dispatched.apply_id).await;
        let results_refused = || {
            refusals
                .refused("edge")
                .into_iter()
                .filter(|r| r.code == code && r.observed_generation == generation && r.phase == "Applied")
                .count()
        };
        // 500: the reconcile fails, and the guest agent, which reports an
        // exit once, has forgotten it; the second write carries the result
        // recovered from the router's journal. 429: the operator's client
        // itself sends the write again after the server's Retry-After.
        wait_for(
            &format!("two result writes refused with {code}"),
            Duration::from_secs(180),
            || async { (results_refused() >= 2).then_some(()) },
        )
        .await;
        refusals.answer(Answer::Allow);
        let status = rig.applied("edge", generation).await;
        assert_eq!(
            status.apply_id, dispatched.apply_id,
            "the apply written ahead is the one recorded"
        );
        eprintln!(
            "{code}: {} result writes refused before the API server took one",
            results_refused()
        );
        apply_ids.push(status.apply_id);
    }
    rig.view.set_commit_delay(0).await.unwrap();
    rig.assert_ran_once_each(&apply_ids).await;
}

/// The operator reaches the API server only through Toxiproxy. Mid-apply,
/// and until the script has ended and the operator has met the fault:
///
/// - its connections are reset: every byte it sends ends the connection
///   (RST on new connections, FIN on those open), so requests fail at once;
/// - the API server's answers are dropped and each connection is closed
///   after 3 s without one (requests time out: on new connections already
///   the TLS handshake does);
/// - the answers are dropped and nothing is closed: requests on open
///   connections reach the API server and are carried out, but the
///   operator never hears so, and every request hangs until the proxy heals.
#[tokio::test]
async fn connections_reset_and_answers_lost_mid_apply_end_applied_with_one_run_each() {
    let guest = GUEST.lease();
    let env = TestEnv::shared().await;
    let toxiproxy = Toxiproxy::start();
    let proxy = toxiproxy.proxy("operator-to-apiserver", socket_of(&env.apiserver_url()));
    let rig = GuestRig::start(env, "api-toxics", &guest, &proxy.https_url()).await;
    let configs = rig.ns.api::<VRouterConfig>();
    rig.view.set_commit_delay(SLOW_COMMIT).await.unwrap();
    let faults = [
        ("reset", "reset_peer", "upstream", 0),
        ("answers-time-out", "timeout", "downstream", 3000),
        ("answers-black-holed", "timeout", "downstream", 0),
    ];
    let mut apply_ids = Vec::new();
    for (fault, toxic, stream, timeout) in faults {
        let generation = rig.set_commands("edge", &commands(fault)).await;
        let dispatched = rig.mid_apply("edge", generation).await;
        let failed_before = rig.failed_config_reconciles();
        proxy.add_toxic(fault, toxic, stream, json!({"timeout": timeout}));
        rig.script_ended(&dispatched.apply_id).await;
        if fault == "answers-black-holed" {
            // Nothing fails here, requests hang. A result write sent on an
            // open connection is stored without the operator knowing.
            let stored = vrouter_test_peers::eventually(Duration::from_secs(20), || async {
                let status = configs.get("edge").await.ok()?.status?;
                (status.observed_generation == generation && status.phase == vrouter_api::Phase::Applied).then_some(())
            })
            .await;
            eprintln!(
                "{fault}: the result write {} while its answer was lost",
                if stored.is_some() {
                    "was stored"
                } else {
                    "did not get through"
                }
            );
        } else {
            rig.operator_failed_since(failed_before).await;
        }
        proxy.remove_toxic(fault);
        let status = rig.applied("edge", generation).await;
        assert_eq!(status.apply_id, dispatched.apply_id);
        eprintln!(
            "{fault}: {} config reconciles failed meanwhile",
            rig.failed_config_reconciles() - failed_before
        );
        apply_ids.push(status.apply_id);
    }
    rig.view.set_commit_delay(0).await.unwrap();
    rig.assert_ran_once_each(&apply_ids).await;
}

/// etcd and kube-apiserver killed with SIGKILL while the guest runs a
/// script, restarted on the same data once the script has ended; then
/// killed again the moment the guest starts the next generation's script
/// (before, or just after, its handle is stored). The operator meets
/// refused connections, its watches resume against a new API server (whose
/// watch cache starts anew: 410 Gone, a re-list), and each generation ends
/// Applied with one run.
#[tokio::test]
async fn the_api_server_and_etcd_killed_mid_apply_and_restarted_end_applied_with_one_run_each() {
    let guest = GUEST.lease();
    let mut env = TestEnv::start().await.unwrap();
    let rig = GuestRig::start(&env, "api-restarted", &guest, &env.apiserver_url()).await;
    rig.view.set_commit_delay(SLOW_COMMIT).await.unwrap();
    let mut apply_ids = Vec::new();

    // Killed with the handle stored, restarted after the script ended.
    let generation = rig.set_commands("edge", &commands("killed-mid-apply")).await;
    let dispatched = rig.mid_apply("edge", generation).await;
    let failed_before = rig.failed_config_reconciles();
    env.kill();
    rig.script_ended(&dispatched.apply_id).await;
    rig.operator_failed_since(failed_before).await;
    let down = std::time::Instant::now();
    env.restart().await.unwrap();
    eprintln!(
        "the API server answered again {:?} after its restart began",
        down.elapsed()
    );
    let status = rig.applied("edge", generation).await;
    assert_eq!(status.apply_id, dispatched.apply_id);
    apply_ids.push(status.apply_id);

    // Killed as the guest starts the script.
    let generation = rig.set_commands("edge", &commands("killed-at-start")).await;
    let started = rig.next_run_started(&apply_ids).await;
    env.kill();
    rig.script_ended(&started).await;
    env.restart().await.unwrap();
    let status = rig.applied("edge", generation).await;
    assert_eq!(
        status.apply_id, started,
        "the run the guest started is the one recorded"
    );
    apply_ids.push(status.apply_id);

    rig.view.set_commit_delay(0).await.unwrap();
    rig.assert_ran_once_each(&apply_ids).await;
    assert!(rig.operator.log().contains("reconcile failed"));
}

/// A watch expired by etcd's compaction. The API server reaches etcd
/// through a second Toxiproxy proxy. With the operator partitioned from the
/// API server, the config gets a new generation; then the API server's link
/// to etcd is cut for a moment while etcd's revision moves on and etcd is
/// compacted. The API server's etcd client resumes its watch at a revision
/// compaction removed, so its watch cache re-lists from etcd and starts
/// anew: every watch resumed from before is answered 410 Gone (“too old
/// resource version”). When the partition heals, the operator's watches
/// resume, get 410, and re-list; the re-list is the only way it learns of
/// the new generation, which it then applies once.
#[tokio::test]
async fn a_watch_expired_by_etcd_compaction_re_lists_and_the_missed_generation_applies_once() {
    let guest = GUEST.lease();
    let toxiproxy = Toxiproxy::start();
    let etcd_port = free_port();
    let etcd_link = toxiproxy.proxy("apiserver-to-etcd", SocketAddr::from(([127, 0, 0, 1], etcd_port)));
    let env = TestEnv::start_with(Options {
        etcd_client_port: Some(etcd_port),
        apiserver_etcd_url: Some(format!("http://{}", etcd_link.listen)),
        ..Options::default()
    })
    .await
    .unwrap();
    let operator_link = toxiproxy.proxy("operator-to-apiserver", socket_of(&env.apiserver_url()));
    let rig = GuestRig::start(&env, "api-compacted", &guest, &operator_link.https_url()).await;
    let configs = rig.ns.api::<VRouterConfig>();
    let admin = env.client();

    let generation = rig.set_commands("edge", &commands("before-partition")).await;
    let first = rig.applied("edge", generation).await;
    let seen = configs.get("edge").await.unwrap().metadata.resource_version.unwrap();

    operator_link.partition();
    let generation = rig.set_commands("edge", &commands("during-partition")).await;
    let relists = watch_cache_initializations(&admin).await;
    etcd_link.disable();
    let mut revision = 0;
    for n in 0..3 {
        revision = env.etcd_put("/vrouter-test/revision", &n.to_string()).await.unwrap();
    }
    env.etcd_compact(revision).await.unwrap();
    etcd_link.enable();
    wait_for(
        "the watch cache to re-list from etcd",
        Duration::from_secs(120),
        || async { (watch_cache_initializations(&admin).await > relists).then_some(()) },
    )
    .await;
    // What the operator's watch will meet: its last version is gone.
    assert_eq!(watch_answer_from(&configs, &seen).await, Some(410));

    let lists_before = config_lists(&admin).await;
    operator_link.heal();
    let second = rig.applied("edge", generation).await;
    let lists = config_lists(&admin).await - lists_before;
    assert!(
        lists > 0,
        "the operator re-listed VRouterConfigs after its watch expired"
    );
    eprintln!("after the 410: {lists} LISTs of VRouterConfigs by the operator");
    rig.assert_ran_once_each(&[first.apply_id, second.apply_id]).await;
}

/// `host:port` of an `https://host:port` URL.
fn socket_of(url: &str) -> SocketAddr {
    url.trim_start_matches("https://").parse().unwrap()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port()
}

/// The code of the error a watch of `configs` from `version` is answered
/// with at once (`None`: it delivers events, the version is still served).
async fn watch_answer_from(configs: &Api<VRouterConfig>, version: &str) -> Option<u16> {
    let stream = configs.watch(&WatchParams::default().timeout(2), version).await;
    let first = match stream {
        Err(kube::Error::Api(e)) => return Some(e.code),
        Err(e) => panic!("watching from {version}: {e}"),
        Ok(stream) => stream.boxed().try_next().await,
    };
    match first {
        Ok(Some(WatchEvent::Error(e))) => Some(e.code),
        Ok(_) => None,
        Err(e) => panic!("watching from {version}: {e}"),
    }
}

/// A counter of the API server's `/metrics`: the sum of the series of
/// `metric` whose labels contain every one of `labels`; 0 while the
/// metrics cannot be read (the API server is losing its etcd link).
async fn counter(client: &kube::Client, metric: &str, labels: &[&str]) -> u64 {
    let request = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let Ok(text) = client.request_text(request).await else {
        return 0;
    };
    text.lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")) && labels.iter().all(|label| l.contains(label)))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// How often the API server's watch cache of VRouterConfigs was filled
/// from etcd: once at start, and again after each re-list.
async fn watch_cache_initializations(client: &kube::Client) -> u64 {
    counter(
        client,
        "apiserver_watch_cache_initializations_total",
        &["resource=\"vrouterconfigs\""],
    )
    .await
}

/// LISTs of VRouterConfigs the API server served. The operator's watches
/// list once at start and again only after a 410; the test itself never
/// lists them.
async fn config_lists(client: &kube::Client) -> u64 {
    counter(
        client,
        "apiserver_request_total",
        &["verb=\"LIST\"", "resource=\"vrouterconfigs\""],
    )
    .await
}
