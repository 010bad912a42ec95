//! Migrating from the Go vrouter-operator (docs/migrating-from-go.md) on a
//! real API server: a Lease held by the Go operator, written, renewed and
//! released as client-go's leader election does, keeps this operator
//! waiting; converted manifests are rendered and applied once it leads.

mod common;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use vrouter_api::{Phase, VRouterBinding, VRouterConfig, VRouterParams, VRouterStatus, VRouterTemplate};
use vrouter_operator::runtime::leader;

use common::replica::{LEASE, applied, config_reconciles, replica_on};
use common::{create, site_idle};

/// Holds the Go operator's Lease as a running Go replica does until
/// dropped: created (or taken) for `holder`, renewed every second.
struct GoReplica {
    leases: Api<Lease>,
    renewing: tokio::task::JoinHandle<()>,
}

impl GoReplica {
    async fn hold(leases: Api<Lease>, holder: &str) -> GoReplica {
        let lease: Lease = serde_json::from_value(json!({
            "metadata": {"name": leader::DEFAULT_LEASE_NAME},
            "spec": go_record(holder, 4),
        }))
        .unwrap();
        leases.create(&PostParams::default(), &lease).await.unwrap();
        let renewing = {
            let leases = leases.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    let renew = json!({"spec": {"renewTime": MicroTime(Timestamp::now())}});
                    leases
                        .patch(
                            leader::DEFAULT_LEASE_NAME,
                            &PatchParams::default(),
                            &Patch::Merge(&renew),
                        )
                        .await
                        .unwrap();
                }
            })
        };
        GoReplica { leases, renewing }
    }

    /// Shuts down as client-go's `ReleaseOnCancel` does: no holder, a
    /// one-second duration.
    async fn release(self) {
        self.renewing.abort();
        let _ = self.renewing.await;
        let release = json!({"spec": go_record("", 1)});
        self.leases
            .patch(
                leader::DEFAULT_LEASE_NAME,
                &PatchParams::default(),
                &Patch::Merge(&release),
            )
            .await
            .unwrap();
    }
}

/// The Go operator's replica, as client-go's `leaderelection` with a Lease
/// lock writes it: holder, duration, acquire and renew times in microseconds.
fn go_record(holder: &str, duration_seconds: i32) -> serde_json::Value {
    let now = MicroTime(Timestamp::now());
    json!({
        "holderIdentity": holder,
        "leaseDurationSeconds": duration_seconds,
        "acquireTime": now,
        "renewTime": now,
        "leaseTransitions": 0,
    })
}

/// During a migration the Go operator still runs: by default this operator
/// competes for the Go operator's Lease, waits while the Go replica renews
/// it, and leads once the Go replica releases it on shutdown.
#[tokio::test]
async fn the_go_operators_lease_keeps_this_operator_waiting_until_released() {
    let site = site_idle("go-lease", &["r1"]).await;
    let leases: Api<Lease> = site.ns.api();
    let go_holder = "vrouter-operator-controller-manager-5d8f7c9b4-x2x7q_3f1c2a4e-8d9b-4f5e-9a51-0d6c9b1e7a22";
    let go = GoReplica::hold(leases.clone(), go_holder).await;

    let ours = replica_on(&site, "rust-replica", leader::DEFAULT_LEASE_NAME).await;
    create::<VRouterConfig>(&site.ns, json!({"metadata": {"name": "one"}, "spec": {"targetRef": {"name": "r1"}, "commands": "set system host-name one\n"}})).await;
    // Three times the Lease's duration: an operator that ignored the Go
    // holder, or judged it by the Lease's creation, would have taken over.
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert_eq!(config_reconciles(&ours), 0, "the Go operator leads: ours must wait");
    let held = leases.get(leader::DEFAULT_LEASE_NAME).await.unwrap();
    assert_eq!(held.spec.unwrap().holder_identity.as_deref(), Some(go_holder));
    assert!(site.routers["r1"].sandbox.calls().is_empty(), "nothing applied");

    // The Go replica shuts down and releases the Lease.
    go.release().await;
    applied(&site, "one").await;
    assert!(config_reconciles(&ours) > 0);

    // Ours holds it now in the form client-go reads, so a Go replica
    // started again would wait in turn.
    let spec = leases.get(leader::DEFAULT_LEASE_NAME).await.unwrap().spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("rust-replica"));
    assert_eq!(spec.lease_duration_seconds, Some(LEASE.as_secs() as i32));
    let renewed = spec.renew_time.expect("renewTime").0;
    assert!(
        Timestamp::now().duration_since(renewed).as_secs() <= LEASE.as_secs() as i64,
        "renewTime {renewed} is kept fresh"
    );
    assert!(!ours.task.is_finished());
}

/// docs/migrating-from-go.md, sections 1 and 2, on the real API server:
/// manifests in Go syntax are converted by `vrouter-operator convert` and
/// applied while a Go replica holds the Lease (nothing is rendered or
/// applied meanwhile); once it releases the Lease, the binding renders the
/// converted template and its config is Applied, and a config the Go
/// operator had applied (its status as the Go operator writes it) is not
/// applied again but gets its VRouterStatus.
#[tokio::test]
async fn the_migration_steps_convert_wait_for_the_go_operator_and_take_over() {
    let site = site_idle("migrate", &["r1", "r2"]).await;
    let go = GoReplica::hold(site.ns.api(), "vrouter-operator-controller-manager-7c9d_1b2e").await;
    // A config the Go operator applied before the switch.
    let by_go = create::<VRouterConfig>(&site.ns, json!({"metadata": {"name": "by-go"}, "spec": {"targetRef": {"name": "r2"}, "commands": "set system host-name by-go\n"}})).await;
    let applied_at = Timestamp::now();
    let go_status = json!({"status": {
        "phase": "Applied",
        "observedGeneration": by_go.metadata.generation,
        "lastAppliedTime": Time(applied_at),
        "lastRebootHandledTime": Time(applied_at),
        "conditions": [{
            "type": "Applied", "status": "True", "reason": "ConfigApplied",
            "message": "Configuration applied successfully.",
            "observedGeneration": by_go.metadata.generation,
            "lastTransitionTime": Time(applied_at),
        }],
    }});
    site.ns
        .api::<VRouterConfig>()
        .patch_status("by-go", &PatchParams::default(), &Patch::Merge(&go_status))
        .await
        .unwrap();

    // 1. Convert the Go operator's manifests.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("site.yaml");
    std::fs::write(
        &file,
        "apiVersion: vrouter.kojuro.date/v1\nkind: VRouterTemplate\nmetadata:\n  name: bgp\nspec:\n  commands: |\n\
         \x20   set system host-name '{{ .hostname }}'\n    {{- range .neighbors }}\n\
         \x20   set protocols bgp {{ $.asn }} neighbor {{ .ip }} remote-as {{ .remoteAs }}\n    {{- end }}\n\
         ---\napiVersion: vrouter.kojuro.date/v1\nkind: VRouterParams\nmetadata:\n  name: site\nspec:\n  params:\n\
         \x20   hostname: edge-1\n    asn: 65000\n    neighbors:\n      - {ip: 192.0.2.1, remoteAs: 64512}\n\
         ---\napiVersion: vrouter.kojuro.date/v1\nkind: VRouterBinding\nmetadata:\n  name: migrate\nspec:\n\
         \x20 templateRefs: [{name: bgp}]\n  paramsRefs: [{name: site}]\n  targetRefs: [{name: r1}]\n",
    )
    .unwrap();
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_vrouter-operator"))
        .args(["convert", "--in-place"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(0), "{}", String::from_utf8_lossy(&run.stderr));
    let converted = std::fs::read_to_string(&file).unwrap();
    assert!(converted.contains("for neighbor in neighbors | values"), "{converted}");

    // 2–3. This operator installed beside the running Go operator.
    let ours = replica_on(&site, "rust-replica", leader::DEFAULT_LEASE_NAME).await;
    // 4. The converted manifests applied.
    for document in serde_yaml::Deserializer::from_str(&converted) {
        let object: serde_json::Value = serde::Deserialize::deserialize(document).unwrap();
        match object["kind"].as_str().unwrap() {
            "VRouterTemplate" => {
                create::<VRouterTemplate>(&site.ns, object).await;
            }
            "VRouterParams" => {
                create::<VRouterParams>(&site.ns, object).await;
            }
            "VRouterBinding" => {
                create::<VRouterBinding>(&site.ns, object).await;
            }
            other => panic!("unexpected {other}"),
        }
    }
    // Three Lease durations with the Go replica renewing: nothing happens.
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert_eq!(config_reconciles(&ours), 0, "the Go operator leads");
    let configs = site.ns.api::<VRouterConfig>();
    assert!(
        configs.get_opt("migrate.r1").await.unwrap().is_none(),
        "nothing rendered yet"
    );

    // The Go operator stops; this one takes over.
    go.release().await;
    applied(&site, "migrate.r1").await;
    let calls = site.routers["r1"].sandbox.calls();
    assert!(calls.contains(&"set system host-name edge-1".to_owned()), "{calls:?}");
    // `$.asn` is the merged params' root: the target's own asn (common's
    // targets carry one) over the site's, as in the Go operator.
    assert!(
        calls.contains(&"set protocols bgp 4200000000 neighbor 192.0.2.1 remote-as 64512".to_owned()),
        "{calls:?}"
    );
    // Every config was reconciled by now (the first list wakes them all): the
    // one the Go operator applied was not applied again.
    let by_go = configs.get("by-go").await.unwrap();
    let status = by_go.status.unwrap();
    assert_eq!(status.phase, Phase::Applied);
    assert!(
        !site.routers["r2"].sandbox.calls().iter().any(|c| c.contains("by-go")),
        "re-applied a config the Go operator had applied"
    );
    // It gets its VRouterStatus (drift detection) all the same.
    let statuses = site.ns.api::<VRouterStatus>();
    common::wait_for("by-go's VRouterStatus", Duration::from_secs(60), || async {
        statuses.get_opt("by-go").await.ok()?
    })
    .await;
    assert!(!ours.task.is_finished());
}
