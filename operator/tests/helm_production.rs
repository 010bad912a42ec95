//! The chart's production settings, rendered by a real `helm` (built by
//! `cargo xtask testenv`): `values.schema.json` refuses a wrong type and an
//! unknown key in `helm lint`, `helm template` and `helm install` (naming
//! the key) and covers exactly the keys of `values.yaml`; a
//! PodDisruptionBudget and a spread over nodes come with more than one
//! replica and not with one; the listeners bind every interface of both
//! families unless `bindAddress` names one; memory is sized from the
//! 10,000-target benchmark; the service account, pod labels and
//! annotations, priority class, extra args, env and volumes, node
//! selector, tolerations and affinity land where Kubernetes reads them,
//! and the API server accepts the result (strict server-side dry run).

mod common;

use std::path::Path;

use serde_json::{Value, json};
use vrouter_test_apiserver::TestEnv;

use common::chart_dry_run::dry_run;
use common::shipped_rbac::{ADMISSION_POLICY_API, chart, documents, helm};

/// What a helm command said, and whether it succeeded.
struct Ran {
    ok: bool,
    output: String,
}

/// `helm <args> <chart> -f <values>` with `values` written to a file.
fn helm_with_values(args: &[&str], values: &Value) -> Ran {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("values.yaml");
    std::fs::write(&file, serde_yaml::to_string(values).unwrap()).unwrap();
    let output = helm()
        .args(args)
        .arg(chart())
        .arg("-f")
        .arg(&file)
        .output()
        .expect("run helm");
    Ran {
        ok: output.status.success(),
        output: format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    }
}

/// The objects `helm template vr` renders with `values` in namespace `ns`.
fn render(ns: &str, values: &Value) -> Vec<Value> {
    // As for the test API server, which serves the policy's API.
    let ran = helm_with_values(
        &[
            "template",
            "vr",
            "--namespace",
            ns,
            "--api-versions",
            ADMISSION_POLICY_API,
        ],
        values,
    );
    assert!(ran.ok, "helm template with {values}: {}", ran.output);
    let start = ran.output.find("---").unwrap_or(0);
    documents(&ran.output[start..])
}

fn find<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}

fn deployment(objects: &[Value]) -> &Value {
    let found = find(objects, "Deployment");
    assert_eq!(found.len(), 1, "one Deployment");
    found[0]
}

fn pod_spec(objects: &[Value]) -> &Value {
    &deployment(objects)["spec"]["template"]["spec"]
}

fn read_chart_file(name: &str) -> String {
    std::fs::read_to_string(chart().join(name)).unwrap_or_else(|e| panic!("reading the chart's {name}: {e}"))
}

fn schema() -> Value {
    serde_json::from_str(&read_chart_file("values.schema.json")).expect("values.schema.json is JSON")
}

fn default_values() -> Value {
    serde_yaml::from_str(&read_chart_file("values.yaml")).expect("values.yaml is YAML")
}

/// Values the schema refuses, the key its message names and why.
fn refused_values() -> [(Value, &'static str, &'static str); 8] {
    [
        (json!({"replicas": "two"}), "/replicas", "want integer"),
        (json!({"webhook": {"port": "https"}}), "/webhook/port", "want integer"),
        (json!({"logFormat": "yaml"}), "/logFormat", "must be one of"),
        (json!({"replica": 2}), "'replica'", "not allowed"),
        (json!({"webhook": {"timeout": 5}}), "'timeout'", "not allowed"),
        (
            json!({"podDisruptionBudget": {"maxUnavailable": 1}}),
            "'maxUnavailable'",
            "not allowed",
        ),
        (
            json!({"resources": {"limits": {"memroy": "1Gi"}}}),
            "'memroy'",
            "not allowed",
        ),
        (json!({"bindAddress": "example.com"}), "/bindAddress", "example.com"),
    ]
}

/// Runs `command` with each refused value: each is refused naming its key;
/// `accepted` passes.
fn refuses_each(command: &[&str], accepted: &Value) {
    for (values, key, reason) in refused_values() {
        let mut merged = accepted.clone();
        merged
            .as_object_mut()
            .unwrap()
            .extend(values.as_object().unwrap().clone());
        let ran = helm_with_values(command, &merged);
        assert!(!ran.ok, "helm {command:?} accepted {values}: {}", ran.output);
        assert!(
            ran.output.contains(key) && ran.output.contains(reason),
            "helm {command:?} with {values}: the refusal names neither {key:?} nor {reason:?}: {}",
            ran.output
        );
    }
    let ran = helm_with_values(command, accepted);
    assert!(ran.ok, "helm {command:?} with {accepted}: {}", ran.output);
}

/// A wrong type and an unknown key, at the top and nested, are refused by
/// `helm lint` and `helm template`, with a message naming the key; the
/// defaults pass.
#[test]
fn lint_and_template_refuse_a_wrong_type_and_an_unknown_key_naming_it() {
    refuses_each(&["lint", "--strict"], &json!({}));
    refuses_each(&["template", "vr"], &json!({}));
}

/// `helm install` against a real API server refuses them the same, before
/// anything is created (a server-side dry run would create nothing either,
/// so the refusal is the schema's); values a cluster without cert-manager
/// needs pass.
#[tokio::test]
async fn install_refuses_a_wrong_type_and_an_unknown_key_naming_it() {
    let env = TestEnv::shared().await;
    let ns = env.namespace("chart-schema").await;
    let kubeconfig = env.kubeconfig_path().to_str().unwrap();
    let command = [
        "install",
        "vr",
        "--dry-run=server",
        "--namespace",
        ns.name(),
        "--kubeconfig",
        kubeconfig,
    ];
    // The harness installed the CRDs; no cert-manager here.
    let accepted =
        json!({"crds": {"install": false}, "webhook": {"certManager": {"enabled": false}, "caBundle": "Y2EK"}});
    refuses_each(&command, &accepted);
    // What to do next, with this release's names.
    let notes = helm_with_values(&command, &accepted).output;
    let notes = &notes[notes.find("NOTES:").unwrap_or_else(|| panic!("no NOTES: {notes}"))..];
    for part in [
        format!(
            "kubectl -n {} wait --for=condition=Available deployment/vr-vrouter-operator",
            ns.name()
        ),
        format!("kubectl -n {} create --dry-run=server -f -", ns.name()),
        r#"admission webhook "validate.vrouter.kojuro.date" denied the request"#.to_owned(),
        "a PodDisruptionBudget keeps 1 through a drain".to_owned(),
        "docs/operations.md".to_owned(),
    ] {
        assert!(notes.contains(&part), "{part:?} not in {notes}");
    }
}

/// The schema's path to `key` below `node`, following `properties`.
fn schema_keys(node: &Value, prefix: &str, out: &mut Vec<String>) {
    let Some(properties) = node["properties"].as_object() else {
        return;
    };
    for (key, child) in properties {
        let path = format!("{prefix}{key}");
        out.push(path.clone());
        schema_keys(child, &format!("{path}."), out);
    }
}

/// Every key of values.yaml, descending into maps the schema describes key
/// by key (its own objects); maps it leaves open (Kubernetes objects such as
/// `affinity`, free maps such as `podLabels`) are one key.
fn values_keys(values: &Value, schema: &Value, prefix: &str, out: &mut Vec<String>) {
    let Some(map) = values.as_object() else {
        return;
    };
    for (key, child) in map {
        let path = format!("{prefix}{key}");
        out.push(path.clone());
        let child_schema = &schema["properties"][key];
        if child_schema["properties"].is_object() {
            values_keys(child, child_schema, &format!("{path}."), out);
        }
    }
}

/// Every object the schema describes key by key refuses any other key.
fn open_objects(node: &Value, path: &str, out: &mut Vec<String>) {
    if let Some(properties) = node["properties"].as_object() {
        if node["additionalProperties"] != false {
            out.push(if path.is_empty() {
                "(top)".to_owned()
            } else {
                path.to_owned()
            });
        }
        for (key, child) in properties {
            let prefix = if path.is_empty() {
                String::new()
            } else {
                format!("{path}.")
            };
            open_objects(child, &format!("{prefix}{key}"), out);
        }
    }
    if let Some(items) = node.get("items") {
        open_objects(items, &format!("{path}[]"), out);
    }
}

/// values.yaml and the schema cannot drift apart: a value added without
/// its schema entry would be refused as unknown, and a schema entry without
/// a value is one nobody documents.
#[test]
fn the_schema_has_exactly_the_keys_of_values_yaml_and_refuses_others() {
    let schema = schema();
    let mut in_schema = Vec::new();
    schema_keys(&schema, "", &mut in_schema);
    let mut in_values = Vec::new();
    values_keys(&default_values(), &schema, "", &mut in_values);
    let missing: Vec<&String> = in_values.iter().filter(|k| !in_schema.contains(k)).collect();
    assert!(
        missing.is_empty(),
        "values.yaml keys missing from values.schema.json (add each with its type): {missing:?}"
    );
    // The schema names every resource a container may request; values.yaml
    // sets only those the defaults need.
    let stale: Vec<&String> = in_schema
        .iter()
        .filter(|k| {
            !in_values.contains(k) && !k.starts_with("resources.requests.") && !k.starts_with("resources.limits.")
        })
        .collect();
    assert!(
        stale.is_empty(),
        "values.schema.json keys that values.yaml lacks: {stale:?}"
    );
    let mut open = Vec::new();
    open_objects(&schema, "", &mut open);
    assert!(
        open.is_empty(),
        "schema objects without additionalProperties: false: {open:?}"
    );
}

/// With more than one replica: a PodDisruptionBudget keeping one through
/// voluntary evictions and a spread over nodes, both selecting exactly the
/// operator's pods. With one replica: neither (a budget a single replica
/// could never meet would block every drain). Values turn them off or
/// replace the spread.
#[test]
fn a_budget_and_a_spread_come_with_more_than_one_replica_only() {
    let objects = render("vrouter-system", &json!({}));
    let budgets = find(&objects, "PodDisruptionBudget");
    assert_eq!(budgets.len(), 1, "{budgets:#?}");
    let pod_labels = &deployment(&objects)["spec"]["template"]["metadata"]["labels"];
    let selector = &budgets[0]["spec"]["selector"]["matchLabels"];
    assert_eq!(budgets[0]["spec"]["minAvailable"], 1);
    assert_eq!(selector, &deployment(&objects)["spec"]["selector"]["matchLabels"]);
    assert_eq!(
        pod_spec(&objects)["topologySpreadConstraints"],
        json!([{
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": selector},
        }])
    );
    for (key, value) in selector.as_object().unwrap() {
        assert_eq!(&pod_labels[key], value, "the pods carry {key}");
    }

    let single = render("vrouter-system", &json!({"replicas": 1}));
    assert!(find(&single, "PodDisruptionBudget").is_empty());
    assert!(pod_spec(&single).get("topologySpreadConstraints").is_none());

    let tuned = render(
        "vrouter-system",
        &json!({"replicas": 3, "podDisruptionBudget": {"minAvailable": 2},
                "spread": {"whenUnsatisfiable": "DoNotSchedule", "topologyKey": "topology.kubernetes.io/zone"}}),
    );
    assert_eq!(find(&tuned, "PodDisruptionBudget")[0]["spec"]["minAvailable"], 2);
    let constraint = &pod_spec(&tuned)["topologySpreadConstraints"][0];
    assert_eq!(constraint["whenUnsatisfiable"], "DoNotSchedule");
    assert_eq!(constraint["topologyKey"], "topology.kubernetes.io/zone");

    let own = json!([{"maxSkew": 2, "topologyKey": "rack", "whenUnsatisfiable": "DoNotSchedule",
                      "labelSelector": {"matchLabels": {"app": "x"}}}]);
    let replaced = render(
        "vrouter-system",
        &json!({"podDisruptionBudget": {"enabled": false}, "topologySpreadConstraints": own}),
    );
    assert!(find(&replaced, "PodDisruptionBudget").is_empty());
    assert_eq!(pod_spec(&replaced)["topologySpreadConstraints"], own);
    let unspread = render("vrouter-system", &json!({"spread": {"enabled": false}}));
    assert!(pod_spec(&unspread).get("topologySpreadConstraints").is_none());
}

fn env_of(objects: &[Value], name: &str) -> Option<Value> {
    pod_spec(objects)["containers"][0]["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .map(|e| e["value"].clone())
}

/// The listeners take `:PORT` (every interface of both families, the
/// operator's rule) unless `bindAddress` names a host; an IPv6 host is
/// bracketed so the operator reads it.
#[test]
fn the_listeners_bind_both_families_unless_a_host_is_named() {
    let cases = [
        (json!({}), [":9443", ":8443", ":8081"]),
        (
            json!({"bindAddress": "0.0.0.0"}),
            ["0.0.0.0:9443", "0.0.0.0:8443", "0.0.0.0:8081"],
        ),
        (json!({"bindAddress": "::"}), ["[::]:9443", "[::]:8443", "[::]:8081"]),
    ];
    for (values, [webhook, metrics, health]) in cases {
        let objects = render("vrouter-system", &values);
        for (var, expected) in [
            ("WEBHOOK_ADDR", webhook),
            ("METRICS_ADDR", metrics),
            ("HEALTH_PROBE_ADDR", health),
        ] {
            let value = env_of(&objects, var).unwrap_or_else(|| panic!("{var} with {values}"));
            assert_eq!(value, expected, "{var} with {values}");
            // The operator's own parser reads it as the listener meant.
            let parsed = vrouter_operator::server::listen::metrics_flag(value.as_str().unwrap())
                .unwrap_or_else(|e| panic!("{var}={value}: {e}"));
            let all = values.get("bindAddress").is_none();
            assert_eq!(
                matches!(parsed, vrouter_operator::server::listen::Listen::AllInterfaces(_)),
                all,
                "{var}={value}"
            );
        }
    }
}

/// The figure of `docs/benchmarks.md`'s 10,000-target run: the operator's
/// peak RSS, in MiB.
fn peak_at_ten_thousand_mib() -> f64 {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/benchmarks.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let section = text
        .split("\n## ")
        .find(|s| s.starts_with("Scale: one binding over 10000"))
        .expect("docs/benchmarks.md has the 10000-target scale run");
    let row = section
        .lines()
        .find(|l| l.starts_with("| peak RSS of the operator process |"))
        .expect("the 10000-target run records the operator's peak RSS");
    let value = row.split('|').nth(2).unwrap().trim();
    value
        .strip_suffix(" MiB")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{value:?} is not `<n> MiB`"))
}

/// A Kubernetes memory quantity in `Mi` or `Gi`, in MiB.
fn mib(quantity: &str) -> f64 {
    if let Some(n) = quantity.strip_suffix("Mi") {
        return n.parse().unwrap();
    }
    let n: f64 = quantity
        .strip_suffix("Gi")
        .unwrap_or_else(|| panic!("{quantity}"))
        .parse()
        .unwrap();
    n * 1024.0
}

/// The default limit holds the 10,000-target peak with at least half as
/// much again for bursts (a watch relist while an apply wave runs), and the
/// request is below the limit.
#[test]
fn memory_is_sized_from_the_ten_thousand_target_benchmark() {
    let peak = peak_at_ten_thousand_mib();
    let objects = render("vrouter-system", &json!({}));
    let resources = &pod_spec(&objects)["containers"][0]["resources"];
    let limit = mib(resources["limits"]["memory"].as_str().unwrap());
    let request = mib(resources["requests"]["memory"].as_str().unwrap());
    assert!(
        limit >= peak * 1.5,
        "limit {limit} MiB for a measured peak of {peak} MiB"
    );
    assert!(request < limit, "request {request} MiB, limit {limit} MiB");
}

/// A ServiceAccount the chart creates carries its annotations and a chosen
/// name; one it does not create is named, and the pods, every binding and
/// the Secret policy use it.
#[test]
fn the_service_account_is_created_or_named() {
    let objects = render(
        "vrouter-system",
        &json!({"serviceAccount": {"name": "router-keeper", "annotations": {"iam.example/role": "r"}}}),
    );
    let accounts = find(&objects, "ServiceAccount");
    assert_eq!(accounts.len(), 1);
    assert_eq!(accounts[0]["metadata"]["name"], "router-keeper");
    assert_eq!(accounts[0]["metadata"]["annotations"]["iam.example/role"], "r");
    assert_eq!(pod_spec(&objects)["serviceAccountName"], "router-keeper");

    let objects = render(
        "vrouter-system",
        &json!({"serviceAccount": {"create": false, "name": "existing"}}),
    );
    assert!(find(&objects, "ServiceAccount").is_empty());
    assert_eq!(pod_spec(&objects)["serviceAccountName"], "existing");
    let subjects: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"].as_str().unwrap().ends_with("Binding") && o["subjects"].is_array())
        .flat_map(|o| o["subjects"].as_array().unwrap())
        .collect();
    assert!(subjects.len() >= 3, "{subjects:#?}");
    assert!(subjects.iter().all(|s| s["name"] == "existing"), "{subjects:#?}");
    let policy = &find(&objects, "ValidatingAdmissionPolicy")[0];
    assert!(
        policy
            .to_string()
            .contains("system:serviceaccount:vrouter-system:existing"),
        "{policy:#}"
    );

    let ran = helm_with_values(&["template", "vr"], &json!({"serviceAccount": {"create": false}}));
    assert!(
        !ran.ok && ran.output.contains("serviceAccount.name is required"),
        "{}",
        ran.output
    );
}

/// Every pod-level value, set at once: each lands where Kubernetes reads
/// it, beside what the chart sets itself, and the API server accepts the
/// result.
#[tokio::test]
async fn pod_values_land_where_kubernetes_reads_them_and_are_accepted() {
    let env = TestEnv::shared().await;
    let ns = env.namespace("chart-production").await;
    let values = json!({
        "podLabels": {"team": "network"},
        "podAnnotations": {"example.com/scrape": "true"},
        "priorityClassName": "system-cluster-critical",
        "extraArgs": ["--enable-http2"],
        "extraEnv": [{"name": "RUST_LOG", "value": "debug"}],
        "extraVolumes": [{"name": "extra", "emptyDir": {}}],
        "extraVolumeMounts": [{"name": "extra", "mountPath": "/extra"}],
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ops", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]}}},
        "webhook": {"certManager": {"enabled": false}, "caBundle": "Y2EK"},
    });
    let objects = render(ns.name(), &values);
    let template = &deployment(&objects)["spec"]["template"];
    let pod = &template["spec"];
    let container = &pod["containers"][0];
    assert_eq!(template["metadata"]["labels"]["team"], "network");
    assert_eq!(
        template["metadata"]["labels"]["app.kubernetes.io/name"],
        "vrouter-operator"
    );
    assert_eq!(template["metadata"]["annotations"]["example.com/scrape"], "true");
    assert_eq!(pod["priorityClassName"], "system-cluster-critical");
    assert_eq!(container["args"], json!(["--enable-http2"]));
    assert_eq!(env_of(&objects, "RUST_LOG"), Some(json!("debug")));
    assert_eq!(env_of(&objects, "LOG_FORMAT"), Some(json!("json")));
    let volumes: Vec<&Value> = pod["volumes"].as_array().unwrap().iter().map(|v| &v["name"]).collect();
    assert_eq!(volumes, [&json!("webhook-certs"), &json!("extra")]);
    let mounts: Vec<&Value> = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["mountPath"])
        .collect();
    assert_eq!(
        mounts,
        [&json!("/tmp/k8s-webhook-server/serving-certs"), &json!("/extra")]
    );
    assert_eq!(pod["nodeSelector"], values["nodeSelector"]);
    assert_eq!(pod["tolerations"], values["tolerations"]);
    assert_eq!(pod["affinity"], values["affinity"]);
    dry_run(&env.client(), &objects).await;

    // Without webhooks the extra volume still mounts, alone.
    let objects = render(
        ns.name(),
        &json!({"webhook": {"enabled": false}, "extraVolumes": values["extraVolumes"],
                "extraVolumeMounts": values["extraVolumeMounts"]}),
    );
    let pod = pod_spec(&objects);
    assert_eq!(pod["volumes"], values["extraVolumes"]);
    assert_eq!(pod["containers"][0]["volumeMounts"], values["extraVolumeMounts"]);
    // And with none of them, the defaults render no empty keys.
    let plain = render(ns.name(), &json!({}));
    let pod = pod_spec(&plain);
    for key in ["priorityClassName", "nodeSelector", "tolerations", "affinity"] {
        assert!(pod.get(key).is_none(), "{key}: {pod:#}");
    }
    assert!(pod["containers"][0].get("args").is_none());
}
