//! The functions and filters templates can call, each drawing on the render's budget.
//!
//! tera's own filters are reused; every one of them is wrapped so its result is
//! size-checked, and the few that can multiply their input (`replace`, `join`,
//! `indent`, `concat`, pretty `json_encode`) are estimated before they run so
//! nothing large is ever allocated. `range` is replaced by a bounded version.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde_json::Value;
use tera::{Filter, Function, Tera};

use super::budget::{limit_error, with_active};
use super::{Limit, TemplateKind};
use crate::escape::{command_word, config_value};
use vrouter_gotemplate::sprig;

/// Filters templates may use. `default` and `safe` are handled by tera's renderer
/// itself and are allowed too (see [`is_allowed_filter`]).
pub(crate) const FILTERS: &[&str] = &[
    "upper",
    "lower",
    "trim",
    "trim_start",
    "trim_end",
    "trim_start_matches",
    "trim_end_matches",
    "truncate",
    "wordcount",
    "replace",
    "capitalize",
    "title",
    "linebreaksbr",
    "indent",
    "striptags",
    "spaceless",
    "escape",
    "escape_xml",
    "addslashes",
    "split",
    "int",
    "float",
    "first",
    "last",
    "nth",
    "join",
    "sort",
    "unique",
    "slice",
    "group_by",
    "filter",
    "map",
    "concat",
    "abs",
    "pluralize",
    "round",
    "length",
    "reverse",
    "json_encode",
    "as_str",
    "get",
];

/// Tests (`is …`) templates may use; all of tera's, none of which can grow anything.
pub(crate) const TESTS: &[&str] = &[
    "defined",
    "undefined",
    "odd",
    "even",
    "string",
    "number",
    "divisibleby",
    "iterable",
    "object",
    "starting_with",
    "ending_with",
    "containing",
    "matching",
];

/// Functions templates may call.
pub(crate) const FUNCTIONS: &[&str] = &["range", "throw"];

/// Functions tera registers that the sandbox replaces with a refusal, in case the
/// static check is ever bypassed: environment access, clock and randomness.
pub(crate) const DENIED_FUNCTIONS: &[&str] = &["get_env", "now", "get_random"];

pub(crate) fn is_allowed_filter(name: &str) -> bool {
    name == "default" || name == "safe" || FILTERS.contains(&name) || sprig::is_filter(name)
}

pub(crate) fn is_allowed_function(name: &str) -> bool {
    FUNCTIONS.contains(&name) || sprig::is_function(name)
}

/// Names the engine uses for the calls its instrumentation inserts. Templates
/// cannot call them: they are not on the allowlists above.
pub(crate) const TICK: &str = "__vrouter_tick";
pub(crate) const CONCAT: &str = "__vrouter_concat";
pub(crate) const CONCAT_TRUTHY: &str = "__vrouter_concat_truthy";
pub(crate) const BOUNDED: &str = "__vrouter_bounded";
pub(crate) const COMMAND_WORD: &str = "__vrouter_command_word";
pub(crate) const CONFIG_VALUE: &str = "__vrouter_config_value";
/// Returns null: what an undefined variable becomes where Go would pass `nil`.
pub(crate) const NULL: &str = "__vrouter_null";

impl From<Limit> for tera::Error {
    fn from(limit: Limit) -> tera::Error {
        limit_error(limit)
    }
}

/// tera's builtin filters, kept alive for the process so wrappers can borrow them.
fn builtins() -> &'static Tera {
    static BUILTINS: OnceLock<Tera> = OnceLock::new();
    BUILTINS.get_or_init(Tera::default)
}

/// Registers the sandbox's functions and bounded filters on `tera`.
pub(crate) fn install(tera: &mut Tera) {
    for name in DENIED_FUNCTIONS {
        let name = *name;
        tera.register_function(name, move |_: &HashMap<String, Value>| -> tera::Result<Value> {
            Err(tera::Error::msg(format!(
                "`{name}` is not available: templates have no access to the environment, clock or randomness"
            )))
        });
    }
    tera.register_function("range", range);
    let throw = builtins().get_function("throw").expect("tera registers `throw`");
    tera.register_function("throw", Timed(throw));
    tera.register_function(TICK, tick);
    tera.register_function(NULL, |_: &HashMap<String, Value>| -> tera::Result<Value> {
        Ok(Value::Null)
    });
    super::go_compat::install(tera);
    tera.register_function(CONCAT, concat);
    tera.register_function(CONCAT_TRUTHY, concat_truthy);
    tera.register_filter(BOUNDED, bounded);
    tera.register_filter(COMMAND_WORD, |value: &Value, args: &HashMap<String, Value>| {
        write_value(value, args, TemplateKind::Commands)
    });
    tera.register_filter(CONFIG_VALUE, |value: &Value, args: &HashMap<String, Value>| {
        write_value(value, args, TemplateKind::Config)
    });
    for name in FILTERS {
        let inner = builtins()
            .get_filter(name)
            .expect("every allowed filter is a tera builtin");
        tera.register_filter(name, Bounded { name, inner });
    }
}

/// A tera filter whose input is estimated (for the amplifying ones) and whose output
/// is size-checked.
struct Bounded {
    name: &'static str,
    inner: &'static dyn Filter,
}

impl Filter for Bounded {
    fn filter(&self, value: &Value, args: &HashMap<String, Value>) -> tera::Result<Value> {
        with_active(|budget| {
            budget.check_time()?;
            if let Some(estimate) = estimate_output(self.name, value, args) {
                budget.check_value_size(estimate)?;
            }
            let out = self.inner.filter(value, args)?;
            budget.check_value_size(value_size(&out))?;
            Ok(out)
        })
    }

    fn is_safe(&self) -> bool {
        self.inner.is_safe()
    }
}

/// A tera function that only draws on the time budget.
struct Timed(&'static dyn Function);

impl Function for Timed {
    fn call(&self, args: &HashMap<String, Value>) -> tera::Result<Value> {
        with_active(|budget| {
            budget.check_time()?;
            self.0.call(args)
        })
    }
}

/// An upper bound of the output size of the filters that can multiply their input.
fn estimate_output(name: &str, value: &Value, args: &HashMap<String, Value>) -> Option<usize> {
    let arg_str = |key: &str| args.get(key).and_then(Value::as_str);
    match (name, value) {
        ("replace", Value::String(s)) => {
            let from = arg_str("from")?;
            let to = arg_str("to")?;
            let count = if from.is_empty() {
                s.chars().count() + 1
            } else {
                s.matches(from).count()
            };
            Some(s.len().saturating_add(count.saturating_mul(to.len())))
        }
        ("join", Value::Array(items)) => {
            let sep = arg_str("sep").unwrap_or("");
            let items_size = items.iter().map(value_size).fold(0usize, usize::saturating_add);
            Some(items_size.saturating_add(sep.len().saturating_mul(items.len())))
        }
        ("indent", Value::String(s)) => {
            let prefix = arg_str("prefix").map_or(4, str::len);
            let lines = s.matches('\n').count() + 1;
            Some(s.len().saturating_add(prefix.saturating_mul(lines)))
        }
        ("concat", _) => Some(value_size(value).saturating_add(args.get("with").map_or(0, value_size))),
        ("json_encode", _) => {
            let stats = ValueStats::of(value);
            // Escaping grows a string at most sixfold (`\u00XX`); pretty printing adds
            // at most one indented line per node.
            let pretty = args.get("pretty").and_then(Value::as_bool).unwrap_or(false);
            let indent = if pretty {
                stats.nodes.saturating_mul(2 * stats.depth + 2)
            } else {
                0
            };
            Some(stats.size.saturating_mul(6).saturating_add(indent))
        }
        _ => None,
    }
}

/// Roughly the size of a value written as JSON.
pub(crate) fn value_size(value: &Value) -> usize {
    ValueStats::of(value).size
}

struct ValueStats {
    size: usize,
    nodes: usize,
    depth: usize,
}

impl ValueStats {
    fn of(value: &Value) -> ValueStats {
        let mut stats = ValueStats {
            size: 0,
            nodes: 0,
            depth: 0,
        };
        stats.visit(value, 1);
        stats
    }

    fn visit(&mut self, value: &Value, depth: usize) {
        self.nodes += 1;
        self.depth = self.depth.max(depth);
        self.size = self.size.saturating_add(match value {
            Value::Null => 4,
            Value::Bool(_) => 5,
            Value::Number(_) => 20,
            Value::String(s) => s.len() + 2,
            Value::Array(items) => {
                items.iter().for_each(|item| self.visit(item, depth + 1));
                2 + items.len()
            }
            Value::Object(map) => {
                map.iter().for_each(|(key, item)| {
                    self.size = self.size.saturating_add(key.len() + 4);
                    self.visit(item, depth + 1);
                });
                2
            }
        });
    }
}

/// `range(end=…, start=0, step_by=1)`: tera's semantics, with the length bounded
/// before anything is allocated (and `step_by=0`, which never ends, refused).
fn range(args: &HashMap<String, Value>) -> tera::Result<Value> {
    with_active(|budget| {
        budget.check_time()?;
        let arg = |key: &str, default: Option<u64>| -> tera::Result<u64> {
            match (args.get(key), default) {
                (Some(v), _) => v.as_u64().ok_or_else(|| {
                    tera::Error::msg(format!(
                        "`range` received {key}={v}, but {key} must be a non-negative integer"
                    ))
                }),
                (None, Some(d)) => Ok(d),
                (None, None) => Err(tera::Error::msg(format!("`range` was called without `{key}`"))),
            }
        };
        let start = arg("start", Some(0))?;
        let end = arg("end", None)?;
        let step = arg("step_by", Some(1))?;
        if step == 0 {
            return Err(tera::Error::msg("`range` received step_by=0, which would never end"));
        }
        if start > end {
            return Err(tera::Error::msg(format!(
                "`range` received start={start} greater than end={end}"
            )));
        }
        let len = u128::from(end - start).div_ceil(u128::from(step));
        budget.check_range_len(len)?;
        Ok(Value::Array(
            (start..end).step_by(step as usize).map(Value::from).collect(),
        ))
    })
}

/// Inserted at the start of every loop body: one iteration of the budget.
fn tick(_: &HashMap<String, Value>) -> tera::Result<Value> {
    with_active(|budget| {
        budget.tick()?;
        Ok(Value::String(String::new()))
    })
}

/// Replaces `a ~ b ~ …`: the same concatenation, refused before it grows too large.
fn concat(args: &HashMap<String, Value>) -> tera::Result<Value> {
    with_active(|budget| {
        budget.check_time()?;
        let mut out = String::new();
        for i in 0..args.len() {
            let part = args
                .get(&i.to_string())
                .ok_or_else(|| tera::Error::msg("internal error: concat part missing"))?;
            let text = match part {
                Value::String(s) => std::borrow::Cow::Borrowed(s.as_str()),
                Value::Number(n) => std::borrow::Cow::Owned(tera_number(n)),
                other => {
                    return Err(tera::Error::msg(format!(
                        "`~` can only join strings and numbers, not {}",
                        crate::merge::json_kind(other)
                    )));
                }
            };
            budget.check_value_size(out.len().saturating_add(text.len()))?;
            out.push_str(&text);
        }
        Ok(Value::String(out))
    })
}

/// `a ~ b` where tera expects a condition: true when the joined text is not empty.
fn concat_truthy(args: &HashMap<String, Value>) -> tera::Result<Value> {
    let joined = concat(args)?;
    Ok(Value::Bool(joined.as_str().is_some_and(|s| !s.is_empty())))
}

/// Appended to every `{% set %}` value, so state grown across loop iterations is
/// bounded too.
fn bounded(value: &Value, _: &HashMap<String, Value>) -> tera::Result<Value> {
    with_active(|budget| {
        budget.check_value_size(value_size(value))?;
        Ok(value.clone())
    })
}

/// Appended to every interpolation not marked `| safe`: escapes the value as one
/// command word or one config value, records it, and writes a sentinel in its
/// place for the render check (`crate::verify`). `at` names the interpolated
/// expression for errors, `id` numbers the interpolation in its source; the value
/// itself is never quoted back (params can hold secrets).
fn write_value(value: &Value, args: &HashMap<String, Value>, kind: TemplateKind) -> tera::Result<Value> {
    with_active(|budget| {
        let at = args.get("at").and_then(Value::as_str).unwrap_or("an interpolation");
        let interpolation = args.get("id").and_then(Value::as_u64).unwrap_or(0) as usize;
        // A null writes an explicit empty word or value, so the arguments around it
        // keep their positions.
        let text = match value {
            Value::String(s) => std::borrow::Cow::Borrowed(s.as_str()),
            Value::Number(n) => std::borrow::Cow::Owned(tera_number(n)),
            Value::Bool(b) => std::borrow::Cow::Borrowed(if *b { "true" } else { "false" }),
            Value::Null => std::borrow::Cow::Borrowed(""),
            Value::Array(_) | Value::Object(_) => {
                let what = if value.is_array() { "a list" } else { "a map" };
                let advice = match kind {
                    TemplateKind::Commands => {
                        "one `{{ }}` writes one command word: loop over it, or join it into one word"
                    }
                    TemplateKind::Config => {
                        "one `{{ }}` writes one config value: loop over it, or join it into one value"
                    }
                };
                return Err(budget.refuse(format!("the value of {at} is {what}; {advice}")));
            }
        };
        let written = match kind {
            TemplateKind::Commands => command_word(&text),
            TemplateKind::Config => config_value(&text),
        };
        match written {
            Ok(word) => Ok(Value::String(budget.write(kind, word.into_owned(), interpolation)?)),
            Err(why) => Err(budget.refuse(format!("the value of {at} {why}"))),
        }
    })
}

/// A number as tera writes it: integers exactly, floats through `f64`'s `Display`
/// (so `3.0` is written `3`).
fn tera_number(n: &serde_json::Number) -> String {
    match (n.as_i64(), n.as_u64(), n.as_f64()) {
        (Some(i), _, _) => i.to_string(),
        (None, Some(u), _) => u.to_string(),
        (None, None, Some(f)) => f.to_string(),
        (None, None, None) => n.to_string(),
    }
}
