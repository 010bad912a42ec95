//! sprig's regular expression functions.

use super::{Call, Result};
use crate::tera_expr::Te;

/// `regexMatch` and `regexFind` (and their `must` forms).
pub(super) fn first(c: &mut Call<'_, '_>) -> Result<Te> {
    c.arity(2, 2)?;
    let s = c.pop();
    let re = c.pop();
    let filter = if c.name.ends_with("Match") {
        "regex_match"
    } else {
        "regex_find"
    };
    if c.name == "mustRegexMatch" {
        return c.refuse("use regexMatch: an invalid expression makes it false");
    }
    Ok(s.filter(filter, vec![("regex", re)]))
}

/// `regexFindAll` and `regexSplit`, which take a count.
pub(super) fn counted(c: &mut Call<'_, '_>) -> Result<Te> {
    c.arity(3, 3)?;
    let count = c.pop();
    let s = c.pop();
    let re = c.pop();
    let filter = if c.name == "regexFindAll" {
        "regex_find_all"
    } else {
        "regex_split"
    };
    Ok(s.filter(filter, vec![("regex", re), ("n", count)]))
}

pub(super) fn replace(c: &mut Call<'_, '_>) -> Result<Te> {
    c.arity(3, 3)?;
    let repl = c.pop();
    let s = c.pop();
    let re = c.pop();
    let filter = if c.name == "regexReplaceAll" {
        "regex_replace_all"
    } else {
        "regex_replace_all_literal"
    };
    Ok(s.filter(filter, vec![("regex", re), ("replacement", repl)]))
}
