//! The project's reading of config.boot text (`vyos_set_commands`: the
//! `config_boot` reader plus VyOS's tree rules) against VyOS's own parser
//! (vyos1x-config, `xtask/oracles/vyosconfig`): on generated configs — trees
//! of node names VyOS sorts in interesting ways, values of every class the
//! value rules know (quotes, backslashes, braces, comment openers, control
//! characters, newlines, non-ASCII, empty), written bare, quoted, escaped and
//! not, with comments and odd layout, then mutated byte by byte — both print
//! the same `set` commands, or both refuse.
//!
//! `VROUTER_VYOS_DIFF_CASES` sets the number of cases (`cargo xtask bench`
//! runs 10⁵); `VROUTER_BENCH_OUT` names a JSON file for the figures.

mod support;

use std::time::Instant;

use support::rng::Rng;
use support::vyos_oracle::vyos_read;
use vrouter_render::vyos_set_commands;

/// Node names: real ones, and ones VyOS's lexical-numeric order treats
/// specially (digit runs of different lengths, leading zeros, long runs).
const NAMES: &[&str] = &[
    "interfaces",
    "ethernet",
    "eth0",
    "eth1",
    "eth2",
    "eth10",
    "address",
    "description",
    "system",
    "host-name",
    "disable",
    "a",
    "b",
    "1",
    "01",
    "9",
    "10",
    "a1b",
    "a01b",
    "a001b",
    "x9y",
    "x10y",
    "99999999999",
    "4294967297",
    "v1.2",
    "1.10",
    "rule",
    "firewall",
    "name",
    "-",
    "_x",
    "ü",
    "é1",
];

/// Values of every class the value rules (`escape.rs`) distinguish.
const VALUES: &[&str] = &[
    "plain",
    "192.0.2.1/24",
    "",
    " ",
    "a b",
    "\"",
    "'",
    "it's",
    "a\"b",
    "\\",
    "a\\b",
    "\\n",
    "\\\"",
    "{",
    "}",
    "a{b}c",
    "#",
    ";",
    "a;b",
    "//",
    "/*",
    "*/",
    "/* x */",
    "// x",
    "\n",
    "a\nb",
    "\t",
    "\r",
    "\r\n",
    "\u{1}",
    "\u{7}",
    "\u{8}",
    "\u{b}",
    "\u{c}",
    "\u{1b}[31m",
    "\u{7f}",
    "\u{0}",
    "ü",
    "日本",
    "\u{a0}",
    "\u{2028}",
    "$(reboot)",
    "`id`",
    "${x}",
    "x; delete interfaces; commit; #",
    "set system host-name x",
    "01",
    "10",
    "eth10",
];

/// Characters for identifiers VyOS accepts bare: anything but blanks,
/// braces and quotes.
const IDENT_CHARS: &[&str] = &[
    "a", "z", "0", "9", "-", "_", ".", "/", "*", "#", ";", "!", ":", "=", "\\", "ü", "$", "@",
];

/// Characters random mutations insert: the grammar's own and others.
const MUTATIONS: &[&str] = &[
    "{", "}", "\"", "'", "\\", "\n", " ", "\t", "\r", "/", "*", "/*", "*/", "//", "#", "a", "0", "\u{1}", "ü",
];

fn name(rng: &mut Rng) -> String {
    if rng.chance(85) {
        return rng.pick(NAMES).to_owned();
    }
    (0..1 + rng.below(6)).map(|_| rng.pick(IDENT_CHARS)).collect()
}

fn raw_value(rng: &mut Rng) -> String {
    match rng.below(10) {
        0..=5 => rng.pick(VALUES).to_owned(),
        6..=7 => format!("{}{}", rng.pick(VALUES), rng.pick(VALUES)),
        8 => (0..rng.below(8)).map(|_| rng.pick(MUTATIONS)).collect(),
        _ => (0..1 + rng.below(5))
            .map(|_| char::from_u32(rng.below(0x3000) as u32).unwrap_or('x'))
            .collect(),
    }
}

/// `value` written as a config.boot token: double-quoted with escapes (as
/// the project writes values), single-quoted, quoted without escaping, or
/// bare.
fn written(rng: &mut Rng, value: &str) -> String {
    let escaped = value.replace('\\', "\\\\").replace('"', "\\\"");
    match rng.below(6) {
        0 | 1 => format!("\"{escaped}\""),
        2 => format!("'{}'", value.replace('\\', "\\\\").replace('\'', "\\'")),
        3 => format!("\"{value}\""),
        4 => format!("'{value}'"),
        _ => value.to_owned(),
    }
}

fn indent(rng: &mut Rng, depth: usize) -> String {
    match rng.below(8) {
        0 => "\t".repeat(depth),
        1 => String::new(),
        2 => " \r".to_owned(),
        _ => "    ".repeat(depth),
    }
}

fn comment(rng: &mut Rng, out: &mut String) {
    match rng.below(12) {
        0 => out.push_str("/* note */\n"),
        1 => out.push_str("// vyos-config-version: \"x\"\n"),
        2 => out.push_str("/* a */ /* b */ "),
        _ => {}
    }
}

/// A block of `count` nodes at `depth`.
fn nodes(rng: &mut Rng, out: &mut String, depth: usize, count: usize) {
    for _ in 0..count {
        comment(rng, out);
        out.push_str(&indent(rng, depth));
        out.push_str(&name(rng));
        let shape = if depth >= 3 { rng.below(2) } else { rng.below(5) };
        match shape {
            0 => {}
            1 => {
                out.push(' ');
                let value = raw_value(rng);
                out.push_str(&written(rng, &value));
            }
            2 => {
                out.push_str(" {\n");
                let count = rng.below(4);
                nodes(rng, out, depth + 1, count);
                out.push_str(&indent(rng, depth));
                out.push('}');
            }
            _ => {
                out.push(' ');
                let tag = if rng.chance(70) { name(rng) } else { raw_value(rng) };
                out.push_str(&written(rng, &tag));
                out.push_str(" {\n");
                let count = rng.below(4);
                nodes(rng, out, depth + 1, count);
                out.push_str(&indent(rng, depth));
                out.push('}');
            }
        }
        out.push_str(if rng.chance(3) { " " } else { "\n" });
        if rng.chance(5) {
            out.push('\n');
        }
    }
}

/// One generated case: a tree, sometimes mutated, sometimes random text.
fn case(rng: &mut Rng) -> String {
    if rng.chance(3) {
        return (0..rng.below(30)).map(|_| rng.pick(MUTATIONS)).collect();
    }
    let mut text = String::new();
    let count = 1 + rng.below(4);
    nodes(rng, &mut text, 0, count);
    if rng.chance(25) {
        for _ in 0..1 + rng.below(3) {
            mutate(rng, &mut text);
        }
    }
    text
}

fn mutate(rng: &mut Rng, text: &mut String) {
    let boundaries: Vec<usize> = (0..=text.len()).filter(|i| text.is_char_boundary(*i)).collect();
    let at = boundaries[rng.below(boundaries.len())];
    if rng.chance(50) || at == text.len() {
        text.insert_str(at, rng.pick(MUTATIONS));
    } else {
        let end = boundaries.iter().copied().find(|b| *b > at).unwrap_or(text.len());
        text.replace_range(at..end, "");
    }
}

/// How the two readings of one text compare.
#[derive(Debug, PartialEq)]
enum Outcome {
    SameCommands,
    BothRefuse,
    Disagree,
}

fn compare(ours: &Result<String, String>, vyos: &Result<String, String>) -> Outcome {
    match (ours, vyos) {
        (Ok(a), Ok(b)) if a == b => Outcome::SameCommands,
        (Err(_), Err(_)) => Outcome::BothRefuse,
        _ => Outcome::Disagree,
    }
}

fn case_count() -> usize {
    std::env::var("VROUTER_VYOS_DIFF_CASES")
        .ok()
        .map(|n| n.parse().expect("VROUTER_VYOS_DIFF_CASES is a number"))
        .unwrap_or(4_000)
}

#[test]
fn the_project_reads_generated_configs_as_vyos_does() {
    let seed = 0x5eed_0047_u64;
    let mut rng = Rng(seed);
    let texts: Vec<String> = (0..case_count()).map(|_| case(&mut rng)).collect();
    let started = Instant::now();
    let vyos = vyos_read(&texts);
    let oracle_secs = started.elapsed().as_secs_f64();
    let mut counts = [0usize; 3];
    let mut disagreements = Vec::new();
    for (text, vyos) in texts.iter().zip(&vyos) {
        let ours = vyos_set_commands(text);
        let outcome = compare(&ours, vyos);
        counts[outcome as usize] += 1;
        if matches!(compare(&ours, vyos), Outcome::Disagree) && disagreements.len() < 5 {
            disagreements.push(format!("text {text:?}\n  project: {ours:?}\n  VyOS:    {vyos:?}"));
        }
    }
    let [same, refused, disagree] = counts;
    write_figures(
        texts.len(),
        same,
        refused,
        disagree,
        oracle_secs,
        started.elapsed().as_secs_f64(),
    );
    assert!(
        disagreements.is_empty(),
        "{disagree} of {} cases (seed {seed:#x}) read differently, first ones:\n{}",
        texts.len(),
        disagreements.join("\n")
    );
    // The generator must exercise both sides of the grammar.
    assert!(
        same > texts.len() / 5 && refused > texts.len() / 10,
        "same {same}, refused {refused}"
    );
}

fn write_figures(cases: usize, same: usize, refused: usize, disagree: usize, oracle_secs: f64, total_secs: f64) {
    let Ok(path) = std::env::var("VROUTER_BENCH_OUT") else {
        return;
    };
    let figures = serde_json::json!({
        "cases": cases, "same_commands": same, "both_refuse": refused, "disagreements": disagree,
        "oracle_secs": oracle_secs, "total_secs": total_secs,
    });
    std::fs::write(path, figures.to_string()).expect("writing the figures");
}

#[test]
fn known_readings_agree_with_vyos() {
    let texts: Vec<String> = [
        "interfaces {\n ethernet eth10 {\n  address b\n }\n ethernet eth2 {\n  address \"a\"\n }\n}\n",
        "a {\n b\n /* trailing comment */\n}\n",
        "x {\n e eth0 {\n }\n e eth0 {\n }\n}\n",
        "a 1\na 2\n",
        "a \"x\\\"'y\"\n",
        "/* only a comment */\n",
    ]
    .map(str::to_owned)
    .to_vec();
    for (text, vyos) in texts.iter().zip(vyos_read(&texts)) {
        let ours = vyos_set_commands(text);
        assert_ne!(
            compare(&ours, &vyos),
            Outcome::Disagree,
            "{text:?}: project {ours:?}, VyOS {vyos:?}"
        );
    }
}
