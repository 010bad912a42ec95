//! `eq`, `ne`, `lt`, `le`, `gt`, `ge` as the Go operator evaluated them.
//!
//! The Go operator decoded params with `UseNumber`: a param's number reached
//! `text/template` as a `json.Number`, a string, so `eq .vlan "100"` compared the
//! texts and was true for `vlan: 100`, and `lt .a .b` of two numeric params
//! ordered their digits (`"10"` before `"9"`). Here numbers are numbers. So an
//! equality with a string that reads as a number compares the other side's text
//! (`vlan | to_string == "100"`, which is what Go compared; for a string the text
//! is the string itself), as does an equality of two values that may both be
//! params. An ordering of two values that may both be params has no faithful
//! form and is refused. Where Go itself failed (a `json.Number` against a number
//! literal: "incompatible types for comparison"), numbers compare as numbers.

use std::collections::HashSet;

use super::{Call, Result};
use crate::tera_expr::Te;

pub(super) fn eq(c: &mut Call<'_, '_>) -> Result<Te> {
    c.arity(2, usize::MAX)?;
    let mut args = c.take_all();
    let first = args.remove(0);
    if args.iter().all(|a| matches!(a, Te::Str(_))) && args.len() > 1 {
        let needle = if args.iter().any(reads_as_number) && may_be_param(&first, &c.t.go_valued_vars) {
            text_of(first)
        } else {
            first
        };
        return Ok(Te::In(Box::new(needle), Box::new(Te::Array(args))));
    }
    let go_valued = &c.t.go_valued_vars;
    let mut cmps: Vec<Te> = args
        .into_iter()
        .map(|a| equality("==", first.clone(), a, go_valued))
        .collect();
    Ok(if cmps.len() == 1 {
        cmps.pop().expect("one")
    } else {
        Te::Or(cmps)
    })
}

/// `ne`, `lt`, `le`, `gt`, `ge`.
pub(super) fn compare(c: &mut Call<'_, '_>) -> Result<Te> {
    c.arity(2, 2)?;
    let op = match c.name {
        "ne" => "!=",
        "lt" => "<",
        "le" => "<=",
        "gt" => ">",
        _ => ">=",
    };
    let r = c.pop();
    let l = c.pop();
    if op == "!=" {
        return Ok(equality(op, l, r, &c.t.go_valued_vars));
    }
    if [&l, &r].iter().any(|a| matches!(a, Te::Str(_))) {
        return c.refuse("tera orders only numbers with < and >, and this compares strings");
    }
    if may_be_param(&l, &c.t.go_valued_vars) && may_be_param(&r, &c.t.go_valued_vars) {
        return c.refuse(
            "the Go operator compared these as text: params' numbers were json.Number strings, so \
             `lt`/`gt` ordered their digits (\"10\" before \"9\"); convert them with `int` \
             (`gt (int .a) (int .b)`) to compare numbers, which converts as it renders",
        );
    }
    Ok(Te::Cmp(op, Box::new(l), Box::new(r)))
}

/// `l == r` or `l != r`, comparing texts where Go compared a `json.Number`'s.
fn equality(op: &'static str, l: Te, r: Te, go_valued: &HashSet<String>) -> Te {
    let (l, r) = match (may_be_param(&l, go_valued), may_be_param(&r, go_valued)) {
        (true, true) => (text_of(l), text_of(r)),
        (true, false) if reads_as_number(&r) => (text_of(l), r),
        (false, true) if reads_as_number(&l) => (l, text_of(r)),
        _ => (l, r),
    };
    Te::Cmp(op, Box::new(l), Box::new(r))
}

fn text_of(te: Te) -> Te {
    te.filter("to_string", vec![])
}

/// A string literal that a param's number could be the text of.
fn reads_as_number(te: &Te) -> bool {
    matches!(te, Te::Str(s) if !s.is_empty()
        && s.chars().all(|c| c.is_ascii_digit() || matches!(c, '-' | '+' | '.' | 'e' | 'E'))
        && s.parse::<f64>().is_ok())
}

/// Whether the value may be a param's number (a `json.Number` in Go): a
/// param or variable, or what passes one on unchanged. Literals, Go's own
/// numbers (`len`, `add`) and the strings functions make are not.
/// `go_valued` are the variables known to hold Go's own values.
pub(crate) fn may_be_param(te: &Te, go_valued: &HashSet<String>) -> bool {
    let may = |t: &Te| may_be_param(t, go_valued);
    match te {
        Te::Path(p) => !(p.segs.is_empty() && go_valued.contains(&p.root)),
        Te::Filter(input, name, args) => {
            matches!(
                name.as_str(),
                "if_empty" | "if_not_empty" | "first" | "last" | "ternary"
            ) && (may(input) || args.iter().any(|(_, a)| may(a)))
        }
        Te::Call(name, args) => name == "coalesce" && args.iter().any(|(_, a)| may(a)),
        Te::Array(items) => items.iter().any(may),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tera_expr::Path;

    fn var(name: &str) -> Te {
        Te::Path(Path::var(name))
    }

    #[test]
    fn a_param_against_a_number_s_text_compares_texts() {
        let text = |name: &str| var(name).filter("to_string", vec![]);
        let cases = [
            (var("vlan"), Te::Str("100".into()), text("vlan"), Te::Str("100".into())),
            (Te::Str("1.5".into()), var("w"), Te::Str("1.5".into()), text("w")),
            (var("a"), var("b"), text("a"), text("b")),
            // A word no number's text can be: tera's comparison is Go's.
            (
                var("role"),
                Te::Str("spine".into()),
                var("role"),
                Te::Str("spine".into()),
            ),
            // Go failed on a json.Number against a number: numbers compare.
            (var("n"), Te::Int(7), var("n"), Te::Int(7)),
            // A range's index is a Go int: Go failed on it against a string.
            (var("i"), Te::Str("0".into()), var("i"), Te::Str("0".into())),
            (
                var("l").filter("len", vec![]),
                Te::Str("3".into()),
                var("l").filter("len", vec![]),
                Te::Str("3".into()),
            ),
        ];
        let go_valued: HashSet<String> = ["i".to_owned()].into();
        for (l, r, want_l, want_r) in cases {
            assert_eq!(
                equality("==", l, r, &go_valued),
                Te::Cmp("==", Box::new(want_l), Box::new(want_r))
            );
        }
    }
}
