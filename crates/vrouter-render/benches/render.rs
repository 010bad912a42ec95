//! The budgets in the crate README: merge, render, script.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Map, Value, json};
use vrouter_render::{TemplateEngine, TemplateSource, merge_layers, render_apply_script, render_templates};

/// Three layers of 1,000 keys each; half the keys overlap the layer below, and
/// every tenth value is a small map that merges recursively.
fn layers() -> Vec<Value> {
    (0..3)
        .map(|layer| {
            let mut map = Map::new();
            for i in 0..1000 {
                let key = format!("key-{}", i + layer * 500);
                let value = if i % 10 == 0 {
                    json!({"enabled": layer % 2 == 0, "asn": 65000 + i, "peers": [i, i + 1]})
                } else {
                    json!(format!("value-{layer}-{i}"))
                };
                map.insert(key, value);
            }
            Value::Object(map)
        })
        .collect()
}

/// A 200-line commands template: 180 fixed lines and a 20-line loop body.
fn bgp_template() -> String {
    let mut t = String::new();
    for i in 0..180 {
        t.push_str(&format!(
            "set system static-host-mapping host-name h{i} alias {{{{ domain }}}} inet 192.0.2.{}\n",
            i % 250
        ));
    }
    t.push_str("{% for n in neighbors %}\n");
    for line in [
        "set protocols bgp {{ asn }} neighbor {{ n.ip }} remote-as {{ n.remoteAs }}",
        "set protocols bgp {{ asn }} neighbor {{ n.ip }} description {{ n.description | default(value=\"peer\") }}",
        "set protocols bgp {{ asn }} neighbor {{ n.ip }} update-source {{ routerId }}",
        "{% if n.password is defined %}set protocols bgp {{ asn }} neighbor {{ n.ip }} password {{ n.password }}{% endif %}",
        "set protocols bgp {{ asn }} neighbor {{ n.ip }} address-family ipv4-unicast soft-reconfiguration inbound",
        "{% for r in redistribute %}set protocols bgp {{ asn }} address-family ipv4-unicast redistribute {{ r }}; {% endfor %}",
    ] {
        t.push_str(line);
        t.push('\n');
    }
    for _ in 0..12 {
        t.push_str("{# spacing #}\n");
    }
    t.push_str("{% endfor %}\n");
    assert_eq!(t.lines().count(), 200);
    t
}

fn bgp_params() -> Value {
    let neighbors: Vec<Value> = (0..100)
        .map(|i| json!({"ip": format!("198.51.100.{i}"), "remoteAs": 64512 + i, "description": format!("peer-{i}")}))
        .collect();
    json!({"asn": 4200000001u64, "routerId": "192.0.2.1", "domain": "example.net",
           "redistribute": ["connected", "static"], "neighbors": neighbors})
}

/// About 500 KiB of config.boot text.
fn big_config() -> String {
    let mut config = String::from("interfaces {\n");
    let mut i = 0;
    while config.len() < 500 * 1024 {
        config.push_str(&format!(
            "    ethernet eth{i} {{\n        address 10.{}.{}.1/24\n        description \"link {i}\"\n    }}\n",
            i / 256 % 256,
            i % 256
        ));
        i += 1;
    }
    config.push_str("}\n");
    config
}

fn benches(c: &mut Criterion) {
    let layers = layers();
    c.bench_function("merge_layers 3 x 1000 keys", |b| {
        b.iter(|| merge_layers(black_box(&layers)).unwrap())
    });

    let template = bgp_template();
    let params = bgp_params();
    let sources = [TemplateSource {
        name: "bgp",
        config: "",
        commands: &template,
    }];
    c.bench_function(
        "render_templates 200-line template, 100 neighbours (parse + render)",
        |b| b.iter(|| render_templates(black_box(&sources), black_box(&params)).unwrap()),
    );
    c.bench_function("TemplateEngine::check 200-line template (admission, every path)", |b| {
        b.iter(|| {
            TemplateEngine::new()
                .check("bgp", vrouter_render::TemplateKind::Commands, black_box(&template))
                .unwrap()
        })
    });
    let prepared = TemplateEngine::new().prepare(&sources).unwrap();
    c.bench_function("PreparedTemplates::render 200-line template, 100 neighbours", |b| {
        b.iter(|| prepared.render(black_box(&params)).unwrap())
    });

    let config = big_config();
    c.bench_function("render_apply_script 500 KiB config", |b| {
        b.iter(|| render_apply_script(black_box(&config), "set system host-name r1\n", true).unwrap())
    });
}

criterion_group!(render, benches);
criterion_main!(render);
