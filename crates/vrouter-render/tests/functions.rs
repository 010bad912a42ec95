//! The functions, filters and tests the README lists, as template authors use them,
//! including the constructs the sandbox rewrites (`~`, `set`, loops), which must
//! behave exactly as tera documents them. Every interpolation is rendered `| safe`
//! here to show the function's own output, joined as the cases need; escaping and
//! where values may land have their own tests.

mod support;

use serde_json::{Value, json};
use support::render_one;
use vrouter_render::TemplateKind;

/// `source` with `| safe` added to every interpolation that lacks it.
fn trusted(source: &str) -> String {
    let mut out = String::new();
    let mut rest = source;
    while let Some(open) = rest.find("{{") {
        let close = open + rest[open..].find("}}").expect("closed tag");
        let inner = rest[open + 2..close].trim();
        out.push_str(&rest[..open]);
        if inner.ends_with("| safe") {
            out.push_str(&rest[open..close + 2]);
        } else {
            out.push_str(&format!("{{{{ {inner} | safe }}}}"));
        }
        rest = &rest[close + 2..];
    }
    out.push_str(rest);
    out
}

fn render(source: &str, params: &Value) -> String {
    let source = &if source.starts_with("{% raw %}") {
        source.to_owned()
    } else {
        trusted(source)
    };
    render_one(TemplateKind::Config, source, params).unwrap_or_else(|e| panic!("{source:?}: {e}"))
}

fn params() -> Value {
    json!({
        "hostName": "  Router-A  ",
        "asn": 4200000001u64,
        "id": 9007199254740993u64,
        "redistribute": ["connected", "static"],
        "neighbors": [
            {"ip": "192.0.2.2", "remoteAs": 65002},
            {"ip": "192.0.2.3", "remoteAs": 65003, "description": "upstream-b"},
        ],
        "empty": [],
        "text": "line one\nline two",
        "enabled": false,
    })
}

#[test]
fn the_documented_functions_work_as_documented() {
    let cases: &[(&str, &str)] = &[
        // default: a missing or null variable falls back
        ("{{ dnsServer | default(value=\"192.0.2.53\") }}", "192.0.2.53"),
        ("{{ asn | default(value=1) }}", "4200000001"),
        // has / contains
        ("{% if redistribute is containing(\"static\") %}yes{% endif %}", "yes"),
        ("{% if \"ospf\" in redistribute %}yes{% else %}no{% endif %}", "no"),
        ("{% if neighbors | length > 1 %}many{% endif %}", "many"),
        // join, upper/lower, trim, indent, replace
        ("{{ redistribute | join(sep=\",\") }}", "connected,static"),
        (
            "{{ hostName | trim | lower }}|{{ hostName | trim | upper }}",
            "router-a|ROUTER-A",
        ),
        ("{{ text | indent(prefix=\"  \") | safe }}", "line one\n  line two"),
        (
            "{{ text | indent(prefix=\"  \", first=true) | safe }}",
            "  line one\n  line two",
        ),
        ("{{ hostName | trim | replace(from=\"-\", to=\"_\") }}", "Router_A"),
        // lists
        (
            "{{ neighbors | map(attribute=\"ip\") | join(sep=\" \") | safe }}",
            "192.0.2.2 192.0.2.3",
        ),
        ("{{ neighbors | first | get(key=\"ip\") }}", "192.0.2.2"),
        ("{{ redistribute | last }}", "static"),
        ("{{ [3, 1, 2, 1] | sort | unique | join(sep=\"\") }}", "123"),
        ("{{ \"a,b\" | split(pat=\",\") | length }}", "2"),
        (
            "{{ neighbors | filter(attribute=\"description\", value=\"upstream-b\") | length }}",
            "1",
        ),
        // numbers: integers are exact
        ("{{ asn }} {{ id }}", "4200000001 9007199254740993"),
        ("{{ asn + 1 }}", "4200000002"),
        ("{{ \"42\" | int }}", "42"),
        ("{{ 2.6 | round }}", "3"),
        // conditions, loops, set
        ("{% if enabled %}on{% elif asn %}asn{% else %}off{% endif %}", "asn"),
        (
            "{% for n in neighbors %}{{ loop.index }}:{{ n.remoteAs }}{% if not loop.last %},{% endif %}{% endfor %}",
            "1:65002,2:65003",
        ),
        ("{% for n in empty %}x{% else %}none{% endfor %}", "none"),
        (
            "{% for n in neighbors %}{% if loop.first %}{% continue %}{% endif %}{{ n.ip }}{% endfor %}",
            "192.0.2.3",
        ),
        (
            "{% for i in range(end=5) %}{% if i == 2 %}{% break %}{% endif %}{{ i }}{% endfor %}",
            "01",
        ),
        (
            "{% for k, v in neighbors[0] %}{{ k }}={{ v }};{% endfor %}",
            "ip=192.0.2.2;remoteAs=65002;",
        ),
        (
            "{% set total = 0 %}{% for n in neighbors %}{% set_global total = total + n.remoteAs %}{% endfor %}{{ total }}",
            "130005",
        ),
        (
            "{% set peers = neighbors | map(attribute=\"ip\") %}{{ peers | length }}",
            "2",
        ),
        // `~` joins strings and numbers, as a value and as a condition
        ("{{ \"as\" ~ asn ~ \"-\" ~ 7 }}", "as4200000001-7"),
        ("{% if \"\" ~ \"\" %}x{% else %}empty{% endif %}", "empty"),
        ("{% if \"a\" ~ \"\" %}x{% endif %}", "x"),
        ("{% if \"a\" ~ \"b\" and enabled %}x{% else %}y{% endif %}", "y"),
        ("{{ \"a\" ~ \"b\" | upper }}", "AB"),
        ("{% set s = \"x\" ~ asn %}{{ s }}", "x4200000001"),
        ("{{ range(end=3) | join(sep=\"-\") }}", "0-1-2"),
        // tests
        (
            "{% if asn is number and hostName is string and neighbors is iterable %}ok{% endif %}",
            "ok",
        ),
        (
            "{% if missing is defined %}x{% else %}undefined{% endif %}",
            "undefined",
        ),
        ("{% if hostName is matching(\"Router\") %}m{% endif %}", "m"),
        ("{{ neighbors[1].description }}", "upstream-b"),
        (
            "{{ neighbors | json_encode | safe }}",
            r#"[{"ip":"192.0.2.2","remoteAs":65002},{"description":"upstream-b","ip":"192.0.2.3","remoteAs":65003}]"#,
        ),
    ];
    let mismatches: Vec<_> = cases
        .iter()
        .map(|(source, expected)| (source, render(source, &params()), format!("{expected}\n")))
        .filter(|(_, got, expected)| got != expected)
        .collect();
    assert!(mismatches.is_empty(), "{mismatches:#?}");
}

#[test]
fn raw_blocks_and_comments_are_literal_and_dropped() {
    assert_eq!(
        render("{% raw %}{{ not rendered }}{% endraw %}{# dropped #}", &json!({})),
        "{{ not rendered }}\n"
    );
}

#[test]
fn whitespace_control_trims_around_tags() {
    let source = "a\n{%- for i in range(end=2) %}\n  item {{ i }}\n{%- endfor %}\nb";
    assert_eq!(render(source, &json!({})), "a\n  item 0\n  item 1\nb\n");
}
