use super::*;
use serde_json::json;

fn target(namespace: &str, spec: serde_json::Value) -> VRouterTarget {
    serde_json::from_value(json!({
        "apiVersion": "vrouter.kojuro.date/v1", "kind": "VRouterTarget",
        "metadata": {"name": "t", "namespace": namespace},
        "spec": spec,
    }))
    .unwrap()
}

fn reach(namespace: &str, endpoint: &str, agent: &str) -> DaemonReach {
    DaemonReach {
        target_namespace: namespace.into(),
        endpoint: endpoint.into(),
        agent_id: agent.into(),
    }
}

fn annotated(value: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(ANNOTATION_ALLOWED_DAEMON_AGENTS.to_owned(), value.to_owned())])
}

#[test]
fn every_daemon_target_reaches_an_agent_and_nothing_else_does() {
    let cases = [
        (
            json!({"provider": {"type": "vrouter-daemon", "daemon": {"address": "D.example:9090", "agentID": "r1"}}}),
            Some(reach("a", "d.example:9090", "r1")),
        ),
        (
            json!({"provider": {"type": "vrouter-daemon", "daemon": {"address": " https://d:1/ ", "agentID": " r1 "}}}),
            Some(reach("a", "d:1", "r1")),
        ),
        // A daemon block the type does not select is not reached.
        (
            json!({"provider": {"type": "kubevirt", "kubevirt": {"name": "vm"},
                "daemon": {"address": "d:1", "agentID": "r1"}}}),
            None,
        ),
        (json!({"provider": {"type": "vrouter-daemon"}}), None),
    ];
    for (spec, want) in cases {
        assert_eq!(target("a", spec.clone()).daemon_reach(), want, "{spec}");
    }
}

#[test]
fn a_target_without_a_namespace_is_denied_whatever_is_granted() {
    let spec = json!({"provider": {"type": "vrouter-daemon", "daemon": {"address": "d:1", "agentID": "r1"}}});
    let reach = target("", spec)
        .daemon_reach()
        .expect("a daemon target reaches its agent");
    assert_eq!(reach.target_namespace, "");
    for granted in ["d:1/r1", "d:1/*"] {
        assert!(
            check_daemon_access(&reach, Some(&annotated(granted))).is_err(),
            "{granted}"
        );
    }
}

#[test]
fn endpoints_compare_without_scheme_slash_or_case() {
    for (address, key) in [
        ("d:1", "d:1"),
        ("  D.Example:9090 ", "d.example:9090"),
        ("http://d:1", "d:1"),
        ("HTTPS://d:1/", "d:1"),
        ("[::1]:9090", "[::1]:9090"),
    ] {
        assert_eq!(endpoint_key(address), key, "{address:?}");
    }
}

#[test]
fn a_grant_covers_its_endpoint_and_agent_pattern_only() {
    // (annotation value, agent reached at d:1 by namespace a, granted?)
    let cases = [
        ("d:1/r1", "r1", true),
        (" x:2/r1 , d:1/r1 ,", "r1", true),
        ("https://D:1/r1", "r1", true),
        ("d:1/r1/", "r1", true),
        ("d:1/*", "anything", true),
        ("d:1/edge-*", "edge-7", true),
        ("d:1/edge-*", "core-7", false),
        ("d:1/r1", "r10", false),
        ("d:1/R1", "r1", false),
        ("d:2/r1", "r1", false),
        ("d:1", "r1", false),
        ("*", "r1", false),
        ("*/r1", "r1", false),
        ("/r1", "r1", false),
        ("d:1/", "r1", false),
        ("d:1/a/r1", "r1", false),
        ("", "r1", false),
    ];
    for (value, agent, granted) in cases {
        let got = check_daemon_access(&reach("a", "d:1", agent), Some(&annotated(value)));
        assert_eq!(got.is_ok(), granted, "{value:?} for {agent:?}: {got:?}");
    }
    assert!(check_daemon_access(&reach("a", "d:1", "r1"), Some(&BTreeMap::new())).is_err());
    // An empty agent id is never granted, not even by `*`.
    assert!(check_daemon_access(&reach("a", "d:1", ""), Some(&annotated("d:1/*"))).is_err());
    assert_eq!(
        check_daemon_access(&reach("a", "d:1", "r1"), None),
        Err(DaemonAccessDenied::NoSuchNamespace(reach("a", "d:1", "r1")))
    );
}

#[test]
fn the_refusal_names_namespace_endpoint_agent_and_how_to_grant() {
    let text = check_daemon_access(&reach("team-a", "d:9090", "edge-1"), Some(&BTreeMap::new()))
        .unwrap_err()
        .to_string();
    assert!(
        text.starts_with(r#"namespace "team-a" is not granted agent "edge-1" of the vrouter-daemon at "d:9090""#),
        "{text}"
    );
    assert!(
        text.ends_with(
            "kubectl annotate namespace team-a --overwrite vrouter.kojuro.date/allowed-daemon-agents=d:9090/edge-1"
        ),
        "{text}"
    );
    // Existing entries are kept, quoted when the shell would glob them; the
    // ones that grant nothing are named.
    let text = check_daemon_access(
        &reach("team-a", "d:9090", "edge-1"),
        Some(&annotated("d:9090/core-*, d:9090")),
    )
    .unwrap_err()
    .to_string();
    assert!(
        text.contains(r#"entries that grant nothing (not ENDPOINT/AGENT): ["d:9090"]"#),
        "{text}"
    );
    assert!(
        text.ends_with("allowed-daemon-agents='d:9090/core-*,d:9090,d:9090/edge-1'"),
        "{text}"
    );
}
