//! Go's `fmt` formatting of template values, for the `printf`, `print` and
//! `println` functions that templates converted from Go call.
//!
//! Values are JSON values. Integers format as Go's integers; a string verb (`%s`,
//! `%v`, `%q`) writes a number as its JSON text, as the Go operator did (it decoded
//! params with `UseNumber`, so a number was its text); `%x` and the other numeric
//! verbs format the number itself. Lists print as `[a b]` and maps as
//! `map[k:v]` with keys in order, as `fmt` prints `[]any` and `map[string]any`.

use serde_json::{Number, Value};

/// Something `printf` cannot do, as opposed to a mismatch Go writes inline
/// (`%!d(string=x)`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FormatError(pub String);

/// `fmt.Sprintf(format, args...)`. `limit` bounds the output (and any width or
/// precision) so a format cannot allocate more than a value may hold.
pub(crate) fn sprintf(format: &str, args: &[Value], limit: usize) -> Result<String, FormatError> {
    let mut out = String::new();
    let mut arg = 0;
    let mut rest = format;
    while let Some(percent) = rest.find('%') {
        out.push_str(&rest[..percent]);
        let (mut spec, after_spec) = parse_spec(&rest[percent + 1..], limit)?;
        rest = after_spec;
        let Some(verb) = rest.chars().next() else {
            out.push_str("%!(NOVERB)");
            break;
        };
        rest = &rest[verb.len_utf8()..];
        if verb == '%' {
            out.push('%');
            continue;
        }
        let Some(value) = args.get(arg) else {
            out.push_str(&format!("%!{verb}(MISSING)"));
            continue;
        };
        arg += 1;
        if verb == 'v' {
            // `%+v` and `%#v` only change how structs print; `#` is Go syntax.
            if spec.sharp {
                return Err(FormatError("printf: `%#v` (Go syntax) is not supported".into()));
            }
            spec.plus = false;
        }
        format_arg(&mut out, &spec, verb, value);
        if out.len() > limit {
            return Err(FormatError(format!("printf: the output is larger than {limit} bytes")));
        }
    }
    out.push_str(rest);
    if arg < args.len() {
        out.push_str(&extra_args(&args[arg..]));
    }
    if out.len() > limit {
        return Err(FormatError(format!("printf: the output is larger than {limit} bytes")));
    }
    Ok(out)
}

/// The flags, width and precision after a `%`, and the text after them.
fn parse_spec(mut rest: &str, limit: usize) -> Result<(Spec, &str), FormatError> {
    let mut spec = Spec::default();
    // Flags.
    loop {
        match rest.chars().next() {
            Some('#') => spec.sharp = true,
            Some('0') => spec.zero = !spec.minus,
            Some('+') => spec.plus = true,
            Some('-') => {
                spec.minus = true;
                spec.zero = false;
            }
            Some(' ') => spec.space = true,
            _ => break,
        }
        rest = &rest[1..];
    }
    if rest.starts_with('[') || rest.starts_with('*') {
        return Err(FormatError(
            "printf: argument indexes (`%[1]d`) and `*` widths are not supported".into(),
        ));
    }
    let digits = rest.chars().take_while(char::is_ascii_digit).count();
    if digits > 0 {
        spec.width = Some(parse_bounded(&rest[..digits], limit)?);
        rest = &rest[digits..];
    }
    if let Some(after) = rest.strip_prefix('.') {
        if after.starts_with('[') || after.starts_with('*') {
            return Err(FormatError(
                "printf: argument indexes (`%[1]d`) and `*` precisions are not supported".into(),
            ));
        }
        let digits = after.chars().take_while(char::is_ascii_digit).count();
        spec.precision = Some(if digits == 0 {
            0
        } else {
            parse_bounded(&after[..digits], limit)?
        });
        rest = &after[digits..];
    }
    Ok((spec, rest))
}

/// Go's note for arguments no verb used: `%!(EXTRA int=1, string=a)`.
fn extra_args(args: &[Value]) -> String {
    let extra: Vec<String> = args
        .iter()
        .map(|v| match v {
            Value::Null => "<nil>".to_owned(),
            v => format!("{}={}", type_name(v), sprint_value(v)),
        })
        .collect();
    format!("%!(EXTRA {})", extra.join(", "))
}

fn parse_bounded(digits: &str, limit: usize) -> Result<usize, FormatError> {
    match digits.parse::<usize>() {
        // Go itself refuses widths and precisions above 1e6 (`%!(BADWIDTH)`).
        Ok(n) if n <= limit && n <= 1_000_000 => Ok(n),
        _ => Err(FormatError(format!(
            "printf: a width or precision of {digits} is larger than a value may be"
        ))),
    }
}

/// `fmt.Sprint(args...)`: spaces between operands when neither is a string.
pub(crate) fn sprint(args: &[Value]) -> String {
    let mut out = String::new();
    for (i, v) in args.iter().enumerate() {
        if i > 0 && !v.is_string() && !args[i - 1].is_string() {
            out.push(' ');
        }
        out.push_str(&sprint_value(v));
    }
    out
}

/// `fmt.Sprintln(args...)`: always spaces, and a newline.
pub(crate) fn sprintln(args: &[Value]) -> String {
    let mut out: Vec<String> = args.iter().map(sprint_value).collect::<Vec<_>>();
    out.push(String::new());
    let joined = out.join(" ");
    format!("{}\n", &joined[..joined.len() - 1])
}

/// One value as `%v` writes it (`<nil>` for null).
pub(crate) fn sprint_value(value: &Value) -> String {
    let mut out = String::new();
    write_v(&mut out, value, true);
    out
}

fn write_v(out: &mut String, value: &Value, top: bool) {
    match value {
        Value::Null => out.push_str("<nil>"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&number_text(n)),
        Value::String(s) => out.push_str(s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                write_v(out, item, false);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push_str("map[");
            for (i, (k, v)) in super::sprig::sorted(map).into_iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                out.push_str(k);
                out.push(':');
                write_v(out, v, false);
            }
            out.push(']');
        }
    }
    let _ = top;
}

/// A JSON number as its text: integers exactly, floats as the shortest decimal
/// that reads back the same (what Go's JSON encoder writes, below 1e21).
pub(crate) fn number_text(n: &Number) -> String {
    match (n.as_i64(), n.as_u64(), n.as_f64()) {
        (Some(i), _, _) => i.to_string(),
        (None, Some(u), _) => u.to_string(),
        (None, None, Some(f)) => f.to_string(),
        (None, None, None) => n.to_string(),
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_i64() => "int64",
        Value::Number(n) if n.is_u64() => "uint64",
        Value::Number(_) => "float64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

#[derive(Debug, Default, Clone)]
struct Spec {
    sharp: bool,
    zero: bool,
    plus: bool,
    minus: bool,
    space: bool,
    width: Option<usize>,
    precision: Option<usize>,
}

impl Spec {
    /// Pads to the width with spaces (or zeros when `zero`), counting characters.
    fn pad(&self, out: &mut String, text: &str, zero: bool) {
        let count = text.chars().count();
        let padding = self.width.map_or(0, |w| w.saturating_sub(count));
        let fill = if zero { '0' } else { ' ' };
        if self.minus {
            out.push_str(text);
            out.extend(std::iter::repeat_n(' ', padding));
        } else {
            out.extend(std::iter::repeat_n(fill, padding));
            out.push_str(text);
        }
    }
}

fn bad_verb(out: &mut String, verb: char, value: &Value) {
    match value {
        Value::Null => out.push_str(&format!("%!{verb}(<nil>)")),
        v => out.push_str(&format!("%!{verb}({}={})", type_name(v), sprint_value(v))),
    }
}

fn format_arg(out: &mut String, spec: &Spec, verb: char, value: &Value) {
    match value {
        Value::Null => match verb {
            'v' => spec.pad(out, "<nil>", false),
            _ => bad_verb(out, verb, value),
        },
        Value::Bool(b) => match verb {
            't' | 'v' => spec.pad(out, if *b { "true" } else { "false" }, spec.zero),
            _ => bad_verb(out, verb, value),
        },
        Value::String(s) => format_string(out, spec, verb, s, value),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                format_int(out, spec, verb, i < 0, i.unsigned_abs(), value);
            } else if let Some(u) = n.as_u64() {
                format_int(out, spec, verb, false, u, value);
            } else {
                format_float(out, spec, verb, n.as_f64().unwrap_or(f64::NAN), value);
            }
        }
        Value::Array(_) | Value::Object(_) => match verb {
            'v' => spec.pad(out, &sprint_value(value), spec.zero),
            _ => bad_verb(out, verb, value),
        },
    }
}

fn format_string(out: &mut String, spec: &Spec, verb: char, s: &str, value: &Value) {
    let truncated: String = match spec.precision {
        Some(p) => s.chars().take(p).collect(),
        None => s.to_owned(),
    };
    match verb {
        's' | 'v' => spec.pad(out, &truncated, spec.zero),
        'q' => {
            let quoted = if spec.sharp && can_backquote(&truncated) {
                format!("`{truncated}`")
            } else {
                go_quote(&truncated, spec.plus)
            };
            spec.pad(out, &quoted, spec.zero);
        }
        'x' | 'X' => {
            let bytes: Vec<u8> = match spec.precision {
                Some(p) => s.bytes().take(p).collect(),
                None => s.bytes().collect(),
            };
            let mut hex = String::new();
            for (i, b) in bytes.iter().enumerate() {
                if spec.space && i > 0 {
                    hex.push(' ');
                }
                if spec.sharp && (spec.space || i == 0) {
                    hex.push_str(if verb == 'x' { "0x" } else { "0X" });
                }
                if verb == 'x' {
                    hex.push_str(&format!("{b:02x}"));
                } else {
                    hex.push_str(&format!("{b:02X}"));
                }
            }
            spec.pad(out, &hex, spec.zero);
        }
        _ => bad_verb(out, verb, value),
    }
}

fn format_int(out: &mut String, spec: &Spec, verb: char, negative: bool, magnitude: u64, value: &Value) {
    if number_as_text(out, spec, verb, value) {
        return;
    }
    let (base, upper) = match verb {
        'd' => (10, false),
        'b' => (2, false),
        'o' | 'O' => (8, false),
        'x' => (16, false),
        'X' => (16, true),
        'c' => {
            match char_of(negative, magnitude) {
                Some(c) => spec.pad(out, &c.to_string(), false),
                None => spec.pad(out, "\u{fffd}", false),
            }
            return;
        }
        'U' => {
            spec.pad(out, &code_point(spec, negative, magnitude), false);
            return;
        }
        // Floats' verbs, and any other, do not apply to an integer.
        _ => {
            bad_verb(out, verb, value);
            return;
        }
    };
    format_in_base(out, spec, verb, (base, upper), negative, magnitude);
}

/// `%U`: `U+0041`, and with `#` the character too (`U+0041 'A'`).
fn code_point(spec: &Spec, negative: bool, magnitude: u64) -> String {
    let mut text = if negative {
        format!("U+{:04X}", (magnitude as i64).wrapping_neg() as u64)
    } else {
        format!("U+{magnitude:04X}")
    };
    if spec.sharp
        && let Some(c) = char_of(negative, magnitude).filter(|c| !c.is_control())
    {
        text.push_str(&format!(" '{c}'"));
    }
    text
}

/// An integer's digits in `base` (upper-case hex if `upper`), with Go's
/// precision, zero padding, base prefix and sign.
fn format_in_base(
    out: &mut String,
    spec: &Spec,
    verb: char,
    (base, upper): (u32, bool),
    negative: bool,
    magnitude: u64,
) {
    let mut digits = match (base, upper) {
        (2, _) => format!("{magnitude:b}"),
        (8, _) => format!("{magnitude:o}"),
        (16, false) => format!("{magnitude:x}"),
        (16, true) => format!("{magnitude:X}"),
        _ => magnitude.to_string(),
    };
    let mut min_digits = 0;
    match spec.precision {
        Some(0) if magnitude == 0 => {
            spec.pad(out, "", false);
            return;
        }
        Some(p) => min_digits = p,
        None if spec.zero && !spec.minus && spec.width.is_some() => {
            min_digits = spec.width.unwrap_or(0);
            if negative || spec.plus || spec.space {
                min_digits = min_digits.saturating_sub(1);
            }
        }
        None => {}
    }
    if digits.len() < min_digits {
        digits = format!("{}{digits}", "0".repeat(min_digits - digits.len()));
    }
    let mut prefix = String::new();
    if spec.sharp {
        match base {
            2 => prefix.push_str("0b"),
            8 if !digits.starts_with('0') => prefix.push('0'),
            16 => prefix.push_str(if upper { "0X" } else { "0x" }),
            _ => {}
        }
    }
    if verb == 'O' {
        prefix.insert_str(0, "0o");
    }
    let sign = if negative {
        "-"
    } else if spec.plus {
        "+"
    } else if spec.space {
        " "
    } else {
        ""
    };
    spec.pad(out, &format!("{sign}{prefix}{digits}"), false);
}

/// The string verbs write a number's text, as the Go operator printed its
/// json.Number; whether `verb` was one of them.
fn number_as_text(out: &mut String, spec: &Spec, verb: char, value: &Value) -> bool {
    match verb {
        'v' | 's' => spec.pad(out, &number_text_of(value), spec.zero),
        'q' => spec.pad(out, &go_quote(&number_text_of(value), spec.plus), spec.zero),
        _ => return false,
    }
    true
}

fn number_text_of(value: &Value) -> String {
    match value {
        Value::Number(n) => number_text(n),
        other => sprint_value(other),
    }
}

fn char_of(negative: bool, magnitude: u64) -> Option<char> {
    if negative {
        return None;
    }
    u32::try_from(magnitude).ok().and_then(char::from_u32)
}

fn format_float(out: &mut String, spec: &Spec, verb: char, v: f64, value: &Value) {
    if number_as_text(out, spec, verb, value) {
        return;
    }
    let text = match verb {
        'e' | 'E' => format_e(v, spec.precision.unwrap_or(6), verb == 'E'),
        'f' | 'F' => format_f(v, spec.precision.unwrap_or(6)),
        'g' | 'G' => format_g(v, spec.precision, verb == 'G'),
        _ => {
            bad_verb(out, verb, value);
            return;
        }
    };
    if spec.sharp {
        // `#` keeps trailing zeros and the point; rarely used in templates.
        bad_verb(out, verb, value);
        return;
    }
    let (sign, body) = match text.strip_prefix('-') {
        Some(body) => ("-", body.to_owned()),
        None if spec.plus => ("+", text),
        None if spec.space => (" ", text),
        None => ("", text),
    };
    if !v.is_finite() {
        spec.pad(out, &format!("{sign}{body}"), false);
        return;
    }
    let total = sign.len() + body.chars().count();
    match spec.width {
        Some(w) if spec.zero && !spec.minus && w > total => {
            out.push_str(sign);
            out.push_str(&"0".repeat(w - total));
            out.push_str(&body);
        }
        _ => spec.pad(out, &format!("{sign}{body}"), false),
    }
}

/// Decimal digits of a finite float: `0.d1d2… × 10^dp` (no trailing zeros).
struct Digits {
    negative: bool,
    digits: Vec<u8>,
    dp: i32,
}

impl Digits {
    /// The shortest digits that read back as `v`, or `v` rounded to `significant`
    /// digits.
    fn of(v: f64, significant: Option<usize>) -> Digits {
        let text = match significant {
            None => format!("{:e}", v.abs()),
            Some(n) => format!("{:.*e}", n.max(1) - 1, v.abs()),
        };
        let (mantissa, exp) = text.split_once('e').expect("`e` format has an exponent");
        let exp: i32 = exp.parse().expect("an integer exponent");
        let mut digits: Vec<u8> = mantissa.bytes().filter(u8::is_ascii_digit).map(|b| b - b'0').collect();
        while digits.len() > 1 && digits.last() == Some(&0) {
            digits.pop();
        }
        if digits == [0] {
            digits.clear();
        }
        Digits {
            negative: v.is_sign_negative(),
            digits,
            dp: exp + 1,
        }
    }
}

fn special(v: f64) -> Option<String> {
    if v.is_nan() {
        Some("NaN".into())
    } else if v.is_infinite() {
        Some(if v > 0.0 { "+Inf".into() } else { "-Inf".into() })
    } else {
        None
    }
}

fn format_e(v: f64, precision: usize, upper: bool) -> String {
    if let Some(s) = special(v) {
        return s;
    }
    let d = Digits::of(v, Some(precision + 1));
    e_from_digits(&d, precision, upper)
}

fn e_from_digits(d: &Digits, precision: usize, upper: bool) -> String {
    let mut out = String::new();
    if d.negative {
        out.push('-');
    }
    let digit = |i: usize| d.digits.get(i).map_or('0', |x| char::from(b'0' + x));
    out.push(digit(0));
    if precision > 0 {
        out.push('.');
        for i in 1..=precision {
            out.push(digit(i));
        }
    }
    let exp = if d.digits.is_empty() { 0 } else { d.dp - 1 };
    out.push(if upper { 'E' } else { 'e' });
    out.push(if exp < 0 { '-' } else { '+' });
    out.push_str(&format!("{:02}", exp.unsigned_abs()));
    out
}

fn format_f(v: f64, precision: usize) -> String {
    if let Some(s) = special(v) {
        return s;
    }
    let text = format!("{:.*}", precision, v);
    // Go writes -0 with its sign, like Rust.
    text
}

pub(crate) fn format_g(v: f64, precision: Option<usize>, upper: bool) -> String {
    if let Some(s) = special(v) {
        return s;
    }
    let shortest = precision.is_none();
    let d = Digits::of(v, precision.map(|p| p.max(1)));
    let nd = d.digits.len() as i32;
    let mut prec = match precision {
        None => nd,
        Some(p) => p.max(1) as i32,
    };
    let mut eprec = prec;
    if eprec > nd && nd >= d.dp {
        eprec = nd;
    }
    if shortest {
        eprec = 6;
    }
    let exp = d.dp - 1;
    if !d.digits.is_empty() && (exp < -4 || exp >= eprec) {
        if prec > nd {
            prec = nd;
        }
        return e_from_digits(&d, (prec - 1).max(0) as usize, upper);
    }
    if prec > d.dp {
        prec = nd;
    }
    let decimals = (prec - d.dp).max(0) as usize;
    let mut out = String::new();
    if d.negative {
        out.push('-');
    }
    let digit = |i: i32| {
        if i < 0 {
            '0'
        } else {
            d.digits.get(i as usize).map_or('0', |x| char::from(b'0' + x))
        }
    };
    if d.dp > 0 {
        for i in 0..d.dp {
            out.push(digit(i));
        }
    } else {
        out.push('0');
    }
    if decimals > 0 {
        out.push('.');
        for i in 0..decimals as i32 {
            out.push(digit(d.dp + i));
        }
    }
    out
}

/// Go's `strconv.Quote` (or `QuoteToASCII` when `ascii`).
pub(crate) fn go_quote(s: &str, ascii: bool) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if (ascii && !c.is_ascii()) || !is_go_printable(c) => {
                let code = c as u32;
                if code < 0x10000 {
                    out.push_str(&format!("\\u{code:04x}"));
                } else {
                    out.push_str(&format!("\\U{code:08x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// An approximation of Go's `strconv.IsPrint` outside ASCII: letters, marks,
/// numbers, punctuation, symbols and U+0020, but not other spaces, controls,
/// format characters or unassigned code points.
fn is_go_printable(c: char) -> bool {
    if c.is_ascii() {
        return !c.is_ascii_control();
    }
    !(c.is_control()
        || c.is_whitespace()
        || matches!(c as u32, 0xad | 0x600..=0x605 | 0x61c | 0x6dd | 0x70f | 0x180e | 0x200b..=0x200f | 0x202a..=0x202e | 0x2060..=0x206f | 0xfeff | 0xfff9..=0xfffb | 0xe000..=0xf8ff | 0xfffe | 0xffff))
}

fn can_backquote(s: &str) -> bool {
    s.chars()
        .all(|c| c != '`' && c != '\u{feff}' && (c == '\t' || !c.is_control()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn f(format: &str, args: Value) -> String {
        sprintf(format, args.as_array().unwrap(), 1 << 20).unwrap()
    }

    // Expected outputs were produced by Go 1.26's fmt.
    #[test]
    fn integers() {
        assert_eq!(
            f("%d|%5d|%-5d|%05d|%+d|% d", json!([42, 42, 42, -42, 42, 42])),
            "42|   42|42   |-0042|+42| 42"
        );
        assert_eq!(
            f(
                "%x|%X|%#x|%o|%#o|%O|%b|%.3d|%.0d",
                json!([255, 255, 255, 8, 8, 8, 5, 7, 0])
            ),
            "ff|FF|0xff|10|010|0o10|101|007|"
        );
        assert_eq!(f("%c|%U|%#U", json!([65, 65, 65])), "A|U+0041|U+0041 'A'");
        assert_eq!(f("%d", json!([18446744073709551615u64])), "18446744073709551615");
    }

    #[test]
    fn strings_and_mismatches() {
        assert_eq!(
            f(
                "%s|%5s|%-5s|%.2s|%q|%x",
                json!(["ab", "ab", "ab", "abc", "a\"b\n", "hi"])
            ),
            "ab|   ab|ab   |ab|\"a\\\"b\\n\"|6869"
        );
        assert_eq!(f("%d|%s", json!(["x", true])), "%!d(string=x)|%!s(bool=true)");
        assert_eq!(f("%d %d", json!([1])), "1 %!d(MISSING)");
        assert_eq!(f("%d", json!([1, "a", null])), "1%!(EXTRA string=a, <nil>)");
        assert_eq!(
            f("100%%|%v|%v|%v", json!([null, [1, "a b", null], {"b": 1, "a": [true]}])),
            "100%|<nil>|[1 a b <nil>]|map[a:[true] b:1]"
        );
        assert_eq!(f("%", json!([])), "%!(NOVERB)");
    }

    #[test]
    fn numbers_print_their_text_with_string_verbs() {
        assert_eq!(f("%s-%v-%q", json!([65000, 1.5, 7])), "65000-1.5-\"7\"");
    }

    #[test]
    fn floats() {
        assert_eq!(
            f(
                "%f|%.2f|%8.3f|%-8.1f|%08.2f|%+.1f",
                json!([1.5, 3.25159, 2.5, 2.5, -2.5, 2.0])
            ),
            "1.500000|3.25|   2.500|2.5     |-0002.50|+2.0"
        );
        assert_eq!(
            f("%e|%.2e|%E", json!([1234567.5, 0.000123, 1e21])),
            "1.234568e+06|1.23e-04|1.000000E+21"
        );
        assert_eq!(
            f(
                "%g|%g|%g|%.3g|%g|%.10g",
                json!([1234567.5, 0.5, 1e-5, 3.25159, 100000.0, 1.5])
            ),
            "1.2345675e+06|0.5|1e-05|3.25|100000|1.5"
        );
        assert_eq!(f("%d", json!([1.5])), "%!d(float64=1.5)");
    }

    #[test]
    fn flags_and_rounding() {
        assert_eq!(
            f("%05s|%-05d|%x|% x|%#x|%X", json!(["ab", 3, -255, "hi", "hi", "hi"])),
            "000ab|3    |-ff|68 69|0x6869|6869"
        );
        assert_eq!(
            f("%.0f|%.0f|%g|%g|%.2g|%g", json!([0.5, 1.5, 1e20, 1e21, 123.0, 0.0001])),
            "0|2|1e+20|1e+21|1.2e+02|0.0001"
        );
    }

    #[test]
    fn sprint_spacing() {
        assert_eq!(
            sprint(&[json!(1), json!(2), json!("a"), json!(3), json!(null)]),
            "1 2a3 <nil>"
        );
        assert_eq!(sprintln(&[json!("a"), json!(1)]), "a 1\n");
    }

    #[test]
    fn huge_widths_are_refused() {
        assert!(sprintf("%99999999d", &[json!(1)], 1000).is_err());
    }
}
