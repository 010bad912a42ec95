//! Shared by the injection tests: the example templates, params whose every string
//! leaf is a chosen value, and the oracle that says what rendering them must do.
//!
//! The oracle renders the same templates with distinct plain placeholders (`p0`,
//! `p1`, …), runs the script under bash and parses the config. With hostile values
//! in place of the placeholders, the stubs must see the same commands with each
//! placeholder argument replaced by its value — one argument each — and `load`
//! must see a config with the same node structure, whose values read back as the
//! values given.

#![allow(dead_code)]

pub mod oracle;
pub mod rng;
pub mod vyos_config;
pub mod vyos_oracle;

/// How many cases a property runs: `full`, or a tenth of it in the quick
/// loop (`cargo xtask test --quick` sets `VROUTER_QUICK_LOOP`), which trades
/// depth for a short edit-and-test cycle. CI runs them all.
pub fn property_cases(full: u32) -> u32 {
    if std::env::var_os("VROUTER_QUICK_LOOP").is_some() {
        (full / 10).max(1)
    } else {
        full
    }
}

use std::path::Path;

use serde_json::{Value, json};
use vrouter_render::testing::{BashHarness, ScriptRun};
use vrouter_render::{TemplateError, TemplateKind, TemplateSource, render_apply_script, render_templates};

/// Renders one template, named `t`, whose `kind` part is `source` (the
/// other part empty), and returns that part.
pub fn render_one(kind: TemplateKind, source: &str, params: &Value) -> Result<String, TemplateError> {
    let (config, commands) = match kind {
        TemplateKind::Config => (source, ""),
        TemplateKind::Commands => ("", source),
    };
    let rendered = render_templates(
        &[TemplateSource {
            name: "t",
            config,
            commands,
        }],
        params,
    )?;
    Ok(match kind {
        TemplateKind::Config => rendered.config,
        TemplateKind::Commands => rendered.commands,
    })
}

/// How many string leaves [`params`] fills.
pub const LEAVES: usize = 13;

/// The templates of `testdata/examples/` as (name, config, commands).
pub fn example_templates() -> Vec<(String, String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/examples");
    ["01-template-base-config.yaml", "02-template-bgp-router.yaml"]
        .into_iter()
        .map(|file| {
            let text = std::fs::read_to_string(dir.join(file)).unwrap();
            let doc: Value = serde_yaml::from_str(&text).unwrap();
            let field = |f: &str| doc["spec"][f].as_str().unwrap_or("").to_owned();
            (
                doc["metadata"]["name"].as_str().unwrap().to_owned(),
                field("config"),
                field("commands"),
            )
        })
        .collect()
}

/// Sources from (name, config, commands), optionally without their config.
pub fn sources(templates: &[(String, String, String)], with_config: bool) -> Vec<TemplateSource<'_>> {
    templates
        .iter()
        .map(|(name, config, commands)| TemplateSource {
            name,
            config: if with_config { config } else { "" },
            commands,
        })
        .collect()
}

/// The example params, with string leaf `i` set to `leaf(i)`.
pub fn params(leaf: impl Fn(usize) -> String) -> Value {
    json!({
        "hostName": leaf(0), "dnsServer": leaf(1), "ntpServer": leaf(2), "asn": leaf(3), "routerId": leaf(4),
        "neighbors": [
            {"ip": leaf(5), "remoteAs": leaf(6), "description": leaf(7)},
            {"ip": leaf(8), "remoteAs": leaf(9), "description": leaf(10)},
        ],
        "addressFamilies": {"ipv4": {"redistribute": [leaf(11), leaf(12)]}},
    })
}

pub fn placeholder(i: usize) -> String {
    format!("p{i}")
}

/// What rendering and running one binding produced.
pub struct Observed {
    pub run: ScriptRun,
    pub config: String,
}

pub fn observe(
    harness: &mut BashHarness,
    templates: &[TemplateSource<'_>],
    params: &Value,
) -> Result<Observed, TemplateError> {
    let rendered = render_templates(templates, params)?;
    let script = render_apply_script(&rendered.config, &rendered.commands, true).expect("no NUL gets past rendering");
    let run = harness.run(&script).expect("bash harness");
    Ok(Observed {
        run,
        config: rendered.config,
    })
}

fn substitute(text: &str, values: &[String]) -> String {
    (0..values.len())
        .rev()
        .find(|&i| text == placeholder(i))
        .map_or_else(|| text.to_owned(), |i| values[i].clone())
}

/// Compares a run with hostile `values` against the placeholder run `oracle`.
pub fn same_structure(oracle: &Observed, observed: &Observed, values: &[String]) -> Result<(), String> {
    let run = &observed.run;
    if (run.status, run.stdout.as_str(), run.stderr.as_str()) != (0, "", "") {
        return Err(format!(
            "status {}, stdout {:?}, stderr {:?}",
            run.status, run.stdout, run.stderr
        ));
    }
    let expected: Vec<(String, Vec<String>)> = oracle
        .run
        .calls()
        .into_iter()
        .map(|(name, args)| {
            (
                name.to_owned(),
                args.into_iter().map(|a| substitute(a, values)).collect(),
            )
        })
        .collect();
    let got: Vec<(String, Vec<String>)> = run
        .calls()
        .into_iter()
        .map(|(n, a)| (n.to_owned(), a.into_iter().map(str::to_owned).collect()))
        .collect();
    if got != expected {
        return Err(format!("commands differ:\n got      {got:?}\n expected {expected:?}"));
    }
    if run.traced_command_names() != oracle.run.traced_command_names() {
        return Err(format!(
            "the script ran other commands:\n got      {:?}\n expected {:?}",
            run.traced_command_names(),
            oracle.run.traced_command_names()
        ));
    }
    let loaded = run.loaded().unwrap_or("");
    if loaded != observed.config {
        return Err("load did not receive the rendered config".into());
    }
    same_config_structure(&oracle.config, &observed.config, values)
}

/// The config's nodes, read by both VyOS parsers, match the placeholder config's;
/// vyos1x reads back the values given.
pub fn same_config_structure(oracle: &str, config: &str, values: &[String]) -> Result<(), String> {
    use vyos_config::{parse_cparse, parse_vyos1x, skeleton, values as config_values};
    let oracle_v1 = parse_vyos1x(oracle).map_err(|e| format!("placeholder config: {e}"))?;
    let v1 = parse_vyos1x(config).map_err(|e| format!("vyos1x cannot read the config: {e}\n{config}"))?;
    if skeleton(&v1) != skeleton(&oracle_v1) {
        return Err(format!("vyos1x reads another node structure:\n{config}"));
    }
    let expected: Vec<String> = config_values(&oracle_v1)
        .iter()
        .map(|v| substitute(v, values))
        .collect();
    if config_values(&v1) != expected {
        return Err(format!(
            "vyos1x reads other values: {:?} vs {:?}",
            config_values(&v1),
            expected
        ));
    }
    let cparse = parse_cparse(config).map_err(|e| format!("cparse cannot read the config: {e}\n{config}"))?;
    let oracle_cparse = parse_cparse(oracle).map_err(|e| format!("placeholder config (cparse): {e}"))?;
    if skeleton(&cparse) != skeleton(&oracle_cparse) {
        return Err(format!("cparse reads another node structure:\n{config}"));
    }
    Ok(())
}
