//! The binding in `testdata/examples/` rendered for each of its targets, the way
//! the binding controller composes it (spec §4.1, §7.1): paramsRefs in order, then
//! the binding's params, then the target's, merged; templates rendered in order.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;
use vrouter_render::delimiter::render_apply_script_with;
use vrouter_render::{TemplateSource, merge_layers, render_templates};

/// Every document in the examples directory, by (kind, name).
fn examples() -> BTreeMap<(String, String), Value> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/examples");
    let mut docs = BTreeMap::new();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("testdata/examples")
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let doc: Value = serde::Deserialize::deserialize(doc).unwrap();
            let key = (
                doc["kind"].as_str().unwrap().to_owned(),
                doc["metadata"]["name"].as_str().unwrap().to_owned(),
            );
            docs.insert(key, doc);
        }
    }
    docs
}

fn get<'a>(docs: &'a BTreeMap<(String, String), Value>, kind: &str, name: &str) -> &'a Value {
    docs.get(&(kind.to_owned(), name.to_owned()))
        .unwrap_or_else(|| panic!("no {kind} {name} in testdata/examples"))
}

fn names(list: &Value) -> Vec<&str> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect()
}

/// (target name, rendered config, rendered commands) for each target of the binding.
fn render_example_binding() -> Vec<(String, String, String)> {
    let docs = examples();
    let binding = &get(&docs, "VRouterBinding", "bgp-binding")["spec"];
    let templates: Vec<&Value> = names(&binding["templateRefs"])
        .into_iter()
        .map(|n| get(&docs, "VRouterTemplate", n))
        .collect();
    let sources: Vec<TemplateSource> = templates
        .iter()
        .map(|t| TemplateSource {
            name: t["metadata"]["name"].as_str().unwrap(),
            config: t["spec"]["config"].as_str().unwrap_or(""),
            commands: t["spec"]["commands"].as_str().unwrap_or(""),
        })
        .collect();
    let mut layers: Vec<Value> = names(&binding["paramsRefs"])
        .into_iter()
        .map(|n| get(&docs, "VRouterParams", n)["spec"]["params"].clone())
        .collect();
    layers.push(binding["params"].clone());
    names(&binding["targetRefs"])
        .into_iter()
        .map(|target_name| {
            let target = get(&docs, "VRouterTarget", target_name);
            let mut target_layers = layers.clone();
            target_layers.push(target["spec"]["params"].clone());
            let params = merge_layers(&target_layers).unwrap();
            let rendered = render_templates(&sources, &params).unwrap();
            (target_name.to_owned(), rendered.config, rendered.commands)
        })
        .collect()
}

#[test]
fn the_example_binding_renders_the_reviewed_router_configs() {
    for (target, config, commands) in render_example_binding() {
        insta::assert_snapshot!(
            format!("binding-{target}"),
            format!("--- config\n{config}--- commands\n{commands}")
        );
    }
}

#[test]
fn the_rendered_example_becomes_the_reviewed_apply_script() {
    let (_, config, commands) = render_example_binding().remove(0);
    let mut fixed = |buf: &mut [u8]| {
        buf.fill(0x5a);
        Ok(())
    };
    let script = render_apply_script_with(&config, &commands, true, &mut fixed).unwrap();
    insta::assert_snapshot!("apply-script-site-a-routers", script);
}
