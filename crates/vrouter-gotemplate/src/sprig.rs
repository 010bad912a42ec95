//! Filters and functions with the semantics of Go `text/template` builtins and
//! sprig, for templates converted from the Go operator ([`crate::convert`]).
//!
//! tera's own filters stay as they are; where a sprig function has no tera
//! counterpart with the same behaviour, it is added here under its sprig name in
//! snake case (`trim_prefix`), or prefixed `sprig_` where tera already uses the
//! name for something else (`sprig_title`). Each draws on the render's budget like
//! every other filter: its time is checked, amplifying ones are estimated before
//! they run, and every result is size-checked.
//!
//! Values are JSON values. Numbers are numbers (the Go operator saw params'
//! numbers as text, a quirk the docs list); `nil` is JSON null, which the engine
//! passes for an undefined variable to the filters and functions in
//! [`NIL_TOLERANT_FILTERS`] and [`NIL_TOLERANT_FUNCTIONS`], as Go passes `nil` for
//! a missing map key.

use std::collections::HashMap;

use serde_json::{Map, Number, Value};

use crate::go_fmt;

/// What a filter or function may spend: the render's budget implements it,
/// and checks each one's time and result size around the call itself.
pub trait Budget {
    /// The largest value, in bytes, a filter may build.
    fn max_value_bytes(&self) -> usize;
    /// Refuses a value of `size` bytes before it is built.
    fn check_value_size(&self, size: usize) -> tera::Result<()>;
    /// Refuses a range or repetition of `requested` items before it is built.
    fn check_range_len(&self, requested: u128) -> tera::Result<()>;
}

/// Filters whose input may be undefined: it arrives as null, as Go passes nil.
pub const NIL_TOLERANT_FILTERS: &[&str] = &[
    "if_empty",
    "if_not_empty",
    "has",
    "has_key",
    "quote",
    "squote",
    "keys",
    "values",
    "entries",
    "to_string",
    "to_json",
    "to_raw_json",
    "to_pretty_json",
];

/// Filter arguments that may be undefined (Go passes nil to these parameters).
pub const NIL_TOLERANT_ARGS: &[(&str, &str)] = &[
    ("if_empty", "value"),
    ("if_not_empty", "value"),
    ("ternary", "yes"),
    ("ternary", "no"),
    ("has", "value"),
    ("append", "value"),
    ("prepend", "value"),
    ("dig", "default"),
];

/// Functions whose arguments (and list arguments' elements) may be undefined.
pub const NIL_TOLERANT_FUNCTIONS: &[&str] = &["printf", "print", "println", "dict", "coalesce"];

/// A filter: its input, its named arguments, the budget it draws on.
pub type FilterFn = fn(&Value, &HashMap<String, Value>, &dyn Budget) -> tera::Result<Value>;
/// A function: its named arguments, the budget it draws on.
pub type FunctionFn = fn(&HashMap<String, Value>, &dyn Budget) -> tera::Result<Value>;

/// Every filter added for converted templates (input: sprig's last argument).
pub const FILTERS: &[&[(&str, FilterFn)]] = &[
    CHOICE_FILTERS,
    STRING_FILTERS,
    COLLECTION_FILTERS,
    CONVERSION_FILTERS,
    REGEX_FILTERS,
];

/// Whether `name` is a filter of this module.
pub fn is_filter(name: &str) -> bool {
    FILTERS.iter().flat_map(|family| family.iter()).any(|(n, _)| *n == name)
}

/// Whether `name` is a function of this module.
pub fn is_function(name: &str) -> bool {
    FUNCTIONS.iter().any(|(n, _)| *n == name)
}

/// The names of this module's functions, for messages.
pub fn function_names() -> impl Iterator<Item = &'static str> {
    FUNCTIONS.iter().map(|(n, _)| *n)
}

/// Choosing between values: Go's `and` and `or` results, `default`, `ternary`.
const CHOICE_FILTERS: &[(&str, FilterFn)] = &[
    ("if_empty", |v, a, _| {
        Ok(if is_empty(v) {
            arg(a, "if_empty", "value")?.clone()
        } else {
            v.clone()
        })
    }),
    ("if_not_empty", |v, a, _| {
        Ok(if is_empty(v) {
            v.clone()
        } else {
            arg(a, "if_not_empty", "value")?.clone()
        })
    }),
    ("ternary", ternary),
];

/// Strings: tests, trims, sizes, quoting and indentation.
const STRING_FILTERS: &[(&str, FilterFn)] = &[
    ("has_prefix", |v, a, _| {
        Ok(Value::Bool(string(v, "has_prefix")?.starts_with(str_arg(
            a,
            "has_prefix",
            "prefix",
        )?)))
    }),
    ("has_suffix", |v, a, _| {
        Ok(Value::Bool(string(v, "has_suffix")?.ends_with(str_arg(
            a,
            "has_suffix",
            "suffix",
        )?)))
    }),
    ("contains", |v, a, _| {
        Ok(Value::Bool(
            string(v, "contains")?.contains(str_arg(a, "contains", "substr")?),
        ))
    }),
    ("trim_prefix", |v, a, _| {
        let s = string(v, "trim_prefix")?;
        Ok(s.strip_prefix(str_arg(a, "trim_prefix", "prefix")?).unwrap_or(s).into())
    }),
    ("trim_suffix", |v, a, _| {
        let s = string(v, "trim_suffix")?;
        Ok(s.strip_suffix(str_arg(a, "trim_suffix", "suffix")?).unwrap_or(s).into())
    }),
    ("trim_all", |v, a, _| {
        let cut = str_arg(a, "trim_all", "chars")?;
        Ok(string(v, "trim_all")?.trim_matches(|c| cut.contains(c)).into())
    }),
    ("nospace", |v, _, _| {
        Ok(string(v, "nospace")?
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect::<String>()
            .into())
    }),
    ("sprig_title", |v, _, _| Ok(title(string(v, "sprig_title")?).into())),
    ("repeat", repeat),
    ("substr", substr),
    ("trunc", trunc),
    ("quote", |v, _, _| {
        Ok(if v.is_null() {
            String::new()
        } else {
            go_fmt::go_quote(&go_fmt::sprint_value(v), false)
        }
        .into())
    }),
    ("squote", |v, _, _| {
        Ok(if v.is_null() {
            String::new()
        } else {
            format!("'{}'", go_fmt::sprint_value(v))
        }
        .into())
    }),
    ("sprig_indent", |v, a, b| indent(v, a, b, "sprig_indent", false)),
    ("nindent", |v, a, b| indent(v, a, b, "nindent", true)),
];

/// Lists and maps.
const COLLECTION_FILTERS: &[(&str, FilterFn)] = &[
    ("has", has),
    ("has_key", has_key),
    ("len", len),
    ("keys", keys),
    ("values", |v, _, b| {
        Ok(Value::Array(
            range_items(v, "values", b)?.into_iter().map(|(_, v)| v).collect(),
        ))
    }),
    ("entries", |v, _, b| {
        Ok(Value::Array(
            range_items(v, "entries", b)?
                .into_iter()
                .map(|(k, v)| Value::Array(vec![k, v]))
                .collect(),
        ))
    }),
    ("uniq", |v, _, _| {
        let mut out: Vec<Value> = Vec::new();
        for item in list(v, "uniq")? {
            if !out.contains(item) {
                out.push(item.clone());
            }
        }
        Ok(Value::Array(out))
    }),
    ("sort_alpha", sort_alpha),
    ("rest", |v, _, _| {
        Ok(Value::Array(list(v, "rest")?.iter().skip(1).cloned().collect()))
    }),
    ("initial", |v, _, _| {
        let l = list(v, "initial")?;
        Ok(Value::Array(l[..l.len().saturating_sub(1)].to_vec()))
    }),
    ("compact", |v, _, _| {
        Ok(Value::Array(
            list(v, "compact")?.iter().filter(|x| !is_empty(x)).cloned().collect(),
        ))
    }),
    ("append", |v, a, _| {
        let mut l = list(v, "append")?.clone();
        l.push(arg(a, "append", "value")?.clone());
        Ok(Value::Array(l))
    }),
    ("prepend", |v, a, _| {
        let mut l = vec![arg(a, "prepend", "value")?.clone()];
        l.extend(list(v, "prepend")?.iter().cloned());
        Ok(Value::Array(l))
    }),
    ("without", |v, a, _| {
        let omit = list(arg(a, "without", "values")?, "without")?;
        Ok(Value::Array(
            list(v, "without")?
                .iter()
                .filter(|x| !omit.contains(x))
                .cloned()
                .collect(),
        ))
    }),
    ("dig", dig),
];

/// Numbers, text, JSON and the base64 and base32 encodings.
const CONVERSION_FILTERS: &[(&str, FilterFn)] = &[
    ("atoi", |v, _, _| Ok(Value::from(atoi(string(v, "atoi")?)))),
    ("sprig_int", |v, _, _| Ok(Value::from(to_int64(v)))),
    ("div", |v, a, _| {
        let by = to_int64(arg(a, "div", "by")?);
        if by == 0 {
            return Err(tera::Error::msg("`div`: integer divide by zero"));
        }
        Ok(Value::from(to_int64(v).wrapping_div(by)))
    }),
    ("to_string", |v, _, _| Ok(go_fmt::sprint_value(v).into())),
    ("to_json", |v, _, _| Ok(go_json(v, true, false).into())),
    ("to_raw_json", |v, _, _| Ok(go_json(v, false, false).into())),
    ("to_pretty_json", |v, _, _| Ok(go_json(v, true, true).into())),
    ("from_json", |v, _, _| {
        Ok(serde_json::from_str(string(v, "from_json")?).unwrap_or(Value::Null))
    }),
    ("b64enc", |v, _, _| {
        Ok(base64_encode(string(v, "b64enc")?.as_bytes()).into())
    }),
    ("b64dec", |v, _, _| {
        decoded(base64_decode(string(v, "b64dec")?.as_bytes()), "b64dec")
    }),
    ("b32enc", |v, _, _| {
        Ok(base32_encode(string(v, "b32enc")?.as_bytes()).into())
    }),
    ("b32dec", |v, _, _| {
        decoded(base32_decode(string(v, "b32dec")?.as_bytes()), "b32dec")
    }),
];

/// Regular expressions, with Go's syntax and match semantics.
const REGEX_FILTERS: &[(&str, FilterFn)] = &[
    ("regex_match", |v, a, _| {
        // sprig's regexMatch answers false for an invalid expression.
        let s = string(v, "regex_match")?;
        Ok(Value::Bool(
            compile(str_arg(a, "regex_match", "regex")?).is_ok_and(|r| r.is_match(s)),
        ))
    }),
    ("regex_find", |v, a, _| {
        let r = compile_or_fail(a, "regex_find")?;
        Ok(r.find(string(v, "regex_find")?).map_or("", |m| m.as_str()).into())
    }),
    ("regex_find_all", |v, a, _| {
        let r = compile_or_fail(a, "regex_find_all")?;
        let n = int_arg(a, "regex_find_all", "n")?;
        let s = string(v, "regex_find_all")?;
        Ok(Value::Array(
            limit(go_find_all(&r, s), n)
                .into_iter()
                .map(|(b, e)| s[b..e].into())
                .collect(),
        ))
    }),
    ("regex_replace_all", |v, a, _| {
        let r = compile_or_fail(a, "regex_replace_all")?;
        let repl = str_arg(a, "regex_replace_all", "replacement")?;
        Ok(r.replace_all(string(v, "regex_replace_all")?, repl).into_owned().into())
    }),
    ("regex_replace_all_literal", |v, a, _| {
        let r = compile_or_fail(a, "regex_replace_all_literal")?;
        let repl = str_arg(a, "regex_replace_all_literal", "replacement")?;
        Ok(
            r.replace_all(string(v, "regex_replace_all_literal")?, regex::NoExpand(repl))
                .into_owned()
                .into(),
        )
    }),
    ("regex_split", |v, a, _| {
        let r = compile_or_fail(a, "regex_split")?;
        let n = int_arg(a, "regex_split", "n")?;
        Ok(Value::Array(
            go_split(&r, string(v, "regex_split")?, n)
                .into_iter()
                .map(Value::from)
                .collect(),
        ))
    }),
];

/// Functions added for converted templates.
pub const FUNCTIONS: &[(&str, FunctionFn)] = &[
    ("printf", |a, b| {
        let format = str_arg(a, "printf", "format")?;
        let args = optional_list(a, "printf", "args")?;
        go_fmt::sprintf(format, args, b.max_value_bytes())
            .map(Value::from)
            .map_err(|e| tera::Error::msg(e.0))
    }),
    ("print", |a, _| {
        Ok(go_fmt::sprint(optional_list(a, "print", "args")?).into())
    }),
    ("println", |a, _| {
        Ok(go_fmt::sprintln(optional_list(a, "println", "args")?).into())
    }),
    ("max", |a, _| extreme(a, "max", std::cmp::max)),
    ("min", |a, _| extreme(a, "min", std::cmp::min)),
    ("dict", |a, _| {
        Ok(Value::Object(
            a.iter().map(|(k, v)| (k.clone(), v.clone())).collect::<Map<_, _>>(),
        ))
    }),
    ("coalesce", |a, _| {
        let values = list(arg(a, "coalesce", "values")?, "coalesce")?;
        Ok(values.iter().find(|v| !is_empty(v)).cloned().unwrap_or(Value::Null))
    }),
];

/// A map's entries by key, as Go's `range`, `fmt` and `encoding/json` order them
/// (serde_json's map is sorted too, unless a crate turns on `preserve_order`).
/// How a message names a value's JSON type ("a string", "an array").
pub fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

pub(crate) fn sorted(map: &Map<String, Value>) -> Vec<(&String, &Value)> {
    let mut entries: Vec<_> = map.iter().collect();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    entries
}

/// sprig's `empty` (and the opposite of Go's truth): null, false, 0, "", [], {}.
pub(crate) fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

fn arg<'a>(args: &'a HashMap<String, Value>, f: &str, name: &str) -> tera::Result<&'a Value> {
    args.get(name)
        .ok_or_else(|| tera::Error::msg(format!("`{f}` was called without `{name}`")))
}

fn str_arg<'a>(args: &'a HashMap<String, Value>, f: &str, name: &str) -> tera::Result<&'a str> {
    arg(args, f, name)?
        .as_str()
        .ok_or_else(|| tera::Error::msg(format!("`{f}` needs `{name}` to be a string")))
}

fn int_arg(args: &HashMap<String, Value>, f: &str, name: &str) -> tera::Result<i64> {
    arg(args, f, name)?
        .as_i64()
        .ok_or_else(|| tera::Error::msg(format!("`{f}` needs `{name}` to be an integer")))
}

fn optional_list<'a>(args: &'a HashMap<String, Value>, f: &str, name: &str) -> tera::Result<&'a [Value]> {
    match args.get(name) {
        None => Ok(&[]),
        Some(v) => list(v, f).map(Vec::as_slice),
    }
}

fn string<'a>(value: &'a Value, f: &str) -> tera::Result<&'a str> {
    value
        .as_str()
        .ok_or_else(|| tera::Error::msg(format!("`{f}` needs a string, not {}", json_kind(value))))
}

fn list<'a>(value: &'a Value, f: &str) -> tera::Result<&'a Vec<Value>> {
    value
        .as_array()
        .ok_or_else(|| tera::Error::msg(format!("`{f}` needs a list, not {}", json_kind(value))))
}

fn ternary(value: &Value, args: &HashMap<String, Value>, _: &dyn Budget) -> tera::Result<Value> {
    match value {
        Value::Bool(true) => Ok(arg(args, "ternary", "yes")?.clone()),
        Value::Bool(false) => Ok(arg(args, "ternary", "no")?.clone()),
        other => Err(tera::Error::msg(format!(
            "`ternary` needs a boolean condition, not {}",
            json_kind(other)
        ))),
    }
}

fn has(value: &Value, args: &HashMap<String, Value>, _: &dyn Budget) -> tera::Result<Value> {
    let needle = arg(args, "has", "value")?;
    match value {
        Value::Null => Ok(Value::Bool(false)),
        Value::Array(items) => Ok(Value::Bool(items.contains(needle))),
        other => Err(tera::Error::msg(format!(
            "`has` needs a list, not {}",
            json_kind(other)
        ))),
    }
}

fn has_key(value: &Value, args: &HashMap<String, Value>, _: &dyn Budget) -> tera::Result<Value> {
    let key = str_arg(args, "has_key", "key")?;
    match value {
        Value::Null => Ok(Value::Bool(false)),
        Value::Object(map) => Ok(Value::Bool(map.contains_key(key))),
        other => Err(tera::Error::msg(format!(
            "`has_key` needs a map, not {}",
            json_kind(other)
        ))),
    }
}

/// Go's (deprecated) `strings.Title`: the first letter of each word upper-cased,
/// the rest left as it is.
fn title(s: &str) -> String {
    let separator = |c: char| {
        if c.is_ascii() {
            !(c.is_ascii_alphanumeric() || c == '_')
        } else {
            !(c.is_alphanumeric()) && c.is_whitespace()
        }
    };
    let mut out = String::with_capacity(s.len());
    let mut previous = ' ';
    for c in s.chars() {
        if separator(previous) {
            let mut upper = c.to_uppercase();
            match (upper.next(), upper.next()) {
                (Some(u), None) => out.push(u),
                _ => out.push(c),
            }
        } else {
            out.push(c);
        }
        previous = c;
    }
    out
}

fn repeat(value: &Value, args: &HashMap<String, Value>, budget: &dyn Budget) -> tera::Result<Value> {
    let s = string(value, "repeat")?;
    let count = int_arg(args, "repeat", "count")?;
    let count = usize::try_from(count).map_err(|_| tera::Error::msg("`repeat`: negative count"))?;
    budget.check_value_size(s.len().saturating_mul(count))?;
    Ok(s.repeat(count).into())
}

/// A byte range of `s`, refused when it would cut a character (Go would produce
/// invalid UTF-8, which a template value cannot hold).
fn byte_slice<'a>(s: &'a str, start: usize, end: usize, f: &str) -> tera::Result<&'a str> {
    if start > end || end > s.len() {
        return Err(tera::Error::msg(format!(
            "`{f}`: slice bounds out of range [{start}:{end}] with length {}",
            s.len()
        )));
    }
    s.get(start..end)
        .ok_or_else(|| tera::Error::msg(format!("`{f}`: the byte range [{start}:{end}] cuts a character in two")))
}

fn substr(value: &Value, args: &HashMap<String, Value>, _: &dyn Budget) -> tera::Result<Value> {
    let s = string(value, "substr")?;
    let start = int_arg(args, "substr", "start")?;
    let end = int_arg(args, "substr", "end")?;
    let len = s.len() as i64;
    let out = if start < 0 {
        if end < 0 {
            return Err(tera::Error::msg(format!(
                "`substr`: slice bounds out of range [:{end}]"
            )));
        }
        byte_slice(s, 0, end as usize, "substr")?
    } else if end < 0 || end > len {
        byte_slice(s, start as usize, s.len(), "substr")?
    } else {
        byte_slice(s, start as usize, end as usize, "substr")?
    };
    Ok(out.into())
}

fn trunc(value: &Value, args: &HashMap<String, Value>, _: &dyn Budget) -> tera::Result<Value> {
    let s = string(value, "trunc")?;
    let c = int_arg(args, "trunc", "length")?;
    let len = s.len() as i64;
    let out = if c < 0 && len + c > 0 {
        byte_slice(s, (len + c) as usize, s.len(), "trunc")?
    } else if c >= 0 && len > c {
        byte_slice(s, 0, c as usize, "trunc")?
    } else {
        s
    };
    Ok(out.into())
}

fn indent(
    value: &Value,
    args: &HashMap<String, Value>,
    budget: &dyn Budget,
    f: &str,
    newline: bool,
) -> tera::Result<Value> {
    let s = string(value, f)?;
    let width =
        usize::try_from(int_arg(args, f, "width")?).map_err(|_| tera::Error::msg(format!("`{f}`: negative width")))?;
    let lines = s.matches('\n').count() + 1;
    budget.check_value_size(s.len().saturating_add(width.saturating_mul(lines)))?;
    let pad = " ".repeat(width);
    let body = format!("{pad}{}", s.replace('\n', &format!("\n{pad}")));
    Ok(if newline { format!("\n{body}") } else { body }.into())
}

fn len(value: &Value, _: &HashMap<String, Value>, _: &dyn Budget) -> tera::Result<Value> {
    match value {
        // Go counts a string's bytes.
        Value::String(s) => Ok(Value::from(s.len())),
        Value::Array(a) => Ok(Value::from(a.len())),
        Value::Object(o) => Ok(Value::from(o.len())),
        other => Err(tera::Error::msg(format!("`len` of {}", json_kind(other)))),
    }
}

fn keys(value: &Value, _: &HashMap<String, Value>, _: &dyn Budget) -> tera::Result<Value> {
    match value {
        Value::Null => Ok(Value::Array(Vec::new())),
        // Sorted: Go's map order is random, so any template that worked did not
        // depend on it.
        Value::Object(map) => Ok(Value::Array(
            sorted(map).into_iter().map(|(k, _)| Value::from(k.clone())).collect(),
        )),
        other => Err(tera::Error::msg(format!(
            "`keys` needs a map, not {}",
            json_kind(other)
        ))),
    }
}

/// What Go's `range` visits: a list's (index, element), a map's (key, value) in
/// key order, an integer n's 0 to n-1 (Go 1.22), nothing for null.
fn range_items(value: &Value, f: &str, budget: &dyn Budget) -> tera::Result<Vec<(Value, Value)>> {
    match value {
        Value::Null => Ok(Vec::new()),
        Value::Number(n) if n.is_i64() || n.is_u64() => {
            let count = n.as_i64().map_or(u64::MAX, |i| i.max(0) as u64);
            budget.check_range_len(u128::from(count))?;
            Ok((0..count).map(|i| (Value::from(i), Value::from(i))).collect())
        }
        Value::Array(items) => Ok(items
            .iter()
            .enumerate()
            .map(|(i, v)| (Value::from(i), v.clone()))
            .collect()),
        Value::Object(map) => Ok(sorted(map)
            .into_iter()
            .map(|(k, v)| (Value::from(k.clone()), v.clone()))
            .collect()),
        other => Err(tera::Error::msg(format!(
            "`{f}`: range can't iterate over {}",
            json_kind(other)
        ))),
    }
}

fn sort_alpha(value: &Value, _: &HashMap<String, Value>, _: &dyn Budget) -> tera::Result<Value> {
    let mut strings: Vec<String> = match value {
        Value::Array(items) => items
            .iter()
            .filter(|v| !v.is_null())
            .map(go_fmt::sprint_value)
            .collect(),
        other => vec![go_fmt::sprint_value(other)],
    };
    strings.sort();
    Ok(Value::Array(strings.into_iter().map(Value::from).collect()))
}

/// Go's `strconv.Atoi`, with sprig's error handling (0 on a syntax error; the
/// bound on overflow).
fn atoi(s: &str) -> i64 {
    let (negative, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return 0;
    }
    let magnitude: u128 = digits.bytes().fold(0u128, |acc, b| {
        (acc * 10 + u128::from(b - b'0')).min(u128::from(u64::MAX) + 1)
    });
    if negative {
        if magnitude > i64::MAX as u128 + 1 {
            i64::MIN
        } else {
            (magnitude as i128).wrapping_neg() as i64
        }
    } else {
        i64::try_from(magnitude).unwrap_or(i64::MAX)
    }
}

/// cast's `ToInt64`, as sprig's `int`, `int64`, `div`, `max` and `min` convert: a
/// number's integer part as its text reads (the Go operator's numbers were text,
/// so `1.5` converts to 0 and `2.0` to 2), strings in Go syntax (`0x10`), booleans
/// as 1 or 0, anything else 0.
pub(crate) fn to_int64(value: &Value) -> i64 {
    match value {
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => i,
            (None, Some(u)) => u as i64,
            _ => parse_go_int(&trim_zero_decimal(&go_fmt::number_text(n))).unwrap_or(0),
        },
        Value::String(s) => parse_go_int(&trim_zero_decimal(s)).unwrap_or(0),
        Value::Bool(b) => i64::from(*b),
        _ => 0,
    }
}

fn trim_zero_decimal(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut found_zero = false;
    for i in (0..bytes.len()).rev() {
        match bytes[i] {
            b'.' if found_zero => return s[..i].to_owned(),
            b'.' => {}
            b'0' => found_zero = true,
            _ => return s.to_owned(),
        }
    }
    s.to_owned()
}

/// `strconv.ParseInt(s, 0, 64)`: optional sign, `0x`/`0o`/`0b`/`0` prefixes,
/// underscores between digits only with a prefix.
fn parse_go_int(s: &str) -> Option<i64> {
    let (negative, body) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let lower = body.to_ascii_lowercase();
    let (radix, digits, prefixed) = if let Some(d) = lower.strip_prefix("0x") {
        (16, d, true)
    } else if let Some(d) = lower.strip_prefix("0o") {
        (8, d, true)
    } else if let Some(d) = lower.strip_prefix("0b") {
        (2, d, true)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, &lower[1..], true)
    } else {
        (10, lower.as_str(), false)
    };
    if digits.contains('_') && (!prefixed || digits.starts_with('_') || digits.ends_with('_') || digits.contains("__"))
    {
        return None;
    }
    let clean: String = digits.chars().filter(|c| *c != '_').collect();
    if clean.is_empty() {
        return None;
    }
    let magnitude = u64::from_str_radix(&clean, radix).ok()?;
    if negative {
        if magnitude > i64::MAX as u64 + 1 {
            None
        } else {
            Some((magnitude as i128).wrapping_neg() as i64)
        }
    } else {
        i64::try_from(magnitude).ok()
    }
}

fn extreme(args: &HashMap<String, Value>, f: &str, pick: fn(i64, i64) -> i64) -> tera::Result<Value> {
    let values = list(arg(args, f, "values")?, f)?;
    let mut iter = values.iter().map(to_int64);
    let first = iter
        .next()
        .ok_or_else(|| tera::Error::msg(format!("`{f}` needs at least one value")))?;
    Ok(Value::from(iter.fold(first, pick)))
}

fn dig(value: &Value, args: &HashMap<String, Value>, _: &dyn Budget) -> tera::Result<Value> {
    let keys = list(arg(args, "dig", "keys")?, "dig")?;
    let default = arg(args, "dig", "default")?;
    let mut current = value;
    for (i, key) in keys.iter().enumerate() {
        let key = key
            .as_str()
            .ok_or_else(|| tera::Error::msg("`dig` needs its keys to be strings"))?;
        let Value::Object(map) = current else {
            return Err(tera::Error::msg(format!(
                "`dig`: the value at key {} is {}, not a map",
                i,
                json_kind(current)
            )));
        };
        match map.get(key) {
            Some(next) => current = next,
            None => return Ok(default.clone()),
        }
    }
    Ok(current.clone())
}

/// Go's `encoding/json` output: keys sorted, `<`, `>`, `&` escaped when `html`,
/// U+2028 and U+2029 always escaped, numbers as their text.
pub(crate) fn go_json(value: &Value, html: bool, pretty: bool) -> String {
    let mut out = String::new();
    write_json(&mut out, value, html, pretty, 0);
    out
}

fn write_json(out: &mut String, value: &Value, html: bool, pretty: bool, depth: usize) {
    let newline = |out: &mut String, depth: usize| {
        if pretty {
            out.push('\n');
            out.push_str(&"  ".repeat(depth));
        }
    };
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&json_number(n)),
        Value::String(s) => write_json_string(out, s, html),
        Value::Array(items) => {
            if items.is_empty() {
                out.push_str("[]");
                return;
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline(out, depth + 1);
                write_json(out, item, html, pretty, depth + 1);
            }
            newline(out, depth);
            out.push(']');
        }
        Value::Object(map) => {
            if map.is_empty() {
                out.push_str("{}");
                return;
            }
            out.push('{');
            for (i, (k, v)) in sorted(map).into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline(out, depth + 1);
                write_json_string(out, k, html);
                out.push(':');
                if pretty {
                    out.push(' ');
                }
                write_json(out, v, html, pretty, depth + 1);
            }
            newline(out, depth);
            out.push('}');
        }
    }
}

/// A number as Go's encoder writes a float64 (`1e+21`, `1e-07`), or exactly when
/// an integer.
fn json_number(n: &Number) -> String {
    if n.is_i64() || n.is_u64() {
        return n.to_string();
    }
    let f = n.as_f64().unwrap_or(0.0);
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        // Go: strconv 'e' shortest, with a two-digit exponent cleaned to one digit.
        let text = format!("{f:e}");
        let (mantissa, exp) = text.split_once('e').expect("an exponent");
        let exp: i32 = exp.parse().expect("an integer exponent");
        let sign = if exp < 0 { '-' } else { '+' };
        let digits = exp.unsigned_abs();
        if digits < 10 {
            format!("{mantissa}e{sign}0{digits}")
        } else {
            format!("{mantissa}e{sign}{digits}")
        }
    } else {
        go_fmt::number_text(n)
    }
}

fn write_json_string(out: &mut String, s: &str, html: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' if html => out.push_str(&format!("\\u{:04x}", c as u32)),
            '\u{2028}' | '\u{2029}' => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

fn decoded(result: Result<Vec<u8>, String>, f: &str) -> tera::Result<Value> {
    match result {
        // sprig answers a decoding error with its message, as a string.
        Err(message) => Ok(message.into()),
        Ok(bytes) => String::from_utf8(bytes)
            .map(Value::from)
            .map_err(|_| tera::Error::msg(format!("`{f}`: the decoded bytes are not UTF-8 text"))),
    }
}

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const BASE32: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let v = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(BASE64[((v >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Go's `base64.StdEncoding.DecodeString`, with its error offsets.
fn base64_decode(src: &[u8]) -> Result<Vec<u8>, String> {
    let corrupt = |at: usize| format!("illegal base64 data at input byte {at}");
    let value = |b: u8| BASE64.iter().position(|x| *x == b).map(|p| p as u32);
    let mut out = Vec::new();
    let mut si = 0;
    while si < src.len() {
        let mut dbuf = [0u32; 4];
        let mut dlen = 4;
        let mut j = 0;
        let mut error = None;
        while j < 4 {
            if si == src.len() {
                if j == 0 {
                    return Ok(out);
                }
                return Err(corrupt(si - j));
            }
            let c = src[si];
            si += 1;
            if let Some(v) = value(c) {
                dbuf[j] = v;
                j += 1;
                continue;
            }
            if c == b'\n' || c == b'\r' {
                continue;
            }
            if c != b'=' {
                return Err(corrupt(si - 1));
            }
            match j {
                0 | 1 => return Err(corrupt(si - 1)),
                2 => {
                    while si < src.len() && (src[si] == b'\n' || src[si] == b'\r') {
                        si += 1;
                    }
                    if si == src.len() {
                        return Err(corrupt(src.len()));
                    }
                    if src[si] != b'=' {
                        return Err(corrupt(si - 1));
                    }
                    si += 1;
                }
                _ => {}
            }
            while si < src.len() && (src[si] == b'\n' || src[si] == b'\r') {
                si += 1;
            }
            if si < src.len() {
                error = Some(corrupt(si));
            }
            dlen = j;
            break;
        }
        let v = (dbuf[0] << 18) | (dbuf[1] << 12) | (dbuf[2] << 6) | dbuf[3];
        let bytes = [(v >> 16) as u8, (v >> 8) as u8, v as u8];
        out.extend_from_slice(&bytes[..dlen - 1]);
        if let Some(e) = error {
            return Err(e);
        }
    }
    Ok(out)
}

fn base32_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(5) * 8);
    for chunk in bytes.chunks(5) {
        let mut b = [0u8; 5];
        b[..chunk.len()].copy_from_slice(chunk);
        let v = b.iter().fold(0u64, |acc, x| (acc << 8) | u64::from(*x));
        let chars = match chunk.len() {
            1 => 2,
            2 => 4,
            3 => 5,
            4 => 7,
            _ => 8,
        };
        for i in 0..8 {
            if i < chars {
                out.push(char::from(BASE32[((v >> (35 - 5 * i)) & 31) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Go's `base32.StdEncoding.DecodeString` (newlines removed first), with its error
/// offsets.
fn base32_decode(raw: &[u8]) -> Result<Vec<u8>, String> {
    let src: Vec<u8> = raw.iter().copied().filter(|b| *b != b'\n' && *b != b'\r').collect();
    let corrupt = |at: usize| format!("illegal base32 data at input byte {at}");
    let value = |b: u8| BASE32.iter().position(|x| *x == b).map(|p| p as u8);
    let olen = src.len();
    let mut rest = &src[..];
    let mut out = Vec::new();
    let mut end = false;
    while !rest.is_empty() && !end {
        let mut dbuf = [0u8; 8];
        let mut dlen = 8;
        let mut j = 0;
        while j < 8 {
            if rest.is_empty() {
                return Err(corrupt(olen - rest.len() - j));
            }
            let c = rest[0];
            rest = &rest[1..];
            if c == b'=' && j >= 2 && rest.len() < 8 {
                if rest.len() + j < 7 {
                    return Err(corrupt(olen));
                }
                for k in 0..7 - j {
                    if rest.len() > k && rest[k] != b'=' {
                        return Err(corrupt(olen - rest.len() + k - 1));
                    }
                }
                dlen = j;
                end = true;
                if matches!(dlen, 1 | 3 | 6) {
                    return Err(corrupt(olen - rest.len() - 1));
                }
                break;
            }
            match value(c) {
                Some(v) => dbuf[j] = v,
                None => return Err(corrupt(olen - rest.len() - 1)),
            }
            j += 1;
        }
        let mut five = [0u8; 5];
        five[4] = dbuf[6] << 5 | dbuf[7];
        five[3] = dbuf[4] << 7 | dbuf[5] << 2 | dbuf[6] >> 3;
        five[2] = dbuf[3] << 4 | dbuf[4] >> 1;
        five[1] = dbuf[1] << 6 | dbuf[2] << 1 | dbuf[3] >> 4;
        five[0] = dbuf[0] << 3 | dbuf[1] >> 2;
        let n = match dlen {
            8 => 5,
            7 => 4,
            5 => 3,
            4 => 2,
            2 => 1,
            _ => 0,
        };
        out.extend_from_slice(&five[..n]);
    }
    Ok(out)
}

/// Compiles a template's regular expression with a size bound (the `regex` crate
/// matches in linear time; the bound keeps compilation small).
fn compile(pattern: &str) -> Result<regex::Regex, regex::Error> {
    regex::RegexBuilder::new(pattern)
        .size_limit(1 << 20)
        .dfa_size_limit(1 << 20)
        .build()
}

fn compile_or_fail(args: &HashMap<String, Value>, f: &str) -> tera::Result<regex::Regex> {
    compile(str_arg(args, f, "regex")?).map_err(|e| tera::Error::msg(format!("`{f}`: invalid regular expression: {e}")))
}

/// Go's `FindAllStringIndex(s, -1)`: an empty match right after the previous
/// match is skipped.
fn go_find_all(r: &regex::Regex, s: &str) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    let mut previous_end = None;
    for m in r.find_iter(s) {
        if m.start() == m.end() && previous_end == Some(m.start()) {
            continue;
        }
        previous_end = Some(m.end());
        out.push((m.start(), m.end()));
    }
    out
}

fn limit<T>(mut items: Vec<T>, n: i64) -> Vec<T> {
    if n >= 0 {
        items.truncate(n as usize);
    }
    items
}

/// Go's `Regexp.Split`.
fn go_split(r: &regex::Regex, s: &str, n: i64) -> Vec<String> {
    if n == 0 {
        return Vec::new();
    }
    if !r.as_str().is_empty() && s.is_empty() {
        return vec![String::new()];
    }
    let matches = limit(go_find_all(r, s), n);
    let mut out: Vec<String> = Vec::new();
    let (mut begin, mut end) = (0, 0);
    for (start, stop) in matches {
        if n > 0 && out.len() as i64 == n - 1 {
            break;
        }
        end = start;
        if stop != 0 {
            out.push(s[begin..end].to_owned());
        }
        begin = stop;
    }
    if end != s.len() {
        out.push(s[begin..].to_owned());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn emptiness_is_sprigs() {
        for v in [
            json!(null),
            json!(false),
            json!(0),
            json!(0.0),
            json!(""),
            json!([]),
            json!({}),
        ] {
            assert!(is_empty(&v), "{v}");
        }
        for v in [
            json!(true),
            json!(1),
            json!(-0.5),
            json!(" "),
            json!([null]),
            json!({"a": null}),
        ] {
            assert!(!is_empty(&v), "{v}");
        }
    }

    #[test]
    fn casts_follow_cast_to_int64() {
        for (v, n) in [
            (json!("0x10"), 16),
            (json!("010"), 8),
            (json!("1_000"), 0),
            (json!("0x1_0"), 16),
            (json!("2.00"), 2),
            (json!("1.5"), 0),
            (json!(2.0), 2),
            (json!(1.5), 0),
            (json!(true), 1),
            (json!(null), 0),
            (json!("abc"), 0),
        ] {
            assert_eq!(to_int64(&v), n, "{v}");
        }
        assert_eq!(atoi("+12"), 12);
        assert_eq!(atoi("99999999999999999999"), i64::MAX);
        assert_eq!(atoi(" 1"), 0);
    }

    #[test]
    fn json_as_go_writes_it() {
        assert_eq!(
            go_json(&json!({"b": "<&>", "a": [1, 1.5, 1e21, 1e-7, null]}), true, false),
            r#"{"a":[1,1.5,1e+21,1e-07,null],"b":"\u003c\u0026\u003e"}"#
        );
        assert_eq!(
            go_json(&json!({"a": [], "b": {"c": 1}}), false, true),
            "{\n  \"a\": [],\n  \"b\": {\n    \"c\": 1\n  }\n}"
        );
    }

    #[test]
    fn base64_and_base32() {
        assert_eq!(base64_encode(b"hello!?"), "aGVsbG8hPw==");
        assert_eq!(base64_decode(b"aGVsbG8hPw==").unwrap(), b"hello!?");
        assert_eq!(base64_decode(b"aGVs\nbG8=").unwrap(), b"hello");
        assert_eq!(
            base64_decode(b"aGV").unwrap_err(),
            "illegal base64 data at input byte 0"
        );
        assert_eq!(
            base64_decode(b"a*==").unwrap_err(),
            "illegal base64 data at input byte 1"
        );
        assert_eq!(base32_encode(b"hello"), "NBSWY3DP");
        assert_eq!(base32_encode(b"hi"), "NBUQ====");
        assert_eq!(base32_decode(b"NBUQ====").unwrap(), b"hi");
        assert!(base32_decode(b"NBU").is_err());
    }

    #[test]
    fn go_title_keeps_the_rest_of_each_word() {
        assert_eq!(title("hELLO wORLD-foo_bar"), "HELLO WORLD-Foo_bar");
    }

    #[test]
    fn regex_split_as_go() {
        let r = compile("a*").unwrap();
        assert_eq!(go_split(&r, "baaac", -1), ["b", "c"]);
        let r = compile(",").unwrap();
        assert_eq!(go_split(&r, "a,b,c", 2), ["a", "b,c"]);
        assert_eq!(go_split(&r, "", -1), [""]);
    }
}
