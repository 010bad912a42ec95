//! sprig's list and dict functions.

use super::{Call, Result};
use crate::tera_expr::{Seg, Te, is_word};
use crate::translate::Ctx;

/// `list` and `tuple`.
pub(super) fn list(c: &mut Call<'_, '_>) -> Result<Te> {
    Ok(Te::Array(c.take_all()))
}

pub(super) fn has(c: &mut Call<'_, '_>) -> Result<Te> {
    c.arity(2, 2)?;
    let list = c.pop();
    let needle = c.pop();
    Ok(list.filter("has", vec![("value", needle)]))
}

/// `append` (`push`) and `prepend`.
pub(super) fn append(c: &mut Call<'_, '_>) -> Result<Te> {
    c.arity(2, 2)?;
    let value = c.pop();
    let list = c.pop();
    let filter = if c.name == "prepend" { "prepend" } else { "append" };
    Ok(list.filter(filter, vec![("value", value)]))
}

pub(super) fn without(c: &mut Call<'_, '_>) -> Result<Te> {
    c.arity(2, usize::MAX)?;
    let mut args = c.take_all();
    let list = args.remove(0);
    Ok(list.filter("without", vec![("values", Te::Array(args))]))
}

pub(super) fn concat(c: &mut Call<'_, '_>) -> Result<Te> {
    let mut it = c.take_all().into_iter();
    let Some(mut acc) = it.next() else {
        return Ok(Te::Array(Vec::new()));
    };
    for a in it {
        acc = acc.filter("concat", vec![("with", a)]);
    }
    Ok(acc)
}

pub(super) fn until(c: &mut Call<'_, '_>) -> Result<Te> {
    c.arity(1, 1)?;
    Ok(Te::call("range", vec![("end", c.pop())]))
}

pub(super) fn until_step(c: &mut Call<'_, '_>) -> Result<Te> {
    c.arity(3, 3)?;
    let step = c.pop();
    let end = c.pop();
    let start = c.pop();
    Ok(Te::call(
        "range",
        vec![("start", start), ("end", end), ("step_by", step)],
    ))
}

pub(super) fn has_key(c: &mut Call<'_, '_>) -> Result<Te> {
    c.arity(2, 2)?;
    let key = c.pop();
    let map = c.pop();
    if let (Te::Path(p), Te::Str(k), Ctx::Condition) = (&map, &key, c.ctx) {
        let mut path = p.clone();
        path.segs.push(Seg::Key(k.clone()));
        return Ok(Te::Test(path, "defined".into(), vec![], false));
    }
    Ok(map.filter("has_key", vec![("key", key)]))
}

pub(super) fn get(c: &mut Call<'_, '_>) -> Result<Te> {
    c.arity(2, 2)?;
    let key = c.pop();
    let map = c.pop();
    Ok(map.filter("get", vec![("key", key), ("default", Te::Str(String::new()))]))
}

pub(super) fn dig(c: &mut Call<'_, '_>) -> Result<Te> {
    c.arity(3, usize::MAX)?;
    let map = c.pop();
    let default = c.pop();
    Ok(map.filter("dig", vec![("keys", Te::Array(c.take_all())), ("default", default)]))
}

pub(super) fn dict(c: &mut Call<'_, '_>) -> Result<Te> {
    if !c.n.is_multiple_of(2) {
        return c.refuse("dict needs key and value pairs");
    }
    let mut kwargs = Vec::new();
    for (i, pair) in c.args.chunks(2).enumerate() {
        match c.str_literal(2 * i) {
            Some(k) if is_word(&k) && k.chars().next().is_some_and(|ch| !ch.is_ascii_digit()) => {
                kwargs.push((k, pair[1].clone()));
            }
            _ => return c.refuse("tera builds a map only with constant keys made of letters, digits and `_`"),
        }
    }
    Ok(Te::Call("dict".into(), kwargs))
}
