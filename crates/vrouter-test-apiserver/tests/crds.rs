//! The generated CRDs, proven against a real kube-apiserver: accepted and
//! Established, defaults, enum and type validation, schemaless params,
//! printer columns and status subresources.

use std::collections::BTreeSet;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use vrouter_api::{
    ProxmoxCluster, VRouterBinding, VRouterConfig, VRouterParams, VRouterStatus, VRouterTarget, VRouterTemplate,
};
use vrouter_test_apiserver::{TestEnv, TestNamespace};

const GROUP: &str = "vrouter.kojuro.date";

/// One kind of the operator: a minimal valid object and, for kinds with a
/// status subresource, a status patch the schema accepts.
struct Kind {
    resource: ApiResource,
    spec: Value,
    status: Option<Value>,
}

fn kinds() -> Vec<Kind> {
    vec![
        Kind {
            resource: ApiResource::erase::<VRouterTemplate>(&()),
            spec: json!({"config": "set system host-name {{ hostname }}"}),
            status: None,
        },
        Kind {
            resource: ApiResource::erase::<VRouterTarget>(&()),
            spec: json!({"provider": {"type": "kubevirt", "kubevirt": {"name": "vm-1"}}}),
            status: Some(json!({"vmRunning": true, "proxmoxNode": "pve-1"})),
        },
        Kind {
            resource: ApiResource::erase::<VRouterBinding>(&()),
            spec: json!({"targetRefs": [{"name": "router-1"}]}),
            status: Some(json!({"observedGeneration": 1})),
        },
        Kind {
            resource: ApiResource::erase::<VRouterParams>(&()),
            spec: json!({"params": {"asn": 65001}}),
            status: None,
        },
        Kind {
            resource: ApiResource::erase::<VRouterConfig>(&()),
            spec: json!({"targetRef": {"name": "router-1"}}),
            status: Some(json!({"phase": "Applied", "message": "applied by the test"})),
        },
        Kind {
            resource: ApiResource::erase::<ProxmoxCluster>(&()),
            spec: json!({"endpoints": ["https://127.0.0.1:8006"], "credentialsRef": {"name": "pve-token"}}),
            status: Some(json!({"lastSyncTime": "2026-01-02T03:04:05Z"})),
        },
        Kind {
            resource: ApiResource::erase::<VRouterStatus>(&()),
            spec: json!({"configRef": {"name": "config-1"}}),
            status: Some(json!({"driftDetected": true, "message": "drift seen by the test"})),
        },
    ]
}

fn object(resource: &ApiResource, name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": {"name": name},
        "spec": spec,
    }))
    .expect("a well-formed object")
}

async fn create(ns: &TestNamespace, resource: &ApiResource, name: &str, spec: Value) -> kube::Result<DynamicObject> {
    ns.dynamic_api(resource)
        .create(&PostParams::default(), &object(resource, name, spec))
        .await
}

/// The API server's refusal of an object, or a panic naming what was accepted.
async fn rejection(ns: &TestNamespace, resource: &ApiResource, spec: Value) -> kube::core::Status {
    match create(ns, resource, "rejected", spec.clone()).await {
        Err(kube::Error::Api(status)) => *status,
        Err(other) => panic!("expected the API server to refuse {spec}, got a transport error: {other}"),
        Ok(obj) => panic!("the API server accepted {spec} as {:?}", obj.data),
    }
}

#[tokio::test]
async fn all_seven_crds_are_established() {
    let env = TestEnv::shared().await;
    let served: Vec<CustomResourceDefinition> = Api::<CustomResourceDefinition>::all(env.client())
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|crd| crd.spec.group == GROUP)
        .collect();
    let names: BTreeSet<String> = served.iter().map(|crd| crd.name_any()).collect();
    let generated: BTreeSet<String> = vrouter_api::crds::all().iter().map(|crd| crd.name_any()).collect();
    assert_eq!(generated.len(), 7, "{generated:?}");
    assert_eq!(names, generated);
    for crd in &served {
        let conditions = crd
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        for wanted in ["NamesAccepted", "Established"] {
            assert!(
                conditions.iter().any(|c| c.type_ == wanted && c.status == "True"),
                "{} is not {wanted}: {conditions:?}",
                crd.name_any()
            );
        }
    }
    // Each kind accepts a minimal valid object.
    let ns = env.namespace("crds-accept-minimal").await;
    for kind in kinds() {
        create(&ns, &kind.resource, "minimal", kind.spec)
            .await
            .unwrap_or_else(|e| panic!("{} refused its minimal object: {e}", kind.resource.kind));
    }
}

#[tokio::test]
async fn save_absent_reads_back_true() {
    let env = TestEnv::shared().await;
    let ns = env.namespace("crds-save-default").await;
    for kind in kinds()
        .into_iter()
        .filter(|k| ["VRouterBinding", "VRouterConfig"].contains(&k.resource.kind.as_str()))
    {
        assert!(kind.spec.get("save").is_none());
        let created = create(&ns, &kind.resource, "no-save", kind.spec).await.unwrap();
        assert_eq!(created.data["spec"]["save"], json!(true), "{}", kind.resource.kind);
        let read = ns.dynamic_api(&kind.resource).get("no-save").await.unwrap();
        assert_eq!(read.data["spec"]["save"], json!(true), "{}", kind.resource.kind);
    }
}

#[tokio::test]
async fn explicit_save_false_stays_false() {
    let env = TestEnv::shared().await;
    let ns = env.namespace("crds-save-false").await;
    for kind in kinds()
        .into_iter()
        .filter(|k| ["VRouterBinding", "VRouterConfig"].contains(&k.resource.kind.as_str()))
    {
        let mut spec = kind.spec;
        spec["save"] = json!(false);
        create(&ns, &kind.resource, "save-false", spec).await.unwrap();
        let read = ns.dynamic_api(&kind.resource).get("save-false").await.unwrap();
        assert_eq!(read.data["spec"]["save"], json!(false), "{}", kind.resource.kind);
        // And through the typed API the operator uses.
        if kind.resource.kind == "VRouterConfig" {
            let typed: VRouterConfig = ns.api::<VRouterConfig>().get("save-false").await.unwrap();
            assert!(!typed.spec.save);
        }
    }
}

#[tokio::test]
async fn unknown_rollout_mode_is_rejected() {
    let env = TestEnv::shared().await;
    let ns = env.namespace("crds-rollout-mode").await;
    let binding = ApiResource::erase::<VRouterBinding>(&());
    let status = rejection(
        &ns,
        &binding,
        json!({"targetRefs": [{"name": "router-1"}], "rollout": {"mode": "AllAtOnce"}}),
    )
    .await;
    assert_eq!(status.code, 422, "{status:?}");
    assert!(status.message.contains("spec.rollout.mode"), "{}", status.message);
    assert!(status.message.contains("WaitForApplied"), "{}", status.message);
    // The known modes are accepted, and an absent mode defaults to Disabled.
    for (name, mode) in [("fixed", json!("FixedInterval")), ("default", Value::Null)] {
        let rollout = if mode.is_null() {
            json!({})
        } else {
            json!({"mode": mode})
        };
        let created = create(
            &ns,
            &binding,
            name,
            json!({"targetRefs": [{"name": "router-1"}], "rollout": rollout}),
        )
        .await
        .unwrap();
        let expected = if mode.is_null() { json!("Disabled") } else { mode };
        assert_eq!(created.data["spec"]["rollout"]["mode"], expected);
    }
}

#[tokio::test]
async fn a_wrong_type_is_rejected() {
    let env = TestEnv::shared().await;
    let ns = env.namespace("crds-wrong-type").await;
    let target = ApiResource::erase::<VRouterTarget>(&());
    let status = rejection(
        &ns,
        &target,
        json!({"provider": {"type": "proxmox", "proxmox": {"vmid": "abc", "clusterRef": {"name": "pve"}}}}),
    )
    .await;
    assert_eq!(status.code, 422, "{status:?}");
    assert!(
        status.message.contains("spec.provider.proxmox.vmid"),
        "{}",
        status.message
    );
    assert!(status.message.contains("integer"), "{}", status.message);

    let config = ApiResource::erase::<VRouterConfig>(&());
    let status = rejection(&ns, &config, json!({"targetRef": {"name": "router-1"}, "save": "yes"})).await;
    assert_eq!(status.code, 422, "{status:?}");
    assert!(status.message.contains("spec.save"), "{}", status.message);

    let status = rejection(&ns, &target, json!({"provider": {"type": "vmware"}})).await;
    assert_eq!(status.code, 422, "{status:?}");
    assert!(status.message.contains("spec.provider.type"), "{}", status.message);
}

#[tokio::test]
async fn params_keep_arbitrary_nested_fields() {
    let env = TestEnv::shared().await;
    let ns = env.namespace("crds-params").await;
    let params = json!({
        "asn": 4_294_967_295u64,
        "vmid": 9_007_199_254_740_993u64,
        "ratio": 1.5,
        "hostname": "edge-1",
        "enabled": false,
        "neighbors": [
            {"address": "192.0.2.1", "remote-as": 65002, "tags": ["a", "b"]},
            {"address": "192.0.2.2", "nested": {"deeper": {"deepest": [1, [2, 3], {}]}}}
        ],
        "empty": {},
        "emptyList": []
    });
    for (kind, spec) in [
        (ApiResource::erase::<VRouterParams>(&()), json!({"params": params})),
        (
            ApiResource::erase::<VRouterTarget>(&()),
            json!({"provider": {"type": "kubevirt", "kubevirt": {"name": "vm-1"}}, "params": params}),
        ),
        (
            ApiResource::erase::<VRouterBinding>(&()),
            json!({"targetRefs": [{"name": "router-1"}], "params": params}),
        ),
    ] {
        create(&ns, &kind, "with-params", spec).await.unwrap();
        let read = ns.dynamic_api(&kind).get("with-params").await.unwrap();
        assert_eq!(read.data["spec"]["params"], params, "{}", kind.kind);
    }
}

#[tokio::test]
async fn printer_columns_are_served() {
    let env = TestEnv::shared().await;
    let ns = env.namespace("crds-printer-columns").await;
    let client = ns.client();
    for kind in kinds() {
        create(&ns, &kind.resource, "columns", kind.spec.clone()).await.unwrap();
        let request = http::Request::get(format!(
            "/apis/{}/{}/namespaces/{}/{}",
            kind.resource.group,
            kind.resource.version,
            ns.name(),
            kind.resource.plural
        ))
        .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .body(Vec::new())
        .unwrap();
        let table: Value = client.request(request).await.unwrap();
        assert_eq!(table["kind"], "Table", "{table}");
        let served: Vec<&str> = table["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        let crd = vrouter_api::crds::all()
            .into_iter()
            .find(|c| c.spec.names.kind == kind.resource.kind)
            .unwrap();
        let mut declared = vec!["Name".to_owned()];
        declared.extend(
            crd.spec.versions[0]
                .additional_printer_columns
                .iter()
                .flatten()
                .map(|c| c.name.clone()),
        );
        assert_eq!(served, declared, "{}", kind.resource.kind);
        assert!(served.ends_with(&["Age"]), "{}: {served:?}", kind.resource.kind);
        assert_eq!(table["rows"][0]["cells"][0], "columns", "{table}");
    }
    // The columns the spec names, with values read from the object.
    let request = http::Request::get(format!(
        "/apis/{GROUP}/v1/namespaces/{}/vrouterconfigs/columns",
        ns.name()
    ))
    .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
    .body(Vec::new())
    .unwrap();
    let table: Value = client.request(request).await.unwrap();
    let names: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Name", "Phase", "Ready", "Reason", "Target", "Age"]);
    assert_eq!(table["rows"][0]["cells"][4], "router-1", "{table}");
}

/// `kubectl` of the API server's release against `env`, with a discovery
/// cache of its own (a shared one could hold another run's API server);
/// panics with its output when it fails.
fn kubectl(env: &TestEnv, args: &[&str]) -> String {
    let binary = vrouter_test_apiserver::kubectl().unwrap_or_else(|e| panic!("kubectl: {e}"));
    let cache = std::env::temp_dir().join(format!("vrouter-crds-kubectl-{}", std::process::id()));
    let output = std::process::Command::new(binary)
        .arg(format!("--kubeconfig={}", env.kubeconfig_path().display()))
        .arg(format!("--cache-dir={}", cache.display()))
        .args(args)
        .output()
        .expect("run kubectl");
    let (out, err) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(output.status.success(), "kubectl {args:?}: {out}{err}");
    out.into_owned()
}

#[tokio::test]
async fn kubectl_get_vrouter_lists_every_kind() {
    let env = TestEnv::shared().await;
    let ns = env.namespace("crds-category").await;
    for kind in kinds() {
        create(&ns, &kind.resource, "listed", kind.spec.clone()).await.unwrap();
    }
    let listed: Value = serde_json::from_str(&kubectl(env, &["get", "vrouter", "-A", "-o", "json"])).unwrap();
    let kinds_listed: BTreeSet<&str> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|item| item["metadata"]["namespace"] == ns.name())
        .map(|item| item["kind"].as_str().unwrap())
        .collect();
    let every_kind: BTreeSet<String> = vrouter_api::crds::all()
        .into_iter()
        .map(|c| c.spec.names.kind)
        .collect();
    assert_eq!(every_kind.len(), 7, "{every_kind:?}");
    assert_eq!(
        kinds_listed,
        every_kind.iter().map(String::as_str).collect::<BTreeSet<_>>()
    );
}

#[tokio::test]
async fn kubectl_shows_ready_and_reason_of_a_config() {
    let env = TestEnv::shared().await;
    let ns = env.namespace("crds-ready-column").await;
    let resource = ApiResource::erase::<VRouterConfig>(&());
    create(&ns, &resource, "shown", json!({"targetRef": {"name": "router-1"}}))
        .await
        .unwrap();
    let ready = json!({"type": "Ready", "status": "False", "reason": "ApplyTimeout",
        "message": "set by the test", "lastTransitionTime": "2026-01-02T03:04:05Z"});
    let applied = json!({"type": "Applied", "status": "True", "reason": "ConfigApplied",
        "message": "set by the test", "lastTransitionTime": "2026-01-02T03:04:05Z"});
    ns.dynamic_api(&resource)
        .patch_status(
            "shown",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Failed", "conditions": [applied, ready]}})),
        )
        .await
        .unwrap();
    let out = kubectl(env, &["get", "vrouterconfig", "shown", "-n", ns.name()]);
    let rows: Vec<Vec<&str>> = out.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows[0][..5], ["NAME", "PHASE", "READY", "REASON", "TARGET"], "{out}");
    assert_eq!(
        rows[1][..5],
        ["shown", "Failed", "False", "ApplyTimeout", "router-1"],
        "{out}"
    );
}

#[tokio::test]
async fn status_is_a_subresource_where_the_spec_says() {
    let env = TestEnv::shared().await;
    let ns = env.namespace("crds-status").await;
    let without_status = ["VRouterTemplate", "VRouterParams"];
    for kind in kinds() {
        let name = "with-status";
        let api = ns.dynamic_api(&kind.resource);
        let crd = vrouter_api::crds::all()
            .into_iter()
            .find(|c| c.spec.names.kind == kind.resource.kind)
            .unwrap();
        let declared = crd.spec.versions[0]
            .subresources
            .as_ref()
            .is_some_and(|s| s.status.is_some());
        let expected = !without_status.contains(&kind.resource.kind.as_str());
        assert_eq!(declared, expected, "{}", kind.resource.kind);
        assert_eq!(kind.status.is_some(), expected, "test table for {}", kind.resource.kind);

        let mut body = object(&kind.resource, name, kind.spec.clone());
        if let Some(status) = &kind.status {
            body.data["status"] = status.clone();
        }
        let created = api.create(&PostParams::default(), &body).await.unwrap();
        match &kind.status {
            Some(status) => {
                // Status sent with the object is dropped; only /status writes it.
                for (field, value) in status.as_object().unwrap() {
                    assert_ne!(
                        created.data["status"][field], *value,
                        "{} took status.{field} on create",
                        kind.resource.kind
                    );
                }
                let patched = api
                    .patch_status(name, &PatchParams::default(), &Patch::Merge(json!({"status": status})))
                    .await
                    .unwrap();
                for (field, value) in status.as_object().unwrap() {
                    assert_eq!(patched.data["status"][field], *value, "{}", kind.resource.kind);
                }
                // A write to the main resource cannot change status either.
                let spec_patch = json!({"metadata": {"labels": {"touched": "yes"}}, "status": null});
                let after = api
                    .patch(name, &PatchParams::default(), &Patch::Merge(spec_patch))
                    .await
                    .unwrap();
                assert_eq!(after.data["status"], patched.data["status"], "{}", kind.resource.kind);
                assert_eq!(after.labels().get("touched").map(String::as_str), Some("yes"));
            }
            None => {
                assert!(created.data.get("status").is_none(), "{}", kind.resource.kind);
                match api.get_status(name).await {
                    Err(kube::Error::Api(status)) => assert_eq!(status.code, 404, "{status:?}"),
                    other => panic!("{} serves /status: {other:?}", kind.resource.kind),
                }
            }
        }
    }
}
