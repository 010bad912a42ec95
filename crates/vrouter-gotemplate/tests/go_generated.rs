//! Property test of `convert` against the real Go engine: generated Go
//! templates (fields and `$` paths, variables and assignment, `range` over lists
//! and maps with and without variables and `else`, `if`/`else if`/`else`,
//! `with`/`else`, `break`/`continue`, pipelines, comparison and logic functions,
//! trim markers, comments, and sprig's string, list, map, number, default and
//! encoding functions) rendered with random params, by Go and converted by us.
//! The commands bash runs with the stub vyatta functions, and the config.boot
//! nodes VyOS reads, must be the same (1,000 command and 600 config templates a run).
//!
//! Integers are compared with the Go engine given Go integers ("typed"): the Go
//! operator itself gave `text/template` numbers as text (`UseNumber`), where a
//! `0` is true and `printf "%d"` fails; those cases are counted and asserted in
//! `go_differential.rs`; the constructs where that would change what the Go
//! operator rendered (`%x` and `lt` of params' numbers) are given `int`, which
//! makes them numbers in Go too (`go_silent_differences.rs`). Values with spaces are generated too: Go wrote them
//! raw, so bash split them; converted, each is one argument, and splitting our
//! arguments at white space must give Go's.

mod support;

use std::cell::RefCell;
use std::fmt::Write;

use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Map, Value, json};
use support::differential::{config_nodes, ours, run_commands, word_split};
use support::go_oracle::GoOracle;
use vrouter_render::TemplateKind;
use vrouter_render::testing::BashHarness;

/// A small deterministic generator (the test case is its seed).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

const WORDS: &[&str] = &[
    "edge", "core", "lan", "wan", "a1", "b-2", "x.y", "10.0.0.1", "eth0", "v6:db8", "p/24", "dmz", "Mgmt", "vpn",
];

/// The params every generated template reads.
fn params(rng: &mut Rng, spaces: bool, empties: bool) -> Value {
    let mut word = |rng: &mut Rng| -> String {
        if empties && rng.chance(8) {
            return String::new();
        }
        let w = (*rng.pick(WORDS)).to_owned();
        if spaces && rng.chance(15) {
            format!("{w} {}", rng.pick(WORDS))
        } else {
            w
        }
    };
    let int = |rng: &mut Rng| -> i64 { [0, 1, 2, 3, 7, 10, 42, -5, 65000, 4_200_000_001][rng.below(10)] };
    let list = |rng: &mut Rng, word: &mut dyn FnMut(&mut Rng) -> String| -> Vec<Value> {
        (0..rng.below(4)).map(|_| Value::from(word(rng))).collect()
    };
    let mut m = Map::new();
    m.insert("k".into(), word(rng).into());
    for _ in 0..rng.below(3) {
        m.insert(rng.pick(&["a", "b", "zz", "m1"]).to_string(), word(rng).into());
    }
    let items: Vec<Value> = (0..rng.below(4))
        .map(|_| json!({"name": word(rng), "n": int(rng), "on": rng.chance(50)}))
        .collect();
    let nonzero = [1, 2, 3, 7, -4][rng.below(5)];
    json!({
        "s0": word(rng), "s1": word(rng), "s2": word(rng),
        "n0": int(rng), "n1": int(rng), "n2": nonzero,
        "b0": rng.chance(50), "b1": rng.chance(50),
        "l": list(rng, &mut word), "ln": (0..rng.below(4)).map(|_| Value::from(int(rng))).collect::<Vec<_>>(),
        "m": m,
        "items": items,
        "o": {"name": word(rng), "port": int(rng), "tags": list(rng, &mut word)},
    })
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Ty {
    Str,
    Int,
    Bool,
    StrList,
    IntList,
    StrMap,
    Item,
    Obj,
}

/// Generates Go template source: trim markers on the control tags, values as
/// whole words (what the engine accepts).
struct Gen<'r> {
    rng: &'r mut Rng,
    /// Variables in scope: ($name, type, declared in loop depth).
    vars: Vec<(String, Ty, usize)>,
    /// What `.` is (None: the params root).
    dot: Vec<Option<Ty>>,
    loop_depth: usize,
    counter: usize,
    config: bool,
}

impl Gen<'_> {
    fn trim(&mut self) -> (&'static str, &'static str) {
        // Trim markers in config glue a node's value to the next node's name,
        // which VyOS cannot read back (the commands cover trimming).
        if self.config {
            return (" ", " ");
        }
        (
            if self.rng.chance(25) { "- " } else { " " },
            if self.rng.chance(25) { " -" } else { " " },
        )
    }

    fn tag(&mut self, body: &str) -> String {
        let (l, r) = self.trim();
        format!("{{{{{l}{body}{r}}}}}")
    }

    fn var_of(&mut self, ty: Ty) -> Option<String> {
        let names: Vec<String> = self.vars.iter().filter(|v| v.1 == ty).map(|v| v.0.clone()).collect();
        (!names.is_empty()).then(|| self.rng.pick(&names).clone())
    }

    fn path(&mut self, ty: Ty) -> Option<String> {
        let root = if self.dot.last() == Some(&None) || self.rng.chance(30) {
            if self.dot.last() == Some(&None) && self.rng.chance(70) {
                "."
            } else {
                "$."
            }
        } else {
            "$."
        };
        let from_root = |names: &[&str]| names.iter().map(|n| format!("{root}{n}")).collect::<Vec<_>>();
        let mut options: Vec<String> = match ty {
            Ty::Str => from_root(&["s0", "s1", "s2", "o.name", "m.k"]),
            Ty::Int => from_root(&["n0", "n1", "n2", "o.port"]),
            Ty::Bool => from_root(&["b0", "b1"]),
            Ty::StrList => from_root(&["l", "o.tags"]),
            Ty::IntList => from_root(&["ln"]),
            Ty::StrMap => from_root(&["m"]),
            Ty::Obj => from_root(&["o"]),
            Ty::Item => vec![],
        };
        if let Some(v) = self.var_of(ty) {
            options.push(v);
        }
        match (self.dot.last(), ty) {
            (Some(Some(d)), t) if *d == t => options.push(".".into()),
            (Some(Some(Ty::Item)), Ty::Str) => options.push(".name".into()),
            (Some(Some(Ty::Item)), Ty::Int) => options.push(".n".into()),
            (Some(Some(Ty::Item)), Ty::Bool) => options.push(".on".into()),
            (Some(Some(Ty::Obj)), Ty::Str) => options.push(".name".into()),
            (Some(Some(Ty::Obj)), Ty::Int) => options.push(".port".into()),
            (Some(Some(Ty::Obj)), Ty::StrList) => options.push(".tags".into()),
            _ => {}
        }
        for (name, vty, _) in self.vars.clone() {
            if vty == Ty::Item {
                match ty {
                    Ty::Str => options.push(format!("{name}.name")),
                    Ty::Int => options.push(format!("{name}.n")),
                    _ => {}
                }
            }
        }
        (!options.is_empty()).then(|| self.rng.pick(&options).clone())
    }

    fn lit_str(&mut self) -> String {
        let w = *self.rng.pick(&["a", "ab", "x-y", "1.2", "LAN", "v"]);
        if self.rng.chance(30) {
            format!("`{w}`")
        } else {
            format!("{w:?}")
        }
    }

    /// A parenthesized expression of `ty` (or a path/literal).
    fn arg(&mut self, ty: Ty, depth: usize) -> String {
        let e = self.expr(ty, depth + 1);
        if e.contains(' ') { format!("({e})") } else { e }
    }

    fn expr(&mut self, ty: Ty, depth: usize) -> String {
        let leaf = depth >= 3 || self.rng.chance(35);
        match ty {
            Ty::Str => {
                if leaf {
                    return if self.rng.chance(80) {
                        self.path(Ty::Str).unwrap_or_else(|| self.lit_str())
                    } else {
                        self.lit_str()
                    };
                }
                let s = self.arg(Ty::Str, depth);
                match self.rng.below(24) {
                    0 => format!("upper {s}"),
                    1 => format!("{s} | lower"),
                    2 => format!("trim {s}"),
                    3 => format!("trimPrefix \"e\" {s}"),
                    4 => format!("{s} | trimSuffix \"e\""),
                    5 => format!("replace \"a\" \"A\" {s}"),
                    6 => format!("printf \"%s-%d\" {s} {}", self.arg(Ty::Int, depth)),
                    7 => format!("printf \"%v\" {}", self.arg(Ty::Int, depth)),
                    // `%x` of a param's number is refused (Go formatted its
                    // digits): `int` makes it a number in Go too.
                    8 => format!(
                        "printf \"%03d:%x\" {} (int {})",
                        self.arg(Ty::Int, depth),
                        self.arg(Ty::Int, depth)
                    ),
                    9 => format!("default \"d\" {s}"),
                    10 => format!("{s} | default {}", self.arg(Ty::Str, depth)),
                    11 => format!("toString {}", self.arg(Ty::Int, depth)),
                    // Go wrote the space raw: two config values, or two words.
                    12 if !self.config => format!("cat {s} {}", self.arg(Ty::Str, depth)),
                    12 => format!("cat {s}"),
                    13 => format!("join \",\" {}", self.arg(Ty::StrList, depth)),
                    14 => format!("join \"+\" {}", self.arg(Ty::IntList, depth)),
                    15 => format!("default \"none\" (first {})", self.arg(Ty::StrList, depth)),
                    16 => format!("ternary {s} {} {}", self.arg(Ty::Str, depth), self.arg(Ty::Bool, depth)),
                    17 => format!("title {s}"),
                    18 => format!("repeat 2 {s}"),
                    19 => format!("trunc 3 {s}"),
                    20 => format!("or {s} {}", self.arg(Ty::Str, depth)),
                    21 => format!("b64enc {s}"),
                    22 => format!("{s} | nospace"),
                    _ => "index $.m \"k\"".to_owned(),
                }
            }
            Ty::Int => {
                if leaf {
                    return if self.rng.chance(75) {
                        self.path(Ty::Int).unwrap_or_else(|| "3".into())
                    } else {
                        self.rng.pick(&["0", "1", "12", "-3"]).to_string()
                    };
                }
                let a = self.arg(Ty::Int, depth);
                match self.rng.below(12) {
                    0 => format!("add {a} {}", self.arg(Ty::Int, depth)),
                    1 => format!("sub {a} {}", self.arg(Ty::Int, depth)),
                    2 => format!("mul {a} 3"),
                    3 => format!("div {a} $.n2"),
                    4 => format!("mod {a} $.n2"),
                    5 => format!("len {}", self.arg(Ty::StrList, depth)),
                    6 => format!("len {}", self.arg(Ty::Str, depth)),
                    7 => format!("max {a} {} 5", self.arg(Ty::Int, depth)),
                    8 => format!("min {a} {}", self.arg(Ty::Int, depth)),
                    9 => format!("add1 {a}"),
                    10 => "atoi \"12\"".into(),
                    _ => format!("len {}", self.arg(Ty::StrMap, depth)),
                }
            }
            Ty::Bool => {
                if leaf {
                    return self.path(Ty::Bool).unwrap_or_else(|| "true".into());
                }
                match self.rng.below(16) {
                    0 => format!("eq {} {}", self.arg(Ty::Str, depth), self.arg(Ty::Str, depth)),
                    1 => format!("eq {} \"edge\" \"lan\"", self.arg(Ty::Str, depth)),
                    2 => format!("ne {} {}", self.arg(Ty::Int, depth), self.arg(Ty::Int, depth)),
                    // Ordering two params is refused (Go ordered their digits).
                    3 => format!("lt {} (int {})", self.arg(Ty::Int, depth), self.arg(Ty::Int, depth)),
                    4 => format!("ge {} 3", self.arg(Ty::Int, depth)),
                    5 => format!("and {} {}", self.arg(Ty::Bool, depth), self.arg(Ty::Bool, depth)),
                    6 => format!("or {} {}", self.arg(Ty::Bool, depth), self.arg(Ty::Bool, depth)),
                    7 => format!("not {}", self.arg(Ty::Bool, depth)),
                    8 => format!("has {} {}", self.arg(Ty::Str, depth), self.arg(Ty::StrList, depth)),
                    9 => format!("hasPrefix \"e\" {}", self.arg(Ty::Str, depth)),
                    10 => format!("contains \"a\" {}", self.arg(Ty::Str, depth)),
                    11 => format!("empty {}", self.arg(Ty::Str, depth)),
                    12 => format!("hasKey {} \"a\"", self.arg(Ty::StrMap, depth)),
                    13 => format!("regexMatch \"^[a-m]\" {}", self.arg(Ty::Str, depth)),
                    14 => format!("le (len {}) 1", self.arg(Ty::StrList, depth)),
                    _ => format!("eq {} {}", self.arg(Ty::Int, depth), self.arg(Ty::Int, depth)),
                }
            }
            Ty::StrList => {
                if leaf {
                    return self.path(Ty::StrList).unwrap_or_else(|| "(list \"a\" \"b\")".into());
                }
                let l = self.arg(Ty::StrList, depth);
                match self.rng.below(8) {
                    0 => format!("list {} {}", self.arg(Ty::Str, depth), self.arg(Ty::Str, depth)),
                    1 => format!("rest {l}"),
                    2 => format!("uniq {l}"),
                    3 => format!("sortAlpha {l}"),
                    4 => format!("append {l} {}", self.arg(Ty::Str, depth)),
                    5 => format!("compact {l}"),
                    6 => format!("sortAlpha (keys {})", self.arg(Ty::StrMap, depth)),
                    _ => format!("without {l} \"edge\""),
                }
            }
            Ty::IntList => self.path(Ty::IntList).unwrap_or_else(|| "$.ln".into()),
            Ty::StrMap => self.path(Ty::StrMap).unwrap_or_else(|| "$.m".into()),
            Ty::Obj => self.path(Ty::Obj).unwrap_or_else(|| "$.o".into()),
            Ty::Item => unreachable!("items come from ranges"),
        }
    }

    /// A value printed in a command: strings, integers or booleans.
    fn printable(&mut self) -> String {
        let ty = *self.rng.pick(&[Ty::Str, Ty::Str, Ty::Str, Ty::Int, Ty::Int, Ty::Bool]);
        self.expr(ty, 0)
    }

    fn condition(&mut self) -> String {
        match self.rng.below(5) {
            // Truthiness of a value, as Go's `if` takes it.
            0 => self.expr(Ty::Str, 1),
            1 => self.expr(Ty::StrList, 2),
            2 => self.expr(Ty::Int, 1),
            _ => self.expr(Ty::Bool, 0),
        }
    }

    fn line(&mut self, out: &mut String) {
        self.counter += 1;
        let n = self.counter;
        if self.config {
            let e = self.printable();
            let _ = writeln!(out, "leaf{n} {{{{ {e} }}}}");
        } else {
            // Values are whole arguments, never the first of `set`, and a word
            // ends each line, so trim markers of the tags around never glue a
            // value to other text (the engine refuses that).
            let (a, b) = (self.printable(), self.printable());
            let _ = writeln!(out, "set x{n} {{{{ {a} }}}} y {{{{ {b} }}}} z");
        }
    }

    fn block(&mut self, out: &mut String, depth: usize) {
        let items = 1 + self.rng.below(3);
        for _ in 0..items {
            let choice = if depth >= 3 { 0 } else { self.rng.below(10) };
            match choice {
                0..=3 => self.line(out),
                4 => {
                    let c = self.condition();
                    out.push_str(&self.tag(&format!("if {c}")));
                    out.push('\n');
                    self.body(out, depth + 1);
                    if self.rng.chance(50) {
                        let c2 = self.condition();
                        out.push_str(&self.tag(&format!("else if {c2}")));
                        out.push('\n');
                        self.body(out, depth + 1);
                    }
                    if self.rng.chance(50) {
                        out.push_str(&self.tag("else"));
                        out.push('\n');
                        self.body(out, depth + 1);
                    }
                    out.push_str(&self.tag("end"));
                    out.push('\n');
                }
                5 | 6 => self.range(out, depth),
                7 => {
                    let (what, ty) = match self.rng.below(3) {
                        0 => (self.path(Ty::Obj).unwrap_or("$.o".into()), Some(Ty::Obj)),
                        1 => (self.path(Ty::Str).unwrap_or("$.s0".into()), Some(Ty::Str)),
                        _ => (self.path(Ty::StrList).unwrap_or("$.l".into()), Some(Ty::StrList)),
                    };
                    out.push_str(&self.tag(&format!("with {what}")));
                    out.push('\n');
                    self.dot.push(ty);
                    self.body(out, depth + 1);
                    self.dot.pop();
                    if self.rng.chance(40) {
                        out.push_str(&self.tag("else"));
                        out.push('\n');
                        self.body(out, depth + 1);
                    }
                    out.push_str(&self.tag("end"));
                    out.push('\n');
                }
                8 => {
                    // A variable, declared or (when one of this loop's or the
                    // template's exists) assigned.
                    let ty = *self.rng.pick(&[Ty::Str, Ty::Int]);
                    let assignable: Vec<String> = self
                        .vars
                        .iter()
                        .filter(|v| v.1 == ty && (v.2 == self.loop_depth || v.2 == 0) && v.0.starts_with("$v"))
                        .map(|v| v.0.clone())
                        .collect();
                    let value = self.expr(ty, 1);
                    if !assignable.is_empty() && self.rng.chance(50) {
                        let name = self.rng.pick(&assignable).clone();
                        out.push_str(&self.tag(&format!("{name} = {value}")));
                    } else {
                        self.counter += 1;
                        let name = format!("$v{}", self.counter);
                        out.push_str(&self.tag(&format!("{name} := {value}")));
                        self.vars.push((name, ty, self.loop_depth));
                    }
                    out.push('\n');
                }
                _ => {
                    let l = if !self.config && self.rng.chance(30) { "- " } else { "" };
                    let r = if !self.config && self.rng.chance(30) { " -" } else { "" };
                    let _ = writeln!(out, "{{{{{l}/* a comment */{r}}}}}");
                }
            }
        }
    }

    /// A block whose variables are gone after it (they are set only when it runs).
    fn body(&mut self, out: &mut String, depth: usize) {
        let before = self.vars.len();
        self.block(out, depth);
        self.vars.truncate(before);
    }

    fn range(&mut self, out: &mut String, depth: usize) {
        let (container, elem, key) = match self.rng.below(5) {
            0 => (self.expr(Ty::StrList, 2), Ty::Str, Ty::Int),
            1 => (self.path(Ty::IntList).unwrap_or("$.ln".into()), Ty::Int, Ty::Int),
            2 => (self.path(Ty::StrMap).unwrap_or("$.m".into()), Ty::Str, Ty::Str),
            3 => ("$.items".into(), Ty::Item, Ty::Int),
            _ => ("3".into(), Ty::Int, Ty::Int),
        };
        let container = if container.contains(' ') {
            format!("({container})")
        } else {
            container
        };
        let vars_before = self.vars.len();
        self.counter += 1;
        let n = self.counter;
        let head = match self.rng.below(3) {
            0 => format!("range {container}"),
            1 => {
                self.vars.push((format!("$e{n}"), elem, self.loop_depth + 1));
                format!("range $e{n} := {container}")
            }
            _ => {
                self.vars.push((format!("$k{n}"), key, self.loop_depth + 1));
                self.vars.push((format!("$e{n}"), elem, self.loop_depth + 1));
                format!("range $k{n}, $e{n} := {container}")
            }
        };
        out.push_str(&self.tag(&head));
        out.push('\n');
        self.loop_depth += 1;
        self.dot.push(Some(elem));
        if self.rng.chance(20) {
            let c = self.condition();
            let what = if self.rng.chance(50) { "break" } else { "continue" };
            let (open, close) = (self.tag(&format!("if {c}")), self.tag(what));
            let end = self.tag("end");
            let _ = writeln!(out, "{open}{close}{end}");
        }
        self.block(out, depth + 1);
        self.dot.pop();
        self.loop_depth -= 1;
        self.vars.truncate(vars_before);
        if self.rng.chance(30) {
            out.push_str(&self.tag("else"));
            out.push('\n');
            self.body(out, depth + 1);
        }
        out.push_str(&self.tag("end"));
        out.push('\n');
    }
}

fn template(rng: &mut Rng, config: bool) -> String {
    let mut g = Gen {
        rng,
        vars: Vec::new(),
        dot: vec![None],
        loop_depth: 0,
        counter: 0,
        config,
    };
    let mut out = String::new();
    g.block(&mut out, 0);
    if config { format!("node {{\n{out}}}\n") } else { out }
}

fn without_empty_values(nodes: &[support::differential::Node]) -> Vec<support::differential::Node> {
    nodes
        .iter()
        .map(|n| support::differential::Node {
            name: n.name.clone(),
            value: n.value.clone().filter(|v| !v.is_empty()),
            children: n.children.as_deref().map(without_empty_values),
        })
        .collect()
}

struct Tally {
    compared: usize,
    go_failed: usize,
    split: usize,
    operator_quirks: usize,
}

fn check(
    oracle: &mut GoOracle,
    harness: &mut BashHarness,
    seed: u64,
    config: bool,
    tally: &mut Tally,
) -> Result<(), TestCaseError> {
    let mut rng = Rng(seed | 1);
    let source = template(&mut rng, config);
    // Config values must be single words: Go wrote them raw into config.boot.
    let params = params(&mut rng, !config, !config);
    let kind = if config {
        TemplateKind::Config
    } else {
        TemplateKind::Commands
    };
    let answer = oracle.render(&source, &params);
    let Some(go) = answer.typed.ok() else {
        tally.go_failed += 1;
        return Ok(());
    };
    if answer.json.ok() != Some(go) {
        tally.operator_quirks += 1;
    }
    let context = || format!("seed {seed}\n--- Go template:\n{source}\n--- params: {params}\n--- Go output:\n{go}");
    let ours =
        ours("generated", kind, &source, &params).map_err(|e| TestCaseError::fail(format!("{e}\n{}", context())))?;
    if config {
        let (g, o) = (config_nodes(go), config_nodes(&ours));
        if g.is_err() {
            // Trim markers glued lines into something VyOS cannot read: nothing
            // to compare.
            tally.go_failed += 1;
            return Ok(());
        }
        if g != o {
            // Go wrote an empty value as nothing (a leaf without value); ours
            // writes `""`, VyOS's empty value.
            if g.as_ref().map(|n| without_empty_values(n)) == o.as_ref().map(|n| without_empty_values(n)) {
                tally.split += 1;
                tally.compared += 1;
                return Ok(());
            }
            return Err(TestCaseError::fail(format!(
                "config nodes differ\n{}\n--- ours:\n{ours}\n{g:?}\n{o:?}",
                context()
            )));
        }
    } else {
        let (go_argv, go_status) = run_commands(harness, go);
        let (our_argv, our_status) = run_commands(harness, &ours);
        if our_argv != go_argv {
            // Go wrote values raw: a value with a space became several words.
            if word_split(&our_argv) != go_argv {
                return Err(TestCaseError::fail(format!(
                    "commands differ\n{}\n--- ours:\n{ours}\nGo:   {go_argv:?}\nours: {our_argv:?}",
                    context()
                )));
            }
            tally.split += 1;
        }
        if our_status != go_status {
            return Err(TestCaseError::fail(format!(
                "{}\n{our_status} vs {go_status}",
                context()
            )));
        }
    }
    tally.compared += 1;
    Ok(())
}

fn run(config: bool, cases: u32) {
    let oracle = RefCell::new(GoOracle::start());
    let harness = RefCell::new(BashHarness::start().expect("bash"));
    let tally = RefCell::new(Tally {
        compared: 0,
        go_failed: 0,
        split: 0,
        operator_quirks: 0,
    });
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&proptest::num::u64::ANY, |seed| {
        check(
            &mut oracle.borrow_mut(),
            &mut harness.borrow_mut(),
            seed,
            config,
            &mut tally.borrow_mut(),
        )
    });
    let tally = tally.into_inner();
    if let Err(failure) = result {
        panic!("{failure}");
    }
    eprintln!(
        "compared {} generated templates; Go failed on {} (skipped); {} differed only by word splitting; \
         {} rendered differently in the Go operator's number handling",
        tally.compared, tally.go_failed, tally.split, tally.operator_quirks
    );
    // Most generated templates must render in Go, or the test compares little.
    assert!(
        tally.go_failed * 5 < cases as usize,
        "Go failed on {} of {cases}",
        tally.go_failed
    );
}

#[test]
fn generated_command_templates_run_the_same_commands() {
    run(false, support::property_cases(1_000));
}

#[test]
fn generated_config_templates_load_the_same_nodes() {
    run(true, support::property_cases(600));
}
