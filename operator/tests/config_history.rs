//! A config's revision history and a rollback to one of its revisions,
//! through the real `vrouter-operator` binary (`history`, `rollback`),
//! against a real kube-apiserver and a sandbox guest (real qemu-ga; the
//! router's config read back from the guest).

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use kube::api::{Patch, PatchParams};
use serde_json::json;
use vrouter_api::{Phase, VRouterBinding, VRouterConfig};
use vrouter_operator::runtime::context::Settings;
use vrouter_test_apiserver::TestEnv;

use common::{create, site, wait_for};

/// Waits until `name` is Applied for a generation above `after`; that
/// generation and its apply id.
async fn applied_after(configs: &kube::Api<VRouterConfig>, name: &str, after: i64) -> (i64, String) {
    wait_for(
        &format!("{name} applied after generation {after}"),
        Duration::from_secs(60),
        || async {
            let config = configs.get_opt(name).await.ok()??;
            let generation = config.metadata.generation?;
            let status = config.status?;
            assert_ne!(status.phase, Phase::Failed, "{name}: {}", status.message);
            (generation > after && status.phase == Phase::Applied && status.observed_generation == generation)
                .then_some((generation, status.apply_id))
        },
    )
    .await
}

async fn set_host(bindings: &kube::Api<VRouterBinding>, host: &str) {
    let patch = json!({"spec": {"params": {"host": host}}});
    bindings
        .patch("edge", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

fn cli(args: &[&str], kubeconfig: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vrouter-operator"))
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .unwrap()
}

/// `history`'s rows (header left out), each split into its columns.
fn history(config: &str, ns: &str, kubeconfig: &Path) -> Vec<Vec<String>> {
    let out = cli(&["history", config, "-n", ns], kubeconfig);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "history: {stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !["first", "second", "third"].iter().any(|host| stdout.contains(host)),
        "history never prints content: {stdout}"
    );
    stdout
        .lines()
        .skip(1)
        .map(|l| l.split('\t').map(str::to_owned).collect())
        .collect()
}

fn running(site: &common::Site) -> String {
    String::from_utf8(site.routers["r1"].sandbox.running_config()).unwrap()
}

#[tokio::test]
async fn history_lists_three_applies_and_a_rollback_to_the_first_is_applied_and_recorded() {
    let site = site("history", &["r1"], Settings::default()).await;
    let ns = &site.ns;
    let namespace = ns.name();
    let kubeconfig = TestEnv::shared().await.kubeconfig_path().to_owned();
    create::<vrouter_api::VRouterTemplate>(
        ns,
        json!({"metadata": {"name": "base"}, "spec": {"commands": "set system host-name {{ host }}\n"}}),
    )
    .await;
    create::<VRouterBinding>(
        ns,
        json!({"metadata": {"name": "edge"}, "spec": {
            "templateRefs": [{"name": "base"}], "params": {"host": "first"}, "targetRefs": [{"name": "r1"}],
        }}),
    )
    .await;
    let configs = ns.api::<VRouterConfig>();
    let bindings = ns.api::<VRouterBinding>();
    let mut applies = vec![applied_after(&configs, "edge.r1", 0).await];
    for host in ["second", "third"] {
        set_host(&bindings, host).await;
        let last = applies.last().unwrap().0;
        applies.push(applied_after(&configs, "edge.r1", last).await);
    }
    assert!(running(&site).contains("third"), "{}", running(&site));

    let binding = format!("{namespace}/edge");
    let rows = wait_for("three revisions", Duration::from_secs(30), || async {
        Some(history("edge.r1", namespace, &kubeconfig)).filter(|rows| rows.len() == 3)
    })
    .await;
    for (i, (row, (generation, apply))) in rows.iter().zip(&applies).enumerate() {
        let expected = [
            (i + 1).to_string(),
            "Applied".into(),
            binding.clone(),
            generation.to_string(),
            apply.clone(),
            "-".into(),
        ];
        let got = [&row[0], &row[2], &row[3], &row[4], &row[5], &row[6]].map(|s| s.clone());
        assert_eq!(got, expected, "{rows:?}");
    }

    let out = cli(
        &["rollback", "edge.r1", "-n", namespace, "--to-revision", "1"],
        &kubeconfig,
    );
    assert!(
        out.status.success(),
        "rollback: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (generation, apply) = applied_after(&configs, "edge.r1", applies[2].0).await;
    let on_guest = running(&site);
    assert!(on_guest.contains("first") && !on_guest.contains("third"), "{on_guest}");
    let rows = wait_for("the rollback's revision", Duration::from_secs(30), || async {
        Some(history("edge.r1", namespace, &kubeconfig)).filter(|rows| rows.len() == 4)
    })
    .await;
    let rollback = [
        &rows[3][0],
        &rows[3][2],
        &rows[3][3],
        &rows[3][4],
        &rows[3][5],
        &rows[3][6],
    ]
    .map(|s| s.clone());
    assert_eq!(
        rollback,
        [
            "4".to_owned(),
            "Applied".into(),
            binding.clone(),
            generation.to_string(),
            apply,
            "rollback to 1".into()
        ]
    );
    // The binding, unchanged, left the rolled-back config as it is.
    let config = configs.get("edge.r1").await.unwrap();
    assert_eq!(config.spec.rollback_to.map(|r| r.revision), Some(1));

    // A revision no longer (or never) kept is refused, naming what is kept.
    let out = cli(
        &["rollback", "edge.r1", "-n", namespace, "--to-revision", "9"],
        &kubeconfig,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("revision 9") && stderr.contains("1..=4"),
        "{stderr}"
    );

    // Changing the binding ends the hold: its new content is applied and
    // the rollback is gone from the config.
    set_host(&bindings, "fourth").await;
    applied_after(&configs, "edge.r1", generation).await;
    let config = configs.get("edge.r1").await.unwrap();
    assert_eq!(config.spec.rollback_to, None);
    assert!(running(&site).contains("fourth"), "{}", running(&site));
}
