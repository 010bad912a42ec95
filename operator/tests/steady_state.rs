//! With everything Applied and nothing changing, the operator writes nothing
//! to the API server. Its own test binary, so its own API server: the write
//! counter sees only this test.

mod common;

use std::time::Duration;

use serde_json::json;
use vrouter_api::{Phase, VRouterBinding, VRouterConfig};
use vrouter_operator::runtime::context::Settings;

use common::{condition, config_phase, create, site, wait_for};

const WRITE_VERBS: [&str; 4] = ["POST", "PUT", "PATCH", "DELETE"];

/// Write requests the API server has served so far, per series of its own
/// `apiserver_request_total` counter. The API server renews its identity
/// Lease every 10 s itself; no other Lease is in play (no leader election
/// here), so Leases are left out.
async fn writes_served(client: &kube::Client) -> std::collections::BTreeMap<String, u64> {
    let request = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client.request_text(request).await.unwrap();
    text.lines()
        .filter(|l| l.starts_with("apiserver_request_total{") && !l.contains("resource=\"leases\""))
        .filter(|l| WRITE_VERBS.iter().any(|v| l.contains(&format!("verb=\"{v}\""))))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_owned(), value.parse::<f64>().ok()? as u64))
        })
        .collect()
}

#[tokio::test]
async fn nothing_is_written_for_two_minutes_once_everything_is_applied() {
    let site = site("steady", &["r1", "r2"], Settings::default()).await;
    let ns = &site.ns;
    create::<vrouter_api::VRouterTemplate>(
        ns,
        json!({"metadata": {"name": "t"}, "spec": {"commands": "set system host-name {{ hostName }}\n"}}),
    )
    .await;
    create::<VRouterBinding>(
        ns,
        json!({"metadata": {"name": "b"}, "spec": {"templateRefs": [{"name": "t"}], "targetRefs": [{"name": "r1"}, {"name": "r2"}]}}),
    )
    .await;
    let configs = ns.api::<VRouterConfig>();
    for name in ["b.r1", "b.r2"] {
        let (phase, _, message) = wait_for(name, Duration::from_secs(60), || async {
            config_phase(&configs, name)
                .await
                .filter(|(p, _, _)| *p == Phase::Applied)
        })
        .await;
        assert_eq!(phase, Phase::Applied, "{message}");
    }
    let bindings = ns.api::<VRouterBinding>();
    wait_for("Ready", Duration::from_secs(30), || async {
        let b = bindings.get("b").await.ok()?;
        condition(&b.status?.conditions, "Ready").filter(|(s, _)| s == "True")
    })
    .await;
    // Let the VRouterStatus objects created after the first apply settle.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let client = site.ctx.client.clone();
    let before = writes_served(&client).await;
    tokio::time::sleep(Duration::from_secs(120)).await;
    let after = writes_served(&client).await;
    // The one write the spec requires while nothing changes: each
    // ProxmoxCluster sync stamps status.lastSyncTime (§7.3 step 5), once per
    // syncInterval (60 s by default). It is bounded here rather than
    // counted as a change.
    let is_sync_heartbeat =
        |series: &str| series.contains("resource=\"proxmoxclusters\"") && series.contains("subresource=\"status\"");
    let heartbeats: u64 = after
        .iter()
        .filter(|(series, _)| is_sync_heartbeat(series))
        .map(|(series, count)| count - before.get(series).copied().unwrap_or(0))
        .sum();
    assert!(
        heartbeats <= 3,
        "{heartbeats} lastSyncTime writes in 120 s at a 60 s syncInterval"
    );
    let grown: Vec<String> = after
        .iter()
        .filter(|(series, _)| !is_sync_heartbeat(series))
        .filter(|(series, count)| before.get(*series).copied().unwrap_or(0) < **count)
        .map(|(series, count)| format!("{series}: {} -> {count}", before.get(series).copied().unwrap_or(0)))
        .collect();
    assert!(grown.is_empty(), "writes while nothing changed:\n{}", grown.join("\n"));
}
