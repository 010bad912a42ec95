//! Where each `{{ … }}` sits in the text the template writes around it.
//!
//! Values are escaped for one context: a command argument (commands) or a config
//! value (config). An interpolation the template itself put inside quotes, inside a
//! shell comment or inside a here-document would be escaped for the wrong context,
//! so admission rejects it. This lexes the template's literal text the way bash and
//! the VyOS config lexer would, skipping over tags.

use super::scan::{Segment, SegmentKind, location};
use super::{Location, TemplateKind};

/// Where an interpolation cannot be escaped correctly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MisplacedContext {
    /// Inside `'…'`, `"…"` or `$'…'` written in the template.
    Quoted,
    /// Inside a `# …` shell comment (commands): a newline in the value would end it.
    ShellComment,
    /// After a `<<` here-document operator (commands): its body is not command
    /// arguments.
    HereDocument,
}

impl std::fmt::Display for MisplacedContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MisplacedContext::Quoted => {
                "inside quotes written in the template; values are quoted automatically, so remove the quotes"
            }
            MisplacedContext::ShellComment => {
                "inside a shell comment, where a value cannot be escaped; move it into a command argument"
            }
            MisplacedContext::HereDocument => {
                "after a here-document operator `<<`, where a value cannot be escaped; pass it as a command argument"
            }
        })
    }
}

/// One interpolation and whether it ends with `| safe`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Interpolation {
    pub location: Location,
    pub safe: bool,
}

/// Every interpolation in `source`, in order.
pub(crate) fn interpolations(source: &str, segments: &[Segment]) -> Vec<Interpolation> {
    segments
        .iter()
        .filter(|s| s.kind == SegmentKind::Expression)
        .map(|s| Interpolation {
            location: location(source, s.span.start),
            safe: is_marked_safe(&source[s.inner.clone()]),
        })
        .collect()
}

/// `{{ value | safe }}`: the template's explicit opt-out from escaping.
pub(crate) fn is_marked_safe(inner: &str) -> bool {
    inner.trim_end().strip_suffix("safe").is_some_and(|rest| {
        rest.trim_end().ends_with('|') && !rest.ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// The first interpolation not marked `safe` that sits in a context its kind's
/// escaping does not cover.
pub(crate) fn misplaced_interpolation(
    source: &str,
    segments: &[Segment],
    kind: TemplateKind,
) -> Option<(Location, MisplacedContext)> {
    let mut lexer = match kind {
        TemplateKind::Commands => Lexer::Shell(ShellState::Normal { at_word_start: true }),
        TemplateKind::Config => Lexer::Config(ConfigState::Normal { at_token_start: true }),
    };
    let mut here_document = false;
    for segment in segments {
        match segment.kind {
            SegmentKind::Text | SegmentKind::Raw => {
                let text = &source[segment.inner.clone()];
                here_document |= lexer.feed(text);
            }
            SegmentKind::Expression => {
                if is_marked_safe(&source[segment.inner.clone()]) {
                    lexer.after_word();
                    continue;
                }
                let context = match lexer {
                    _ if here_document => Some(MisplacedContext::HereDocument),
                    Lexer::Shell(ShellState::Single | ShellState::Double | ShellState::AnsiC)
                    | Lexer::Config(ConfigState::Double | ConfigState::Single) => Some(MisplacedContext::Quoted),
                    Lexer::Shell(ShellState::Comment) => Some(MisplacedContext::ShellComment),
                    _ => None,
                };
                if let Some(context) = context {
                    return Some((location(source, segment.span.start), context));
                }
                lexer.after_word();
            }
            SegmentKind::Statement | SegmentKind::Comment => {}
        }
    }
    None
}

#[derive(Debug, Clone, Copy)]
enum Lexer {
    Shell(ShellState),
    Config(ConfigState),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ShellState {
    Normal { at_word_start: bool },
    Single,
    Double,
    AnsiC,
    Comment,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConfigState {
    Normal { at_token_start: bool },
    Double,
    Single,
    BlockComment,
    LineComment,
}

impl Lexer {
    /// An interpolation's output is a word: what follows is not at a word start.
    fn after_word(&mut self) {
        match self {
            Lexer::Shell(ShellState::Normal { at_word_start }) => *at_word_start = false,
            Lexer::Config(ConfigState::Normal { at_token_start }) => *at_token_start = false,
            _ => {}
        }
    }

    /// Advances over literal text; returns true when it holds a `<<` operator.
    fn feed(&mut self, text: &str) -> bool {
        let mut here_document = false;
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match self {
                Lexer::Shell(state) => {
                    *state = match *state {
                        ShellState::Normal { at_word_start } => match c {
                            '\\' => {
                                chars.next();
                                ShellState::Normal { at_word_start: false }
                            }
                            '\'' => ShellState::Single,
                            '"' => ShellState::Double,
                            '$' if chars.peek() == Some(&'\'') => {
                                chars.next();
                                ShellState::AnsiC
                            }
                            '#' if at_word_start => ShellState::Comment,
                            '<' if chars.peek() == Some(&'<') => {
                                chars.next();
                                here_document = true;
                                ShellState::Normal { at_word_start: true }
                            }
                            c if c.is_whitespace() || matches!(c, ';' | '&' | '|' | '(' | ')') => {
                                ShellState::Normal { at_word_start: true }
                            }
                            _ => ShellState::Normal { at_word_start: false },
                        },
                        ShellState::Single => match c {
                            '\'' => ShellState::Normal { at_word_start: false },
                            _ => ShellState::Single,
                        },
                        ShellState::Double | ShellState::AnsiC => {
                            let state = *state;
                            match c {
                                '\\' => {
                                    chars.next();
                                    state
                                }
                                '"' if state == ShellState::Double => ShellState::Normal { at_word_start: false },
                                '\'' if state == ShellState::AnsiC => ShellState::Normal { at_word_start: false },
                                _ => state,
                            }
                        }
                        ShellState::Comment => match c {
                            '\n' => ShellState::Normal { at_word_start: true },
                            _ => ShellState::Comment,
                        },
                    };
                }
                Lexer::Config(state) => {
                    *state = match *state {
                        ConfigState::Normal { at_token_start } => match c {
                            '"' => ConfigState::Double,
                            '\'' => ConfigState::Single,
                            '/' if chars.peek() == Some(&'*') => {
                                chars.next();
                                ConfigState::BlockComment
                            }
                            '/' if at_token_start && chars.peek() == Some(&'/') => ConfigState::LineComment,
                            c if c.is_whitespace() || matches!(c, '{' | '}') => {
                                ConfigState::Normal { at_token_start: true }
                            }
                            _ => ConfigState::Normal { at_token_start: false },
                        },
                        ConfigState::Double | ConfigState::Single => {
                            let state = *state;
                            match c {
                                '\\' => {
                                    chars.next();
                                    state
                                }
                                '"' if state == ConfigState::Double => ConfigState::Normal { at_token_start: false },
                                '\'' if state == ConfigState::Single => ConfigState::Normal { at_token_start: false },
                                _ => state,
                            }
                        }
                        ConfigState::BlockComment => match c {
                            '*' if chars.peek() == Some(&'/') => {
                                chars.next();
                                ConfigState::Normal { at_token_start: true }
                            }
                            _ => ConfigState::BlockComment,
                        },
                        ConfigState::LineComment => match c {
                            '\n' => ConfigState::Normal { at_token_start: true },
                            _ => ConfigState::LineComment,
                        },
                    };
                }
            }
        }
        here_document
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::template::scan::segments;

    fn misplaced(kind: TemplateKind, source: &str) -> Option<(usize, usize, MisplacedContext)> {
        misplaced_interpolation(source, &segments(source), kind).map(|(l, c)| (l.line, l.column, c))
    }

    #[test]
    fn shell_quotes_comments_and_here_documents() {
        use MisplacedContext::*;
        let commands = TemplateKind::Commands;
        assert_eq!(misplaced(commands, "set a {{ x }}\nset b {{ y }}"), None);
        assert_eq!(misplaced(commands, "set a '{{ x }}'"), Some((1, 8, Quoted)));
        assert_eq!(misplaced(commands, "set a \"x {{ x }}\""), Some((1, 10, Quoted)));
        assert_eq!(misplaced(commands, "set a $'{{ x }}'"), Some((1, 9, Quoted)));
        assert_eq!(misplaced(commands, "set a 'b' {{ x }} \"c\""), None);
        assert_eq!(misplaced(commands, "set a 'it'\\''s' {{ x }}"), None);
        assert_eq!(misplaced(commands, "set a \\' {{ x }}"), None);
        assert_eq!(misplaced(commands, "# note\nset a {{ x }}"), None);
        assert_eq!(misplaced(commands, "set a # {{ x }}"), Some((1, 9, ShellComment)));
        assert_eq!(misplaced(commands, "set a#b {{ x }}"), None);
        assert_eq!(misplaced(commands, "# it's fine\nset a {{ x }}"), None);
        assert_eq!(
            misplaced(commands, "cat <<EOF\n{{ x }}\nEOF"),
            Some((2, 1, HereDocument))
        );
        assert_eq!(misplaced(commands, "set a '{{ x | safe }}'"), None);
        assert_eq!(
            misplaced(commands, "{% raw %}'{% endraw %}{{ x }}"),
            Some((1, 23, Quoted))
        );
    }

    #[test]
    fn config_quotes_and_comments() {
        use MisplacedContext::*;
        let config = TemplateKind::Config;
        assert_eq!(misplaced(config, "system {\n    host-name {{ x }}\n}"), None);
        assert_eq!(misplaced(config, "description \"{{ x }}\""), Some((1, 14, Quoted)));
        assert_eq!(misplaced(config, "description '{{ x }}'"), Some((1, 14, Quoted)));
        assert_eq!(misplaced(config, "a \"q\\\"\" {{ x }}"), None);
        assert_eq!(misplaced(config, "/* it's {{ x }} */ a {{ y }}"), None);
        assert_eq!(misplaced(config, "// it's {{ x }}\na {{ y }}"), None);
        assert_eq!(misplaced(config, "url http://x'{{ y }}"), Some((1, 14, Quoted)));
    }

    #[test]
    fn safe_is_the_last_filter_only() {
        assert!(is_marked_safe(" x | safe "));
        assert!(is_marked_safe("x|safe"));
        assert!(!is_marked_safe(" unsafe "));
        assert!(!is_marked_safe(" x | unsafe "));
        assert!(!is_marked_safe(" x | safe | upper "));
    }
}
