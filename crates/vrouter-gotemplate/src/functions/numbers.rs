//! sprig's integer math.

use super::{Call, Result};
use crate::tera_expr::Te;

/// `add`, `sub`, `mul`, `mod`, folded left over their arguments.
pub(super) fn arithmetic(c: &mut Call<'_, '_>) -> Result<Te> {
    let (op, min) = match c.name {
        "add" => ("+", 0),
        "sub" => ("-", 2),
        "mul" => ("*", 1),
        _ => ("%", 2),
    };
    let variadic = c.name == "add" || c.name == "mul";
    c.arity(min, if variadic { usize::MAX } else { 2 })?;
    let mut it = c.take_all().into_iter();
    Ok(match it.next() {
        None => Te::Int(if c.name == "mul" { 1 } else { 0 }),
        Some(first) => it.fold(first, |acc, a| Te::Math(op, Box::new(acc), Box::new(a))),
    })
}

pub(super) fn add1(c: &mut Call<'_, '_>) -> Result<Te> {
    c.arity(1, 1)?;
    Ok(Te::Math("+", Box::new(c.pop()), Box::new(Te::Int(1))))
}

pub(super) fn div(c: &mut Call<'_, '_>) -> Result<Te> {
    c.arity(2, 2)?;
    let by = c.pop();
    Ok(c.pop().filter("div", vec![("by", by)]))
}

/// `max` (`biggest`) and `min`.
pub(super) fn extreme(c: &mut Call<'_, '_>) -> Result<Te> {
    c.arity(1, usize::MAX)?;
    let f = if c.name == "min" { "min" } else { "max" };
    Ok(Te::call(f, vec![("values", Te::Array(c.take_all()))]))
}

pub(super) fn floor_ceil(c: &mut Call<'_, '_>) -> Result<Te> {
    c.arity(1, 1)?;
    let method = Te::Str(c.name.to_owned());
    Ok(c.pop().filter("round", vec![("method", method)]))
}

pub(super) fn round(c: &mut Call<'_, '_>) -> Result<Te> {
    c.arity(2, 3)?;
    if c.n == 3 {
        return c.refuse("round with a custom rounding point has no counterpart");
    }
    let places = c.pop();
    Ok(c.pop().filter(
        "round",
        vec![("method", Te::Str("common".into())), ("precision", places)],
    ))
}
