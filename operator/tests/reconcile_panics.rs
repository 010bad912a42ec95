//! A panic in one reconcile, caught at the shared reconcile boundary
//! (`reconciler::run`, which every controller runs through), against a real
//! kube-apiserver: the process, the controller and its other objects go on,
//! the panic is counted in `vrouter_reconcile_panics_total`, and the object
//! that panicked is retried later rather than wedged.
//!
//! The panic is a real one raised inside a reconcile of a controller built
//! for this test on ConfigMaps: the operator's own controllers have no input
//! left that panics (the hostile-peer suites prove that), and a production
//! hook that panics on demand would be a way to crash the operator.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::Controller;
use kube::runtime::controller::Action;
use kube::runtime::watcher;
use serde_json::json;
use vrouter_operator::runtime::context::{Context, Providers, Settings};
use vrouter_operator::runtime::metrics::Metrics;
use vrouter_operator::runtime::reconciler::{self, Reconciler, Shutdown};
use vrouter_providers::{Provider, ProviderError};
use vrouter_test_apiserver::TestEnv;

const NAME: &str = "panicky";

/// No router is reached here.
struct NoProviders;

#[async_trait::async_trait]
impl Providers for NoProviders {
    async fn for_target(&self, _: &vrouter_api::VRouterTarget) -> Result<Arc<dyn Provider>, ProviderError> {
        Err(ProviderError::AgentUnavailable {
            reason: "this test reaches no router".into(),
        })
    }
}

struct Ctx {
    base: Context,
    /// Successful reconciles, by object name.
    reconciled: Mutex<HashMap<String, usize>>,
}

impl AsRef<Context> for Ctx {
    fn as_ref(&self) -> &Context {
        &self.base
    }
}

#[derive(Debug, thiserror::Error)]
#[error("never returned")]
struct NeverError;

/// Panics on a ConfigMap whose `data.input` is `1e20`, the way the
/// operator once did on a guest's `/proc/uptime` of `1e20 0`.
struct Panicky;

impl Reconciler for Panicky {
    type Object = ConfigMap;
    type Context = Ctx;
    type Error = NeverError;
    const NAME: &'static str = NAME;

    async fn reconcile(object: Arc<ConfigMap>, ctx: Arc<Ctx>) -> Result<Action, NeverError> {
        let input = object
            .data
            .as_ref()
            .and_then(|d| d.get("input"))
            .cloned()
            .unwrap_or_default();
        let seconds: f64 = input.parse().unwrap_or(0.0);
        // Panics for 1e20: no Duration holds it.
        let _ = Duration::from_secs_f64(seconds);
        *ctx.reconciled.lock().unwrap().entry(object.name_any()).or_default() += 1;
        Ok(Action::await_change())
    }

    fn retry_after(_: &NeverError, _: &Ctx) -> Duration {
        Duration::from_secs(1)
    }
}

fn config_map(name: &str, input: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"input": input}})).unwrap()
}

fn counter(metrics: &Metrics, family: &str) -> u64 {
    let exposition = metrics.encode();
    let series = format!("vrouter_{family}_total{{controller=\"{NAME}\"}} ");
    exposition
        .lines()
        .find_map(|l| l.strip_prefix(&series))
        .map_or(0, |v| v.trim().parse().unwrap())
}

fn reconciled(ctx: &Ctx, name: &str) -> usize {
    ctx.reconciled.lock().unwrap().get(name).copied().unwrap_or(0)
}

async fn wait_until(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    vrouter_test_peers::eventually(limit, || std::future::ready(check().then_some(())))
        .await
        .unwrap_or_else(|| panic!("timed out waiting for {what}"));
}

#[tokio::test]
async fn a_panicking_reconcile_is_counted_and_retried_while_the_others_go_on() {
    let env = TestEnv::shared().await;
    let ns = env.namespace("reconcile-panics").await;
    let client = env.client();
    let metrics = Metrics::new();
    let ctx = Arc::new(Ctx {
        base: Context::new(
            client.clone(),
            metrics.clone(),
            Settings::default(),
            Arc::new(NoProviders),
        ),
        reconciled: Mutex::new(HashMap::new()),
    });
    let maps = ns.api::<ConfigMap>();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let shutdown: Shutdown = async move {
        let _ = stopped.await;
    }
    .boxed()
    .shared();
    let controller = Controller::new(maps.clone(), watcher::Config::default());
    let running = tokio::spawn(reconciler::run::<Panicky>(controller, ctx.clone(), shutdown));

    maps.create(&PostParams::default(), &config_map("boom", "1e20"))
        .await
        .unwrap();
    maps.create(&PostParams::default(), &config_map("fine-1", "12.5"))
        .await
        .unwrap();
    wait_until("the first panic to be counted", Duration::from_secs(60), || {
        counter(&metrics, "reconcile_panics") >= 1
    })
    .await;
    assert!(counter(&metrics, "reconcile_errors") >= 1, "a panic is an error too");
    wait_until("fine-1 to be reconciled", Duration::from_secs(60), || {
        reconciled(&ctx, "fine-1") >= 1
    })
    .await;

    // After the panic: the controller (and the process) still reconciles
    // objects created now.
    maps.create(&PostParams::default(), &config_map("fine-2", "3600"))
        .await
        .unwrap();
    wait_until(
        "fine-2 to be reconciled after the panic",
        Duration::from_secs(60),
        || reconciled(&ctx, "fine-2") >= 1,
    )
    .await;
    assert!(!running.is_finished(), "the controller ended with the panic");

    // Not wedged: unchanged, it is tried again after the backoff (and panics
    // again); changed, it is reconciled.
    wait_until(
        "the panicking object to be retried",
        reconciler::PANIC_RETRY * 3,
        || counter(&metrics, "reconcile_panics") >= 2,
    )
    .await;
    assert_eq!(reconciled(&ctx, "boom"), 0);
    maps.patch(
        "boom",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"input": "7"}})),
    )
    .await
    .unwrap();
    wait_until("the fixed object to be reconciled", Duration::from_secs(60), || {
        reconciled(&ctx, "boom") >= 1
    })
    .await;

    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(30), running)
        .await
        .expect("the controller stops at shutdown")
        .expect("the controller task did not panic");
}
