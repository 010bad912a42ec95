//! Generated template shapes × hostile values: every render the check accepts is
//! run by bash (stub vyatta functions, command trace) and parsed by mvdan/sh, and
//! must do exactly what the same template does with plain placeholder values —
//! the same commands, each value one argument, nothing else run — with `load`
//! seeing the template's node structure. Zero escapes.
//!
//! `VROUTER_INJECTION_CASES` sets the number of cases (10,000 by default; `cargo
//! xtask bench` runs 100,000).

mod support;

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRng, TestRunner};
use serde_json::{Value, json};
use support::oracle::ShParse;
use support::{placeholder, same_config_structure};
use vrouter_render::testing::{BashHarness, ScriptRun};
use vrouter_render::{
    TemplateEngine, TemplateError, TemplateKind, TemplateSource, render_apply_script, render_templates,
};

const SLOTS: usize = 4;

/// Pieces of commands templates: accepted places, every refused context the
/// check knows, and unbalanced openers, so shapes combine them.
const PIECES: &[&str] = &[
    "set a b {{ v }}",
    "set system host-name {{ v }}",
    "delete a {{ v }} x",
    "echo {{ v }} {{ v }}",
    "if true; then set a {{ v }}; fi",
    "if false; then :; else delete b {{ v }}; fi",
    "while false; do set a {{ v }}; done",
    "for i in 1 2; do set a {{ v }}; done",
    "case x in x) set a {{ v }};; *) ;; esac",
    "{ set a {{ v }}; }",
    "( set a {{ v }} )",
    "set a {{ v }} | set b c",
    "set a {{ v }} >/dev/null 2>&1",
    "X=1 set a {{ v }}",
    "set a {{ v }} && set b {{ v }} || set c d",
    "! set a {{ v }}",
    "set a \\\n  {{ v }}",
    "set a '{{ v }}'",
    "set a \"{{ v }}\"",
    "set a $'{{ v }}'",
    "set a ${{ v }}",
    "set a \\{{ v }}",
    "echo `echo {{ v }}`",
    "set a $({{ v }})",
    "set a $(echo {{ v }})",
    "set a $(( {{ v }} ))",
    "set a ${ {{ v }} }",
    "set a ${x:-{{ v }}}",
    "set a {x,{{ v }}}",
    "set a x{{ v }}",
    "set a {{ v }}=1",
    "set a ~{{ v }}",
    "cat <<EOF\n{{ v }}\nEOF",
    "cat <<'EOF'\nset a {{ v }}\nEOF",
    "cat <<<{{ v }}",
    "cat >{{ v }}",
    "x={{ v }}",
    "[[ {{ v }} ]]",
    "(( {{ v }} ))",
    "case {{ v }} in x) ;; esac",
    "case x in {{ v }}) ;; esac",
    "# {{ v }}",
    "set a b # {{ v }}",
    "{{ v }} a b",
    "eval set a {{ v }}",
    "bash -c {{ v }}",
    "set {{ v }} a",
    "for i in {{ v }}; do :; done",
    "set a <(echo {{ v }})",
    "f() { set a {{ v }}; }",
    "set a @(x|{{ v }})",
    "set a \"$(echo '{{ v }}')\"",
    "'",
    "\"",
    "`",
    "$(",
    ")",
    "\\",
    "{",
    "}",
    "<<EOF",
    "EOF",
    "#",
    ";",
    "&&",
    "|",
    "$",
    "${",
    "((",
    "[[",
    "{% if c %}'{% else %}'{% endif %}",
    "{% if c %}set a {% else %}delete a {% endif %}{{ v }}",
    "{% if c %}\"{% endif %}",
    "{% for i in l %}set a {{ v }}\n{% endfor %}",
    "{% for i in l %}'{% endfor %}set a {{ v }}",
    "{% if c %}<<EOF\n{% endif %}set a {{ v }}",
];

/// A template: 1 to 4 pieces joined by newlines, spaces or `; `, each `{{ v }}`
/// bound to one of the slots.
fn shape() -> impl Strategy<Value = String> {
    let piece = (prop::sample::select(PIECES), prop::collection::vec(0..SLOTS, 2));
    let joiner = prop::sample::select(vec!["\n", " ", "; ", "\n\n"]);
    prop::collection::vec((piece, joiner), 1..5).prop_map(|pieces| {
        let mut out = String::new();
        for ((piece, slots), joiner) in pieces {
            let mut slots = slots.into_iter().cycle();
            let mut rest = piece;
            while let Some(at) = rest.find("{{ v }}") {
                out.push_str(&rest[..at]);
                out.push_str(&format!("{{{{ v{} }}}}", slots.next().unwrap()));
                rest = &rest[at + "{{ v }}".len()..];
            }
            out.push_str(rest);
            out.push_str(joiner);
        }
        out
    })
}

/// Hostile values: shell and config.boot syntax, injection attempts, here-document
/// delimiters, line breaks; no single quote or NUL (refused before placement).
fn value() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        3 => "[a-z0-9.:/-]{1,6}",
        1 => "[0-9]{1,2}",
        3 => prop::sample::select(vec![
            "\"", "\\", "$", "`", ";", "&", "|", "#", "*", "?", "~", "=", "!", "(", ")", "<", ">", "{", "}", "[",
            "]", " ", "\t", "\n", "\r", "$(touch /tmp/vr-pwned)", "`touch /tmp/vr-pwned`", ";touch /tmp/vr-pwned;",
            "\nEOF\ntouch /tmp/vr-pwned\n", "EOF", "${IFS}", "$((1))", "-n", "+o", "--", "*/", "/*", "//",
        ])
        .prop_map(str::to_owned),
        1 => "\\PC{1,3}".prop_map(|s| s.replace('\'', "")),
    ];
    prop::collection::vec(piece, 0..5).prop_map(|pieces| pieces.concat())
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

/// The config template every case also renders, so `load` is checked too.
const CONFIG: &str = "interfaces {\n    ethernet {{ v0 }} {\n        description {{ v1 }}\n    }\n}\nsystem {\n    host-name {{ v2 }}\n}\n";

fn render(commands: &str, params: &Value) -> Result<(String, String), TemplateError> {
    render_templates(
        &[TemplateSource {
            name: "t",
            config: CONFIG,
            commands,
        }],
        params,
    )
    .map(|r| (r.config, r.commands))
}

/// One accepted case: what placeholders and hostile values rendered to.
struct Accepted {
    shape: String,
    values: Vec<String>,
    c: bool,
    loops: usize,
    oracle: (String, String),
    hostile: (String, String),
}

fn expected_calls(run: &ScriptRun, values: &[String]) -> Vec<(String, Vec<String>)> {
    run.calls()
        .into_iter()
        .map(|(name, args)| {
            let args = args
                .into_iter()
                .map(|a| {
                    (0..values.len())
                        .find(|&i| a == placeholder(i))
                        .map_or_else(|| a.to_owned(), |i| values[i].clone())
                })
                .collect();
            (name.to_owned(), args)
        })
        .collect()
}

fn owned_calls(run: &ScriptRun) -> Vec<(String, Vec<String>)> {
    run.calls()
        .into_iter()
        .map(|(n, a)| (n.to_owned(), a.into_iter().map(str::to_owned).collect()))
        .collect()
}

fn check_batch(bash: &mut BashHarness, sh: &mut ShParse, batch: &[Accepted]) {
    let scripts: Vec<String> = batch
        .iter()
        .flat_map(|case| {
            [&case.oracle, &case.hostile]
                .map(|(config, commands)| render_apply_script(config, commands, true).expect("no NUL"))
        })
        .collect();
    let runs = bash.run_many(&scripts).expect("bash harness");
    for (case, pair) in batch.iter().zip(runs.chunks(2)) {
        let (oracle, hostile) = (&pair[0], &pair[1]);
        let context = || {
            format!(
                "template {:?}\nvalues {:?}\ncommands:\n{}",
                case.shape, case.values, case.hostile.1
            )
        };
        // Compared as multisets: the sides of a pipeline, or a `&` job, run in
        // either order.
        let sorted = |mut v: Vec<(String, Vec<String>)>| {
            v.sort();
            v
        };
        assert_eq!(
            sorted(owned_calls(hostile)),
            sorted(expected_calls(oracle, &case.values)),
            "ESCAPE (calls): {}",
            context()
        );
        let names = |run: &ScriptRun| {
            let mut names: Vec<(u32, String)> = run
                .traced_command_names()
                .into_iter()
                .map(|(d, n)| (d, n.to_owned()))
                .collect();
            names.sort();
            names
        };
        assert_eq!(
            names(hostile),
            names(oracle),
            "ESCAPE (other commands ran): {}",
            context()
        );
        assert_eq!(hostile.loaded(), Some(case.hostile.0.as_str()), "{}", context());
        same_config_structure(&case.oracle.0, &case.hostile.0, &case.values)
            .unwrap_or_else(|e| panic!("ESCAPE (config): {e}: {}", context()));
    }
    // mvdan/sh: in every accepted commands text, each value's sentinel is a plain
    // literal word argument of a simple command.
    // (A commands text without values is not read by the check, nor here.)
    let (cases, texts): (Vec<&Accepted>, Vec<(String, Vec<String>)>) = batch
        .iter()
        .map(|case| (case, sentinel_text(case)))
        .filter(|(_, (text, words))| words.iter().any(|w| text.contains(w.as_str())))
        .unzip();
    let verdicts = sh.check(&texts).expect("the mvdan/sh oracle");
    for ((case, (text, _)), verdict) in cases.iter().zip(&texts).zip(verdicts) {
        assert!(
            verdict.is_ok(),
            "mvdan/sh disagrees: {verdict:?}\ntemplate {:?}\ntext {text:?}",
            case.shape
        );
    }
}

/// The commands rendered with plain sentinel words for the values (what the
/// check read), and those words.
fn sentinel_text(case: &Accepted) -> (String, Vec<String>) {
    let words: Vec<String> = (0..SLOTS).map(|i| format!("VRSENTINEL{i}X")).collect();
    let (_, commands) =
        render(&case.shape, &params(&words, case.c, case.loops)).expect("accepted with values is accepted with words");
    (commands, words)
}

#[test]
fn accepted_renders_run_only_the_intended_commands() {
    let cases: u32 = std::env::var("VROUTER_INJECTION_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| support::property_cases(10_000));
    let started = std::time::Instant::now();
    let mut bash = BashHarness::start().expect("this test runs the apply script under bash");
    let mut sh = ShParse::start();
    let engine = TemplateEngine::new();
    let mut runner = TestRunner::new_with_rng(
        Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::deterministic_rng(proptest::test_runner::RngAlgorithm::ChaCha),
    );
    let strategy = (shape(), prop::collection::vec(value(), SLOTS), any::<bool>(), 0..3usize);
    let (mut accepted, mut refused, mut batch) = (0u32, 0u32, Vec::new());
    for _ in 0..cases {
        let (shape, values, c, loops) = strategy.new_tree(&mut runner).unwrap().current();
        // Admission must never fail other than with a template error.
        let _ = engine.check("t", TemplateKind::Commands, &shape);
        let placeholders: Vec<String> = (0..SLOTS).map(placeholder).collect();
        let hostile = render(&shape, &params(&values, c, loops));
        let oracle = render(&shape, &params(&placeholders, c, loops));
        match (oracle, hostile) {
            (Ok(oracle), Ok(hostile)) => {
                accepted += 1;
                batch.push(Accepted {
                    shape,
                    values,
                    c,
                    loops,
                    oracle,
                    hostile,
                });
            }
            (Err(_), Err(_)) => refused += 1,
            (Ok(_), Err(TemplateError::Unrepresentable { .. })) => refused += 1,
            (oracle, hostile) => panic!(
                "placement must not depend on the values:\ntemplate {shape:?}\nvalues {values:?}\n\
                 placeholders: {oracle:?}\nvalues: {hostile:?}"
            ),
        }
        if batch.len() == 200 {
            check_batch(&mut bash, &mut sh, &batch);
            batch.clear();
        }
    }
    check_batch(&mut bash, &mut sh, &batch);
    eprintln!("{cases} cases: {accepted} accepted and run, {refused} refused");
    if let Some(out) = std::env::var_os("VROUTER_BENCH_OUT") {
        let report = json!({"cases": cases, "accepted": accepted, "refused": refused,
                            "seconds": started.elapsed().as_secs_f64()});
        std::fs::write(out, report.to_string()).expect("writing the bench report");
    }
    // The generator must exercise both sides.
    assert!(
        accepted > cases / 10 && refused > cases / 10,
        "{accepted} accepted, {refused} refused"
    );
}
