//! Go template builtins that are not logic: `index`, `slice`, `print`,
//! `println`, `printf` (`len` is a plain filter).

use std::collections::HashSet;

use super::comparison::may_be_param;
use super::{Call, Result, index};
use crate::tera_expr::Te;
use crate::translate::verbs;

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
    // Go's `print` spaces two operands when neither is a string, and a param's
    // number was a string there (a `json.Number`): next to a value that may be
    // a param, Go's spacing depends on what the param holds.
    let go_valued = &c.t.go_valued_vars;
    let hazard =
        |a: &Te, b: &Te| (may_be_param(a, go_valued) || may_be_param(b, go_valued)) && !is_text(a) && !is_text(b);
    if c.args.windows(2).any(|w| hazard(&w[0], &w[1])) {
        return c.refuse(
            "Go's `print` put a space between two values unless one was a string, and a param's number \
             was a string there (json.Number); write the separator: `print .a \" \" .b` or `printf \"%v%v\"`",
        );
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
    if let Te::Str(f) = &format
        && let Some(verbs) = verbs(f)
        && let Some(reason) = verbs
            .iter()
            .zip(&args)
            .find_map(|((_, v), a)| verb_refusal(v, a, &c.t.go_valued_vars))
    {
        return c.refuse(reason);
    }
    Ok(Te::call("printf", vec![("format", format), ("args", Te::Array(args))]))
}

/// Why a `printf` verb formats `arg` other than the Go operator did: `%x` of a
/// param's number wrote the hex of its digits there (a `json.Number` is a
/// string), and of the number here; `%s` and `%q` of one of Go's own numbers
/// wrote `%!s(int=2)` or a quoted character there, and the number here.
pub(crate) fn verb_refusal(verb: &str, arg: &Te, go_valued: &HashSet<String>) -> Option<&'static str> {
    if verb.ends_with(['x', 'X']) && may_be_param(arg, go_valued) {
        return Some(
            "`%x` of a param's number wrote the hex of its digits in the Go operator (a json.Number is a \
             string) and would write the hex of the number here; convert it with `int` (`printf \"%x\" (int .n)`) \
             to format the number, or `toString` to format its digits",
        );
    }
    if verb.ends_with(['s', 'q']) && go_number(arg) {
        return Some(
            "Go's `%s` and `%q` of one of its own numbers (`len`, `add`, a literal) wrote `%!s(int=2)` or a \
             quoted character, and would write the number here; use `%d` or `%v`",
        );
    }
    None
}

/// A value that is a string in Go and here.
fn is_text(te: &Te) -> bool {
    match te {
        Te::Str(_) | Te::Concat(_) => true,
        Te::Filter(_, name, _) => matches!(
            name.as_str(),
            "to_string"
                | "upper"
                | "lower"
                | "trim"
                | "quote"
                | "squote"
                | "replace"
                | "join"
                | "trim_prefix"
                | "trim_suffix"
                | "sprig_title"
                | "b64enc"
        ),
        Te::Call(name, _) => matches!(name.as_str(), "printf" | "print" | "println"),
        _ => false,
    }
}

/// A number Go's own functions or a literal made (never a param's).
fn go_number(te: &Te) -> bool {
    match te {
        Te::Int(_) | Te::Float(_) | Te::Math(..) => true,
        Te::Filter(_, name, _) => matches!(name.as_str(), "len" | "sprig_int" | "atoi" | "div" | "round" | "float"),
        Te::Call(name, _) => matches!(name.as_str(), "max" | "min"),
        _ => false,
    }
}
