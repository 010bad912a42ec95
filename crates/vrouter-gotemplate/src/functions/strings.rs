//! sprig's string functions of more than one value, and `quote`.

use super::{Call, Result};
use crate::tera_expr::Te;
use crate::translate::Ctx;

pub(super) fn quote(c: &mut Call<'_, '_>) -> Result<Te> {
    if c.n != 1 {
        return c.refuse(format!("`{}` with other than one value", c.name));
    }
    Ok(c.pop().filter(c.name, vec![]))
}

/// Tests and trims at the start or end of a string, and `contains`.
pub(super) fn affix(c: &mut Call<'_, '_>) -> Result<Te> {
    c.arity(2, 2)?;
    let s = c.pop();
    let a = c.pop();
    let (filter, key) = match c.name {
        "trimPrefix" => ("trim_prefix", "prefix"),
        "trimSuffix" => ("trim_suffix", "suffix"),
        "trimAll" | "trimall" => ("trim_all", "chars"),
        "hasPrefix" => ("has_prefix", "prefix"),
        "hasSuffix" => ("has_suffix", "suffix"),
        _ => ("contains", "substr"),
    };
    // A condition on a variable reads better as a tera test.
    if let (Te::Path(p), "has_prefix" | "has_suffix", Ctx::Condition) = (&s, filter, c.ctx) {
        let test = if filter == "has_prefix" {
            "starting_with"
        } else {
            "ending_with"
        };
        return Ok(Te::Test(p.clone(), test.into(), vec![a], false));
    }
    Ok(s.filter(filter, vec![(key, a)]))
}

pub(super) fn replace(c: &mut Call<'_, '_>) -> Result<Te> {
    c.arity(3, 3)?;
    let s = c.pop();
    let new = c.pop();
    let old = c.pop();
    Ok(s.filter("replace", vec![("from", old), ("to", new)]))
}

/// Functions of a string and a count: `repeat`, `trunc`, `indent`, `nindent`.
pub(super) fn sized(c: &mut Call<'_, '_>) -> Result<Te> {
    c.arity(2, 2)?;
    let s = c.pop();
    let count = c.pop();
    let (filter, key) = match c.name {
        "repeat" => ("repeat", "count"),
        "trunc" => ("trunc", "length"),
        "indent" => ("sprig_indent", "width"),
        _ => ("nindent", "width"),
    };
    Ok(s.filter(filter, vec![(key, count)]))
}

pub(super) fn substr(c: &mut Call<'_, '_>) -> Result<Te> {
    c.arity(3, 3)?;
    let s = c.pop();
    let end = c.pop();
    let start = c.pop();
    Ok(s.filter("substr", vec![("start", start), ("end", end)]))
}

/// sprig joins its non-nil values with spaces.
pub(super) fn cat(c: &mut Call<'_, '_>) -> Result<Te> {
    let mut parts = Vec::new();
    for (i, a) in c.take_all().into_iter().enumerate() {
        if i > 0 {
            parts.push(Te::Str(" ".into()));
        }
        parts.push(a);
    }
    Ok(match parts.len() {
        0 => Te::Str(String::new()),
        1 => parts.pop().expect("one"),
        _ => Te::Concat(parts),
    })
}

pub(super) fn join(c: &mut Call<'_, '_>) -> Result<Te> {
    c.arity(2, 2)?;
    let list = c.pop();
    let sep = c.pop();
    if matches!(&sep, Te::Str(s) if s.contains("\\n") || s.contains("\\t")) {
        return c.refuse("tera's join reads `\\n` and `\\t` in the separator as newline and tab");
    }
    Ok(list.filter("join", vec![("sep", sep)]))
}

pub(super) fn split_list(c: &mut Call<'_, '_>) -> Result<Te> {
    c.arity(2, 2)?;
    let s = c.pop();
    let sep = c.pop();
    if matches!(&sep, Te::Str(x) if x.is_empty()) {
        return c.refuse("splitting at every character has no tera counterpart");
    }
    Ok(s.filter("split", vec![("pat", sep)]))
}

/// `split` and `splitn`, whose map result has no tera counterpart.
pub(super) fn split_map(c: &mut Call<'_, '_>) -> Result<Te> {
    c.refuse("returns a map with keys `_0`, `_1`, …; use `splitList` (a list) in the Go template first")
}
