//! Issue #20's four injections: each is refused at admission and at render with
//! the interpolation's location, and a template shape that is accepted makes bash
//! (with the stub vyatta functions and the command trace) run exactly the intended
//! commands, the value one argument.

use serde_json::json;
use vrouter_render::testing::BashHarness;
use vrouter_render::{
    Location, Placement, TemplateEngine, TemplateError, TemplateKind, TemplateSource, render_apply_script,
    render_templates,
};

struct Case {
    name: &'static str,
    /// The template the issue tried.
    hostile: &'static str,
    params: serde_json::Value,
    location: Location,
    placement: Placement,
    /// A shape of the same intent that is accepted.
    accepted: &'static str,
    /// What the stubs must see for `accepted`, after `configure` and before
    /// `commit`/`save`.
    intended: Vec<(&'static str, Vec<&'static str>)>,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "backquotes",
            hostile: "echo `echo {{ x }}`",
            params: json!({"x": "a` ; touch /tmp/pwned ; `b", "c": true}),
            location: Location { line: 1, column: 12 },
            placement: Placement::Substitution,
            accepted: "echo {{ x }}",
            intended: vec![],
        },
        Case {
            name: "after a dollar",
            hostile: "echo ${{ x }}",
            params: json!({"x": "\\\"; touch /tmp/pwned; #", "c": true}),
            location: Location { line: 1, column: 7 },
            placement: Placement::Expansion,
            accepted: "set system host-name {{ x }}",
            intended: vec![("set", vec!["system", "host-name", "\\\"; touch /tmp/pwned; #"])],
        },
        Case {
            name: "after a backslash",
            hostile: "echo \\{{ x }}",
            params: json!({"x": "x;touch /tmp/pwned;", "c": true}),
            location: Location { line: 1, column: 7 },
            placement: Placement::Escaped,
            accepted: "set system domain-name {{ x }}",
            intended: vec![("set", vec!["system", "domain-name", "x;touch /tmp/pwned;"])],
        },
        Case {
            name: "if/else branches",
            hostile: "{% if c %}'{% else %}'{% endif %}{{ x }}",
            params: json!({"x": "a\ntouch /tmp/pwned\n", "c": true}),
            location: Location { line: 1, column: 34 },
            placement: Placement::Syntax {
                message: "a single quote that is never closed".into(),
                line: Some(1),
            },
            accepted: "{% if c %}set system host-name {% else %}delete system host-name {% endif %}{{ x }}",
            intended: vec![("set", vec!["system", "host-name", "a\ntouch /tmp/pwned\n"])],
        },
    ]
}

fn render(commands: &str, params: &serde_json::Value) -> Result<String, TemplateError> {
    render_templates(
        &[TemplateSource {
            name: "t",
            config: "",
            commands,
        }],
        params,
    )
    .map(|r| r.commands)
}

#[test]
fn each_issue_case_is_refused_with_its_location_at_admission_and_render() {
    let engine = TemplateEngine::new();
    for case in cases() {
        let expected = TemplateError::MisplacedInterpolation {
            template: vrouter_render::TemplateId {
                name: "t".into(),
                kind: TemplateKind::Commands,
            },
            location: case.location,
            placement: case.placement.clone(),
        };
        let at_render = render(case.hostile, &case.params).unwrap_err();
        assert_eq!(at_render, expected, "{}: {at_render}", case.name);
        let at_admission = engine.check("t", TemplateKind::Commands, case.hostile).unwrap_err();
        assert!(
            matches!(&at_admission, TemplateError::MisplacedInterpolation { location, .. } if *location == case.location),
            "{}: {at_admission}",
            case.name
        );
        // The message names the place, never the value.
        assert!(!at_render.to_string().contains("pwned"), "{at_render}");
    }
}

#[test]
fn each_accepted_shape_runs_exactly_the_intended_commands_under_bash() {
    let mut bash = BashHarness::start().expect("this test runs the apply script under bash");
    let engine = TemplateEngine::new();
    for case in cases() {
        engine.check("t", TemplateKind::Commands, case.accepted).unwrap();
        let commands = render(case.accepted, &case.params).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        let script = render_apply_script("", &commands, true).unwrap();
        let run = bash.run(&script).unwrap();
        let mut expected = vec![
            ("configure", vec![]),
            ("load", vec!["/opt/vyatta/etc/config.boot.default"]),
        ];
        expected.extend(case.intended.iter().cloned());
        expected.extend([("commit", vec![]), ("save", vec![])]);
        let calls: Vec<(&str, Vec<&str>)> = run.calls().into_iter().filter(|(name, _)| *name != "source").collect();
        assert_eq!(calls, expected, "{}: {commands}\n{}", case.name, run.stderr);
        // Nothing else ran: no `touch`, no command named by the value.
        let ran: Vec<&str> = run.traced_command_names().into_iter().map(|(_, name)| name).collect();
        assert!(!ran.iter().any(|name| name.contains("touch")), "{}: {ran:?}", case.name);
        if case.name == "backquotes" {
            assert_eq!(run.stdout, "a` ; touch /tmp/pwned ; `b\n", "{}", case.name);
        }
        assert_eq!(run.status, 0, "{}: {}", case.name, run.stderr);
    }
}
