//! Go template builtins that are not logic: `index`, `slice`, `print`,
//! `println`, `printf` (`len` is a plain filter).

use super::{Call, Result, index};
use crate::go_template::tera_expr::Te;

pub(super) fn index_call(c: &mut Call<'_, '_>) -> Result<Te> {
    c.arity(1, usize::MAX)?;
    let keys = c.args.split_off(1);
    let base = c.args.pop();
    index(c.t, base, keys, c.at)
}

pub(super) fn slice(c: &mut Call<'_, '_>) -> Result<Te> {
    c.arity(1, 3)?;
    let mut it = c.take_all().into_iter();
    let list = it.next().expect("arity checked");
    let mut kw = Vec::new();
    if let Some(start) = it.next() {
        kw.push(("start", start));
    }
    if let Some(end) = it.next() {
        kw.push(("end", end));
    }
    Ok(list.filter("slice", kw))
}

pub(super) fn print(c: &mut Call<'_, '_>) -> Result<Te> {
    if c.n == 1 && matches!(c.args[0], Te::Str(_)) {
        return Ok(c.pop());
    }
    Ok(Te::call("print", vec![("args", Te::Array(c.take_all()))]))
}

pub(super) fn println(c: &mut Call<'_, '_>) -> Result<Te> {
    Ok(Te::call("println", vec![("args", Te::Array(c.take_all()))]))
}

pub(super) fn printf(c: &mut Call<'_, '_>) -> Result<Te> {
    c.arity(1, usize::MAX)?;
    let mut args = c.take_all();
    let format = args.remove(0);
    Ok(Te::call("printf", vec![("format", format), ("args", Te::Array(args))]))
}
