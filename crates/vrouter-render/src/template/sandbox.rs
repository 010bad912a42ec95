//! What a parsed template may contain, and the instrumentation that bounds it.
//!
//! [`validate`] walks tera's AST and refuses everything outside the sandbox: other
//! templates (`include`, `import`, `extends`, blocks, macros), filter sections
//! (which buffer their whole body), and any function, filter or test not on the
//! allowlists. [`instrument`] then rewrites the accepted AST so every loop iteration
//! draws on the iteration budget, every `~` concatenation and every `set` is
//! size-checked, and every interpolation not marked `| safe` passes through its
//! kind's writer (one command word, or one config value).

use std::collections::HashMap;

use tera::ast::{Expr, ExprVal, FunctionCall, LogicOperator, Node, WS};

use super::functions::{self, BOUNDED, CONCAT, CONCAT_TRUTHY, FUNCTIONS, NULL, TESTS, TICK};
use vrouter_gotemplate::sprig::{NIL_TOLERANT_ARGS, NIL_TOLERANT_FILTERS, NIL_TOLERANT_FUNCTIONS};

/// Something the template uses that the sandbox does not allow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Violation {
    /// What was used, e.g. "the function `get_env`".
    pub what: String,
    /// Why it is not available.
    pub why: String,
    /// Text to look for in the source to point at it.
    pub needle: String,
}

impl Violation {
    fn new(what: String, why: &str, needle: &str) -> Violation {
        Violation {
            what,
            why: why.to_owned(),
            needle: needle.to_owned(),
        }
    }
}

const OTHER_TEMPLATES: &str =
    "a template renders alone, with only its params; other templates, files and macros are not reachable";

pub(crate) fn validate(ast: &[Node]) -> Result<(), Violation> {
    ast.iter().try_for_each(validate_node)
}

fn validate_node(node: &Node) -> Result<(), Violation> {
    match node {
        Node::Text(_) | Node::Raw(..) | Node::Comment(..) | Node::Break(_) | Node::Continue(_) => Ok(()),
        Node::VariableBlock(_, expr) => {
            let last = expr.filters.len().saturating_sub(1);
            if expr
                .filters
                .iter()
                .enumerate()
                .any(|(i, f)| f.name == "safe" && i != last)
            {
                return Err(Violation::new(
                    "`safe` before another filter".into(),
                    "`| safe` opts the whole interpolation out of escaping, so it must be the last filter",
                    "safe",
                ));
            }
            validate_expr(expr)
        }
        Node::Set(_, set) => validate_expr(&set.value),
        Node::If(if_node, _) => {
            for (_, cond, body) in &if_node.conditions {
                validate_expr(cond)?;
                validate(body)?;
            }
            if let Some((_, body)) = &if_node.otherwise {
                validate(body)?;
            }
            Ok(())
        }
        Node::Forloop(_, for_loop, _) => {
            validate_expr(&for_loop.container)?;
            validate(&for_loop.body)?;
            for_loop.empty_body.as_deref().map_or(Ok(()), validate)
        }
        Node::Include(_, names, _) => Err(Violation::new(
            format!("`include` of {}", names.join(", ")),
            OTHER_TEMPLATES,
            "include",
        )),
        Node::Extends(_, name) => Err(Violation::new(
            format!("`extends \"{name}\"`"),
            OTHER_TEMPLATES,
            "extends",
        )),
        Node::ImportMacro(_, file, _) => Err(Violation::new(
            format!("`import \"{file}\"`"),
            OTHER_TEMPLATES,
            "import",
        )),
        Node::MacroDefinition(_, def, _) => Err(Violation::new(
            format!("the macro `{}`", def.name),
            OTHER_TEMPLATES,
            "macro",
        )),
        Node::Block(_, block, _) => Err(Violation::new(
            format!("the block `{}`", block.name),
            OTHER_TEMPLATES,
            "block",
        )),
        Node::Super => Err(Violation::new("`super()`".into(), OTHER_TEMPLATES, "super")),
        Node::FilterSection(_, section, _) => Err(Violation::new(
            format!("the filter section `{{% filter {} %}}`", section.filter.name),
            "apply filters to values instead: `{{ value | filter }}`",
            "filter",
        )),
    }
}

fn validate_expr(expr: &Expr) -> Result<(), Violation> {
    match &expr.val {
        ExprVal::String(_) | ExprVal::Int(_) | ExprVal::Float(_) | ExprVal::Bool(_) | ExprVal::Ident(_) => {}
        ExprVal::Math(m) => {
            validate_expr(&m.lhs)?;
            validate_expr(&m.rhs)?;
        }
        ExprVal::Logic(l) => {
            validate_expr(&l.lhs)?;
            validate_expr(&l.rhs)?;
        }
        ExprVal::In(i) => {
            validate_expr(&i.lhs)?;
            validate_expr(&i.rhs)?;
        }
        ExprVal::Test(test) => {
            if !TESTS.contains(&test.name.as_str()) {
                return Err(Violation::new(
                    format!("the test `{}`", test.name),
                    &format!("it is not one of the available tests ({})", TESTS.join(", ")),
                    &test.name,
                ));
            }
            test.args.iter().try_for_each(validate_expr)?;
        }
        ExprVal::MacroCall(call) => {
            return Err(Violation::new(
                format!("the macro call `{}::{}`", call.namespace, call.name),
                OTHER_TEMPLATES,
                &call.name,
            ));
        }
        ExprVal::FunctionCall(call) => validate_function(call)?,
        ExprVal::Array(items) => items.iter().try_for_each(validate_expr)?,
        ExprVal::StringConcat(concat) => {
            for part in &concat.values {
                if let ExprVal::FunctionCall(call) = part {
                    validate_function(call)?;
                }
            }
        }
    }
    for filter in &expr.filters {
        if !functions::is_allowed_filter(&filter.name) {
            return Err(Violation::new(
                format!("the filter `{}`", filter.name),
                "it is not one of the available filters (see the vrouter-render README)",
                &filter.name,
            ));
        }
        filter.args.values().try_for_each(validate_expr)?;
    }
    Ok(())
}

fn validate_function(call: &FunctionCall) -> Result<(), Violation> {
    if !functions::is_allowed_function(&call.name) {
        let why = if functions::DENIED_FUNCTIONS.contains(&call.name.as_str()) {
            "templates have no access to the environment, clock or randomness".to_owned()
        } else {
            format!(
                "it is not one of the available functions ({}, {})",
                FUNCTIONS.join(", "),
                vrouter_gotemplate::sprig::function_names()
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        return Err(Violation::new(
            format!("the function `{}`", call.name),
            &why,
            &call.name,
        ));
    }
    call.args.values().try_for_each(validate_expr)
}

/// Rewrites a validated AST so the render's budget bounds it. `output_filter`, when
/// given, is appended to every interpolation not ending in `| safe`, with the
/// interpolation's number in source order (counted in `next_id`, which matches
/// the order of `{{ }}` tags in the source) as its `id`.
pub(crate) fn instrument(ast: &mut [Node], output_filter: Option<&str>, next_id: &mut usize) {
    for node in ast.iter_mut() {
        instrument_node(node, output_filter, next_id);
    }
}

/// The `id` of an interpolation's writer, if it has one.
pub(crate) fn writer_id(expr: &Expr, writer: &str) -> Option<usize> {
    let filter = expr.filters.last().filter(|f| f.name == writer)?;
    match filter.args.get("id")?.val {
        ExprVal::Int(id) => usize::try_from(id).ok(),
        _ => None,
    }
}

fn instrument_node(node: &mut Node, output_filter: Option<&str>, next_id: &mut usize) {
    match node {
        Node::VariableBlock(_, expr) => {
            let described = describe(expr);
            let id = *next_id;
            *next_id += 1;
            instrument_expr(expr, Position::Value);
            // `not …` writes a boolean, which needs no escaping (and tera negates
            // after the filters, so escaping first would change its truth).
            if let Some(filter) = output_filter
                && !expr.is_marked_safe()
                && !expr.negated
            {
                let args = HashMap::from([
                    ("at".to_owned(), Expr::new(ExprVal::String(described))),
                    ("id".to_owned(), Expr::new(ExprVal::Int(id as i64))),
                ]);
                expr.filters.push(call(filter, args));
            }
        }
        Node::Set(_, set) => {
            instrument_expr(&mut set.value, Position::Value);
            set.value.filters.push(call(BOUNDED, HashMap::new()));
        }
        Node::If(if_node, _) => {
            for (_, cond, body) in &mut if_node.conditions {
                instrument_expr(cond, Position::Condition);
                instrument(body, output_filter, next_id);
            }
            if let Some((_, body)) = &mut if_node.otherwise {
                instrument(body, output_filter, next_id);
            }
        }
        Node::Forloop(_, for_loop, _) => {
            instrument_expr(&mut for_loop.container, Position::Value);
            instrument(&mut for_loop.body, output_filter, next_id);
            // First in the body, so `continue` cannot skip it.
            for_loop.body.insert(0, tick_node());
            if let Some(body) = &mut for_loop.empty_body {
                instrument(body, output_filter, next_id);
            }
        }
        _ => {}
    }
}

/// Whether tera evaluates an expression as a value or as a condition: a call in a
/// condition must return a boolean.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Position {
    Value,
    Condition,
}

fn instrument_expr(expr: &mut Expr, position: Position) {
    tolerate_nil(expr);
    match &mut expr.val {
        ExprVal::Math(m) => {
            instrument_expr(&mut m.lhs, Position::Value);
            instrument_expr(&mut m.rhs, Position::Value);
        }
        ExprVal::Logic(l) => {
            let operands = if matches!(l.operator, LogicOperator::And | LogicOperator::Or) {
                Position::Condition
            } else {
                Position::Value
            };
            instrument_expr(&mut l.lhs, operands);
            instrument_expr(&mut l.rhs, operands);
        }
        ExprVal::In(i) => {
            instrument_expr(&mut i.lhs, Position::Value);
            instrument_expr(&mut i.rhs, Position::Value);
        }
        ExprVal::Test(test) => test.args.iter_mut().for_each(|a| instrument_expr(a, Position::Value)),
        ExprVal::FunctionCall(fc) => {
            if NIL_TOLERANT_FUNCTIONS.contains(&fc.name.as_str()) {
                for arg in fc.args.values_mut() {
                    nil_for_undefined(arg);
                    if let ExprVal::Array(items) = &mut arg.val {
                        items.iter_mut().for_each(nil_for_undefined);
                    }
                }
            }
            fc.args.values_mut().for_each(|a| instrument_expr(a, Position::Value));
        }
        ExprVal::Array(items) => items.iter_mut().for_each(|a| instrument_expr(a, Position::Value)),
        ExprVal::StringConcat(concat) => {
            let args = concat
                .values
                .drain(..)
                .enumerate()
                .map(|(i, part)| {
                    let mut part = Expr::new(part);
                    instrument_expr(&mut part, Position::Value);
                    (i.to_string(), part)
                })
                .collect();
            // In a condition tera calls a function directly and wants a boolean (it
            // applies `not` itself); a filtered concatenation stays a value.
            let name = if position == Position::Condition && expr.filters.is_empty() {
                CONCAT_TRUTHY
            } else {
                CONCAT
            };
            expr.val = ExprVal::FunctionCall(call(name, args));
        }
        ExprVal::String(_)
        | ExprVal::Int(_)
        | ExprVal::Float(_)
        | ExprVal::Bool(_)
        | ExprVal::Ident(_)
        | ExprVal::MacroCall(_) => {}
    }
    for filter in &mut expr.filters {
        for (name, arg) in filter.args.iter_mut() {
            if NIL_TOLERANT_ARGS.contains(&(filter.name.as_str(), name.as_str())) {
                nil_for_undefined(arg);
            }
        }
        filter
            .args
            .values_mut()
            .for_each(|a| instrument_expr(a, Position::Value));
    }
}

/// `x | f(…)` where `f` takes Go's `nil` for a missing value: an undefined `x`
/// reaches `f` as null instead of failing the render.
fn tolerate_nil(expr: &mut Expr) {
    if matches!(expr.val, ExprVal::Ident(_))
        && expr
            .filters
            .first()
            .is_some_and(|f| NIL_TOLERANT_FILTERS.contains(&f.name.as_str()))
    {
        expr.filters.insert(0, null_default());
    }
}

/// A bare variable argument becomes `x | default(value=null)`.
fn nil_for_undefined(expr: &mut Expr) {
    if matches!(expr.val, ExprVal::Ident(_)) && expr.filters.is_empty() && !expr.negated {
        expr.filters.push(null_default());
    }
}

/// tera's `default` (applied by its renderer to an undefined or null variable)
/// with a null value.
fn null_default() -> FunctionCall {
    let null = Expr::new(ExprVal::FunctionCall(call(NULL, HashMap::new())));
    call("default", HashMap::from([("value".to_owned(), null)]))
}

/// Names an interpolated expression for errors, without its value.
fn describe(expr: &Expr) -> String {
    match &expr.val {
        ExprVal::Ident(name) => format!("`{name}`"),
        ExprVal::FunctionCall(call) => format!("`{}(…)`", call.name),
        ExprVal::StringConcat(_) => "a `~` expression".to_owned(),
        _ => "an expression".to_owned(),
    }
}

fn call(name: &str, args: HashMap<String, Expr>) -> FunctionCall {
    FunctionCall {
        name: name.to_owned(),
        args,
    }
}

fn tick_node() -> Node {
    Node::VariableBlock(
        WS::default(),
        Expr::new(ExprVal::FunctionCall(call(TICK, HashMap::new()))),
    )
}
