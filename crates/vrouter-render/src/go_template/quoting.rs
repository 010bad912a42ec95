//! Interpolations the Go template wrapped in quotes or put in a comment.
//!
//! Go templates quote values by hand (`set system host-name '{{ .hostname }}'`),
//! because Go writes values raw. Here every value is escaped for where it lands,
//! and admission refuses an interpolation inside quotes the template wrote. So a
//! quoted string holding interpolations becomes one interpolation of the whole
//! string: `'AS{{ .asn }}'` → `{{ "AS" ~ asn }}`, which bash or the VyOS parser
//! reads as the same single word or value. In commands, an interpolation inside a
//! `# comment` is removed (a comment runs nothing, and a value with a newline
//! would end it).

use super::assemble::Piece;
use super::tera_expr::Te;
use super::translate::Unconvertible;
use crate::TemplateKind;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Normal,
    Single,
    Double,
    /// `$'…'` (commands).
    AnsiC,
    /// `# …` to the end of the line (commands), or `/* … */` (config).
    Comment,
    /// The body of a here-document (commands), to the end of the text.
    HereDoc,
}

struct Region {
    /// Piece and byte offset of the opening quote.
    open: (usize, usize),
    quote: char,
    outputs: usize,
    crosses_tag: bool,
}

/// Rewrites quoted interpolations; returns the notes to give about removed ones.
/// Where a removed interpolation was, and why.
pub(crate) type Removed = (usize, String);

pub(crate) fn fix(pieces: Vec<Piece>, kind: TemplateKind) -> Result<(Vec<Piece>, Vec<Removed>), Unconvertible> {
    let mut pieces = pieces;
    let mut notes = Vec::new();
    let mut state = State::Normal;
    let mut region: Option<Region> = None;
    // Whether the previous character ends a word (for `#`).
    let mut at_word_start = true;
    let mut i = 0;
    while i < pieces.len() {
        match &pieces[i] {
            Piece::Text { text, .. } => {
                let text = text.clone();
                let bytes: Vec<(usize, char)> = text.char_indices().collect();
                let mut k = 0;
                let mut jump = None;
                while k < bytes.len() {
                    let (offset, c) = bytes[k];
                    let next = bytes.get(k + 1).map(|x| x.1);
                    match (state, kind) {
                        (State::Normal, _) => match c {
                            '\'' => {
                                state = State::Single;
                                region = Some(Region {
                                    open: (i, offset),
                                    quote: '\'',
                                    outputs: 0,
                                    crosses_tag: false,
                                });
                            }
                            '"' => {
                                state = State::Double;
                                region = Some(Region {
                                    open: (i, offset),
                                    quote: '"',
                                    outputs: 0,
                                    crosses_tag: false,
                                });
                            }
                            '$' if kind == TemplateKind::Commands && next == Some('\'') => {
                                state = State::AnsiC;
                                k += 1;
                            }
                            '\\' if kind == TemplateKind::Commands => k += 1,
                            '#' if kind == TemplateKind::Commands && at_word_start => state = State::Comment,
                            '<' if kind == TemplateKind::Commands && next == Some('<') => state = State::HereDoc,
                            '/' if kind == TemplateKind::Config && next == Some('*') => {
                                state = State::Comment;
                                k += 1;
                            }
                            _ => {}
                        },
                        (State::Single, TemplateKind::Commands) => {
                            if c == '\'' {
                                state = State::Normal;
                                if let Some(r) = region.take().filter(|r| r.outputs > 0) {
                                    // Lexing goes on in the text after the closing quote.
                                    notes.push(quotes_removed(&pieces, &r));
                                    jump = Some(close(&mut pieces, r, (i, offset), kind)?);
                                    at_word_start = false;
                                    break;
                                }
                            }
                        }
                        (State::Double, _) | (State::Single, TemplateKind::Config) => {
                            if c == '\\' {
                                k += 1;
                            } else if c == region.as_ref().map_or('"', |r| r.quote) {
                                state = State::Normal;
                                if let Some(r) = region.take().filter(|r| r.outputs > 0) {
                                    notes.push(quotes_removed(&pieces, &r));
                                    jump = Some(close(&mut pieces, r, (i, offset), kind)?);
                                    at_word_start = false;
                                    break;
                                }
                            }
                        }
                        (State::AnsiC, _) => {
                            if c == '\\' {
                                k += 1;
                            } else if c == '\'' {
                                state = State::Normal;
                            }
                        }
                        (State::Comment, TemplateKind::Commands) => {
                            if c == '\n' {
                                state = State::Normal;
                            }
                        }
                        (State::Comment, TemplateKind::Config) => {
                            if c == '*' && next == Some('/') {
                                state = State::Normal;
                                k += 1;
                            }
                        }
                        (State::HereDoc, _) => {}
                    }
                    at_word_start = c.is_whitespace() || matches!(c, ';' | '&' | '|' | '(' | ')' | '<' | '>');
                    k += 1;
                }
                i = jump.unwrap_or(i + 1);
            }
            Piece::Trimmed { .. } => i += 1,
            Piece::Output { go, .. } => {
                let at = go.start;
                match state {
                    State::Single | State::Double => {
                        if let Some(r) = region.as_mut() {
                            r.outputs += 1;
                        }
                    }
                    State::AnsiC => {
                        return Err(Unconvertible {
                            at,
                            construct: "$'…{{ … }}…'".into(),
                            reason:
                                "an interpolation inside a `$'…'` string cannot be escaped; move it out of the quotes"
                                    .into(),
                        });
                    }
                    State::HereDoc => {
                        return Err(Unconvertible {
                            at,
                            construct: "<<".into(),
                            reason: "an interpolation in a here-document cannot be escaped; pass the value as a command argument".into(),
                        });
                    }
                    State::Comment if kind == TemplateKind::Commands => {
                        notes.push((
                            at,
                            "an interpolation inside a `#` comment was removed: a comment runs nothing, \
                             and a value with a newline would have ended it"
                                .to_owned(),
                        ));
                        pieces.remove(i);
                        continue;
                    }
                    _ => {}
                }
                at_word_start = false;
                i += 1;
            }
            Piece::Tag { .. } => {
                if let Some(r) = region.as_mut() {
                    r.crosses_tag = true;
                }
                i += 1;
            }
        }
    }
    Ok((pieces, notes))
}

/// The note for quotes the Go template wrote around values.
fn quotes_removed(pieces: &[Piece], r: &Region) -> Removed {
    let at = match &pieces[r.open.0] {
        Piece::Text { go, .. } => go.start + r.open.1,
        _ => 0,
    };
    (
        at,
        format!(
            "the {} quotes written around the value were removed: values are quoted automatically \
             (with Go's quoting a value holding that quote broke out of it)",
            if r.quote == '\'' { "single" } else { "double" }
        ),
    )
}

/// Replaces the quoted region from `r.open` to the closing quote at `close_at`
/// with one output; returns the index of the piece holding the text after the
/// closing quote.
fn close(
    pieces: &mut Vec<Piece>,
    r: Region,
    close_at: (usize, usize),
    kind: TemplateKind,
) -> Result<usize, Unconvertible> {
    let (open_piece, open_offset) = r.open;
    let (close_piece, close_offset) = close_at;
    let go_start = match &pieces[open_piece] {
        Piece::Text { go, .. } => go.start + open_offset,
        _ => 0,
    };
    if r.crosses_tag {
        return Err(Unconvertible {
            at: go_start,
            construct: format!("{}…{{{{ … }}}}…{}", r.quote, r.quote),
            reason: "a quoted string holding an interpolation runs across `if`/`range`/`with`; \
                     values are quoted automatically, so write the interpolation without the quotes"
                .into(),
        });
    }
    let mut parts: Vec<Te> = Vec::new();
    let mut literal = String::new();
    let mut go_end = go_start;
    for (idx, piece) in pieces.iter().enumerate().take(close_piece + 1).skip(open_piece) {
        match piece {
            Piece::Text { text, go } => {
                let from = if idx == open_piece { open_offset + 1 } else { 0 };
                let to = if idx == close_piece { close_offset } else { text.len() };
                let raw = &text[from..to];
                literal.push_str(&decode(raw, r.quote, kind).map_err(|reason| Unconvertible {
                    at: go.start + from,
                    construct: raw.chars().take(40).collect(),
                    reason,
                })?);
                go_end = go.start + to + 1;
            }
            Piece::Output { te, go, .. } => {
                if !literal.is_empty() {
                    parts.push(Te::Str(std::mem::take(&mut literal)));
                }
                parts.push(te.clone());
                go_end = go.end;
            }
            _ => {}
        }
    }
    if !literal.is_empty() {
        parts.push(Te::Str(literal));
    }
    let te = if parts.len() == 1 {
        parts.pop().expect("one part")
    } else {
        Te::Concat(parts)
    };
    let (before, after, go_text_end) = match (&pieces[open_piece], &pieces[close_piece]) {
        (Piece::Text { text: a, go: ga }, Piece::Text { text: b, go: gb }) => (
            Piece::Text {
                text: a[..open_offset].to_owned(),
                go: ga.start..ga.start + open_offset,
            },
            Piece::Text {
                text: b[close_offset + 1..].to_owned(),
                go: gb.start + close_offset + 1..gb.end,
            },
            gb.end,
        ),
        _ => unreachable!("regions open and close in text"),
    };
    let _ = go_text_end;
    let output = Piece::Output {
        te,
        trim_left: false,
        trim_right: false,
        go: go_start..go_end,
    };
    pieces.splice(open_piece..=close_piece, [before, output, after]);
    Ok(open_piece + 2)
}

/// The value a quoted string's literal text stands for.
fn decode(raw: &str, quote: char, kind: TemplateKind) -> Result<String, String> {
    match (kind, quote) {
        (TemplateKind::Commands, '\'') => Ok(raw.to_owned()),
        (TemplateKind::Commands, _) => {
            let mut out = String::new();
            let mut chars = raw.chars();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => match chars.next() {
                        Some(e @ ('$' | '`' | '"' | '\\')) => out.push(e),
                        Some('\n') => {}
                        Some(e) => {
                            out.push('\\');
                            out.push(e);
                        }
                        None => out.push('\\'),
                    },
                    '$' | '`' => {
                        return Err("a double-quoted string holding both an interpolation and a shell \
                                    expansion (`$`, a backquote) cannot be converted; write the interpolation \
                                    outside the quotes"
                            .into());
                    }
                    c => out.push(c),
                }
            }
            Ok(out)
        }
        (TemplateKind::Config, _) => {
            let mut out = String::new();
            let mut chars = raw.chars();
            while let Some(c) = chars.next() {
                if c != '\\' {
                    out.push(c);
                    continue;
                }
                out.push(match chars.next() {
                    Some('/') => '/',
                    Some('\\') => '\\',
                    Some('b') => '\u{8}',
                    Some('f') => '\u{c}',
                    Some('n') => '\n',
                    Some('r') => '\r',
                    Some('t') => '\t',
                    Some('\'') => '\'',
                    Some('"') => '"',
                    other => {
                        return Err(format!(
                            "the escape `\\{}` in a quoted config value is not one VyOS reads",
                            other.map(String::from).unwrap_or_default()
                        ));
                    }
                });
            }
            Ok(out)
        }
    }
}

/// Characters a word may have around an interpolation for the word to become
/// one value: nothing the shell or the VyOS lexer reads specially.
fn plain(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '/' | '@' | '%' | '+' | ',' | '-' | '=')
}

/// One word made of interpolations and plain text (`eth{{ .i }}`,
/// `{{ .a }}-{{ .b }}`) becomes one interpolation of the joined value
/// (`{{ "eth" ~ i }}`): the engine writes each value as a whole word, and the
/// words of a command are what bash (or VyOS) read from the Go output when the
/// values are plain.
pub(crate) fn merge_words(pieces: Vec<Piece>) -> Vec<Piece> {
    let mut out: Vec<Piece> = Vec::with_capacity(pieces.len());
    let mut i = 0;
    while i < pieces.len() {
        if !matches!(pieces[i], Piece::Output { .. }) {
            out.push(pieces[i].clone());
            i += 1;
            continue;
        }
        // The run: outputs, removed white space and plain text, up to a tag or
        // the first character of a text that ends the word.
        let mut j = i;
        let mut stop: Option<(usize, usize)> = None;
        while j < pieces.len() {
            match &pieces[j] {
                Piece::Output { .. } | Piece::Trimmed { .. } => j += 1,
                Piece::Text { text, .. } => {
                    let plain_len = text.len() - text.trim_start_matches(plain).len();
                    if plain_len < text.len() {
                        stop = Some((j, plain_len));
                        break;
                    }
                    j += 1;
                }
                Piece::Tag { .. } => break,
            }
        }
        // The text before, past white space a trim marker removed.
        let before = out.iter().rposition(|p| !matches!(p, Piece::Trimmed { .. }));
        let prefix = match before.map(|b| &out[b]) {
            Some(Piece::Text { text, .. }) => text.len() - text.trim_end_matches(plain).len(),
            _ => 0,
        };
        let inner_words = pieces[i..j]
            .iter()
            .filter(|p| matches!(p, Piece::Output { .. }) || matches!(p, Piece::Text { text, .. } if !text.is_empty()))
            .count();
        let suffix = stop.map_or(0, |(_, len)| len);
        if inner_words + usize::from(prefix > 0) + usize::from(suffix > 0) < 2 {
            // A lone interpolation between separators: unchanged.
            out.extend(pieces[i..j].iter().cloned());
            i = j;
            continue;
        }
        let mut parts = Vec::new();
        let (mut go_start, mut trim_left) = match &pieces[i] {
            Piece::Output { go, trim_left, .. } => (go.start, *trim_left),
            _ => unreachable!("runs start at an output"),
        };
        if prefix > 0 {
            // The removed white space between stays removed.
            out.truncate(before.expect("a text precedes") + 1);
        }
        if prefix > 0
            && let Some(Piece::Text { text, go }) = out.last_mut()
        {
            let cut = text.len() - prefix;
            parts.push(Te::Str(text[cut..].to_owned()));
            go_start = go.start + cut;
            text.truncate(cut);
            go.end = go.start + cut;
            trim_left = false;
        }
        let mut go_end = go_start;
        let mut trim_right = false;
        for piece in &pieces[i..j] {
            match piece {
                Piece::Output {
                    te, go, trim_right: r, ..
                } => {
                    parts.push(te.clone());
                    go_end = go.end;
                    trim_right = *r;
                }
                Piece::Text { text, go } if !text.is_empty() => {
                    parts.push(Te::Str(text.clone()));
                    go_end = go.end;
                    trim_right = false;
                }
                _ => {}
            }
        }
        let mut after = None;
        if let Some((k, len)) = stop {
            if let Piece::Text { text, go } = &pieces[k] {
                if len > 0 {
                    parts.push(Te::Str(text[..len].to_owned()));
                    go_end = go.start + len;
                    trim_right = false;
                }
                after = Some(Piece::Text {
                    text: text[len..].to_owned(),
                    go: go.start + len..go.end,
                });
            }
            j = k + 1;
        }
        out.push(Piece::Output {
            te: Te::Concat(parts),
            trim_left,
            trim_right,
            go: go_start..go_end,
        });
        out.extend(after);
        i = j;
    }
    out
}
