use super::*;

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn selector(yaml: &str) -> TargetSelector {
    serde_yaml::from_str(yaml).unwrap()
}

#[test]
fn matching_table() {
    let site_a = labels(&[("site", "a"), ("role", "edge")]);
    let site_b = labels(&[("site", "b")]);
    let bare = labels(&[]);
    // (selector, labels, selected)
    let cases: &[(&str, &BTreeMap<String, String>, bool)] = &[
        ("{}", &bare, true),
        ("{}", &site_a, true),
        ("matchLabels: {site: a}", &site_a, true),
        ("matchLabels: {site: a}", &site_b, false),
        ("matchLabels: {site: a}", &bare, false),
        ("matchLabels: {site: a, role: edge}", &site_a, true),
        ("matchLabels: {site: a, role: core}", &site_a, false),
        (
            "matchExpressions: [{key: site, operator: In, values: [a, c]}]",
            &site_a,
            true,
        ),
        (
            "matchExpressions: [{key: site, operator: In, values: [a, c]}]",
            &site_b,
            false,
        ),
        (
            "matchExpressions: [{key: site, operator: In, values: [a]}]",
            &bare,
            false,
        ),
        (
            "matchExpressions: [{key: site, operator: NotIn, values: [a]}]",
            &site_a,
            false,
        ),
        (
            "matchExpressions: [{key: site, operator: NotIn, values: [a]}]",
            &site_b,
            true,
        ),
        // Kubernetes semantics: a target without the key is NotIn any set.
        (
            "matchExpressions: [{key: site, operator: NotIn, values: [a]}]",
            &bare,
            true,
        ),
        ("matchExpressions: [{key: role, operator: Exists}]", &site_a, true),
        ("matchExpressions: [{key: role, operator: Exists}]", &site_b, false),
        (
            "matchExpressions: [{key: role, operator: DoesNotExist}]",
            &site_a,
            false,
        ),
        ("matchExpressions: [{key: role, operator: DoesNotExist}]", &site_b, true),
        // Labels and expressions all hold (AND).
        (
            "{matchLabels: {site: a}, matchExpressions: [{key: role, operator: DoesNotExist}]}",
            &site_a,
            false,
        ),
        (
            "{matchLabels: {site: b}, matchExpressions: [{key: role, operator: DoesNotExist}]}",
            &site_b,
            true,
        ),
        // An operator admission refuses selects nothing rather than everything.
        (
            "matchExpressions: [{key: site, operator: in, values: [a]}]",
            &site_a,
            false,
        ),
    ];
    for (yaml, labels, want) in cases {
        assert_eq!(selector(yaml).matches(labels), *want, "{yaml} on {labels:?}");
    }
}

#[test]
fn problems_table() {
    // (selector, expected (field, message fragment) pairs)
    let cases: &[(&str, &[(&str, &str)])] = &[
        ("{}", &[]),
        (
            "matchExpressions: [{key: site, operator: In, values: [a]}, {key: x, operator: Exists}]",
            &[],
        ),
        ("matchLabels: {example.com/site: a-1}", &[]),
        (
            "matchExpressions: [{key: site, operator: Equals, values: [a]}]",
            &[("s.matchExpressions[0].operator", "\"Equals\" is not an operator")],
        ),
        (
            "matchExpressions: [{key: site, operator: In}]",
            &[("s.matchExpressions[0].values", "at least one value for In")],
        ),
        (
            "matchExpressions: [{key: site, operator: NotIn, values: []}]",
            &[("s.matchExpressions[0].values", "at least one value for NotIn")],
        ),
        (
            "matchExpressions: [{key: site, operator: Exists, values: [a]}]",
            &[("s.matchExpressions[0].values", "must be empty for Exists")],
        ),
        (
            "matchExpressions: [{key: site, operator: DoesNotExist, values: [a]}]",
            &[("s.matchExpressions[0].values", "must be empty for DoesNotExist")],
        ),
        (
            "matchExpressions: [{key: 'bad key', operator: Exists}]",
            &[("s.matchExpressions[0].key", "label key \"bad key\"")],
        ),
        (
            "matchExpressions: [{key: site, operator: In, values: [ok, 'no way']}]",
            &[("s.matchExpressions[0].values[1]", "label value \"no way\"")],
        ),
        ("matchLabels: {'Bad_/x': a}", &[("s.matchLabels[\"Bad_/x\"]", "prefix")]),
        (
            "matchLabels: {site: '-a'}",
            &[("s.matchLabels[\"site\"]", "label value \"-a\"")],
        ),
        ("matchLabels: {'': a}", &[("s.matchLabels[\"\"]", "must not be empty")]),
    ];
    for (yaml, want) in cases {
        let got = selector(yaml).problems("s");
        assert_eq!(got.len(), want.len(), "{yaml}: {got:?}");
        for (problem, (field, fragment)) in got.iter().zip(want.iter()) {
            assert_eq!(problem.field, *field, "{yaml}");
            assert!(problem.message.contains(fragment), "{yaml}: {}", problem.message);
        }
    }
}

#[test]
fn a_long_value_is_refused() {
    let long = "a".repeat(64);
    let s = TargetSelector {
        match_labels: [("site".to_owned(), long)].into(),
        ..Default::default()
    };
    assert!(s.problems("s")[0].message.contains("at most 63"));
}

#[test]
fn a_binding_configures_its_named_targets_then_the_selected_ones_by_name() {
    let spec = |yaml: &str| -> crate::VRouterBindingSpec { serde_yaml::from_str(yaml).unwrap() };
    let edge = labels(&[("role", "edge")]);
    let core = labels(&[("role", "core")]);
    let fleet = [("r3", &edge), ("r1", &edge), ("r2", &core), ("b", &edge)];
    // (spec, targets configured)
    let cases: &[(&str, &[&str])] = &[
        ("targetRefs: [{name: b}, {name: a}]", &["b", "a"]),
        ("targetSelector: {matchLabels: {role: edge}}", &["b", "r1", "r3"]),
        // Union: a named target that also matches appears once, where named.
        (
            "{targetRefs: [{name: r3}, {name: x}], targetSelector: {matchLabels: {role: edge}}}",
            &["r3", "x", "b", "r1"],
        ),
        ("targetSelector: {}", &["b", "r1", "r2", "r3"]),
        ("targetSelector: {matchLabels: {role: none}}", &[]),
    ];
    for (yaml, want) in cases {
        let got = spec(yaml).target_names(fleet.iter().map(|(n, l)| (*n, *l)));
        assert_eq!(got, *want, "{yaml}");
    }
}
