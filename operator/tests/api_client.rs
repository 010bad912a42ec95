//! The operator's Kubernetes client (`vrouter_providers::api_client`) and
//! its object lookups against a real API server, with the faults made for
//! real: a fault proxy (Toxiproxy) that black-holes connections, and the
//! API server itself answering 429 and 503 with `Retry-After: 3600` (a
//! validating webhook's denial, `common::status_refusals`).
//!
//! What each proves:
//! - a request on a connection that silently died ends at its deadline, the
//!   next one gets through, and a watch streams on past that deadline;
//! - a 429/503 asking for an hour's wait is sent again a bounded number of
//!   times, each wait capped, and then handed to the caller;
//! - one ProxmoxCluster's lookup hanging on a black-holed connection stalls
//!   only the routers that need that object: the others keep applying, and
//!   the stalled router applies once its lookups get through again.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, Patch, PatchParams, WatchEvent, WatchParams};
use serde_json::json;
use vrouter_api::{Phase, ProxmoxCluster, VRouterConfig};
use vrouter_providers::api_client::{self, ApiTimeouts, retry};
use vrouter_providers::lookup_cache::{self, CachedLookup};
use vrouter_providers::{KubeLookup, ObjectLookup, ProviderError};
use vrouter_test_apiserver::TestEnv;
use vrouter_test_peers::toxiproxy::{Proxy, Toxiproxy};

use common::status_refusals::{Answer, StatusRefusals};
use common::{create, final_phase, site_with_lookup, wait_for};

/// The operator's client (the production stack) reaching the API server
/// at `url` with the harness's admin credentials.
fn operator_client(env: &TestEnv, url: &str, timeouts: &ApiTimeouts) -> kube::Client {
    let mut config = env.config().clone();
    config.cluster_url = url.parse().unwrap();
    api_client::client(config, timeouts).expect("the operator's client builds")
}

fn apiserver_socket(env: &TestEnv) -> std::net::SocketAddr {
    env.apiserver_url().trim_start_matches("https://").parse().unwrap()
}

/// Every answer from the API server dropped, on open connections and new
/// ones, with nothing closed: a connection that died without a word.
fn black_hole(proxy: &Proxy) {
    proxy.add_toxic("black-hole", "timeout", "downstream", json!({"timeout": 0}));
}

/// Far longer than any deadline of the client: a call still running then
/// hangs, which is the failure these tests look for.
const HANG: Duration = Duration::from_secs(180);

#[tokio::test]
async fn a_request_on_a_black_holed_connection_ends_at_its_deadline_while_a_watch_streams_past_it() {
    let env = TestEnv::shared().await;
    let ns = env.namespace("kc-deadline").await;
    let toxiproxy = Toxiproxy::start();
    let proxy = toxiproxy.proxy("operator-to-apiserver", apiserver_socket(env));
    let timeouts = ApiTimeouts {
        request: Duration::from_secs(3),
        ..ApiTimeouts::default()
    };
    let client = operator_client(env, &proxy.https_url(), &timeouts);
    let configs: Api<VRouterConfig> = Api::namespaced(client.clone(), ns.name());

    // A watch is not cut at the request deadline: an event made after the
    // deadline has passed arrives on it.
    let params = WatchParams::default().timeout(30);
    let mut events = configs.watch(&params, "0").await.unwrap().boxed();
    tokio::time::sleep(timeouts.request * 2).await;
    create::<VRouterConfig>(
        &ns,
        json!({"metadata": {"name": "late"}, "spec": {"targetRef": {"name": "none"}}}),
    )
    .await;
    let added = tokio::time::timeout(HANG, async {
        loop {
            match events.try_next().await {
                Ok(Some(WatchEvent::Added(config))) => return config.metadata.name,
                Ok(Some(WatchEvent::Bookmark(_))) => continue,
                other => panic!("the watch ended before the event: {other:?}"),
            }
        }
    })
    .await
    .expect("the event arrived on the watch");
    assert_eq!(added.as_deref(), Some("late"));
    drop(events);

    // A get sent on an open connection that then goes silent (the get
    // before leaves its connection idle in the pool, and the next reuses
    // it) ends with an error at the deadline.
    configs.get("late").await.unwrap();
    black_hole(&proxy);
    let stalled = tokio::time::timeout(HANG, configs.get("late"))
        .await
        .unwrap_or_else(|_| panic!("a get on a black-holed connection still hung after {HANG:?}"));
    let error = stalled.expect_err("no answer came through the black hole").to_string();
    assert!(error.contains("request deadline"), "{error}");

    // The client is not stuck on the dead connection.
    proxy.remove_toxic("black-hole");
    let config = tokio::time::timeout(HANG, configs.get("late"))
        .await
        .expect("the get after the black hole finished")
        .unwrap();
    assert_eq!(config.metadata.name.as_deref(), Some("late"));
}

#[tokio::test]
async fn a_429_or_503_asking_for_an_hour_is_sent_again_a_bounded_number_of_times_with_capped_waits() {
    let env = TestEnv::shared().await;
    let ns = env.namespace("kc-retry").await;
    let refusals = StatusRefusals::register(env, &ns).await;
    create::<VRouterConfig>(
        &ns,
        json!({"metadata": {"name": "edge"}, "spec": {"targetRef": {"name": "none"}}}),
    )
    .await;
    let client = operator_client(env, &env.apiserver_url(), &ApiTimeouts::default());
    let configs: Api<VRouterConfig> = Api::namespaced(client, ns.name());
    let status = Patch::Merge(json!({"status": {"phase": "Applying", "observedGeneration": 1}}));
    for code in [429, 503] {
        let before = refusals.refused("edge").len();
        refusals.answer(Answer::Refuse {
            code,
            retry_after: Some(3600),
        });
        let answered = tokio::time::timeout(HANG, configs.patch_status("edge", &PatchParams::default(), &status))
            .await
            .unwrap_or_else(|_| {
                panic!("a status write refused with {code} and Retry-After 3600 still waited after {HANG:?}")
            });
        match answered {
            Err(kube::Error::Api(e)) => assert_eq!(e.code, code),
            other => panic!("expected the {code} handed to the caller, got {other:?}"),
        }
        let sent = refusals.refused("edge").len() - before;
        assert_eq!(
            sent,
            1 + retry::MAX_RETRIES as usize,
            "the write and its retries reached the API server"
        );
    }
    refusals.answer(Answer::Allow);
    let written = configs
        .patch_status("edge", &PatchParams::default(), &status)
        .await
        .unwrap();
    assert_eq!(written.status.unwrap().phase, Phase::Applying);
}

/// The operator's lookups, each sent through one of two clients by the
/// object's namespace: those of the stalled site through a proxy that
/// black-holes them, the others through the operator's own. It counts the
/// reads of the stalled site that began and those that ended (with an
/// answer or an error; a read abandoned at the cache's deadline never ends).
struct ByNamespace {
    stalled_prefix: &'static str,
    stalled: KubeLookup,
    others: KubeLookup,
    stalled_reads: AtomicUsize,
    stalled_reads_ended: AtomicUsize,
}

impl ByNamespace {
    async fn read<T>(
        &self,
        namespace: &str,
        read: impl AsyncFnOnce(&KubeLookup) -> Result<T, ProviderError>,
    ) -> Result<T, ProviderError> {
        if !namespace.starts_with(self.stalled_prefix) {
            return read(&self.others).await;
        }
        self.stalled_reads.fetch_add(1, Ordering::SeqCst);
        let answer = read(&self.stalled).await;
        self.stalled_reads_ended.fetch_add(1, Ordering::SeqCst);
        answer
    }
}

#[async_trait]
impl ObjectLookup for ByNamespace {
    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Arc<Secret>>, ProviderError> {
        self.read(namespace, async |l| l.secret(namespace, name).await).await
    }

    async fn proxmox_cluster(&self, namespace: &str, name: &str) -> Result<Option<Arc<ProxmoxCluster>>, ProviderError> {
        self.read(namespace, async |l| l.proxmox_cluster(namespace, name).await)
            .await
    }
}

async fn apply(ns: &vrouter_test_apiserver::TestNamespace, target: &str, host_name: &str) {
    create::<VRouterConfig>(
        ns,
        json!({"metadata": {"name": target}, "spec": {"targetRef": {"name": target},
            "commands": format!("set system host-name {host_name}\n")}}),
    )
    .await;
}

#[tokio::test]
async fn a_black_holed_proxmox_cluster_lookup_stalls_only_its_routers_and_they_apply_after_it_heals() {
    let env = TestEnv::shared().await;
    let toxiproxy = Toxiproxy::start();
    let operator_link = toxiproxy.proxy("operator-to-apiserver", apiserver_socket(env));
    let lookup_link = toxiproxy.proxy("stalled-lookups-to-apiserver", apiserver_socket(env));
    let timeouts = ApiTimeouts::default();
    let client = operator_client(env, &operator_link.https_url(), &timeouts);
    let stalled_client = operator_client(env, &lookup_link.https_url(), &timeouts);
    // An open connection, idle in the pool, for the stalled site's first
    // read: it goes silent under the black hole without being closed.
    Api::<Namespace>::all(stalled_client.clone())
        .get("default")
        .await
        .unwrap();
    let routed = ByNamespace {
        stalled_prefix: "kc-stalled-",
        stalled: KubeLookup::new(stalled_client),
        others: KubeLookup::new(client.clone()),
        stalled_reads: AtomicUsize::new(0),
        stalled_reads_ended: AtomicUsize::new(0),
    };
    // One cache for every namespace, as in the operator's process.
    let lookup = Arc::new(CachedLookup::new(routed, lookup_cache::DEFAULT_TTL));

    black_hole(&lookup_link);
    let stalled = site_with_lookup("kc-stalled", &["s1"], client.clone(), lookup.clone()).await;
    apply(&stalled.ns, "s1", "stalled").await;
    wait_for("a lookup of the stalled site in flight", HANG, || async {
        (lookup.inner().stalled_reads.load(Ordering::SeqCst) > 0).then_some(())
    })
    .await;

    // The other routers apply while that lookup hangs: none of them waits
    // for it to end (the client's own deadline, which would end it, is
    // longer than the cache's).
    let applying = site_with_lookup("kc-applying", &["r1", "r2"], client.clone(), lookup.clone()).await;
    let configs = applying.ns.api::<VRouterConfig>();
    for router in ["r1", "r2"] {
        apply(&applying.ns, router, router).await;
    }
    for router in ["r1", "r2"] {
        let (phase, _, message) = final_phase(&configs, router, HANG).await;
        assert_eq!(phase, Phase::Applied, "{router}: {message}");
    }
    assert_eq!(
        lookup.inner().stalled_reads_ended.load(Ordering::SeqCst),
        0,
        "the other routers applied only after a hung read of the stalled site had ended"
    );
    let stalled_configs = stalled.ns.api::<VRouterConfig>();
    let phase = common::config_phase(&stalled_configs, "s1")
        .await
        .map(|(phase, _, _)| phase);
    assert_ne!(phase, Some(Phase::Applied), "s1 applied through a black hole");

    // Healed, the stalled router's next lookup gets through and it applies.
    lookup_link.remove_toxic("black-hole");
    let (phase, _, message) = final_phase(&stalled_configs, "s1", HANG).await;
    assert_eq!(phase, Phase::Applied, "s1: {message}");
}
