//! Go template builtins that are not logic: `index`, `slice`, `print`,
//! `println`, `printf` (`len` is a plain filter).

use std::collections::HashSet;

use super::comparison::may_be_param;
use super::{Call, Result, index};
use crate::go_template::tera_expr::Te;
use crate::go_template::translate::verbs;

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
    // number was a string there (a `json.Number`): between two values that may
    // be params, Go's spacing depends on what they hold.
    let go_valued = &c.t.go_valued_vars;
    let param_pair = c
        .args
        .windows(2)
        .any(|w| may_be_param(&w[0], go_valued) && may_be_param(&w[1], go_valued));
    if param_pair {
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
/// string), and of the number here.
pub(crate) fn verb_refusal(verb: &str, arg: &Te, go_valued: &HashSet<String>) -> Option<&'static str> {
    (verb.ends_with(['x', 'X']) && may_be_param(arg, go_valued)).then_some(
        "`%x` of a param's number wrote the hex of its digits in the Go operator (a json.Number is a \
         string) and would write the hex of the number here; convert it with `int` (`printf \"%x\" (int .n)`) \
         to format the number, or `toString` to format its digits",
    )
}
