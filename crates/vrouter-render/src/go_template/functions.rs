//! Each Go builtin and sprig function as a tera expression of the same meaning.
//!
//! Where tera has an operator, test or filter that behaves as the Go function
//! does on the values it is meant for, that is used (`eq` → `==`, `upper`); where
//! not, the engine's sprig-compatible filter of the same name (see
//! `template::sprig`). Functions with no safe or meaningful counterpart are
//! refused with the reason.

use super::parse::Term;
use super::tera_expr::{Seg, Te, is_word};
use super::translate::{Ctx, Translator, Unconvertible, unconvertible};

type Result<T> = std::result::Result<T, Unconvertible>;

/// Why a family of functions has no counterpart.
fn refused_reason(name: &str) -> Option<&'static str> {
    const CLOCK: &[&str] = &[
        "now",
        "date",
        "dateInZone",
        "date_in_zone",
        "dateModify",
        "date_modify",
        "mustDateModify",
        "must_date_modify",
        "ago",
        "duration",
        "durationRound",
        "htmlDate",
        "htmlDateInZone",
        "toDate",
        "mustToDate",
        "unixEpoch",
    ];
    const RANDOM: &[&str] = &[
        "randAlpha",
        "randAlphaNum",
        "randAscii",
        "randNumeric",
        "randBytes",
        "randInt",
        "shuffle",
        "uuidv4",
    ];
    const CRYPTO: &[&str] = &[
        "genPrivateKey",
        "genCA",
        "genCAWithKey",
        "genSelfSignedCert",
        "genSelfSignedCertWithKey",
        "genSignedCert",
        "genSignedCertWithKey",
        "buildCustomCert",
        "bcrypt",
        "htpasswd",
        "derivePassword",
        "encryptAES",
        "decryptAES",
        "sha1sum",
        "sha256sum",
        "sha512sum",
        "adler32sum",
    ];
    if CLOCK.contains(&name) {
        return Some("templates have no clock: a render must give the same config every time");
    }
    if RANDOM.contains(&name) {
        return Some("templates have no randomness: a render must give the same config every time");
    }
    if CRYPTO.contains(&name) {
        return Some("templates have no hashing or key functions; compute the value outside and pass it as a param");
    }
    match name {
        "env" | "expandenv" => {
            Some("the Go operator removed it too: templates have no access to the operator's environment")
        }
        "getHostByName" => Some("the Go operator removed it too: templates make no DNS lookups"),
        "include" | "tpl" | "required" | "toYaml" | "fromYaml" | "lookup" => {
            Some("a Helm function, which the Go operator never had (it failed with `function not defined`)")
        }
        "html" | "js" | "urlquery" | "call" => {
            Some("a Go builtin with no use in router configuration; it has no counterpart")
        }
        _ => None,
    }
}

/// The tera expression for the Go call `name args…` (the piped value, if any, is
/// the last argument).
pub(crate) fn call(
    t: &mut Translator<'_>,
    name: &str,
    mut args: Vec<Te>,
    literal: &[Option<&Term>],
    ctx: Ctx,
    at: usize,
) -> Result<Te> {
    let n = args.len();
    let construct = || name.to_owned();
    let arity = |min: usize, max: usize| -> Result<()> {
        if n < min || n > max {
            let expected = if min == max {
                format!("{min}")
            } else if max == usize::MAX {
                format!("at least {min}")
            } else {
                format!("{min} to {max}")
            };
            return unconvertible(
                at,
                construct(),
                format!("wrong number of args for {name}: want {expected} got {n}"),
            );
        }
        Ok(())
    };
    let str_literal = |i: usize| -> Option<String> {
        match literal.get(i) {
            Some(Some(Term::String(s))) => Some(s.clone()),
            _ => None,
        }
    };
    let pop = |args: &mut Vec<Te>| args.pop().expect("arity checked");
    if let Some(reason) = refused_reason(name) {
        return unconvertible(at, construct(), reason);
    }
    let te = match name {
        // ---- logic and comparison
        "and" | "or" => {
            arity(1, usize::MAX)?;
            if ctx == Ctx::Condition {
                if n == 1 {
                    pop(&mut args)
                } else if name == "and" {
                    Te::And(args)
                } else {
                    Te::Or(args)
                }
            } else {
                // The value Go returns: the first empty (`and`) or non-empty (`or`)
                // argument, else the last.
                let filter = if name == "and" { "if_not_empty" } else { "if_empty" };
                let mut rev = args.into_iter().rev();
                let mut acc = rev.next().expect("arity checked");
                for a in rev {
                    acc = a.filter(filter, vec![("value", acc)]);
                }
                acc
            }
        }
        "not" => {
            arity(1, 1)?;
            pop(&mut args).not()
        }
        "eq" => {
            arity(2, usize::MAX)?;
            let first = args.remove(0);
            if args.iter().all(|a| matches!(a, Te::Str(_))) && args.len() > 1 {
                Te::In(Box::new(first), Box::new(Te::Array(args)))
            } else {
                let mut cmps: Vec<Te> = args
                    .into_iter()
                    .map(|a| Te::Cmp("==", Box::new(first.clone()), Box::new(a)))
                    .collect();
                if cmps.len() == 1 {
                    cmps.pop().expect("one")
                } else {
                    Te::Or(cmps)
                }
            }
        }
        "ne" | "lt" | "le" | "gt" | "ge" => {
            arity(2, 2)?;
            let op = match name {
                "ne" => "!=",
                "lt" => "<",
                "le" => "<=",
                "gt" => ">",
                _ => ">=",
            };
            if name != "ne" && args.iter().any(|a| matches!(a, Te::Str(_))) {
                return unconvertible(
                    at,
                    construct(),
                    "tera orders only numbers with < and >, and this compares strings",
                );
            }
            let r = pop(&mut args);
            let l = pop(&mut args);
            Te::Cmp(op, Box::new(l), Box::new(r))
        }
        // ---- builtins
        "len" => {
            arity(1, 1)?;
            pop(&mut args).filter("len", vec![])
        }
        "index" => {
            arity(1, usize::MAX)?;
            let keys = args.split_off(1);
            return index(t, args.pop(), keys, at);
        }
        "slice" => {
            arity(1, 3)?;
            let mut it = args.into_iter();
            let list = it.next().expect("arity checked");
            let mut kw = Vec::new();
            if let Some(start) = it.next() {
                kw.push(("start", start));
            }
            if let Some(end) = it.next() {
                kw.push(("end", end));
            }
            list.filter("slice", kw)
        }
        "print" => {
            if n == 1 && matches!(args[0], Te::Str(_)) {
                pop(&mut args)
            } else {
                Te::call("print", vec![("args", Te::Array(args))])
            }
        }
        "println" => Te::call("println", vec![("args", Te::Array(args))]),
        "printf" => {
            arity(1, usize::MAX)?;
            let format = args.remove(0);
            Te::call("printf", vec![("format", format), ("args", Te::Array(args))])
        }
        // ---- defaults
        "default" => {
            arity(1, 2)?;
            if n == 1 {
                // `default "x"` with nothing piped: Go passes no value, so the default.
                pop(&mut args)
            } else {
                let value = pop(&mut args);
                let fallback = pop(&mut args);
                value.filter("if_empty", vec![("value", fallback)])
            }
        }
        "empty" => {
            arity(1, 1)?;
            pop(&mut args).not()
        }
        "coalesce" => Te::call("coalesce", vec![("values", Te::Array(args))]),
        "ternary" => {
            arity(3, 3)?;
            let cond = pop(&mut args);
            let no = pop(&mut args);
            let yes = pop(&mut args);
            cond.filter("ternary", vec![("yes", yes), ("no", no)])
        }
        "fail" => {
            arity(1, 1)?;
            Te::call("throw", vec![("message", pop(&mut args))])
        }
        // ---- strings
        "upper" | "lower" | "trim" => {
            arity(1, 1)?;
            pop(&mut args).filter(name, vec![])
        }
        "title" => {
            arity(1, 1)?;
            pop(&mut args).filter("sprig_title", vec![])
        }
        "nospace" | "b64enc" | "b64dec" | "b32enc" | "b32dec" | "atoi" | "uniq" | "compact" | "rest" | "initial" => {
            arity(1, 1)?;
            pop(&mut args).filter(name, vec![])
        }
        "sortAlpha" => {
            arity(1, 1)?;
            pop(&mut args).filter("sort_alpha", vec![])
        }
        "first" | "last" | "reverse" => {
            arity(1, 1)?;
            pop(&mut args).filter(name, vec![])
        }
        "toString" => one(&mut args, n, at, name, "to_string")?,
        "toJson" => one(&mut args, n, at, name, "to_json")?,
        "toRawJson" => one(&mut args, n, at, name, "to_raw_json")?,
        "toPrettyJson" => one(&mut args, n, at, name, "to_pretty_json")?,
        "fromJson" => one(&mut args, n, at, name, "from_json")?,
        "int" | "int64" => one(&mut args, n, at, name, "sprig_int")?,
        "float64" => one(&mut args, n, at, name, "float")?,
        "keys" => one(&mut args, n, at, name, "keys")?,
        "values" => one(&mut args, n, at, name, "values")?,
        "quote" | "squote" => {
            if n != 1 {
                return unconvertible(at, construct(), format!("`{name}` with other than one value"));
            }
            pop(&mut args).filter(name, vec![])
        }
        "trimPrefix" | "trimSuffix" | "trimAll" | "trimall" | "hasPrefix" | "hasSuffix" | "contains" => {
            arity(2, 2)?;
            let s = pop(&mut args);
            let a = pop(&mut args);
            let (filter, key) = match name {
                "trimPrefix" => ("trim_prefix", "prefix"),
                "trimSuffix" => ("trim_suffix", "suffix"),
                "trimAll" | "trimall" => ("trim_all", "chars"),
                "hasPrefix" => ("has_prefix", "prefix"),
                "hasSuffix" => ("has_suffix", "suffix"),
                _ => ("contains", "substr"),
            };
            // A condition on a variable reads better as a tera test.
            if let (Te::Path(p), "has_prefix" | "has_suffix", Ctx::Condition) = (&s, filter, ctx) {
                let test = if filter == "has_prefix" {
                    "starting_with"
                } else {
                    "ending_with"
                };
                return Ok(Te::Test(p.clone(), test.into(), vec![a], false));
            }
            s.filter(filter, vec![(key, a)])
        }
        "replace" => {
            arity(3, 3)?;
            let s = pop(&mut args);
            let new = pop(&mut args);
            let old = pop(&mut args);
            s.filter("replace", vec![("from", old), ("to", new)])
        }
        "repeat" | "trunc" | "indent" | "nindent" => {
            arity(2, 2)?;
            let s = pop(&mut args);
            let count = pop(&mut args);
            let (filter, key) = match name {
                "repeat" => ("repeat", "count"),
                "trunc" => ("trunc", "length"),
                "indent" => ("sprig_indent", "width"),
                _ => ("nindent", "width"),
            };
            s.filter(filter, vec![(key, count)])
        }
        "substr" => {
            arity(3, 3)?;
            let s = pop(&mut args);
            let end = pop(&mut args);
            let start = pop(&mut args);
            s.filter("substr", vec![("start", start), ("end", end)])
        }
        "cat" => {
            // sprig joins its non-nil values with spaces.
            let mut parts = Vec::new();
            for (i, a) in args.into_iter().enumerate() {
                if i > 0 {
                    parts.push(Te::Str(" ".into()));
                }
                parts.push(a);
            }
            match parts.len() {
                0 => Te::Str(String::new()),
                1 => parts.pop().expect("one"),
                _ => Te::Concat(parts),
            }
        }
        "join" => {
            arity(2, 2)?;
            let list = pop(&mut args);
            let sep = pop(&mut args);
            if matches!(&sep, Te::Str(s) if s.contains("\\n") || s.contains("\\t")) {
                return unconvertible(
                    at,
                    construct(),
                    "tera's join reads `\\n` and `\\t` in the separator as newline and tab",
                );
            }
            list.filter("join", vec![("sep", sep)])
        }
        "splitList" => {
            arity(2, 2)?;
            let s = pop(&mut args);
            let sep = pop(&mut args);
            if matches!(&sep, Te::Str(x) if x.is_empty()) {
                return unconvertible(at, construct(), "splitting at every character has no tera counterpart");
            }
            s.filter("split", vec![("pat", sep)])
        }
        "split" | "splitn" => {
            return unconvertible(
                at,
                construct(),
                "returns a map with keys `_0`, `_1`, …; use `splitList` (a list) in the Go template first",
            );
        }
        // ---- regular expressions
        "regexMatch" | "mustRegexMatch" | "regexFind" | "mustRegexFind" => {
            arity(2, 2)?;
            let s = pop(&mut args);
            let re = pop(&mut args);
            let filter = if name.ends_with("Match") {
                "regex_match"
            } else {
                "regex_find"
            };
            if name == "mustRegexMatch" {
                return unconvertible(at, construct(), "use regexMatch: an invalid expression makes it false");
            }
            s.filter(filter, vec![("regex", re)])
        }
        "regexFindAll" | "regexSplit" => {
            arity(3, 3)?;
            let count = pop(&mut args);
            let s = pop(&mut args);
            let re = pop(&mut args);
            let filter = if name == "regexFindAll" {
                "regex_find_all"
            } else {
                "regex_split"
            };
            s.filter(filter, vec![("regex", re), ("n", count)])
        }
        "regexReplaceAll" | "regexReplaceAllLiteral" => {
            arity(3, 3)?;
            let repl = pop(&mut args);
            let s = pop(&mut args);
            let re = pop(&mut args);
            let filter = if name == "regexReplaceAll" {
                "regex_replace_all"
            } else {
                "regex_replace_all_literal"
            };
            s.filter(filter, vec![("regex", re), ("replacement", repl)])
        }
        // ---- lists and maps
        "list" | "tuple" => Te::Array(args),
        "has" => {
            arity(2, 2)?;
            let list = pop(&mut args);
            let needle = pop(&mut args);
            list.filter("has", vec![("value", needle)])
        }
        "append" | "push" | "prepend" => {
            arity(2, 2)?;
            let value = pop(&mut args);
            let list = pop(&mut args);
            let filter = if name == "prepend" { "prepend" } else { "append" };
            list.filter(filter, vec![("value", value)])
        }
        "without" => {
            arity(2, usize::MAX)?;
            let list = args.remove(0);
            list.filter("without", vec![("values", Te::Array(args))])
        }
        "concat" => {
            let mut it = args.into_iter();
            let Some(mut acc) = it.next() else {
                return Ok(Te::Array(Vec::new()));
            };
            for a in it {
                acc = acc.filter("concat", vec![("with", a)]);
            }
            acc
        }
        "until" => {
            arity(1, 1)?;
            Te::call("range", vec![("end", pop(&mut args))])
        }
        "untilStep" => {
            arity(3, 3)?;
            let step = pop(&mut args);
            let end = pop(&mut args);
            let start = pop(&mut args);
            Te::call("range", vec![("start", start), ("end", end), ("step_by", step)])
        }
        "hasKey" => {
            arity(2, 2)?;
            let key = pop(&mut args);
            let map = pop(&mut args);
            if let (Te::Path(p), Te::Str(k), Ctx::Condition) = (&map, &key, ctx) {
                let mut path = p.clone();
                path.segs.push(Seg::Key(k.clone()));
                return Ok(Te::Test(path, "defined".into(), vec![], false));
            }
            map.filter("has_key", vec![("key", key)])
        }
        "get" => {
            arity(2, 2)?;
            let key = pop(&mut args);
            let map = pop(&mut args);
            map.filter("get", vec![("key", key), ("default", Te::Str(String::new()))])
        }
        "dig" => {
            arity(3, usize::MAX)?;
            let map = pop(&mut args);
            let default = pop(&mut args);
            map.filter("dig", vec![("keys", Te::Array(args)), ("default", default)])
        }
        "dict" => {
            if !n.is_multiple_of(2) {
                return unconvertible(at, construct(), "dict needs key and value pairs");
            }
            let mut kwargs = Vec::new();
            for (i, pair) in args.chunks(2).enumerate() {
                match str_literal(2 * i) {
                    Some(k) if is_word(&k) && k.chars().next().is_some_and(|c| !c.is_ascii_digit()) => {
                        kwargs.push((k, pair[1].clone()));
                    }
                    _ => {
                        return unconvertible(
                            at,
                            construct(),
                            "tera builds a map only with constant keys made of letters, digits and `_`",
                        );
                    }
                }
            }
            Te::Call("dict".into(), kwargs)
        }
        // ---- numbers
        "add" | "sub" | "mul" | "mod" => {
            let (op, min) = match name {
                "add" => ("+", 0),
                "sub" => ("-", 2),
                "mul" => ("*", 1),
                _ => ("%", 2),
            };
            arity(min, if name == "add" || name == "mul" { usize::MAX } else { 2 })?;
            let mut it = args.into_iter();
            match it.next() {
                None => Te::Int(if name == "mul" { 1 } else { 0 }),
                Some(first) => it.fold(first, |acc, a| Te::Math(op, Box::new(acc), Box::new(a))),
            }
        }
        "add1" => {
            arity(1, 1)?;
            Te::Math("+", Box::new(pop(&mut args)), Box::new(Te::Int(1)))
        }
        "div" => {
            arity(2, 2)?;
            let by = pop(&mut args);
            pop(&mut args).filter("div", vec![("by", by)])
        }
        "max" | "biggest" | "min" => {
            arity(1, usize::MAX)?;
            let f = if name == "min" { "min" } else { "max" };
            Te::call(f, vec![("values", Te::Array(args))])
        }
        "floor" | "ceil" => {
            arity(1, 1)?;
            pop(&mut args).filter("round", vec![("method", Te::Str(name.to_owned()))])
        }
        "round" => {
            arity(2, 3)?;
            if n == 3 {
                return unconvertible(at, construct(), "round with a custom rounding point has no counterpart");
            }
            let places = pop(&mut args);
            pop(&mut args).filter(
                "round",
                vec![("method", Te::Str("common".into())), ("precision", places)],
            )
        }
        _ => {
            return unconvertible(
                at,
                construct(),
                if is_known(name) {
                    format!("`{name}` has no counterpart in the sandboxed engine (see docs/templates.md)")
                } else {
                    format!("function {name:?} not defined (it is neither a Go template builtin nor a sprig function)")
                },
            );
        }
    };
    Ok(te)
}

fn one(args: &mut Vec<Te>, n: usize, at: usize, name: &str, filter: &str) -> Result<Te> {
    if n != 1 {
        return unconvertible(
            at,
            name.to_owned(),
            format!("wrong number of args for {name}: want 1 got {n}"),
        );
    }
    Ok(args.pop().expect("one").filter(filter, vec![]))
}

/// `index x k1 k2 …` as a path: `x.k1[k2]`. `base` is `None` for the params root
/// (`index . "key"`), which can only be indexed by a constant name.
pub(crate) fn index(t: &mut Translator<'_>, base: Option<Te>, keys: Vec<Te>, at: usize) -> Result<Te> {
    let mut keys = keys.into_iter();
    let mut path = match base {
        None => match keys.next() {
            Some(Te::Str(first)) => match t.root_path(&[first], at)? {
                Te::Path(p) => p,
                _ => unreachable!("root_path makes a path"),
            },
            _ => return unconvertible(at, "index", "the params root can only be indexed by a constant name"),
        },
        Some(Te::Path(p)) => p,
        // A computed value is stored first so it can be indexed.
        Some(other) => t.hoist(&other, at)?,
    };
    for key in keys {
        let seg = match key {
            Te::Str(s) => Seg::Key(s),
            Te::Int(i) if i >= 0 => Seg::Index(i),
            Te::Path(p) if p.segs.is_empty() => Seg::Var(p),
            other => Seg::Var(t.hoist(&other, at)?),
        };
        path.segs.push(seg);
    }
    Ok(Te::Path(path))
}

/// Whether `name` is a sprig or builtin function (so it exists in Go, though not
/// here).
pub(crate) fn is_known(name: &str) -> bool {
    const SPRIG: &str = "abbrev abbrevboth add add1 add1f addf adler32sum ago all any append atoi b32dec b32enc \
        b64dec b64enc base bcrypt biggest buildCustomCert camelcase cat ceil chunk clean coalesce compact concat \
        contains date dateInZone dateModify date_in_zone date_modify decryptAES deepCopy deepEqual default \
        derivePassword dict dig dir div divf duration durationRound empty encryptAES env expandenv ext fail first \
        float64 floor fromJson genCA genCAWithKey genPrivateKey genSelfSignedCert genSelfSignedCertWithKey \
        genSignedCert genSignedCertWithKey get getHostByName has hasKey hasPrefix hasSuffix hello htmlDate \
        htmlDateInZone htpasswd indent initial initials int int64 isAbs join kebabcase keys kindIs kindOf last \
        list lower max maxf merge mergeOverwrite min minf mod mul mulf mustAppend mustChunk mustCompact \
        mustDateModify mustDeepCopy mustFirst mustFromJson mustHas mustInitial mustLast mustMerge \
        mustMergeOverwrite mustPrepend mustPush mustRegexFind mustRegexFindAll mustRegexMatch \
        mustRegexReplaceAll mustRegexReplaceAllLiteral mustRegexSplit mustRest mustReverse mustSlice mustToDate \
        mustToJson mustToPrettyJson mustToRawJson mustUniq mustWithout must_date_modify nindent nospace now omit \
        osBase osClean osDir osExt osIsAbs pick pluck plural prepend push quote randAlpha randAlphaNum randAscii \
        randBytes randInt randNumeric regexFind regexFindAll regexMatch regexQuoteMeta regexReplaceAll \
        regexReplaceAllLiteral regexSplit repeat replace rest reverse round semver semverCompare seq set sha1sum \
        sha256sum sha512sum shuffle slice snakecase sortAlpha split splitList splitn squote sub subf substr \
        swapcase ternary title toDate toDecimal toJson toPrettyJson toRawJson toString toStrings trim trimAll \
        trimPrefix trimSuffix trimall trunc tuple typeIs typeIsLike typeOf uniq unixEpoch unset until untilStep \
        untitle upper urlJoin urlParse uuidv4 values without wrap wrapWith";
    const BUILTIN: &str = "and call html index slice js len not or print printf println urlquery eq ge gt le lt ne";
    SPRIG
        .split_whitespace()
        .chain(BUILTIN.split_whitespace())
        .any(|n| n == name)
}
