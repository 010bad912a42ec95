//! Comparing what a Go template renders (with the Go engine) and what its
//! conversion renders (with ours): the commands bash runs, with the stub vyatta
//! functions, and the config.boot nodes VyOS reads.

#![allow(dead_code)]

use serde_json::Value;
use vrouter_gotemplate::convert;
use vrouter_render::testing::BashHarness;
use vrouter_render::{TemplateEngine, TemplateKind, TemplateSource, render_apply_script, render_templates};

use vrouter_render::testing::config_boot::{self, parse_vyos1x};

pub type Argv = Vec<(String, Vec<String>)>;

/// The stubbed commands bash runs for `commands`, and whether the script ran
/// only its own commands without error output.
pub fn run_commands(harness: &mut BashHarness, commands: &str) -> (Argv, String) {
    let script = render_apply_script("", commands, false).expect("no NUL in commands");
    let run = harness.run(&script).expect("bash harness");
    let calls = run
        .calls()
        .into_iter()
        .map(|(n, a)| (n.to_owned(), a.into_iter().map(str::to_owned).collect()))
        .collect();
    (calls, format!("status {} stderr {:?}", run.status, run.stderr))
}

/// A config node as VyOS reads it: name, value, children (where the text had them
/// does not matter here).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub name: String,
    pub value: Option<String>,
    pub children: Option<Vec<Node>>,
}

fn plain(nodes: &[config_boot::Node]) -> Vec<Node> {
    nodes
        .iter()
        .map(|n| Node {
            name: n.name.clone(),
            value: n.value.clone(),
            children: n.children.as_deref().map(plain),
        })
        .collect()
}

/// The nodes of a config, or why VyOS's lexer and parser refuse it.
pub fn config_nodes(config: &str) -> Result<Vec<Node>, String> {
    parse_vyos1x(config).map(|nodes| plain(&nodes))
}

/// Our side: converts `go_source` and renders it with `params`.
pub fn ours(name: &str, kind: TemplateKind, go_source: &str, params: &Value) -> Result<String, String> {
    let converted = convert(go_source, kind, &TemplateEngine::new()).map_err(|e| format!("convert: {e}"))?;
    let source = match kind {
        TemplateKind::Config => TemplateSource {
            name,
            config: &converted.tera,
            commands: "",
        },
        TemplateKind::Commands => TemplateSource {
            name,
            config: "",
            commands: &converted.tera,
        },
    };
    let rendered = render_templates(&[source], params).map_err(|e| format!("render of\n{}\n: {e}", converted.tera))?;
    Ok(match kind {
        TemplateKind::Config => rendered.config,
        TemplateKind::Commands => rendered.commands,
    })
}

/// Each argument split at white space, empty ones dropped: what bash makes of
/// a value written unquoted, as the Go operator wrote values.
pub fn word_split(argv: &Argv) -> Argv {
    argv.iter()
        .map(|(n, args)| {
            (
                n.clone(),
                args.iter()
                    .flat_map(|a| a.split_whitespace().map(str::to_owned))
                    .collect(),
            )
        })
        .collect()
}
