//! The template sandbox: what is refused at check time, and the bounds that stop a
//! render. Every bomb here is stopped by a named bound, never by a timeout.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use vrouter_render::{
    Limit, Limits, Location, TemplateEngine, TemplateError, TemplateKind, TemplateSource, render_templates,
};

/// Renders with the default limits except time: a debug build on a loaded
/// machine can take longer than the default 2 s to grow a value to its size
/// limit, and here the named bound, not the clock, must be what stops it.
fn render_commands(source: &str, params: &Value) -> Result<String, TemplateError> {
    let engine = TemplateEngine::with_limits(Limits {
        time_limit: Duration::from_secs(120),
        ..Limits::default()
    });
    let prepared = engine.prepare(&[TemplateSource {
        name: "t",
        config: "",
        commands: source,
    }])?;
    Ok(prepared.render(params)?.commands)
}

fn check(source: &str) -> Result<(), TemplateError> {
    TemplateEngine::new().check("t", TemplateKind::Commands, source)
}

fn not_allowed(source: &str) -> (String, Option<Location>) {
    match check(source) {
        Err(TemplateError::NotAllowed { what, location, .. }) => {
            // Rendering refuses it the same way: prepare runs the same check.
            assert!(matches!(
                render_commands(source, &json!({})),
                Err(TemplateError::NotAllowed { .. })
            ));
            (what, location)
        }
        other => panic!("{source:?} should not be allowed, got {other:?}"),
    }
}

fn limit_of(result: Result<impl std::fmt::Debug, TemplateError>) -> Limit {
    match result {
        Err(TemplateError::LimitExceeded { limit, .. }) => limit,
        other => panic!("expected a sandbox limit to trip, got {other:?}"),
    }
}

#[test]
fn get_env_is_gone() {
    let (what, location) = not_allowed("set system host-name x\n{{ get_env(name=\"HOME\") }}");
    assert_eq!(what, "the function `get_env`");
    assert_eq!(location, Some(Location { line: 2, column: 4 }));
    let (what, _) = not_allowed("{{ get_env(name=\"PATH\", default=\"x\") | upper }}");
    assert_eq!(what, "the function `get_env`");
}

#[test]
fn clock_and_randomness_are_gone() {
    assert_eq!(not_allowed("{{ now() }}").0, "the function `now`");
    assert_eq!(not_allowed("{{ get_random(end=10) }}").0, "the function `get_random`");
}

#[test]
fn other_templates_files_and_macros_are_unreachable() {
    let cases = [
        ("{% include \"other\" %}", "`include` of other"),
        ("{% import \"macros\" as m %}", "`import \"macros\"`"),
        ("{% extends \"base\" %}", "`extends \"base\"`"),
        ("{% macro f() %}x{% endmacro f %}", "the macro `f`"),
        ("{% block b %}x{% endblock b %}", "the block `b`"),
        (
            "{% filter upper %}x{% endfilter %}",
            "the filter section `{% filter upper %}`",
        ),
    ];
    for (source, expected) in cases {
        let (what, location) = not_allowed(source);
        assert_eq!(what, expected, "{source}");
        assert_eq!(location.map(|l| l.line), Some(1), "{source}");
    }
}

#[test]
fn only_listed_filters_functions_and_tests_exist() {
    assert_eq!(not_allowed("{{ x | filesizeformat }}").0, "the filter `filesizeformat`");
    assert_eq!(not_allowed("{{ x | date }}").0, "the filter `date`");
    assert_eq!(not_allowed("{{ x | urlencode }}").0, "the filter `urlencode`");
    assert_eq!(
        not_allowed("{{ x | __vrouter_bounded }}").0,
        "the filter `__vrouter_bounded`"
    );
    assert_eq!(not_allowed("{{ __vrouter_tick() }}").0, "the function `__vrouter_tick`");
    assert_eq!(
        not_allowed("{% if x is nonsense %}{% endif %}").0,
        "the test `nonsense`"
    );
    assert_eq!(not_allowed("{{ 'a' ~ lookup(host=\"x\") }}").0, "the function `lookup`");
}

#[test]
fn a_loop_bomb_stops_at_the_iteration_limit() {
    let bomb = "{% for a in range(end=10000) %}{% for b in range(end=10000) %}{% endfor %}{% endfor %}";
    assert_eq!(
        limit_of(render_commands(bomb, &json!({}))),
        Limit::LoopIterations { limit: 100_000 }
    );
    // `continue` cannot skip the iteration count.
    let bomb = "{% for a in range(end=10000) %}{% for b in range(end=10000) %}{% continue %}{% endfor %}{% endfor %}";
    assert_eq!(
        limit_of(render_commands(bomb, &json!({}))),
        Limit::LoopIterations { limit: 100_000 }
    );
}

#[test]
fn an_output_bomb_stops_at_the_output_limit() {
    let bomb = format!("{{% for a in range(end=10000) %}}{}{{% endfor %}}", "x".repeat(1000));
    assert_eq!(
        limit_of(render_commands(&bomb, &json!({}))),
        Limit::Output { limit: 768 * 1024 }
    );
}

#[test]
fn the_output_limit_covers_config_and_commands_together() {
    let half = format!("{{% for a in range(end=500) %}}{}\n{{% endfor %}}", "y".repeat(1000));
    let ok = render_templates(
        &[TemplateSource {
            name: "t",
            config: &half,
            commands: "",
        }],
        &json!({}),
    );
    assert!(ok.is_ok());
    let both = render_templates(
        &[TemplateSource {
            name: "t",
            config: &half,
            commands: &half,
        }],
        &json!({}),
    );
    let Err(TemplateError::LimitExceeded { template, limit, .. }) = both else {
        panic!("{both:?}")
    };
    assert_eq!(limit, Limit::Output { limit: 768 * 1024 });
    assert_eq!(template.kind, TemplateKind::Commands);
}

#[test]
fn range_is_bounded_before_it_allocates() {
    let err = render_commands("{% for i in range(end=1000000000000) %}{% endfor %}", &json!({}));
    assert_eq!(
        limit_of(err),
        Limit::RangeLength {
            limit: 10_000,
            requested: 1_000_000_000_000
        }
    );
    let err = render_commands("{{ range(end=5, step_by=0) | length }}", &json!({})).unwrap_err();
    assert!(err.to_string().contains("step_by=0, which would never end"), "{err}");
    assert_eq!(
        render_commands(
            "echo {{ range(start=1, end=8, step_by=3) | join(sep=\",\") }}",
            &json!({})
        )
        .unwrap(),
        "echo 1,4,7\n"
    );
}

#[test]
fn growing_a_string_across_iterations_stops_at_the_value_limit() {
    let bomb =
        "{% set s = 'xxxxxxxx' %}{% for i in range(end=64) %}{% set_global s = s ~ s %}{% endfor %}{{ s | length }}";
    assert_eq!(
        limit_of(render_commands(bomb, &json!({}))),
        Limit::ValueSize { limit: 768 * 1024 }
    );
    let bomb = "{% set l = [1, 2] %}{% for i in range(end=64) %}{% set_global l = l | concat(with=l) %}{% endfor %}";
    assert_eq!(
        limit_of(render_commands(bomb, &json!({}))),
        Limit::ValueSize { limit: 768 * 1024 }
    );
}

#[test]
fn amplifying_filters_are_refused_before_they_run() {
    let params = json!({"a": "a".repeat(10_000), "b": "b".repeat(10_000)});
    assert_eq!(
        limit_of(render_commands("{{ a | replace(from=\"a\", to=b) | length }}", &params)),
        Limit::ValueSize { limit: 768 * 1024 }
    );
    assert_eq!(
        limit_of(render_commands(
            "{{ range(end=10000) | join(sep=b) | length }}",
            &params
        )),
        Limit::ValueSize { limit: 768 * 1024 }
    );
    assert_eq!(
        limit_of(render_commands("{{ a | replace(from=\"\", to=b) | length }}", &params)),
        Limit::ValueSize { limit: 768 * 1024 }
    );
    // Each `addslashes` doubles a run of quotes: the chain stops at the first
    // result over the limit, never far past it.
    let chain = format!("{{{{ q{} | length }}}}", " | addslashes".repeat(30));
    assert_eq!(
        limit_of(render_commands(&chain, &json!({"q": "'".repeat(100)}))),
        Limit::ValueSize { limit: 768 * 1024 }
    );
    assert_eq!(
        limit_of(render_commands(
            "{{ a ~ a ~ a ~ a ~ a ~ a ~ a ~ a ~ a ~ a | length }}",
            &json!({"a": "a".repeat(100_000)})
        )),
        Limit::ValueSize { limit: 768 * 1024 }
    );
}

#[test]
fn tag_shapes_that_parse_slowly_or_deeply_are_refused_with_a_location() {
    let nested_calls = "{{ throw(message=throw(message=throw(message=throw(message=1)))) }}";
    let err = check(nested_calls).unwrap_err();
    assert_eq!(
        err,
        TemplateError::LimitExceeded {
            template: vrouter_render::TemplateId {
                name: "t".into(),
                kind: TemplateKind::Commands
            },
            limit: Limit::ExpressionDepth { limit: 3 },
            // The fourth `(`, where the nesting passes three.
            location: Some(Location {
                line: 1,
                column: nested_calls.match_indices('(').nth(3).unwrap().0 + 1
            }),
        }
    );
    let chain = format!("{{{{ 1{} }}}}", " + 1".repeat(100));
    assert_eq!(limit_of(check(&chain)), Limit::ExpressionOperators { limit: 64 });
    let ifs = format!("{}x{}", "{% if true %}".repeat(17), "{% endif %}".repeat(17));
    assert_eq!(limit_of(check(&ifs)), Limit::BlockDepth { limit: 16 });
    let big = "x".repeat(64 * 1024 + 1);
    assert_eq!(
        limit_of(check(&big)),
        Limit::TemplateSize {
            limit: 64 * 1024,
            size: 64 * 1024 + 1
        }
    );
}

#[test]
fn the_time_limit_is_a_backstop_checked_at_every_iteration() {
    let engine = TemplateEngine::with_limits(Limits {
        time_limit: std::time::Duration::ZERO,
        ..Limits::default()
    });
    let prepared = engine.prepare(&[TemplateSource {
        name: "t",
        config: "",
        commands: "{% for i in [1] %}x{% endfor %}",
    }]);
    let err = prepared.unwrap().render(&json!({}));
    assert_eq!(
        limit_of(err),
        Limit::Time {
            limit: std::time::Duration::ZERO
        }
    );
}

#[test]
fn an_undefined_variable_names_the_variable_and_the_template() {
    let err = render_templates(
        &[TemplateSource {
            name: "bgp-router",
            config: "",
            commands: "{% for n in neighbors %}{{ n.remoteAs }}{% endfor %}",
        }],
        &json!({"neighbors": [{"ip": "192.0.2.1"}]}),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "template `bgp-router` (commands) uses the variable `n.remoteAs`, which is not defined in the params"
    );
    let err = render_commands("{{ asn }}", &json!({})).unwrap_err();
    assert!(
        matches!(err, TemplateError::UndefinedVariable { ref variable, .. } if variable == "asn"),
        "{err:?}"
    );
}

#[test]
fn a_syntax_error_names_the_template_line_and_column() {
    let err = TemplateEngine::new()
        .check(
            "base-config",
            TemplateKind::Config,
            "system {\n    host-name {{ name bad }}\n}",
        )
        .unwrap_err();
    let TemplateError::Syntax {
        template,
        location,
        message,
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(template.name, "base-config");
    assert_eq!(template.kind, TemplateKind::Config);
    // tera's parser stops at `bad`.
    assert_eq!(*location, Some(Location { line: 2, column: 23 }));
    assert!(message.starts_with("expected"), "{message}");
    assert!(
        err.to_string()
            .starts_with("template `base-config` (config) has a syntax error at line 2, column 23: expected")
    );
    let err = check("{% for x in y %}").unwrap_err();
    assert!(
        matches!(err, TemplateError::Syntax { location: Some(_), .. }),
        "{err:?}"
    );
    let err = check("ok\n{{ 99999999999999999999 }}").unwrap_err();
    assert!(
        matches!(
            err,
            TemplateError::Syntax {
                location: Some(Location { line: 2, column: 4 }),
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn throw_reports_the_template_author_s_message() {
    let err = render_commands(
        "{% if not asn is defined %}{{ throw(message=\"asn is required\") }}{% endif %}",
        &json!({}),
    );
    let err = err.unwrap_err();
    assert!(err.to_string().contains("asn is required"), "{err}");
}

#[test]
fn params_must_be_an_object() {
    let err = render_commands("x", &json!([1])).unwrap_err();
    assert_eq!(err, TemplateError::ParamsNotObject { found: "an array" });
}
