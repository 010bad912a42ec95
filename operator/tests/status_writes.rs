//! Status writes against a real kube-apiserver: a write that records an
//! exec's result must survive a label or spec written meanwhile (qemu-ga
//! reports an exit once; losing it means applying again), and must still
//! lose to a status someone else changed.

mod common;

use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use vrouter_api::{Phase, VRouterConfig};
use vrouter_operator::runtime::status_writes;
use vrouter_test_apiserver::TestEnv;

use common::create;

fn is_conflict<T: std::fmt::Debug>(result: &Result<T, kube::Error>) -> bool {
    matches!(result, Err(kube::Error::Api(e)) if e.code == 409)
}

#[tokio::test]
async fn a_result_survives_a_label_written_meanwhile_but_not_a_status_written_meanwhile() {
    let env = TestEnv::shared().await;
    let ns = env.namespace("status-writes").await;
    let client = env.client();
    let api = ns.api::<VRouterConfig>();
    let seen: VRouterConfig = create(
        &ns,
        json!({"metadata": {"name": "c"}, "spec": {"targetRef": {"name": "r1"}, "commands": "set system host-name c\n"}}),
    )
    .await;
    let current = seen.status.clone().unwrap_or_default();
    // Someone labels the object after the controller read it.
    api.patch(
        "c",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"team": "net"}}})),
    )
    .await
    .unwrap();
    let mut result = current.clone();
    result.phase = Phase::Applied;
    result.message = "exit 0".into();

    let plain = status_writes::patch_status(&client, &seen, Some(&current), &result).await;
    assert!(is_conflict(&plain), "the stale read is a conflict: {plain:?}");
    let written = status_writes::patch_status_keeping_result(&client, &seen, &current, &result).await;
    assert!(
        written.unwrap().is_some(),
        "the result is written over the new resourceVersion"
    );
    let stored = api.get("c").await.unwrap();
    assert_eq!(
        stored.status.as_ref().map(|s| (s.phase, s.message.as_str())),
        Some((Phase::Applied, "exit 0"))
    );
    assert_eq!(stored.labels().get("team").map(String::as_str), Some("net"));

    // Now the status itself moves after the read (drift detection sending
    // the config back to Pending): that write must not be overwritten.
    let seen = stored;
    let current = seen.status.clone().unwrap_or_default();
    api.patch_status(
        "c",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Pending"}})),
    )
    .await
    .unwrap();
    let mut other = current.clone();
    other.phase = Phase::Failed;
    let lost = status_writes::patch_status_keeping_result(&client, &seen, &current, &other).await;
    assert!(
        is_conflict(&lost),
        "a status changed meanwhile stays a conflict: {lost:?}"
    );
    let stored = api.get("c").await.unwrap();
    assert_eq!(stored.status.map(|s| s.phase), Some(Phase::Pending));
}

#[tokio::test]
async fn a_new_exec_handle_survives_a_label_written_while_the_apply_starts() {
    use k8s_openapi::jiff::Timestamp;
    use vrouter_operator::controllers::vrouter_config::decide::{self, Clock};

    let env = TestEnv::shared().await;
    let ns = env.namespace("handle-writes").await;
    let client = env.client();
    let api = ns.api::<VRouterConfig>();
    let seen: VRouterConfig = create(
        &ns,
        json!({"metadata": {"name": "d"}, "spec": {"targetRef": {"name": "r1"}, "commands": "set system host-name d\n"}}),
    )
    .await;
    let generation = seen.metadata.generation.unwrap();
    // As the controller does it: the status before the dispatch is built in
    // memory at a time with a fraction of a second, written, and the handle
    // then recorded over it.
    let clock = Clock {
        now: Timestamp::new(Timestamp::now().as_second(), 500_000_000).unwrap(),
        apply_timeout: std::time::Duration::from_secs(300),
    };
    let status = seen.status.clone().unwrap_or_default();
    let before = decide::before_dispatch(&status, generation, clock, "g1-status-writes");
    let fresh = status_writes::write_status(&client, &seen, Some(&status), &before)
        .await
        .unwrap();
    api.patch(
        "d",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"team": "net"}}})),
    )
    .await
    .unwrap();
    let dispatched = decide::after_dispatch(&before, generation, clock, 4242, None).status;
    let written = status_writes::patch_status_keeping_result(&client, &fresh, &before, &dispatched).await;
    assert!(
        written.unwrap().is_some(),
        "the handle is written over the new resourceVersion"
    );
    let stored = api.get("d").await.unwrap();
    assert_eq!(
        stored.status.map(|s| (s.phase, s.exec_pid)),
        Some((Phase::Applying, 4242))
    );
}
