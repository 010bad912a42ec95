//! The injection check's config side against VyOS's own parser: generated
//! `config` template shapes × hostile values; for every render the check
//! accepts, VyOS's parser (vyos1x-config, `xtask/oracles/vyosconfig`) must
//! read exactly the intended nodes and values — the `set` commands of the
//! same template rendered with plain placeholder words, each placeholder
//! replaced by its value — as bash and mvdan/sh are asked for commands
//! (`injection_properties.rs`).
//!
//! `VROUTER_INJECTION_VYOS_CASES` sets the number of cases.

mod support;

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRng, TestRunner};
use serde_json::{Value, json};
use support::render_one;
use support::vyos_oracle::vyos_read;
use vrouter_render::TemplateKind;
use vrouter_render::testing::config_boot::{Node, parse_vyos1x, set_commands_of};

const SLOTS: usize = 3;

/// Pieces of config templates: values as leaf values, tags, names, inside
/// quotes the template wrote, glued to text, in comments, twice on a line,
/// under conditions and loops.
const PIECES: &[&str] = &[
    "host-name {{ v }}",
    "description {{ v }}",
    "ethernet {{ v }} {\n    address {{ v }}\n}",
    "address \"{{ v }}\"",
    "address '{{ v }}'",
    "address x{{ v }}",
    "address {{ v }}x",
    "/* {{ v }} */\nnode a",
    "// {{ v }}\nnode b",
    "address {{ v }} {{ v }}",
    "{{ v }} leaf",
    "{{ v }} {\n}",
    "rule {{ v }} {\n    action accept\n    description {{ v }}\n}",
    "{% if c %}address {{ v }}{% endif %}",
    "{% for i in l %}address {{ v }}\n{% endfor %}",
    "address {{ v }}\n/* c */\nnode c",
    "address {{ v }} // trailing",
    "disable",
    "address {{ v }}\n/* a comment before the end */",
];

/// A template: 1 to 4 pieces, each `{{ v }}` bound to a slot, inside 0 to 2
/// enclosing nodes.
fn shape() -> impl Strategy<Value = String> {
    let piece = (prop::sample::select(PIECES), prop::collection::vec(0..SLOTS, 2));
    (prop::collection::vec(piece, 1..5), 0..3usize).prop_map(|(pieces, depth)| {
        let mut body = String::new();
        for (piece, slots) in pieces {
            let mut slots = slots.into_iter().cycle();
            let mut rest = piece;
            while let Some(at) = rest.find("{{ v }}") {
                body.push_str(&rest[..at]);
                body.push_str(&format!("{{{{ v{} }}}}", slots.next().unwrap()));
                rest = &rest[at + "{{ v }}".len()..];
            }
            body.push_str(rest);
            body.push('\n');
        }
        for level in (0..depth).rev() {
            body = format!("level{level} {{\n{body}}}\n");
        }
        body
    })
}

/// Hostile values: config.boot and shell syntax, every control character
/// class, non-ASCII, empty.
fn value() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        3 => "[a-z0-9./-]{1,6}",
        1 => "[0-9]{1,3}",
        3 => prop::sample::select(vec![
            "\"", "\\", "\\\"", "\\n", "{", "}", "#", ";", "//", "/*", "*/", " ", "\t", "\n", "\r", "'",
            "\u{1}", "\u{8}", "\u{c}", "\u{7f}", "\u{0}", "ü", "\u{a0}", "$(reboot)", "`id`",
            "x\"\ninterfaces {\n", "}\nsystem {\n", "a b", "",
        ])
        .prop_map(str::to_owned),
        1 => "\\PC{1,3}",
    ];
    prop::collection::vec(piece, 0..4).prop_map(|pieces| pieces.concat())
}

fn slot(i: usize) -> String {
    format!("VRSLOT{i}Q")
}

fn params(values: &[String], c: bool, loops: usize) -> Value {
    let mut map = serde_json::Map::new();
    for (i, v) in values.iter().enumerate() {
        map.insert(format!("v{i}"), json!(v));
    }
    map.insert("c".into(), json!(c));
    map.insert("l".into(), json!(vec![0; loops]));
    Value::Object(map)
}

/// `nodes` with every slot word in names and values replaced by its value.
fn substituted(nodes: &[Node], values: &[String]) -> Vec<Node> {
    let fill = |text: &str| (0..values.len()).fold(text.to_owned(), |text, i| text.replace(&slot(i), &values[i]));
    nodes
        .iter()
        .map(|n| Node {
            name: fill(&n.name),
            value: n.value.as_deref().map(fill),
            children: n.children.as_deref().map(|c| substituted(c, values)),
            ..n.clone()
        })
        .collect()
}

/// One accepted render: the template, the values, what VyOS must read.
struct Accepted {
    shape: String,
    values: Vec<String>,
    rendered: String,
    intended: Result<String, String>,
}

#[test]
fn vyos_reads_every_accepted_config_render_as_intended() {
    let cases: u32 = std::env::var("VROUTER_INJECTION_VYOS_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000);
    let mut runner = TestRunner::new_with_rng(
        Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::deterministic_rng(proptest::test_runner::RngAlgorithm::ChaCha),
    );
    let strategy = (shape(), prop::collection::vec(value(), SLOTS), any::<bool>(), 0..3usize);
    let (mut accepted, mut refused) = (Vec::new(), 0u32);
    for _ in 0..cases {
        let (shape, values, c, loops) = strategy.new_tree(&mut runner).unwrap().current();
        let words: Vec<String> = (0..SLOTS).map(slot).collect();
        let hostile = render_one(TemplateKind::Config, &shape, &params(&values, c, loops));
        let plain = render_one(TemplateKind::Config, &shape, &params(&words, c, loops));
        match (plain, hostile) {
            (Ok(plain), Ok(rendered)) => {
                let nodes = parse_vyos1x(&plain).expect("an accepted placeholder render parses");
                let intended = set_commands_of(&substituted(&nodes, &values));
                accepted.push(Accepted {
                    shape,
                    values,
                    rendered,
                    intended,
                });
            }
            (_, Err(_)) => refused += 1,
            (Err(e), Ok(_)) => panic!("accepted with values but not with plain words: {e}\n{shape}"),
        }
    }
    let texts: Vec<String> = accepted.iter().map(|a| a.rendered.clone()).collect();
    for (case, vyos) in accepted.iter().zip(vyos_read(&texts)) {
        let same = match (&case.intended, &vyos) {
            (Ok(a), Ok(b)) => a == b,
            // Two values alike can make a duplicate node: VyOS refuses the
            // config as the intended tree's rules do; nothing is injected.
            (Err(_), Err(_)) => true,
            _ => false,
        };
        assert!(
            same,
            "ESCAPE (VyOS reads another config):\ntemplate {:?}\nvalues {:?}\nrendered {:?}\nintended {:?}\nVyOS     {vyos:?}",
            case.shape, case.values, case.rendered, case.intended
        );
    }
    eprintln!(
        "{cases} cases: {} accepted and read by VyOS, {refused} refused",
        accepted.len()
    );
    assert!(
        accepted.len() as u32 > cases / 10 && refused > cases / 10,
        "{} accepted, {refused} refused",
        accepted.len()
    );
}
