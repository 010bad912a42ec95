//! Writing one value as one word of a vyatta command, or as one config.boot value.
//!
//! The template engine passes every `{{ … }}` through one of these (by template
//! kind) unless the template marks it `| safe`, so a value from params can never
//! become a second command or a new config node. `docs/security.md` explains the
//! choices and cites the VyOS lexers they are checked against.

use std::borrow::Cow;

/// Why a value cannot be written as one word or one config value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Unrepresentable {
    /// bash cannot carry a NUL byte in a script.
    #[error("contains a NUL character at character {at}, which a vbash script cannot carry")]
    Nul {
        /// Character index, from 0.
        at: usize,
    },
    /// A single quote. VyOS wraps values in single quotes without escaping them
    /// when it hands them to `/bin/sh`: vyatta-cfg's `Cstore::getCompletionEnv`
    /// (`src/cstore/cstore.cpp`, commit `0a5b58a`) builds `COMP_WORDS=( '…' )`
    /// from every argument of `set`/`delete` and runs it with `popen`, and node
    /// validators run `validate-value … --value '$VAR(@)'`. A `'` in a value would
    /// end those quotes and run the rest as a command on the router.
    #[error(
        "contains a single quote at character {at}, which VyOS passes to a shell inside single quotes \
         without escaping it"
    )]
    SingleQuote {
        /// Character index, from 0.
        at: usize,
    },
    /// The VyOS config lexers have no escape for this control character.
    #[error("contains the control character U+{code:04X} at character {at}, which a config.boot value cannot carry")]
    ControlCharacter {
        /// The character's code point.
        code: u32,
        /// Character index, from 0.
        at: usize,
    },
}

/// Characters that stay unquoted in a command: none is special to bash in an
/// argument (no quotes, `$`, backquotes, globs, `~`, `=`, `#`, `;`, `&`, `|`,
/// `<`, `>`, parentheses, braces, whitespace).
fn plain_in_command(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '/' | '@' | '%' | '+' | ',' | '-')
}

/// Writes `value` as exactly one bash word: unchanged when every character is
/// plain, otherwise single-quoted, so bash passes it to the command as one
/// argument, byte for byte. NUL cannot be written, and a single quote is refused
/// (see [`Unrepresentable::SingleQuote`]).
///
/// ```
/// use vrouter_render::escape::command_word;
/// assert_eq!(command_word("192.0.2.1/24").unwrap(), "192.0.2.1/24");
/// assert_eq!(command_word("x; delete interfaces ethernet eth0; commit; #").unwrap(),
///            "'x; delete interfaces ethernet eth0; commit; #'");
/// assert!(command_word("x'; reboot; '").is_err());
/// assert_eq!(command_word("").unwrap(), "''");
/// ```
pub fn command_word(value: &str) -> Result<Cow<'_, str>, Unrepresentable> {
    for (at, c) in value.chars().enumerate() {
        match c {
            '\0' => return Err(Unrepresentable::Nul { at }),
            '\'' => return Err(Unrepresentable::SingleQuote { at }),
            _ => {}
        }
    }
    if !value.is_empty() && value.chars().all(plain_in_command) {
        return Ok(Cow::Borrowed(value));
    }
    Ok(Cow::Owned(format!("'{value}'")))
}

/// Characters that stay unquoted in config.boot: all are identifier characters
/// for both VyOS config lexers (no quotes, braces, whitespace, `!`, `#`, `;`,
/// `*`).
fn plain_in_config(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '/' | '@' | '%' | '+' | ',' | '=' | '-')
}

/// Writes `value` as exactly one config.boot value: unchanged when every character
/// is plain (and it holds no `//`, which starts a comment), otherwise double-quoted
/// with `\` and `"` escaped, newline, carriage return and tab written as `\n`,
/// `\r`, `\t`, and a `/` after `*` written `\/` (so `*/` cannot end a comment the
/// template put the value in). Other control characters have no escape in the VyOS
/// lexers and are refused, and so is a single quote (see
/// [`Unrepresentable::SingleQuote`]).
///
/// ```
/// use vrouter_render::escape::config_value;
/// assert_eq!(config_value("10.0.0.1").unwrap(), "10.0.0.1");
/// assert_eq!(config_value("a \"b\"\n} evil {").unwrap(), r#""a \"b\"\n} evil {""#);
/// assert!(config_value("bell\u{7}").is_err());
/// ```
pub fn config_value(value: &str) -> Result<Cow<'_, str>, Unrepresentable> {
    for (at, c) in value.chars().enumerate() {
        match c {
            '\0' => return Err(Unrepresentable::Nul { at }),
            '\'' => return Err(Unrepresentable::SingleQuote { at }),
            '\n' | '\r' | '\t' => {}
            c if c.is_ascii_control() => return Err(Unrepresentable::ControlCharacter { code: u32::from(c), at }),
            _ => {}
        }
    }
    if !value.is_empty() && value.chars().all(plain_in_config) && !value.contains("//") {
        return Ok(Cow::Borrowed(value));
    }
    let mut quoted = String::with_capacity(value.len() + 2);
    quoted.push('"');
    let mut previous = None;
    for c in value.chars() {
        match c {
            '\\' => quoted.push_str(r"\\"),
            '"' => quoted.push_str("\\\""),
            '\n' => quoted.push_str(r"\n"),
            '\r' => quoted.push_str(r"\r"),
            '\t' => quoted.push_str(r"\t"),
            '/' if previous == Some('*') => quoted.push_str(r"\/"),
            c => quoted.push(c),
        }
        previous = Some(c);
    }
    quoted.push('"');
    Ok(Cow::Owned(quoted))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_words() {
        let cases = [
            ("router-a", "router-a"),
            ("65001", "65001"),
            ("2001:db8::1/64", "2001:db8::1/64"),
            ("a b", "'a b'"),
            ("", "''"),
            ("$(reboot)", "'$(reboot)'"),
            ("`id`", "'`id`'"),
            ("a\nb", "'a\nb'"),
            ("~root", "'~root'"),
            ("x=1", "'x=1'"),
            ("*", "'*'"),
            ("#", "'#'"),
            ("é", "'é'"),
        ];
        for (value, word) in cases {
            assert_eq!(command_word(value).unwrap(), word, "{value:?}");
        }
        assert_eq!(command_word("a\0b"), Err(Unrepresentable::Nul { at: 1 }));
        assert_eq!(command_word("it's"), Err(Unrepresentable::SingleQuote { at: 2 }));
    }

    #[test]
    fn config_values() {
        let cases = [
            ("10.0.0.1", "10.0.0.1"),
            ("upstream-a", "upstream-a"),
            ("a=b,c", "a=b,c"),
            ("/config/scripts/x.sh", "/config/scripts/x.sh"),
            ("http://example.net", r#""http://example.net""#),
            ("", r#""""#),
            ("a b", r#""a b""#),
            ("{", r#""{""#),
            (r"\", r#""\\""#),
            ("\"", r#""\"""#),
            ("a\r\n\tb", r#""a\r\n\tb""#),
            ("*/ x", r#""*\/ x""#),
            ("/* x", r#""/* x""#),
            ("日本", r#""日本""#),
        ];
        for (value, written) in cases {
            assert_eq!(config_value(value).unwrap(), written, "{value:?}");
        }
        assert_eq!(
            config_value("a\u{1b}"),
            Err(Unrepresentable::ControlCharacter { code: 0x1b, at: 1 })
        );
        assert_eq!(
            config_value("\u{7f}"),
            Err(Unrepresentable::ControlCharacter { code: 0x7f, at: 0 })
        );
        assert_eq!(config_value("\0"), Err(Unrepresentable::Nul { at: 0 }));
        assert_eq!(config_value("a'"), Err(Unrepresentable::SingleQuote { at: 1 }));
    }
}
