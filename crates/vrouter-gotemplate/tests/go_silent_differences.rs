//! The classes of Go constructs whose conversion once rendered something other
//! than the Go operator did without saying so, against the real Go engine
//! (`text/template` + sprig, params decoded as the Go operator decodes them:
//! every number a `json.Number`). Each case is a realistic VyOS template; it
//! must either convert to what Go rendered (the commands bash runs, the nodes
//! VyOS reads, or the very text where layout is the point) or be refused with
//! its line, column and reason. A silent difference fails the test.

mod support;

use serde_json::{Value, json};
use support::differential::{config_nodes, ours, run_commands, word_split};
use support::go_oracle::GoOracle;
use vrouter_gotemplate::convert;
use vrouter_render::testing::BashHarness;
use vrouter_render::{TemplateEngine, TemplateKind};

use TemplateKind::{Commands, Config};

/// What converting a case must give.
enum Expect {
    /// What Go rendered: the same commands run or config nodes read.
    Same,
    /// What Go rendered, to the byte.
    SameText,
    /// The same commands, once a value with white space (one argument here,
    /// written raw and split by bash in Go: a documented difference) is split.
    SameWords,
    /// Refused at (line, column), the reason containing the text.
    Refused(usize, usize, &'static str),
}

struct Case {
    kind: TemplateKind,
    template: String,
    params: Value,
    expect: Expect,
}

fn case(kind: TemplateKind, template: impl Into<String>, params: Value, expect: Expect) -> Case {
    Case {
        kind,
        template: template.into(),
        params,
        expect,
    }
}

struct Differential {
    oracle: GoOracle,
    harness: BashHarness,
}

impl Differential {
    fn start() -> Differential {
        Differential {
            oracle: GoOracle::start(),
            harness: BashHarness::start().expect("bash"),
        }
    }

    fn check_all(&mut self, cases: &[Case]) {
        let failures: Vec<String> = cases.iter().filter_map(|c| self.check(c).err()).collect();
        assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    }

    fn check(&mut self, c: &Case) -> Result<(), String> {
        let what = format!("{} template {:?} with {}", c.kind, c.template, c.params);
        let template = c.template.as_str();
        let go = self.oracle.render(template, &c.params).json;
        let Some(go) = go.ok() else {
            return Err(format!("{what}: the case must render in Go: {:?}", go.error));
        };
        if let Expect::Refused(line, column, reason) = c.expect {
            return match convert(template, c.kind, &TemplateEngine::new()) {
                Ok(converted) => Err(format!(
                    "{what}: converted, must be refused\n{}\nGo:\n{go}\nours:\n{:?}",
                    converted.tera,
                    ours("t", c.kind, template, &c.params)
                )),
                Err(e) => {
                    let p = &e.problems[0];
                    let at = (p.location.line, p.location.column);
                    if at == (line, column) && p.reason.contains(reason) {
                        Ok(())
                    } else {
                        Err(format!(
                            "{what}: refused as `{e}`, expected {line}:{column}: …{reason}…"
                        ))
                    }
                }
            };
        }
        let ours = ours("t", c.kind, template, &c.params).map_err(|e| format!("{what}: {e}"))?;
        let tera = convert(template, c.kind, &TemplateEngine::new())
            .map(|c| c.tera)
            .unwrap_or_default();
        let differ = |how: &str| {
            Err(format!(
                "{what}: {how} differ\nGo:\n{go:?}\nours:\n{ours:?}\nconverted:\n{tera}"
            ))
        };
        // The engine ends each template's text with a newline (templates are
        // joined line by line), which Go's text may lack.
        let go_line = if go.ends_with('\n') || go.is_empty() {
            go.to_owned()
        } else {
            format!("{go}\n")
        };
        if matches!(c.expect, Expect::SameText) && ours != go_line {
            return differ("the texts");
        }
        match c.kind {
            Commands => {
                let (our_argv, our_run) = run_commands(&mut self.harness, &ours);
                let (go_argv, go_run) = run_commands(&mut self.harness, go);
                let split = matches!(c.expect, Expect::SameWords) && word_split(&our_argv) == go_argv;
                if (our_argv != go_argv && !split) || our_run != go_run {
                    return differ("the commands run");
                }
            }
            Config => {
                let go_nodes = config_nodes(go);
                if go_nodes.is_err() || config_nodes(&ours) != go_nodes {
                    return differ("the config nodes");
                }
            }
        }
        Ok(())
    }
}

/// The oracle's "json" rendering decodes params as the Go operator does
/// (internal/template/render.go: encoding/json with `UseNumber`): every
/// number, nested ones too, is a `json.Number`. The cases below rely on it.
#[test]
fn the_oracle_sees_params_numbers_as_the_go_operator_did() {
    let mut oracle = GoOracle::start();
    let template = r#"{{ printf "%T %T %T %T" .n .f (index .l 0) .o.port }}"#;
    let params = json!({"n": 7, "f": 1.5, "l": [1], "o": {"port": 179}});
    let answer = oracle.render(template, &params);
    assert_eq!(
        answer.json.ok(),
        Some("json.Number json.Number json.Number json.Number")
    );
}

/// Quote characters a template's functions write into a value (`printf "%q"`,
/// `quote`/`squote`, a literal with quotes, JSON) were read by bash or by the
/// VyOS parser in the Go operator's output; the engine escapes values, so
/// after conversion they would reach VyOS as part of the value.
#[test]
fn quotes_written_by_functions_are_read_as_go_s_output_was() {
    let p = json!({
        "hostname": "edge-1",
        "iface": "eth1",
        "desc": "uplink to transit A",
        "site": "ams",
        "servers": ["192.0.2.53", "198.51.100.53"],
        "peer": {"ip": "192.0.2.1", "name": "isp a"},
    });
    let cases = [
        // `%q` as the whole value, or one of printf's words.
        case(
            Commands,
            "set system host-name {{ printf \"%q\" .hostname }}",
            p.clone(),
            Expect::Same,
        ),
        case(
            Commands,
            "{{ printf \"set interfaces ethernet %s description %q\" .iface .desc }}",
            p.clone(),
            Expect::Same,
        ),
        case(
            Commands,
            "{{ printf \"set protocols bgp neighbor %s description %q\" .peer.ip .peer.name }}\n",
            p.clone(),
            Expect::Same,
        ),
        case(
            Config,
            "system {\n    host-name {{ printf \"%q\" .hostname }}\n}\n",
            p.clone(),
            Expect::Same,
        ),
        // `quote`/`squote` as an argument of printf.
        case(
            Commands,
            "{{ printf \"set system host-name %s\" (quote .hostname) }}",
            p.clone(),
            Expect::Same,
        ),
        case(
            Commands,
            "{{ printf \"set interfaces ethernet %s description %s\" .iface (squote .desc) }}",
            p.clone(),
            Expect::Same,
        ),
        case(
            Config,
            "interfaces {\n    ethernet {{ .iface }} {\n        description {{ printf \"%s\" (quote .desc) }}\n    }\n}\n",
            p.clone(),
            Expect::Same,
        ),
        // Quotes inside a word: bash joins the pieces.
        case(
            Commands,
            "set interfaces ethernet eth0 description {{ printf \"to-%q\" .site }}",
            p.clone(),
            Expect::Same,
        ),
        // Where the quotes cannot be told from the value: refused.
        case(
            Commands,
            "set system name-server {{ join \" \" (list (quote (index .servers 0)) (quote (index .servers 1))) }}",
            p.clone(),
            Expect::Refused(1, 24, "quote"),
        ),
        case(
            Commands,
            "set interfaces ethernet eth0 description {{ upper (quote .site) }}",
            p.clone(),
            Expect::Refused(1, 42, "quote"),
        ),
        case(
            Commands,
            "{{ $d := printf \"%q\" .desc }}set interfaces ethernet eth0 description {{ $d }}",
            p.clone(),
            Expect::Refused(1, 71, "quote"),
        ),
        case(
            Commands,
            "set interfaces ethernet eth0 description {{ default \"\\\"none\\\"\" .missing }}",
            p.clone(),
            Expect::Refused(1, 42, "quote"),
        ),
        case(
            Commands,
            "set system login banner post-login {{ toJson .site }}",
            p.clone(),
            Expect::Refused(1, 36, "quote"),
        ),
        // The template's own quotes around a quoted value: Go kept the inner ones.
        case(
            Commands,
            "set interfaces ethernet eth0 description '{{ quote .site }}'",
            p.clone(),
            Expect::Refused(1, 43, "quote"),
        ),
    ];
    Differential::start().check_all(&cases);
}

/// The Go operator decoded params with `UseNumber`: a number was a
/// `json.Number`, a string kind, so `eq` and `ne` compared its text with a
/// string, and `lt`/`gt` of two params compared texts.
#[test]
fn comparisons_of_numeric_params_with_text_are_what_go_compared() {
    let p = json!({
        "vlan": 100,
        "mtu": 1500,
        "asn": 65000,
        "remoteAs": "65000",
        "priority": 10,
        "maxPriority": 9,
        "weight": 1.5,
        "name": "wan",
    });
    let cases = [
        case(
            Commands,
            "{{ if eq .vlan \"100\" }}set interfaces ethernet eth1 vif 100 description mgmt{{ end }}",
            p.clone(),
            Expect::Same,
        ),
        case(
            Commands,
            "{{ if ne .mtu \"1500\" }}set interfaces ethernet eth0 mtu {{ .mtu }}{{ end }}",
            p.clone(),
            Expect::Same,
        ),
        case(
            Commands,
            "{{ if eq .asn \"64512\" \"65000\" }}set protocols bgp system-as {{ .asn }}{{ end }}",
            p.clone(),
            Expect::Same,
        ),
        case(
            Commands,
            "set protocols bgp neighbor 192.0.2.1 remote-as {{ if eq .asn .remoteAs }}internal{{ else }}external{{ end }}",
            p.clone(),
            Expect::Same,
        ),
        case(
            Config,
            "interfaces {\n    ethernet eth0 {\n{{- if eq .weight \"1.5\" }}\n        description weighted\n{{- end }}\n    }\n}\n",
            p.clone(),
            Expect::Same,
        ),
        case(
            Commands,
            "set x {{ if eq \"100\" .vlan }}a{{ else }}b{{ end }}",
            p.clone(),
            Expect::Same,
        ),
        case(
            Commands,
            "set x {{ ternary \"tagged\" \"untagged\" (ne .vlan \"1\") }}",
            p.clone(),
            Expect::Same,
        ),
        case(
            Commands,
            "set x {{ if eq .missing \"1\" }}a{{ else }}b{{ end }}",
            p.clone(),
            Expect::Same,
        ),
        // Numbers Go's own functions made compare as numbers in Go too.
        case(
            Commands,
            "{{ if gt (int .priority) (int .maxPriority) }}set high-availability vrrp group lan priority {{ .maxPriority }}{{ end }}",
            p.clone(),
            Expect::Same,
        ),
        // `lt`/`gt` of two params: Go compared texts ("10" < "9").
        case(
            Commands,
            "{{ if gt .priority .maxPriority }}set high-availability vrrp group lan priority {{ .maxPriority }}{{ end }}",
            p.clone(),
            Expect::Refused(1, 7, "text"),
        ),
    ];
    Differential::start().check_all(&cases);
}

/// Formatting a param's number: Go formatted the `json.Number`'s text.
#[test]
fn numbers_are_formatted_as_go_formatted_their_text() {
    let p = json!({
        "vlan": 100,
        "id": 10,
        "asn": 65000,
        "tag": 120,
        "weight": 1.5,
        "site": "ams",
        "ports": ["eth0", "eth1", "eth2", "eth3", "eth4", "eth5", "eth6", "eth7", "eth8", "eth9", "eth10", "eth11"],
    });
    let cases = [
        case(
            Commands,
            "set interfaces ethernet eth0 vif {{ printf \"%v\" .vlan }} description {{ printf \"%s-%s\" .site (toString .vlan) }}",
            p.clone(),
            Expect::Same,
        ),
        case(
            Commands,
            "set policy community-list 100 rule 10 regex {{ printf \"%s:%s\" .asn .tag }}",
            p.clone(),
            Expect::Same,
        ),
        case(
            Config,
            "interfaces {\n    ethernet eth0 {\n        description {{ printf \"%q\" (printf \"vlan %5s weight %-4v site %s\" .vlan .weight .site) }}\n    }\n}\n",
            p.clone(),
            Expect::Same,
        ),
        case(
            Commands,
            "set interfaces ethernet eth0 mac 02:00:00:00:00:{{ printf \"%02x\" (int .id) }}",
            p.clone(),
            Expect::Same,
        ),
        case(
            Commands,
            "set policy community-list 100 rule 10 regex {{ print .asn \":\" .tag }}",
            p.clone(),
            Expect::Same,
        ),
        // A range's index is a Go int: `%x` formats the number in Go too.
        case(
            Commands,
            "{{ range $i, $p := .ports }}set interfaces ethernet {{ $p }} mac 02:00:00:00:01:{{ printf \"%02x\" $i }}\n{{ end }}",
            p.clone(),
            Expect::Same,
        ),
        // `%x` of a json.Number wrote the hex of its digits ("3130").
        case(
            Commands,
            "set interfaces ethernet eth0 mac 02:00:00:00:00:{{ printf \"%02x\" .id }}",
            p.clone(),
            Expect::Refused(1, 52, "hex of its digits"),
        ),
        // `print` of two numbers: no space in Go (json.Number is a string).
        case(
            Commands,
            "set system host-name r{{ print .asn .tag }}",
            p.clone(),
            Expect::Refused(1, 26, "space"),
        ),
    ];
    Differential::start().check_all(&cases);
}

/// Go's trim markers on a comment remove the white space around it wherever
/// it is, the start of the template included.
#[test]
fn trimmed_comments_and_actions_keep_go_s_layout() {
    let p = json!({"hostname": "edge-1", "ifaces": ["eth0", "eth1"], "ntp": ["192.0.2.123"]});
    let cases = [
        case(
            Commands,
            "{{- /* managed by the operator */ -}}\nset system host-name {{ .hostname }}\n",
            p.clone(),
            Expect::SameText,
        ),
        case(
            Commands,
            "{{- /* header */}}\nset system host-name {{ .hostname }}\n",
            p.clone(),
            Expect::SameText,
        ),
        case(
            Commands,
            "{{/* header */ -}}\n\nset system host-name {{ .hostname }}\n",
            p.clone(),
            Expect::SameText,
        ),
        case(
            Commands,
            "\n{{- /* header */ -}}\n\n  set system host-name {{ .hostname }}\n",
            p.clone(),
            Expect::SameText,
        ),
        case(
            Config,
            "{{- /* system node */ -}}\nsystem {\n    host-name {{ .hostname }}\n}\n",
            p.clone(),
            Expect::SameText,
        ),
        case(
            Commands,
            "set system host-name {{ .hostname }}\n{{- /* interfaces */ -}}\n{{ range .ifaces }}\nset interfaces ethernet {{ . }}\n{{- end }}\n",
            p.clone(),
            Expect::SameText,
        ),
        case(
            Commands,
            "{{- /* a */ -}}\n{{- /* b */ -}}\nset system host-name {{ .hostname }}\n{{- /* end */ -}}\n",
            p.clone(),
            Expect::SameText,
        ),
        case(
            Config,
            "system {\n    ntp {\n{{- range .ntp }}\n        {{- /* one server */}}\n        server {{ . }}\n{{- end }}\n    }\n}\n",
            p.clone(),
            Expect::SameText,
        ),
        case(
            Commands,
            "{{- if .hostname -}}\nset system host-name {{ .hostname }}\n{{- end }}\n",
            p.clone(),
            Expect::SameText,
        ),
        case(
            Commands,
            "{{- $h := .hostname -}}\n\nset system host-name {{ $h }}\n",
            p.clone(),
            Expect::SameText,
        ),
    ];
    Differential::start().check_all(&cases);
}

/// `define` and `block` are refused at their own tag with the reason, whatever
/// follows them.
#[test]
fn define_and_block_are_refused_where_they_are_written() {
    let p = json!({"hostname": "edge-1"});
    let cases = [
        case(
            Commands,
            "{{ define \"host\" }}set system host-name {{ .hostname }}{{ end }}\n{{ template \"host\" . }}\n",
            p.clone(),
            Expect::Refused(1, 1, "renders alone"),
        ),
        case(
            Commands,
            "set system time-zone UTC\n{{ block \"host\" . }}set system host-name {{ .hostname }}\n{{ end }}\n",
            p.clone(),
            Expect::Refused(2, 1, "renders alone"),
        ),
        case(
            Commands,
            "{{- define \"ntp\" -}}\n{{ range $s := .servers }}set system ntp server {{ $s }}\n{{ end }}\n{{- end -}}\nset system host-name {{ .hostname }}\n",
            p.clone(),
            Expect::Refused(1, 1, "renders alone"),
        ),
    ];
    Differential::start().check_all(&cases);
}

/// Generated layouts: comments, declarations, outputs and conditions with
/// every combination of trim markers, at the start, between lines and at the
/// end, separated by nothing, spaces, newlines or blank lines. The text must
/// be Go's to the byte (or the template refused).
#[test]
fn generated_trim_layouts_keep_go_s_text() {
    const ATOMS: &[&str] = &[
        "{{/* c */}}",
        "{{- /* c */}}",
        "{{/* c */ -}}",
        "{{- /* c */ -}}",
        "{{ $v := .h }}",
        "{{- $v := .h -}}",
        "set system host-name {{ .h }}",
        "set system host-name {{- .h }}",
        "set system host-name {{ .h -}}",
        "set a b",
        "{{ if .on }}set c d{{ end }}",
        "{{- if .on -}}\nset c d\n{{- end -}}",
        "{{ if .off }}x{{ else -}}\n  set e f\n{{- end }}",
        "{{ range .l }}\nset g {{ . }}\n{{- end }}",
        "{{- range .l -}} set g {{ . }} {{- else }}none{{ end }}",
    ];
    const SEPARATORS: &[&str] = &["", " ", "\n", "\n\n", "\n  ", " \n"];
    let params = json!({"h": "edge-1", "on": true, "off": false, "l": ["x", "y"]});
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    let mut cases = Vec::new();
    for _ in 0..600 {
        let mut template = String::new();
        for _ in 0..1 + next(4) {
            template.push_str(SEPARATORS[next(SEPARATORS.len())]);
            template.push_str(ATOMS[next(ATOMS.len())]);
        }
        template.push_str(SEPARATORS[next(SEPARATORS.len())]);
        cases.push(template);
    }
    let mut d = Differential::start();
    let mut failures = Vec::new();
    let mut compared = 0;
    for template in &cases {
        let go = d.oracle.render(template, &params).json;
        if go.error.is_some() || convert(template, Commands, &TemplateEngine::new()).is_err() {
            continue;
        }
        match d.check(&case(Commands, template.as_str(), params.clone(), Expect::SameText)) {
            Ok(()) => compared += 1,
            Err(e) => failures.push(e),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {}:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n\n")
    );
    assert!(compared >= 400, "only {compared} layouts compared");
}

/// Generated templates mixing the constructs of these classes (quoting
/// functions, printf verbs, comparisons, `print`, `toString`) over string and
/// numeric params, rendered by Go with params decoded as the Go operator
/// decodes them. Each must run the same commands or be refused. (The
/// documented differences, a number's truth and `%d`, are not generated.)
#[test]
fn generated_quoting_and_number_templates_run_what_go_ran_or_are_refused() {
    // A list's index formatted by `%s`/`%q` is a documented difference (Go
    // wrote `%!s(int=0)`): only conditions read `$i`.
    const VALUES: &[&str] = &["$.s", "$.n", "$.ns", "$.f", "$.neg", "$.big", "$e", "(len $.l)", "5"];
    const COMPARED: &[&str] = &["$.s", "$.n", "$.ns", "$.f", "$.neg", "$.big", "$e", "$i", "(len $.l)"];
    let params = json!({
        "s": "edge-1", "n": 100, "ns": "100", "f": 1.5, "neg": -3, "big": 65000,
        "l": ["eth0", "eth1"],
    });
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    let mut cases = Vec::new();
    for _ in 0..800 {
        let (a, b) = (VALUES[next(VALUES.len())], VALUES[next(VALUES.len())]);
        let value = match next(14) {
            0 => format!("quote {a}"),
            1 => format!("squote {a}"),
            2 => format!("printf \"%q\" {a}"),
            3 => format!("printf \"%s\" {a}"),
            4 => format!("printf \"%v-%v\" {a} {b}"),
            5 => format!("toString {a}"),
            6 => format!("printf \"%x\" {a}"),
            7 => format!("upper (quote {a})"),
            8 => format!("print {a} {b}"),
            9 => format!("printf \"%s:%q\" {a} {b}"),
            10 => format!("printf \"%s\" (quote {a})"),
            11 => format!("{a} | quote"),
            12 => format!("cat {a} (quote {b})"),
            _ => a.to_owned(),
        };
        let (c, d) = (COMPARED[next(COMPARED.len())], COMPARED[next(COMPARED.len())]);
        let cond = match next(8) {
            0 => format!("eq {c} \"100\""),
            1 => format!("ne {c} \"1.5\""),
            2 => format!("eq {c} {d}"),
            3 => format!("lt {c} {d}"),
            4 => format!("eq {c} \"edge-1\" \"65000\""),
            5 => format!("gt (int {c}) 5"),
            6 => format!("ne {c} {d}"),
            _ => format!("eq (toString {c}) \"-3\""),
        };
        cases.push(format!(
            "{{{{ range $i, $e := .l }}}}\nset x {{{{ {value} }}}}\n{{{{ if {cond} }}}}set y a{{{{ else }}}}set y b{{{{ end }}}}\n{{{{ end }}}}\n"
        ));
    }
    let mut d = Differential::start();
    let (mut compared, mut refused, mut failures) = (0, 0, Vec::new());
    for template in &cases {
        let go = d.oracle.render(template, &params).json;
        if go.error.is_some() {
            continue;
        }
        if convert(template, Commands, &TemplateEngine::new()).is_err() {
            refused += 1;
            continue;
        }
        match d.check(&case(Commands, template.as_str(), params.clone(), Expect::SameWords)) {
            Ok(()) => compared += 1,
            Err(e) => failures.push(e),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {}:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n\n")
    );
    assert!(compared >= 300, "only {compared} compared ({refused} refused)");
}
