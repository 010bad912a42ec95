//! Quote characters a Go expression writes into the value it outputs.
//!
//! The Go operator wrote values raw, so a `"` or `'` that `quote`, `squote`,
//! `printf "%q"`, `toJson` or a string literal put into an output was read by
//! bash (commands) or the VyOS parser (config) as quoting, not as part of the
//! value. The engine escapes every value, so after conversion those characters
//! would reach VyOS inside the value. Where the quotes wrap the whole value
//! (`quote .x`, `printf "%q" .x`) they are dropped, with a note: the value is
//! then what bash or VyOS read. Anywhere else in a written value the
//! expression is refused, because which characters are quoting and which are
//! the value's can no longer be told apart.

use std::collections::HashSet;

use super::tera_expr::Te;
use super::translate::verbs;

/// The value inside quotes that wrap the whole of `te`, and the function that
/// wrote them: `x | quote`, `x | squote`, `printf(format="%q", args=[x])`.
pub(crate) fn unwrap(te: &Te) -> Option<(Te, &'static str)> {
    match te {
        Te::Filter(input, name, args) if args.is_empty() && name == "quote" => Some(((**input).clone(), "quote")),
        Te::Filter(input, name, args) if args.is_empty() && name == "squote" => Some(((**input).clone(), "squote")),
        Te::Call(name, args) if name == "printf" => match args.as_slice() {
            [(f, Te::Str(format)), (a, Te::Array(values))]
                if f == "format" && a == "args" && format == "%q" && values.len() == 1 =>
            {
                Some((values[0].clone(), "printf \"%q\""))
            }
            // `printf "%s" (quote .x)`: the format adds nothing.
            [(f, Te::Str(format)), (a, Te::Array(values))]
                if f == "format" && a == "args" && (format == "%s" || format == "%v") && values.len() == 1 =>
            {
                unwrap(&values[0])
            }
            _ => None,
        },
        _ => None,
    }
}

/// The first construct in `te` that writes quote characters into its value,
/// named for an error; `quoted_vars` are the variables holding such a value.
pub(crate) fn writer(te: &Te, quoted_vars: &HashSet<String>) -> Option<String> {
    match te {
        Te::Path(p) if quoted_vars.contains(&p.root) => Some(format!(
            "the variable `{}`, set to a value with quotes written by the template",
            p.root
        )),
        Te::Str(s) if s.contains(['"', '\'', '`']) => Some(format!("the string {s:?}")),
        Te::Filter(input, name, args) => filter_writer(input, name, args, quoted_vars),
        Te::Call(name, args) => {
            if name == "printf"
                && let Some((_, Te::Str(format))) = args.iter().find(|(k, _)| k == "format")
                && writes_quotes(format)
            {
                return Some(format!("printf {format:?}"));
            }
            args.iter().find_map(|(_, a)| writer(a, quoted_vars))
        }
        Te::Array(items) | Te::Concat(items) => items.iter().find_map(|a| writer(a, quoted_vars)),
        // Numbers and booleans: no quotes.
        _ => None,
    }
}

fn filter_writer(input: &Te, name: &str, args: &[(String, Te)], quoted_vars: &HashSet<String>) -> Option<String> {
    match name {
        "quote" => return Some("`quote`".into()),
        "squote" => return Some("`squote`".into()),
        "to_json" | "to_raw_json" | "to_pretty_json" => return Some("`toJson`".into()),
        // Numbers, booleans, and encodings that leave no quote.
        "b64enc" | "b32enc" | "len" | "sprig_int" | "atoi" | "float" | "div" | "round" | "has" | "has_key"
        | "contains" | "has_prefix" | "has_suffix" | "regex_match" => return None,
        _ => {}
    }
    writer(input, quoted_vars).or_else(|| {
        args.iter()
            .filter(|(key, _)| !matches!(key.as_str(), "from" | "prefix" | "suffix" | "chars" | "pat" | "regex"))
            .find_map(|(_, a)| writer(a, quoted_vars))
    })
}

/// A format whose own text or verbs write quotes (`%q`, `\"%s\"`).
fn writes_quotes(format: &str) -> bool {
    format.contains(['"', '\'', '`']) || verbs(format).is_none_or(|vs| vs.iter().any(|(_, v)| v.ends_with('q')))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tera_expr::Path;

    fn var(name: &str) -> Te {
        Te::Path(Path::var(name))
    }

    fn printf(format: &str, arg: Te) -> Te {
        Te::call(
            "printf",
            vec![("format", Te::Str(format.into())), ("args", Te::Array(vec![arg]))],
        )
    }

    #[test]
    fn quotes_around_the_whole_value_unwrap() {
        assert_eq!(unwrap(&var("x").filter("quote", vec![])), Some((var("x"), "quote")));
        assert_eq!(unwrap(&printf("%q", var("x"))), Some((var("x"), "printf \"%q\"")));
        assert_eq!(unwrap(&printf("a%q", var("x"))), None);
        assert_eq!(
            unwrap(&printf("%s", var("x").filter("squote", vec![]))),
            Some((var("x"), "squote"))
        );
        assert_eq!(unwrap(&var("x").filter("upper", vec![])), None);
    }

    #[test]
    fn quotes_written_inside_a_value_are_found() {
        let quoted: HashSet<String> = ["d".to_owned()].into();
        let join = |items| Te::Array(items).filter("join", vec![("sep", Te::Str(" ".into()))]);
        let found = [
            var("x").filter("quote", vec![]).filter("upper", vec![]),
            join(vec![var("a").filter("squote", vec![]), var("b")]),
            printf("%5q", var("x")),
            printf("\"%s\"", var("x")),
            var("x").filter("if_empty", vec![("value", Te::Str("\"none\"".into()))]),
            var("x").filter("to_json", vec![]),
            var("d"),
        ];
        for te in found {
            assert!(writer(&te, &quoted).is_some(), "{te:?}");
        }
        let clean = [
            var("x"),
            printf("%s", var("x")),
            var("x").filter(
                "replace",
                vec![("from", Te::Str("\"".into())), ("to", Te::Str("".into()))],
            ),
            var("x").filter("quote", vec![]).filter("len", vec![]),
            join(vec![var("a"), var("b")]),
        ];
        for te in clean {
            assert_eq!(writer(&te, &quoted), None, "{te:?}");
        }
    }
}
