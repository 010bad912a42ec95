//! Budgets in docs/benchmarks.md: the binding controller's pure render of
//! one binding for 1,000 targets, and the admission check of a binding that
//! lists 1,000 targets.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use vrouter_api::compose::render_configs;
use vrouter_api::validate;
use vrouter_api::{VRouterBinding, VRouterParams, VRouterTarget, VRouterTemplate};

const TARGETS: usize = 1000;

fn object<K: serde::de::DeserializeOwned>(value: Value) -> K {
    serde_json::from_value(value).expect("a valid fixture")
}

fn binding(targets: usize) -> VRouterBinding {
    let target_refs: Vec<Value> = (0..targets).map(|i| json!({"name": format!("r{i}")})).collect();
    object(json!({
        "apiVersion": "vrouter.kojuro.date/v1", "kind": "VRouterBinding",
        "metadata": {"name": "edge", "namespace": "net", "uid": "uid-1"},
        "spec": {
            "templateRefs": [{"name": "system"}, {"name": "interfaces"}, {"name": "bgp"}],
            "paramsRefs": [{"name": "site"}],
            "targetRefs": target_refs,
            "params": {"domain": "example.net", "bgp": {"holdTime": 90, "keepalive": 30}},
        },
    }))
}

/// Three templates of a typical router: host settings, interfaces from a
/// loop, and BGP neighbours from a loop, as commands and as config.
fn templates() -> Vec<VRouterTemplate> {
    let system = "set system host-name {{ hostName }}\nset system domain-name {{ domain }}\n\
        {% for s in ntp %}set service ntp server {{ s }}\n{% endfor %}";
    let interfaces = "{% for i in interfaces %}set interfaces ethernet {{ i.name }} address {{ i.address }}\n\
        set interfaces ethernet {{ i.name }} description {{ i.description | default(value=\"uplink\") }}\n{% endfor %}";
    let bgp = "protocols {\n    bgp {{ asn }} {\n{% for n in neighbors %}        neighbor {{ n.ip }} {\n            remote-as {{ n.remoteAs }}\n        }\n{% endfor %}        parameters {\n            router-id {{ routerId }}\n        }\n    }\n}\n";
    [("system", system, ""), ("interfaces", interfaces, ""), ("bgp", "", bgp)]
        .into_iter()
        .map(|(name, commands, config)| {
            object(json!({
                "apiVersion": "vrouter.kojuro.date/v1", "kind": "VRouterTemplate",
                "metadata": {"name": name, "namespace": "net"},
                "spec": {"commands": commands, "config": config},
            }))
        })
        .collect()
}

fn params() -> Vec<VRouterParams> {
    let neighbors: Vec<Value> = (0..8)
        .map(|i| json!({"ip": format!("198.51.100.{i}"), "remoteAs": 64512 + i}))
        .collect();
    vec![object(json!({
        "apiVersion": "vrouter.kojuro.date/v1", "kind": "VRouterParams",
        "metadata": {"name": "site", "namespace": "net"},
        "spec": {"params": {
            "ntp": ["ntp1.example.net", "ntp2.example.net"],
            "neighbors": neighbors,
            "interfaces": [{"name": "eth0", "address": "dhcp"}],
            "asn": 64500,
        }},
    }))]
}

fn targets(count: usize) -> Vec<VRouterTarget> {
    (0..count)
        .map(|i| {
            object(json!({
                "apiVersion": "vrouter.kojuro.date/v1", "kind": "VRouterTarget",
                "metadata": {"name": format!("r{i}"), "namespace": "net"},
                "spec": {
                    "provider": {"type": "proxmox", "proxmox": {"vmid": 100 + i, "clusterRef": {"name": "pve"}}},
                    "params": {
                        "hostName": format!("r{i}"),
                        "asn": 4_200_000_000u64 + i as u64,
                        "routerId": format!("192.0.2.{}", i % 250),
                        "interfaces": [
                            {"name": "eth0", "address": format!("203.0.113.{}/24", i % 250)},
                            {"name": "eth1", "address": "dhcp", "description": "lan"},
                        ],
                    },
                },
            }))
        })
        .collect()
}

fn render_one_binding(c: &mut Criterion) {
    let (b, t, p, r) = (binding(TARGETS), templates(), params(), targets(TARGETS));
    let rendered = render_configs(&b, &t, &p, &r).expect("the fixture renders");
    assert_eq!(rendered.len(), TARGETS);
    assert!(rendered[7].spec.commands.contains("set system host-name r7"));
    assert!(rendered[7].spec.config.contains("remote-as 64519"));
    c.bench_function("render_configs 1000 targets, 3 templates, 3 param layers", |bench| {
        bench.iter(|| render_configs(black_box(&b), &t, &p, &r).expect("renders"))
    });
}

fn validate_binding(c: &mut Criterion) {
    let b = binding(TARGETS);
    assert!(validate::binding(&b).is_allowed(), "the fixture is valid");
    c.bench_function("validate::binding 1000 targetRefs", |bench| {
        bench.iter(|| validate::binding(black_box(&b)))
    });
}

criterion_group!(benches, render_one_binding, validate_binding);
criterion_main!(benches);
