//! `convert`: what each Go construct becomes, what is refused and
//! where, and the engine recognising a Go template. (That the conversions render
//! what Go renders is `go_differential.rs` and `go_generated.rs`.)

use vrouter_gotemplate::{TemplateKind, convert, detect};
use vrouter_render::{TemplateEngine, TemplateError};

/// The conversion of `go` as the arguments of a command (where the engine
/// accepts values), without the command.
fn tera(go: &str) -> String {
    match convert(&format!("set x {go}"), TemplateKind::Commands, &TemplateEngine::new()) {
        Ok(c) => c.tera.strip_prefix("set x ").expect("the command stays").to_owned(),
        Err(e) => panic!("{go:?}: {e}"),
    }
}

#[test]
fn constructs_become_their_tera_forms() {
    let cases = [
        ("{{ .asn }}", "{{ asn }}"),
        ("{{ .bgp.asn }} {{ $.bgp.asn }}", "{{ bgp.asn }} {{ bgp.asn }}"),
        (r#"{{ index .m "a-b" 0 }}"#, r#"{{ m["a-b"][0] }}"#),
        (r#"{{ index . "key" }}"#, "{{ key }}"),
        (
            "{{ range .neighbors }}{{ .ip }} {{ $.asn }} {{ end }}",
            "{% for neighbor in neighbors | values %}{{ neighbor.ip }} {{ asn }} {% endfor %}",
        ),
        (
            "{{ range $i, $n := .l }}{{ $i }} {{ else }}none{{ end }}",
            "{% for entry in l | entries %}{% set i = entry.0 %}{% set n = entry.1 %}{{ i }} {% else %}none{% endfor %}",
        ),
        (
            "{{ range 3 }}{{ . }} {{ end }}",
            "{% for i in range(end=3) %}{{ i }} {% endfor %}",
        ),
        (
            "{{ if .a }}1{{ else if eq .b \"x\" }}2{{ else }}3{{ end }}",
            "{% if a %}1{% elif b == \"x\" %}2{% else %}3{% endif %}",
        ),
        ("{{ if and .a (not .b) }}y{{ end }}", "{% if a and not b %}y{% endif %}"),
        ("{{ if or .a .b }}y{{ end }}", "{% if a or b %}y{% endif %}"),
        (
            r#"{{ if eq .s "a" "b" }}y{{ end }}"#,
            r#"{% if s in ["a", "b"] %}y{% endif %}"#,
        ),
        (
            "{{ with .o }}{{ .name }}{{ else }}-{{ end }}",
            "{% if o %}{{ o.name }}{% else %}-{% endif %}",
        ),
        ("{{ $x := .a }}{{ $x }}", "{% set x = a %}{{ x }}"),
        (
            "{{ $n := 0 }}{{ range .l }}{{ $n = add1 $n }}{{ end }}{{ $n }}",
            "{% set n = 0 %}{% for l_item in l | values %}{% set_global n = n + 1 %}{% endfor %}{{ n }}",
        ),
        ("a\n{{- if .x -}}\n b\n{{- end }}", "a\n{%- if x -%}\n b\n{%- endif %}"),
        ("a {{- .x -}} b", r#"{{ "a" ~ x ~ "b" }}"#),
        ("{{/* note */}}x", "{# note #}x"),
        (
            r#"{{ default "8.8.8.8" .dns }}"#,
            r#"{{ dns | if_empty(value="8.8.8.8") }}"#,
        ),
        (r#"{{ .mtu | default 1500 }}"#, "{{ mtu | if_empty(value=1500) }}"),
        (r#"{{ or .a "x" }}"#, r#"{{ a | if_empty(value="x") }}"#),
        (r#"{{ has "connected" .r }}"#, r#"{{ r | has(value="connected") }}"#),
        (
            r#"{{ if hasKey .m "k" }}y{{ end }}"#,
            "{% if m.k is defined %}y{% endif %}",
        ),
        (
            r#"{{ join "," .l }} {{ len .l }}"#,
            r#"{{ l | join(sep=",") }} {{ l | len }}"#,
        ),
        (
            r#"{{ .s | trimPrefix "v" | upper }}"#,
            r#"{{ s | trim_prefix(prefix="v") | upper }}"#,
        ),
        (
            "{{ add .a 1 }} {{ div .a 2 }} {{ mod .a 3 }}",
            "{{ a + 1 }} {{ a | div(by=2) }} {{ a % 3 }}",
        ),
        (
            r#"{{ printf "neighbor %s remote-as %d" .ip .as }}"#,
            r#"neighbor {{ ip }} remote-as {{ printf(format="%d", args=[as]) }}"#,
        ),
        (
            r#"{{ printf "%s-%s" .a .b }}"#,
            r#"{{ printf(format="%s-%s", args=[a, b]) }}"#,
        ),
        (
            "set system host-name '{{ .hostname }}'",
            "set system host-name {{ hostname }}",
        ),
        ("set x \"AS{{ .asn }}\"", r#"set x {{ "AS" ~ asn }}"#),
        (r#"{{ "literal" }} {{ 1.0 }} {{ true }}"#, "literal 1 true"),
        (
            r#"{{ b64enc (toJson .x) }} {{ b64enc .s }}"#,
            "{{ x | to_json | b64enc }} {{ s | b64enc }}",
        ),
    ];
    for (go, expected) in cases {
        assert_eq!(tera(go), expected, "{go}");
    }
}

#[test]
fn variables_are_named_apart_from_the_params_the_template_reads() {
    assert_eq!(tera("{{ $asn := .asn }}{{ $asn }}"), "{% set asn_2 = asn %}{{ asn_2 }}");
}

#[test]
fn and_or_evaluate_later_arguments_only_when_needed() {
    // Go stops at the first argument that decides; `index` of a missing list
    // would fail if evaluated.
    assert_eq!(
        tera("{{ or .a (index .l 5 | upper) }}"),
        "{% set tmp = a %}{% if not tmp %}{% set tmp = l[5] | upper %}{% endif %}{{ tmp }}"
    );
}

#[test]
fn trims_stay_applied_where_tera_would_trim_more_or_ignores_them() {
    // A no-break space is not white space to Go's trim markers.
    assert_eq!(
        tera("a\u{a0} {{- if .x }} b{{ end }}"),
        "a\u{a0}{% if x %} b{% endif %}"
    );
    // tera ignores whitespace control inside a for loop's `else`.
    assert_eq!(
        tera("{{ range .l }}x{{ else }}\n  {{- .y -}}\n{{ end }}"),
        "{% for l_item in l | values %}x{% else %}{{ y }}{% endfor %}"
    );
}

#[test]
fn what_cannot_be_converted_is_reported_with_its_location() {
    let cases = [
        ("a\n  {{ now }}", (2, 6), "no clock"),
        ("{{ env \"HOME\" }}", (1, 4), "removed it too"),
        ("{{ template \"x\" . }}", (1, 1), "renders alone"),
        ("a\n{{ define \"x\" }}{{ .y }}{{ end }}", (2, 1), "renders alone"),
        (
            "a\n{{- block \"x\" . -}}\n{{ .y }}\n{{- end }}",
            (2, 1),
            "renders alone",
        ),
        ("set x {{ toJson .x }}", (1, 7), "`toJson` writes quote characters"),
        ("{{ toJson . }}", (1, 11), "whole params object"),
        // The engine's own rules apply to the result: a value is an argument.
        ("{{ .command }} x", (1, 1), "the name of a command"),
        (
            "{{ range .l }}{{ range .m }}{{ $x = 1 }}{{ end }}{{ end }}",
            (1, 32),
            "not declared",
        ),
        (
            "{{ $x := 0 }}{{ range .l }}{{ $y := 0 }}{{ range .m }}{{ $y = 1 }}{{ end }}{{ end }}",
            (1, 58),
            "nested range",
        ),
        ("{{ lt .a \"b\" }}", (1, 4), "only numbers"),
        ("{{ split \",\" .s }}", (1, 4), "splitList"),
        ("{{ nosuch .x }}", (1, 4), "not defined"),
        ("{{ .x", (1, 1), "not a valid Go template"),
        ("cat <<EOF\n{{ .x }}\nEOF", (2, 1), "here-document"),
        ("echo \"$HOME {{ .x }}\"", (1, 7), "shell"),
    ];
    for (go, (line, column), reason) in cases {
        let err = convert(go, TemplateKind::Commands, &TemplateEngine::new()).unwrap_err();
        let p = &err.problems[0];
        assert_eq!((p.location.line, p.location.column), (line, column), "{go}: {err}");
        assert!(p.reason.contains(reason), "{go}: {err}");
    }
    // Every problem is reported, not only the first.
    let err = convert(
        "{{ now }}\n{{ uuidv4 }}",
        TemplateKind::Commands,
        &TemplateEngine::new(),
    )
    .unwrap_err();
    assert_eq!(err.problems.len(), 2, "{err}");
}

#[test]
fn quotes_and_comments_written_around_values_are_noted() {
    let c = convert(
        "set system host-name {{ quote .h }}\n# for {{ .site }}\n",
        TemplateKind::Commands,
        &TemplateEngine::new(),
    )
    .unwrap();
    assert_eq!(c.tera, "set system host-name {{ h }}\n# for \n");
    assert_eq!(c.notes.len(), 2, "{:?}", c.notes);
    assert_eq!((c.notes[0].location.line, c.notes[1].location.line), (1, 2));
    // Quotes `printf` wrote around a whole value, or around one of its words.
    let c = convert(
        "set system host-name {{ printf \"%q\" .h }}\n{{ printf \"set system domain-name %s\" (squote .d) }}\n",
        TemplateKind::Commands,
        &TemplateEngine::new(),
    )
    .unwrap();
    assert_eq!(c.tera, "set system host-name {{ h }}\nset system domain-name {{ d }}\n");
    let notes: Vec<String> = c.notes.iter().map(ToString::to_string).collect();
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert!(
        notes[0].starts_with("1:25: the quotes `printf \"%q\"` wrote were dropped"),
        "{notes:?}"
    );
    assert!(
        notes[1].starts_with("2:4: the quotes `squote` wrote were dropped"),
        "{notes:?}"
    );
}

#[test]
fn the_engine_recognises_go_templates_and_names_the_tera_form() {
    let engine = TemplateEngine::new();
    let source = "set system host-name {{ .hostname }}\n{{ range .neighbors }}\nset protocols bgp neighbor {{ .ip }}\n{{ end }}\n";
    let err = engine.check("bgp", TemplateKind::Commands, source).unwrap_err();
    let TemplateError::GoSyntax { location, go, tera, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!((location.line, location.column), (1, 22));
    assert_eq!(go, "{{ .hostname }}");
    assert_eq!(tera.as_deref(), Some("{{ hostname }}"));
    let message = err.to_string();
    assert!(message.contains("Go template syntax"), "{message}");
    assert!(message.contains("vrouter-operator convert"), "{message}");
    // After conversion the same engine accepts it.
    let converted = convert(source, TemplateKind::Commands, &engine).unwrap();
    engine.check("bgp", TemplateKind::Commands, &converted.tera).unwrap();
    // A template that is not Go keeps tera's own error.
    let err = engine.check("t", TemplateKind::Commands, "{{ x y }}").unwrap_err();
    assert!(matches!(err, TemplateError::Syntax { .. }), "{err}");
    assert!(detect("{% for x in l %}{% endfor %}", TemplateKind::Commands, &engine).is_none());
}

#[test]
fn a_go_template_that_does_not_convert_is_still_recognised() {
    let err = TemplateEngine::new()
        .check("t", TemplateKind::Commands, "set system time {{ now }}\nset x {{ .x }}")
        .unwrap_err();
    let TemplateError::GoSyntax { go, tera: None, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(go, "{{ .x }}");
}
