//! The corpus in `testdata/hostile-values/`, put in every string param of the
//! example templates, rendered, and the apply script run by bash with stub vyatta
//! functions: the stubs see exactly the template's commands with each value as one
//! argument, and `load` sees a config with the template's node structure.

mod support;

use std::path::Path;

use serde_json::Value;
use support::{LEAVES, example_templates, observe, params, placeholder, same_structure, sources};
use vrouter_render::escape::{command_word, config_value};
use vrouter_render::testing::BashHarness;
use vrouter_render::{TemplateError, render_templates};

fn corpus() -> Vec<(String, String)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/hostile-values/values.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut values: Vec<(String, String)> = doc["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["name"].as_str().unwrap().to_owned(),
                v["value"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    // Each value lands in about 23 places, so these stay under the 768 KiB output limit.
    values.push(("very-long".into(), "x".repeat(20_000)));
    values.push(("very-long-quotes".into(), "'\"".repeat(3_000)));
    values.push(("very-long-lines".into(), "a\n".repeat(2_000)));
    values
}

#[test]
fn hostile_values_stay_one_argument_and_one_config_value() {
    let templates = example_templates();
    let mut harness = BashHarness::start().expect("this test runs the apply script under bash");
    let with_config = sources(&templates, true);
    let commands_only = sources(&templates, false);
    let oracle = observe(&mut harness, &with_config, &params(placeholder)).unwrap();
    let oracle_commands = observe(&mut harness, &commands_only, &params(placeholder)).unwrap();
    let mut checked = 0;
    for (name, value) in corpus() {
        let values = vec![value.clone(); LEAVES];
        let hostile = params(|_| value.clone());
        let commands_ok = command_word(&value).is_ok();
        let config_ok = config_value(&value).is_ok();
        match observe(&mut harness, &with_config, &hostile) {
            Ok(observed) => {
                assert!(commands_ok && config_ok, "{name}: should have been refused");
                same_structure(&oracle, &observed, &values).unwrap_or_else(|e| panic!("{name}: {e}"));
                checked += 1;
            }
            Err(TemplateError::Unrepresentable { reason, .. }) => {
                assert!(
                    !(commands_ok && config_ok),
                    "{name}: refused but representable: {reason}"
                );
                // The error names the place, never the value (params can hold secrets).
                assert!(!value.is_empty() && !reason.contains(&value), "{name}: {reason}");
                if commands_ok {
                    let observed = observe(&mut harness, &commands_only, &hostile).unwrap();
                    same_structure(&oracle_commands, &observed, &values).unwrap_or_else(|e| panic!("{name}: {e}"));
                    checked += 1;
                }
            }
            Err(other) => panic!("{name}: {other}"),
        }
    }
    assert!(checked >= 35, "only {checked} values ran under bash");
}

#[test]
fn the_upstream_example_is_refused_for_its_quote_and_is_one_word_without_it() {
    let templates = example_templates();
    // VyOS re-quotes values with single quotes it does not escape (escape.rs,
    // `Unrepresentable::SingleQuote`), so a `'` is refused wherever it lands.
    let value = "x'; delete interfaces ethernet eth0; commit; #";
    let err = render_templates(&sources(&templates, true), &params(|_| value.to_owned())).unwrap_err();
    assert!(
        err.to_string().ends_with(
            "the value of `hostName` contains a single quote at character 1, which VyOS passes to a shell inside \
             single quotes without escaping it"
        ),
        "{err}"
    );
    let value = "x; delete interfaces ethernet eth0; commit; #";
    let rendered = render_templates(&sources(&templates, true), &params(|_| value.to_owned())).unwrap();
    let first = rendered.commands.lines().next().unwrap();
    assert_eq!(
        first,
        "set system host-name 'x; delete interfaces ethernet eth0; commit; #'"
    );
    assert!(
        rendered
            .config
            .contains("router-id \"x; delete interfaces ethernet eth0; commit; #\"\n")
    );
}

#[test]
fn refusals_name_the_interpolation_not_the_value() {
    let templates = example_templates();
    let err = render_templates(
        &sources(&templates, true),
        &params(|i| if i == 0 { "a\0secret".into() } else { placeholder(i) }),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "template `base-config` (commands): the value of `hostName` contains a NUL character at character 1, \
         which a vbash script cannot carry"
    );
    let err = render_templates(
        &sources(&templates, true),
        &params(|i| if i == 4 { "\u{1b}secret".into() } else { placeholder(i) }),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "template `bgp-router` (config): the value of `routerId` contains the control character U+001B at \
         character 0, which a config.boot value cannot carry"
    );
}
