//! Each Go builtin and sprig function as a tera expression of the same meaning.
//!
//! Where tera has an operator, test or filter that behaves as the Go function
//! does on the values it is meant for, that is used (`eq` → `==`, `upper`); where
//! not, the engine's sprig-compatible filter of the same name (see
//! `template::sprig`). Functions with no safe or meaningful counterpart are
//! refused with the reason.

mod builtins;
mod collections;
mod comparison;
mod logic;
mod numbers;
mod regex;
mod strings;

use super::parse::Term;
use super::tera_expr::{Seg, Te};
use super::translate::{Ctx, Translator, Unconvertible, unconvertible};

pub(crate) use builtins::verb_refusal;

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
    args: Vec<Te>,
    literal: &[Option<&Term>],
    ctx: Ctx,
    at: usize,
) -> Result<Te> {
    let mut call = Call {
        t,
        name,
        n: args.len(),
        args,
        literal,
        ctx,
        at,
    };
    if let Some(reason) = refused_reason(name) {
        return call.refuse(reason);
    }
    if let Some((_, filter)) = UNARY_FILTERS.iter().find(|(go, _)| *go == name) {
        call.arity(1, 1)?;
        return Ok(call.pop().filter(filter, vec![]));
    }
    match HANDLERS.iter().find(|(names, _)| names.contains(&name)) {
        Some((_, handler)) => handler(&mut call),
        None if is_known(name) => call.refuse(format!(
            "`{name}` has no counterpart in the sandboxed engine (see docs/templates.md)"
        )),
        None => call.refuse(format!(
            "function {name:?} not defined (it is neither a Go template builtin nor a sprig function)"
        )),
    }
}

/// Functions of one value that are one filter of the engine: Go name, filter.
const UNARY_FILTERS: &[(&str, &str)] = &[
    ("len", "len"),
    ("upper", "upper"),
    ("lower", "lower"),
    ("trim", "trim"),
    ("title", "sprig_title"),
    ("nospace", "nospace"),
    ("b64enc", "b64enc"),
    ("b64dec", "b64dec"),
    ("b32enc", "b32enc"),
    ("b32dec", "b32dec"),
    ("atoi", "atoi"),
    ("uniq", "uniq"),
    ("compact", "compact"),
    ("rest", "rest"),
    ("initial", "initial"),
    ("sortAlpha", "sort_alpha"),
    ("first", "first"),
    ("last", "last"),
    ("reverse", "reverse"),
    ("toString", "to_string"),
    ("toJson", "to_json"),
    ("toRawJson", "to_raw_json"),
    ("toPrettyJson", "to_pretty_json"),
    ("fromJson", "from_json"),
    ("int", "sprig_int"),
    ("int64", "sprig_int"),
    ("float64", "float"),
    ("keys", "keys"),
    ("values", "values"),
];

type Handler = fn(&mut Call<'_, '_>) -> Result<Te>;

/// Every other function, by family.
const HANDLERS: &[(&[&str], Handler)] = &[
    // logic, comparison and defaults
    (&["and", "or"], logic::and_or),
    (&["not", "empty"], logic::not),
    (&["eq"], comparison::eq),
    (&["ne", "lt", "le", "gt", "ge"], comparison::compare),
    (&["default"], logic::default),
    (&["coalesce"], logic::coalesce),
    (&["ternary"], logic::ternary),
    (&["fail"], logic::fail),
    // Go builtins
    (&["index"], builtins::index_call),
    (&["slice"], builtins::slice),
    (&["print"], builtins::print),
    (&["println"], builtins::println),
    (&["printf"], builtins::printf),
    // strings
    (&["quote", "squote"], strings::quote),
    (
        &[
            "trimPrefix",
            "trimSuffix",
            "trimAll",
            "trimall",
            "hasPrefix",
            "hasSuffix",
            "contains",
        ],
        strings::affix,
    ),
    (&["replace"], strings::replace),
    (&["repeat", "trunc", "indent", "nindent"], strings::sized),
    (&["substr"], strings::substr),
    (&["cat"], strings::cat),
    (&["join"], strings::join),
    (&["splitList"], strings::split_list),
    (&["split", "splitn"], strings::split_map),
    // regular expressions
    (
        &["regexMatch", "mustRegexMatch", "regexFind", "mustRegexFind"],
        regex::first,
    ),
    (&["regexFindAll", "regexSplit"], regex::counted),
    (&["regexReplaceAll", "regexReplaceAllLiteral"], regex::replace),
    // lists and maps
    (&["list", "tuple"], collections::list),
    (&["has"], collections::has),
    (&["append", "push", "prepend"], collections::append),
    (&["without"], collections::without),
    (&["concat"], collections::concat),
    (&["until"], collections::until),
    (&["untilStep"], collections::until_step),
    (&["hasKey"], collections::has_key),
    (&["get"], collections::get),
    (&["dig"], collections::dig),
    (&["dict"], collections::dict),
    // numbers
    (&["add", "sub", "mul", "mod"], numbers::arithmetic),
    (&["add1"], numbers::add1),
    (&["div"], numbers::div),
    (&["max", "biggest", "min"], numbers::extreme),
    (&["floor", "ceil"], numbers::floor_ceil),
    (&["round"], numbers::round),
];

/// A Go call being translated: its name and its translated arguments.
struct Call<'c, 's> {
    t: &'c mut Translator<'s>,
    name: &'c str,
    /// The number of arguments as written (before any is taken).
    n: usize,
    args: Vec<Te>,
    /// The arguments that were literals in the Go template.
    literal: &'c [Option<&'c Term>],
    ctx: Ctx,
    at: usize,
}

impl Call<'_, '_> {
    /// Go's own error for a wrong number of arguments.
    fn arity(&self, min: usize, max: usize) -> Result<()> {
        let (name, n) = (self.name, self.n);
        if n < min || n > max {
            let expected = if min == max {
                format!("{min}")
            } else if max == usize::MAX {
                format!("at least {min}")
            } else {
                format!("{min} to {max}")
            };
            return self.refuse(format!("wrong number of args for {name}: want {expected} got {n}"));
        }
        Ok(())
    }

    fn refuse<T>(&self, reason: impl Into<String>) -> Result<T> {
        unconvertible(self.at, self.name, reason)
    }

    /// The last argument not yet taken.
    fn pop(&mut self) -> Te {
        self.args.pop().expect("arity checked")
    }

    /// Every argument not yet taken.
    fn take_all(&mut self) -> Vec<Te> {
        std::mem::take(&mut self.args)
    }

    /// Argument `i` if the Go template wrote it as a string literal.
    fn str_literal(&self, i: usize) -> Option<String> {
        match self.literal.get(i) {
            Some(Some(Term::String(s))) => Some(s.clone()),
            _ => None,
        }
    }
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
