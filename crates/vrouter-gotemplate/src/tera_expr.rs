//! tera expressions as the converter builds them, and their printing within
//! tera 1's grammar.
//!
//! tera's grammar is narrower than Go's: filters apply to plain values, `~` joins
//! only variables, literals and calls, tests apply only to variables, a
//! condition treats a call or a filtered literal differently from a value, and
//! the engine bounds bracket nesting. Where an expression does not fit the place
//! it goes, the printer stores it in a `{% set %}` temporary first and uses the
//! temporary's name there.

use std::fmt::Write;

/// How deeply `(` and `[` may nest in one tag (the engine's
/// `Limits::max_expression_depth`).
pub(crate) const MAX_DEPTH: usize = 3;

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Te {
    Path(Path),
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    Array(Vec<Te>),
    Call(String, Vec<(String, Te)>),
    Filter(Box<Te>, String, Vec<(String, Te)>),
    Math(&'static str, Box<Te>, Box<Te>),
    Concat(Vec<Te>),
    Cmp(&'static str, Box<Te>, Box<Te>),
    In(Box<Te>, Box<Te>),
    /// `path is [not] name(args)`.
    Test(Path, String, Vec<Te>, bool),
    Not(Box<Te>),
    And(Vec<Te>),
    Or(Vec<Te>),
}

/// A variable and the keys and indexes read from it: `a.b["c-d"][0][i]`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Path {
    pub root: String,
    pub segs: Vec<Seg>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Seg {
    Key(String),
    Index(i64),
    /// A key or index held by another variable.
    Var(Path),
}

impl Path {
    pub fn var(root: impl Into<String>) -> Path {
        Path {
            root: root.into(),
            segs: Vec::new(),
        }
    }

    #[cfg(test)]
    pub fn key(mut self, key: impl Into<String>) -> Path {
        self.segs.push(Seg::Key(key.into()));
        self
    }
}

impl Te {
    pub fn filter(self, name: &str, args: Vec<(&str, Te)>) -> Te {
        Te::Filter(
            Box::new(self),
            name.to_owned(),
            args.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
        )
    }

    pub fn call(name: &str, args: Vec<(&str, Te)>) -> Te {
        Te::Call(
            name.to_owned(),
            args.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
        )
    }

    /// Go's `not`: a boolean, so `not (not x)` is not `x` where a value is written.
    pub fn not(self) -> Te {
        match self {
            Te::Test(p, n, a, negated) => Te::Test(p, n, a, !negated),
            other => Te::Not(Box::new(other)),
        }
    }
}

/// Where an expression is printed; each place accepts a part of tera's grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
    /// `{{ … }}`, `{% set x = … %}`, a keyword argument, a test argument.
    Value,
    /// `{% if … %}` and the operands of `and`, `or`, `not`: tera evaluates a call
    /// there as a boolean and ignores filters on literals and calls.
    Condition,
    /// The container of `{% for x in … %}`.
    Container,
    FilterInput,
    MathOperand,
    ConcatOperand,
    CompareOperand,
    InNeedle,
    InHaystack,
    ArrayElement,
}

/// Why an expression cannot be written in tera at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Inexpressible(pub String);

/// Prints expressions, collecting the temporaries they need.
pub(crate) struct Printer<'n> {
    /// `{% set … %}` statements to place before the tag, in order.
    pub prelude: Vec<String>,
    names: &'n mut dyn FnMut() -> String,
}

impl<'n> Printer<'n> {
    pub fn new(names: &'n mut dyn FnMut() -> String) -> Self {
        Printer {
            prelude: Vec::new(),
            names,
        }
    }

    /// Prints `te` for `slot`, hoisting into temporaries what does not fit.
    pub fn print(&mut self, te: &Te, slot: Slot) -> Result<String, Inexpressible> {
        self.at(te, slot, 0)
    }

    fn hoist(&mut self, te: &Te) -> Result<String, Inexpressible> {
        let value = self.at(te, Slot::Value, 0)?;
        let name = (self.names)();
        self.prelude.push(format!("set {name} = {value}"));
        Ok(name)
    }

    fn fits(te: &Te, slot: Slot) -> bool {
        use Slot::*;
        match te {
            Te::Path(_) => true,
            Te::Int(_) | Te::Float(_) | Te::Bool(_) => slot != InHaystack,
            Te::Str(_) => !matches!(slot, MathOperand),
            Te::Call(..) => !matches!(slot, Condition | InHaystack),
            Te::Array(_) => matches!(slot, Value | InHaystack | Container | ArrayElement),
            Te::Filter(input, ..) => match slot {
                Condition => matches!(**input, Te::Path(_) | Te::Filter(..)) && base_is_path(input),
                MathOperand | ConcatOperand | InHaystack => false,
                _ => true,
            },
            Te::Math(..) => matches!(
                slot,
                Value | Condition | FilterInput | MathOperand | CompareOperand | InNeedle | ArrayElement | Container
            ),
            Te::Concat(_) => matches!(
                slot,
                Value | Condition | FilterInput | CompareOperand | InNeedle | InHaystack | ArrayElement
            ),
            Te::Cmp(..) | Te::In(..) | Te::Test(..) | Te::Not(_) | Te::And(_) | Te::Or(_) => {
                matches!(slot, Value | Condition | ArrayElement)
            }
        }
    }

    fn at(&mut self, te: &Te, slot: Slot, depth: usize) -> Result<String, Inexpressible> {
        if !Self::fits(te, slot) {
            return self.hoist(te);
        }
        let opens = matches!(te, Te::Call(..) | Te::Array(_))
            || matches!(te, Te::Filter(_, _, args) if !args.is_empty())
            || matches!(te, Te::Path(p) if p.segs.iter().any(|s| !matches!(s, Seg::Key(k) if is_word(k))));
        if opens && depth + 1 > MAX_DEPTH && depth > 0 {
            return self.hoist(te);
        }
        Ok(match te {
            Te::Path(p) => print_path(p)?,
            Te::Str(s) => string_literal(s)?,
            Te::Int(i) => i.to_string(),
            Te::Float(f) => float_literal(*f)?,
            Te::Bool(b) => b.to_string(),
            Te::Array(items) => self.array(items, depth)?,
            Te::Call(name, args) => format!("{name}({})", self.kwargs(args, depth + 1)?),
            Te::Filter(input, name, args) => {
                let input = self.at(input, Slot::FilterInput, depth)?;
                if args.is_empty() {
                    format!("{input} | {name}")
                } else {
                    format!("{input} | {name}({})", self.kwargs(args, depth + 1)?)
                }
            }
            Te::Math(op, l, r) => {
                let l = self.math_operand(l, op, false, depth)?;
                let r = self.math_operand(r, op, true, depth)?;
                format!("{l} {op} {r}")
            }
            Te::Concat(parts) => {
                let mut printed = Vec::new();
                for p in parts {
                    printed.push(self.at(p, Slot::ConcatOperand, depth)?);
                }
                printed.join(" ~ ")
            }
            Te::Cmp(op, l, r) => {
                let l = self.at(l, Slot::CompareOperand, depth)?;
                let r = self.at(r, Slot::CompareOperand, depth)?;
                format!("{l} {op} {r}")
            }
            Te::In(needle, haystack) => {
                let n = self.at(needle, Slot::InNeedle, depth)?;
                let h = self.at(haystack, Slot::InHaystack, depth)?;
                format!("{n} in {h}")
            }
            Te::Test(path, name, args, negated) => self.test(path, name, args, *negated, depth)?,
            Te::Not(inner) => self.not(inner, slot, depth)?,
            Te::And(items) | Te::Or(items) => self.logical(te, items, depth)?,
        })
    }

    fn array(&mut self, items: &[Te], depth: usize) -> Result<String, Inexpressible> {
        let mut out = String::from("[");
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            out.push_str(&self.at(item, Slot::ArrayElement, depth + 1)?);
        }
        out.push(']');
        Ok(out)
    }

    fn test(
        &mut self,
        path: &Path,
        name: &str,
        args: &[Te],
        negated: bool,
        depth: usize,
    ) -> Result<String, Inexpressible> {
        let not = if negated { "not " } else { "" };
        if args.is_empty() {
            return Ok(format!("{} is {not}{name}", print_path(path)?));
        }
        let mut printed = Vec::new();
        for a in args {
            printed.push(self.at(a, Slot::Value, depth + 1)?);
        }
        Ok(format!("{} is {not}{name}({})", print_path(path)?, printed.join(", ")))
    }

    fn not(&mut self, inner: &Te, slot: Slot, depth: usize) -> Result<String, Inexpressible> {
        // tera takes `not` only before a value or a comparison; and where a
        // value is written, it negates a comparison twice (tera 1.20), so
        // there the comparison goes to a temporary first.
        let hoist = match inner {
            Te::Not(_) | Te::And(_) | Te::Or(_) => true,
            Te::Cmp(..) => slot != Slot::Condition,
            _ => false,
        };
        let printed = if hoist {
            self.hoist(inner)?
        } else {
            self.at(inner, Slot::Condition, depth)?
        };
        Ok(format!("not {printed}"))
    }

    /// `te` is the `Te::And` or `Te::Or` of `items`.
    fn logical(&mut self, te: &Te, items: &[Te], depth: usize) -> Result<String, Inexpressible> {
        let op = if matches!(te, Te::And(_)) { " and " } else { " or " };
        let mut printed = Vec::new();
        for item in items {
            let p = self.at(item, Slot::Condition, depth)?;
            // `and` binds tighter than `or`: an `or` inside `and` needs parentheses.
            let needs_parens = matches!(
                (te, item),
                (Te::And(_), Te::Or(_)) | (Te::Or(_), Te::Or(_)) | (Te::And(_), Te::And(_))
            );
            printed.push(if needs_parens { format!("({p})") } else { p });
        }
        Ok(printed.join(op))
    }

    fn math_operand(&mut self, te: &Te, op: &str, right: bool, depth: usize) -> Result<String, Inexpressible> {
        let Te::Math(inner, ..) = te else {
            return self.at(te, Slot::MathOperand, depth);
        };
        let weaker = |o: &str| matches!(o, "+" | "-");
        // tera is left-associative with `* / %` above `+ -`: a right operand that is
        // itself an operation, or a weaker one on the left, needs parentheses.
        if right || (weaker(inner) && !weaker(op)) {
            if depth + 1 > MAX_DEPTH {
                return self.hoist(te);
            }
            Ok(format!("({})", self.at(te, Slot::MathOperand, depth + 1)?))
        } else {
            self.at(te, Slot::MathOperand, depth)
        }
    }

    fn kwargs(&mut self, args: &[(String, Te)], depth: usize) -> Result<String, Inexpressible> {
        let mut printed = Vec::new();
        for (k, v) in args {
            printed.push(format!("{k}={}", self.at(v, Slot::Value, depth)?));
        }
        Ok(printed.join(", "))
    }
}

/// Whether a filter chain starts from a variable (tera evaluates it properly in a
/// condition; on a literal or call it ignores the filters).
fn base_is_path(te: &Te) -> bool {
    match te {
        Te::Path(_) => true,
        Te::Filter(input, ..) => base_is_path(input),
        _ => false,
    }
}

/// A key tera can write after a dot.
pub(crate) fn is_word(key: &str) -> bool {
    !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A name tera reads as a variable (not a keyword, boolean or tera's own).
pub(crate) fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    first_ok
        && is_word(name)
        && !name.starts_with("__")
        && !["true", "false", "True", "False"].iter().any(|b| name.starts_with(b))
        && !["and", "or", "not", "in", "is", "loop", "super", "self"].contains(&name)
}

fn print_path(p: &Path) -> Result<String, Inexpressible> {
    let mut out = p.root.clone();
    for seg in &p.segs {
        match seg {
            Seg::Key(k) if is_word(k) => {
                let _ = write!(out, ".{k}");
            }
            Seg::Key(k) => {
                let _ = write!(out, "[{}]", string_literal(k)?);
            }
            Seg::Index(i) => {
                let _ = write!(out, "[{i}]");
            }
            Seg::Var(v) => {
                if v.segs.iter().any(|s| !matches!(s, Seg::Key(k) if is_word(k))) {
                    return Err(Inexpressible(
                        "an index held in a variable must itself be a plain variable".into(),
                    ));
                }
                let _ = write!(out, "[{}]", print_path(v)?);
            }
        }
    }
    Ok(out)
}

/// A tera string literal: tera strings have no escapes, so the quote character is
/// one the text does not contain.
pub(crate) fn string_literal(s: &str) -> Result<String, Inexpressible> {
    for q in ['"', '\'', '`'] {
        if !s.contains(q) {
            return Ok(format!("{q}{s}{q}"));
        }
    }
    Err(Inexpressible(
        "a string containing all three quote characters (\", ' and `) has no tera literal".into(),
    ))
}

/// tera float literals have a point and no exponent.
fn float_literal(f: f64) -> Result<String, Inexpressible> {
    if !f.is_finite() {
        return Err(Inexpressible(format!("the number {f} has no tera literal")));
    }
    let text = f.to_string();
    Ok(if text.contains('.') { text } else { format!("{text}.0") })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn show(te: &Te, slot: Slot) -> (Vec<String>, String) {
        let mut n = 0;
        let mut names = || {
            n += 1;
            format!("tmp{n}")
        };
        let mut p = Printer::new(&mut names);
        let text = p.print(te, slot).unwrap();
        (p.prelude, text)
    }

    fn path(s: &str) -> Te {
        Te::Path(Path::var(s))
    }

    #[test]
    fn filters_chain_and_calls_nest() {
        let te = path("x")
            .filter("trim_prefix", vec![("prefix", Te::Str("v".into()))])
            .filter("upper", vec![]);
        assert_eq!(show(&te, Slot::Value).1, r#"x | trim_prefix(prefix="v") | upper"#);
    }

    #[test]
    fn what_does_not_fit_goes_to_a_temporary() {
        // A filtered value cannot be joined with `~`.
        let te = Te::Concat(vec![Te::Str("AS".into()), path("x").filter("upper", vec![])]);
        assert_eq!(
            show(&te, Slot::Value),
            (vec!["set tmp1 = x | upper".to_owned()], r#""AS" ~ tmp1"#.to_owned())
        );
        // A call in a condition.
        let te = Te::call("printf", vec![("format", Te::Str("%d".into()))]);
        assert_eq!(show(&te, Slot::Condition).1, "tmp1");
    }

    #[test]
    fn deep_nesting_is_hoisted() {
        let inner = Te::call(
            "f",
            vec![(
                "a",
                Te::call(
                    "g",
                    vec![("b", Te::call("h", vec![("c", Te::Array(vec![Te::Int(1)]))]))],
                ),
            )],
        );
        let (prelude, text) = show(&inner, Slot::Value);
        assert!(!prelude.is_empty(), "{text}");
        for line in prelude.iter().chain([&text]) {
            let depth = line.chars().fold((0i32, 0i32), |(d, m), c| match c {
                '(' | '[' => (d + 1, m.max(d + 1)),
                ')' | ']' => (d - 1, m),
                _ => (d, m),
            });
            assert!(depth.1 <= MAX_DEPTH as i32, "{line}");
        }
    }

    #[test]
    fn literals() {
        assert_eq!(string_literal("a\"b").unwrap(), "'a\"b'");
        assert!(string_literal("\"'`").is_err());
        assert_eq!(float_literal(1e21).unwrap(), "1000000000000000000000.0");
        let p = Path::var("m").key("a-b").key("c");
        assert_eq!(print_path(&p).unwrap(), r#"m["a-b"].c"#);
    }

    #[test]
    fn logic_parenthesizes_or_inside_and() {
        let te = Te::And(vec![Te::Or(vec![path("a"), path("b")]), path("c").not()]);
        assert_eq!(show(&te, Slot::Condition).1, "(a or b) and not c");
        // `not (a and b)` is not tera.
        let te = Te::And(vec![path("a"), path("b")]).not();
        assert_eq!(
            show(&te, Slot::Condition),
            (vec!["set tmp1 = a and b".to_owned()], "not tmp1".to_owned())
        );
    }
}
