//! Logic and defaults: `and`, `or`, `not`, `default`, `coalesce`, `ternary`,
//! `fail`.

use super::{Call, Result};
use crate::tera_expr::Te;
use crate::translate::Ctx;

pub(super) fn and_or(c: &mut Call<'_, '_>) -> Result<Te> {
    c.arity(1, usize::MAX)?;
    let and = c.name == "and";
    if c.ctx == Ctx::Condition {
        return Ok(if c.n == 1 {
            c.pop()
        } else if and {
            Te::And(c.take_all())
        } else {
            Te::Or(c.take_all())
        });
    }
    // The value Go returns: the first empty (`and`) or non-empty (`or`)
    // argument, else the last.
    let filter = if and { "if_not_empty" } else { "if_empty" };
    let mut rev = c.take_all().into_iter().rev();
    let mut acc = rev.next().expect("arity checked");
    for a in rev {
        acc = a.filter(filter, vec![("value", acc)]);
    }
    Ok(acc)
}

/// `not` and sprig's `empty`: both are the negated truth of one value.
pub(super) fn not(c: &mut Call<'_, '_>) -> Result<Te> {
    c.arity(1, 1)?;
    Ok(c.pop().not())
}

pub(super) fn default(c: &mut Call<'_, '_>) -> Result<Te> {
    c.arity(1, 2)?;
    if c.n == 1 {
        // `default "x"` with nothing piped: Go passes no value, so the default.
        return Ok(c.pop());
    }
    let value = c.pop();
    let fallback = c.pop();
    Ok(value.filter("if_empty", vec![("value", fallback)]))
}

pub(super) fn coalesce(c: &mut Call<'_, '_>) -> Result<Te> {
    Ok(Te::call("coalesce", vec![("values", Te::Array(c.take_all()))]))
}

pub(super) fn ternary(c: &mut Call<'_, '_>) -> Result<Te> {
    c.arity(3, 3)?;
    let cond = c.pop();
    let no = c.pop();
    let yes = c.pop();
    Ok(cond.filter("ternary", vec![("yes", yes), ("no", no)]))
}

pub(super) fn fail(c: &mut Call<'_, '_>) -> Result<Te> {
    c.arity(1, 1)?;
    Ok(Te::call("throw", vec![("message", c.pop())]))
}
