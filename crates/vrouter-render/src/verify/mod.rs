//! The render-time check that every interpolated value lands where its escaping
//! holds.
//!
//! A template is rendered with a random *sentinel* in place of each escaped value
//! (a word of letters and digits no template or value can guess). The rendered
//! text — control flow already resolved — is read with the grammar that will read
//! it on the router: bash's for `commands` ([`shell`]), both VyOS config.boot
//! parsers for `config` ([`crate::config_boot`]). A sentinel is accepted only
//! where a whole plain word is exactly one value: an argument of an allowed simple
//! command, or the value token of a config node. Then each sentinel is replaced by
//! its escaped value, which occupies the same place (an escaped value is one
//! plain or quoted word, one plain or quoted config value). Every other place is
//! refused with the reason.

mod shell;

use std::fmt;
use std::ops::Range;

use crate::config_boot::{self, TokenKind};

pub(crate) use shell::ALLOWED_COMMANDS;

/// Where an interpolated value landed that its escaping does not cover, as the
/// bash or VyOS grammar reads the rendered text.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Placement {
    /// Inside quotes written in the template (`'…'`, `"…"`, `$'…'`; in config
    /// `"…"`, `'…'`).
    Quoted,
    /// Right after a backslash.
    Escaped,
    /// Inside or right after `$` (a parameter, `${ }` or arithmetic expansion).
    Expansion,
    /// Inside `$( )`, backquotes, `<( )` or `>( )`.
    Substitution,
    /// In a here-document's operator, delimiter or body.
    HereDocument,
    /// In a here-string (`<<<`).
    HereString,
    /// In a redirection.
    Redirection,
    /// In a variable assignment.
    Assignment,
    /// In a shell comment.
    Comment,
    /// As a command name.
    CommandName,
    /// Joined with other text into one word (brace expansion, globs, `=`, `~` …).
    PartOfWord,
    /// As a `case` word or pattern.
    CasePattern,
    /// As a `for` variable or list word.
    LoopWord,
    /// An argument of a command not known to keep its arguments as data.
    ArgumentOf(String),
    /// The first argument of vyatta's `set`.
    FirstArgumentOfSet,
    /// In rendered commands holding a construct the check does not read.
    NotAnalysed {
        /// What it is.
        construct: &'static str,
        /// Line of the rendered text.
        line: usize,
    },
    /// In a rendered text that is not valid for its grammar.
    Syntax {
        /// What is wrong.
        message: String,
        /// Line of the rendered text, when known.
        line: Option<usize>,
    },
    /// In config, inside a `/* */` or `//` comment.
    ConfigComment,
    /// In config, as (part of) a node name.
    NodeName,
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Placement::Quoted => f.write_str(
                "inside quotes written in the template; values are quoted automatically, so remove the quotes",
            ),
            Placement::Escaped => f.write_str("right after a backslash, which would join it to the text before"),
            Placement::Expansion => f.write_str("inside a `$` expansion (`$name`, `${ }`, `$(( ))`)"),
            Placement::Substitution => f.write_str("inside a command substitution (`$( )`, backquotes, `<( )`)"),
            Placement::HereDocument => f.write_str("in a here-document (`<<`), where a value cannot be escaped"),
            Placement::HereString => f.write_str("in a here-string (`<<<`)"),
            Placement::Redirection => f.write_str("in a redirection"),
            Placement::Assignment => f.write_str("in a variable assignment"),
            Placement::Comment => {
                f.write_str("inside a shell comment, where a value cannot be escaped; move it into a command argument")
            }
            Placement::CommandName => f.write_str("the name of a command; a value may only be an argument"),
            Placement::PartOfWord => f.write_str(
                "joined with other text into one shell word; put it alone between spaces (it is quoted as needed), \
                 or build the whole word inside one `{{ }}` with `~`",
            ),
            Placement::CasePattern => f.write_str("a `case` word or pattern"),
            Placement::LoopWord => f.write_str("a `for` loop word; loop over params with `{% for %}` instead"),
            Placement::ArgumentOf(command) => write!(
                f,
                "an argument of `{command}`, which is not known to keep its arguments as data; \
                 values may be arguments of {}",
                ALLOWED_COMMANDS
                    .iter()
                    .map(|c| format!("`{c}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Placement::FirstArgumentOfSet => f.write_str(
                "the first argument of `set`, where vyatta runs bash's builtin `set` for a value starting \
                 with `-` or `+`; write the config path's first word in the template",
            ),
            Placement::NotAnalysed { construct, line } => write!(
                f,
                "in commands that hold {construct} (line {line} of the rendered commands), which the \
                 injection check does not read"
            ),
            Placement::Syntax {
                message,
                line: Some(line),
            } => {
                write!(f, "in a rendered text that does not parse (line {line}: {message})")
            }
            Placement::Syntax { message, line: None } => {
                write!(f, "in a rendered text that does not parse ({message})")
            }
            Placement::ConfigComment => f.write_str("inside a config comment, where a value cannot be escaped"),
            Placement::NodeName => {
                f.write_str("a config node name or part of one; a value may only be a node's value or tag")
            }
        }
    }
}

/// A random sentinel prefix: `VRS`, 24 hex digits, `X`; a sentinel is the prefix,
/// the value's index in decimal, and `X`. Only letters and digits, so a sentinel is
/// a plain word for bash and both VyOS lexers.
pub(crate) fn sentinel_prefix() -> String {
    let mut random = [0u8; 12];
    // Without the OS generator the prefix is still unique per process and
    // render, just guessable; a template cannot use it to forge a place either way,
    // since every occurrence of the prefix is counted.
    if getrandom::fill(&mut random).is_err() {
        let fallback = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        random.copy_from_slice(&fallback.to_le_bytes()[..12]);
    }
    let hex: String = random.iter().map(|b| format!("{b:02x}")).collect();
    format!("VRS{hex}X")
}

pub(crate) fn sentinel(prefix: &str, index: usize) -> String {
    format!("{prefix}{index}X")
}

/// The sentinels found in a rendered text, by position.
pub(crate) struct Sentinels {
    spans: Vec<(Range<usize>, usize)>,
}

impl Sentinels {
    /// Finds every occurrence of `prefix`; each must be a well-formed sentinel
    /// and each index in `0..count` must occur exactly once.
    fn find(text: &str, prefix: &str, count: usize) -> Result<Sentinels, Refusal> {
        let mut spans = Vec::with_capacity(count);
        let mut seen = vec![false; count];
        for (at, _) in text.match_indices(prefix) {
            let digits_start = at + prefix.len();
            let digits = text[digits_start..].bytes().take_while(u8::is_ascii_digit).count();
            let end = digits_start + digits;
            let index = text[digits_start..end].parse::<usize>().ok();
            match index {
                Some(index) if index < count && !seen[index] && text.as_bytes().get(end) == Some(&b'X') => {
                    seen[index] = true;
                    spans.push((at..end + 1, index));
                }
                _ => {
                    return Err(Refusal {
                        index: index.filter(|i| *i < count).unwrap_or(0),
                        placement: Placement::Syntax {
                            message: "an interpolation's place could not be recognised".into(),
                            line: Some(line_of(text, at)),
                        },
                    });
                }
            }
        }
        if let Some(index) = seen.iter().position(|s| !s) {
            return Err(Refusal {
                index,
                placement: Placement::Syntax {
                    message: "an interpolation's output did not reach the rendered text".into(),
                    line: None,
                },
            });
        }
        Ok(Sentinels { spans })
    }

    /// Whether a sentinel starts inside `range`.
    pub(crate) fn any_within(&self, range: Range<usize>) -> bool {
        let first = self.spans.partition_point(|(s, _)| s.start < range.start);
        self.spans.get(first).is_some_and(|(s, _)| s.start < range.end)
    }

    /// Whether `range` is exactly one sentinel.
    pub(crate) fn is_exactly_one(&self, range: Range<usize>) -> bool {
        let first = self.spans.partition_point(|(s, _)| s.start < range.start);
        self.spans.get(first).is_some_and(|(s, _)| *s == range)
    }
}

/// A sentinel refused, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// The index of the value, in render order.
    pub index: usize,
    pub placement: Placement,
}

/// Where each of `count` sentinels is in rendered `commands`, once all are in
/// accepted places.
pub(crate) fn check_commands(text: &str, prefix: &str, count: usize) -> Result<Vec<(Range<usize>, usize)>, Refusal> {
    let sentinels = Sentinels::find(text, prefix, count)?;
    if sentinels.spans.is_empty() {
        return Ok(Vec::new());
    }
    let reading = shell::read(text, &sentinels);
    // Reading must reach the end: a text the check cannot read completely is
    // refused, at the first value after where reading stopped (or the last one).
    if let Some(stop) = &reading.stop {
        let (_, index) = sentinels
            .spans
            .iter()
            .find(|(span, _)| span.start >= stop.at)
            .or(sentinels.spans.last())
            .expect("at least one sentinel");
        let line = line_of(text, stop.at);
        let placement = match &stop.place {
            Placement::NotAnalysed { construct, .. } => Placement::NotAnalysed { construct, line },
            Placement::Syntax { message, .. } => Placement::Syntax {
                message: message.clone(),
                line: Some(line),
            },
            other => other.clone(),
        };
        return Err(Refusal {
            index: *index,
            placement,
        });
    }
    let mut accepted = reading.accepted;
    accepted.sort_by_key(|r| r.start);
    for (span, index) in &sentinels.spans {
        if contains_span(&accepted, span) {
            continue;
        }
        let placement = reading
            .marks
            .iter()
            .filter(|(range, _)| range.start <= span.start && span.start < range.end)
            .min_by_key(|(range, place)| (*place == Placement::PartOfWord, range.len()))
            .map_or(Placement::PartOfWord, |(_, place)| place.clone());
        return Err(Refusal {
            index: *index,
            placement,
        });
    }
    Ok(sentinels.spans)
}

/// Where each of `count` sentinels is in rendered `config`, once both VyOS
/// parsers read each as exactly the value token of a node.
pub(crate) fn check_config(text: &str, prefix: &str, count: usize) -> Result<Vec<(Range<usize>, usize)>, Refusal> {
    let sentinels = Sentinels::find(text, prefix, count)?;
    let Some(&(_, first_index)) = sentinels.spans.first() else {
        return Ok(Vec::new());
    };
    let syntax = |message: String| Placement::Syntax { message, line: None };
    let (v1, cparse) = match (config_boot::parse_vyos1x(text), config_boot::parse_cparse(text)) {
        (Ok(v1), Ok(cparse)) => (v1, cparse),
        (Err(e), _) => {
            return Err(Refusal {
                index: first_index,
                placement: syntax(format!("vyos1x-config: {e}")),
            });
        }
        (_, Err(e)) => {
            return Err(Refusal {
                index: first_index,
                placement: syntax(format!("vyatta-cfg loadFile: {e}")),
            });
        }
    };
    let mut v1_values = Vec::new();
    config_boot::value_spans(&v1, &mut v1_values);
    v1_values.sort_by_key(|r| r.start);
    let mut cparse_values = Vec::new();
    config_boot::value_spans(&cparse, &mut cparse_values);
    cparse_values.sort_by_key(|r| r.start);
    for (span, index) in &sentinels.spans {
        if contains_span(&v1_values, span) && contains_span(&cparse_values, span) {
            continue;
        }
        return Err(Refusal {
            index: *index,
            placement: config_placement(text, span, &v1, &cparse),
        });
    }
    Ok(sentinels.spans)
}

/// Why a sentinel is not a value token, for the error.
fn config_placement(
    text: &str,
    span: &Range<usize>,
    v1: &[config_boot::Node],
    cparse: &[config_boot::Node],
) -> Placement {
    for tokens in [config_boot::vyos1x_tokens(text), config_boot::cparse_tokens(text)]
        .into_iter()
        .flatten()
    {
        let Some((range, kind)) = tokens
            .iter()
            .find(|(range, _)| range.start <= span.start && span.start < range.end)
        else {
            continue;
        };
        match kind {
            TokenKind::Comment => return Placement::ConfigComment,
            TokenKind::Quoted => return Placement::Quoted,
            TokenKind::Word if range != span => return Placement::PartOfWord,
            TokenKind::Word => {}
        }
    }
    let mut names = Vec::new();
    config_boot::name_spans(v1, &mut names);
    config_boot::name_spans(cparse, &mut names);
    if names.iter().any(|n| n.start <= span.start && span.start < n.end) {
        return Placement::NodeName;
    }
    Placement::Syntax {
        message: "the two VyOS parsers do not both read it as one value".into(),
        line: Some(line_of(text, span.start)),
    }
}

/// Whether `sorted` (by start) holds exactly `span`.
fn contains_span(sorted: &[Range<usize>], span: &Range<usize>) -> bool {
    sorted
        .binary_search_by_key(&span.start, |r| r.start)
        .is_ok_and(|i| sorted[i] == *span)
}

pub(crate) fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// `text` with each sentinel span replaced by its value.
pub(crate) fn substitute<'v>(text: &str, spans: &[(Range<usize>, usize)], value: impl Fn(usize) -> &'v str) -> String {
    let extra: usize = spans.iter().map(|(_, i)| value(*i).len()).sum();
    let mut out = String::with_capacity(text.len() + extra);
    let mut last = 0;
    for (span, index) in spans {
        out.push_str(&text[last..span.start]);
        out.push_str(value(*index));
        last = span.end;
    }
    out.push_str(&text[last..]);
    out
}

#[cfg(test)]
mod tests;
