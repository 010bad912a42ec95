//! For random param values, the commands that run and the config nodes that load
//! are the template's: their number and names never depend on the values.

mod support;

use std::cell::RefCell;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use support::{
    LEAVES, example_templates, observe, params, placeholder, same_config_structure, same_structure, sources,
};
use vrouter_render::testing::BashHarness;
use vrouter_render::{TemplateKind, TemplateSource, render_templates};

/// Values built from the characters that matter to bash and config.boot, plus any
/// printable text; control characters other than tab, CR and LF, and the single
/// quote, are left to the refusal tests.
fn value() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        4 => "[a-z0-9.:/-]{1,6}",
        2 => prop::sample::select(vec![
            "\"", "\\", "$", "`", ";", "&", "|", "#", "*", "?", "~", "=", "!", "(", ")", "<", ">", "{", "}",
            "[", "]", " ", "\t", "\n", "\r", "//", "/*", "*/", "$(", "\\\"", "VROUTER_CONFIG_EOF_",
            "\u{2028}", "\u{ff07}", "\u{202e}",
        ])
        .prop_map(str::to_owned),
        1 => "\\PC{1,4}",
    ];
    prop::collection::vec(piece, 0..6).prop_map(|pieces| pieces.concat().replace('\'', ""))
}

fn values() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(value(), LEAVES)
}

/// Commands and config together, executed by bash: 1,000 cases.
#[test]
fn commands_and_config_nodes_do_not_depend_on_the_values() {
    let templates = example_templates();
    let with_config = sources(&templates, true);
    let harness = RefCell::new(BashHarness::start().expect("this test runs the apply script under bash"));
    let oracle = observe(&mut harness.borrow_mut(), &with_config, &params(placeholder)).unwrap();
    let mut runner = TestRunner::new(Config {
        cases: support::property_cases(1_000),
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&values(), |values| {
        let observed = observe(&mut harness.borrow_mut(), &with_config, &params(|i| values[i].clone()))
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        same_structure(&oracle, &observed, &values).map_err(TestCaseError::fail)
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
}

/// A config template with every kind of position a value can take (a tag, a leaf
/// value, beside `/* */` and `//` comments, nested nodes), read by both VyOS
/// parsers: 5,000 cases.
#[test]
fn config_node_structure_does_not_depend_on_the_values() {
    let config = "\
interfaces {
    ethernet {{ a }} {
        address {{ b }}
        /* managed */ mtu {{ c }}
        description {{ d }}
    }
}
// note
system {
    domain-name {{ e }}
    host-name {{ f }}
    login {
        banner {
            pre-login {{ g }}
        }
    }
}
";
    vrouter_render::TemplateEngine::new()
        .check("t", TemplateKind::Config, config)
        .unwrap();
    let names = ["a", "b", "c", "d", "e", "f", "g"];
    let render = |leaf: &dyn Fn(usize) -> String| {
        let params = serde_json::Value::Object(
            names
                .iter()
                .enumerate()
                .map(|(i, n)| (n.to_string(), leaf(i).into()))
                .collect(),
        );
        render_templates(
            &[TemplateSource {
                name: "t",
                config,
                commands: "",
            }],
            &params,
        )
        .map(|r| r.config)
    };
    let oracle = render(&placeholder).unwrap();
    let mut runner = TestRunner::new(Config {
        cases: support::property_cases(5_000),
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&prop::collection::vec(value(), names.len()), |values| {
        let config = render(&|i| values[i].clone()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        same_config_structure(&oracle, &config, &values).map_err(TestCaseError::fail)
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
}
