//! Automatic escaping through the engine: how each kind writes values, the `safe`
//! opt-out, and what admission rejects or warns about.

mod support;

use serde_json::{Value, json};
use support::render_one;
use vrouter_render::{Location, Placement, TemplateEngine, TemplateError, TemplateKind};

fn commands(source: &str, params: &Value) -> Result<String, TemplateError> {
    render_one(TemplateKind::Commands, source, params)
}

fn config(source: &str, params: &Value) -> Result<String, TemplateError> {
    render_one(TemplateKind::Config, source, params)
}

#[test]
fn each_interpolation_is_one_command_word() {
    let params = json!({"plain": "eth0", "spaced": "a b", "quote": "say \"hi\"", "n": 65001, "big": 18446744073709551615u64,
                        "yes": true, "nothing": null, "empty": "", "nl": "a\nreboot"});
    let cases = [
        ("{{ plain }}", "eth0"),
        ("{{ spaced }}", "'a b'"),
        ("{{ quote }}", r#"'say "hi"'"#),
        ("{{ n }} {{ big }}", "65001 18446744073709551615"),
        ("{{ yes }}", "true"),
        ("{{ nothing }}", "''"),
        ("{{ empty }}", "''"),
        ("{{ nl }}", "'a\nreboot'"),
        ("{{ plain ~ \" x\" }}", "'eth0 x'"),
        ("{{ [\"a\", \"b\"] | join(sep=\" \") }}", "'a b'"),
        ("{{ not empty }}", "true"),
        ("{{ spaced | upper }}", "'A B'"),
        ("{{ n + 1 }}", "65002"),
    ];
    for (source, expected) in cases {
        assert_eq!(
            commands(&format!("set x {source}"), &params).unwrap(),
            format!("set x {expected}\n"),
            "{source}"
        );
    }
}

#[test]
fn each_interpolation_is_one_config_value() {
    let params = json!({"plain": "10.0.0.1", "spaced": "link to a", "brace": "} x {", "quote": "say \"hi\"",
                        "nl": "a\nb", "url": "http://x", "n": 4294967295u64, "nothing": null});
    let cases = [
        ("{{ plain }}", "10.0.0.1"),
        ("{{ spaced }}", "\"link to a\""),
        ("{{ brace }}", "\"} x {\""),
        ("{{ quote }}", r#""say \"hi\"""#),
        ("{{ nl }}", r#""a\nb""#),
        ("{{ url }}", "\"http://x\""),
        ("{{ n }}", "4294967295"),
        ("{{ nothing }}", "\"\""),
    ];
    for (source, expected) in cases {
        assert_eq!(
            config(&format!("description {source}"), &params).unwrap(),
            format!("description {expected}\n")
        );
    }
}

#[test]
fn lists_and_maps_must_be_looped_or_joined() {
    let err = commands("set system name-server {{ servers }}", &json!({"servers": ["a", "b"]})).unwrap_err();
    assert_eq!(
        err.to_string(),
        "template `t` (commands): the value of `servers` is a list; one `{{ }}` writes one command word: \
         loop over it, or join it into one word"
    );
    let err = config("x {{ m }}", &json!({"m": {"a": 1}})).unwrap_err();
    assert!(matches!(err, TemplateError::Unrepresentable { .. }), "{err}");
    let looped = "{% for s in servers %}set system name-server {{ s }}\n{% endfor %}";
    assert_eq!(
        commands(looped, &json!({"servers": ["192.0.2.1", "a b"]})).unwrap(),
        "set system name-server 192.0.2.1\nset system name-server 'a b'\n"
    );
}

#[test]
fn safe_opts_one_interpolation_out_and_admission_warns_about_it() {
    let params = json!({"raw": "a b; c"});
    assert_eq!(commands("set x {{ raw | safe }}", &params).unwrap(), "set x a b; c\n");
    let warnings = TemplateEngine::new()
        .review("t", TemplateKind::Commands, "set a {{ x }}\nset b {{ raw | safe }}")
        .unwrap();
    assert_eq!(warnings.len(), 1);
    assert_eq!(warnings[0].location, Location { line: 2, column: 7 });
    assert!(
        warnings[0]
            .to_string()
            .starts_with("template `t` (commands) at line 2, column 7: this interpolation is marked `| safe`")
    );
    let err = TemplateEngine::new()
        .check("t", TemplateKind::Commands, "set x {{ raw | safe | upper }}")
        .unwrap_err();
    assert!(
        matches!(err, TemplateError::NotAllowed { ref what, .. } if what == "`safe` before another filter"),
        "{err}"
    );
}

#[test]
fn admission_rejects_interpolations_the_template_quotes_itself() {
    let engine = TemplateEngine::new();
    let cases = [
        (
            TemplateKind::Commands,
            "set system host-name '{{ name }}'",
            1,
            23,
            Placement::Quoted,
        ),
        (
            TemplateKind::Commands,
            "set a b\nset system host-name \"{{ name }}\"",
            2,
            23,
            Placement::Quoted,
        ),
        (
            TemplateKind::Commands,
            "set a b # {{ name }}",
            1,
            11,
            Placement::Comment,
        ),
        (
            TemplateKind::Commands,
            "cat <<EOF\n{{ name }}\nEOF",
            2,
            1,
            Placement::HereDocument,
        ),
        (
            TemplateKind::Config,
            "system {\n    host-name \"{{ name }}\"\n}",
            2,
            16,
            Placement::Quoted,
        ),
        (
            TemplateKind::Config,
            "description '{{ name }}'",
            1,
            14,
            Placement::Quoted,
        ),
    ];
    // A value in a config comment would be escaped for a value, not a comment.
    let err = engine
        .check("t", TemplateKind::Config, "/* {{ x }} */\nsystem {\n}")
        .unwrap_err();
    assert!(
        matches!(
            err,
            TemplateError::MisplacedInterpolation {
                placement: Placement::ConfigComment,
                location: Location { line: 1, column: 4 },
                ..
            }
        ),
        "{err}"
    );
    for (kind, source, line, column, context) in cases {
        let err = engine.check("t", kind, source).unwrap_err();
        assert_eq!(
            err,
            TemplateError::MisplacedInterpolation {
                template: vrouter_render::TemplateId { name: "t".into(), kind },
                location: Location { line, column },
                placement: context,
            },
            "{source}"
        );
    }
    let err = engine
        .check("t", TemplateKind::Commands, "set x '{{ name }}'")
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "template `t` (commands) at line 1, column 8: this interpolation is inside quotes written in the template; \
         values are quoted automatically, so remove the quotes (or mark trusted template text `| safe`)"
    );
    // Rendering refuses it the same way.
    assert!(matches!(
        commands("set x '{{ name }}'", &json!({"name": "n"})),
        Err(TemplateError::MisplacedInterpolation { .. })
    ));
    // Quotes the template closes itself, and quoted trusted text, are fine.
    engine
        .check(
            "t",
            TemplateKind::Commands,
            "set a 'b c' {{ name }} \"d\"\n# it's a comment\nset e '{{ f | safe }}'",
        )
        .unwrap();
    engine
        .check(
            "t",
            TemplateKind::Config,
            "/* it's a note */\nsystem {\n    host-name {{ name }}\n}",
        )
        .unwrap();
}
