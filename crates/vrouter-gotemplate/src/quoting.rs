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

use std::ops::Range;

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
    let mut lexer = Lexer {
        kind,
        state: State::Normal,
        region: None,
        at_word_start: true,
        notes: Vec::new(),
    };
    let mut i = 0;
    while i < pieces.len() {
        i = match &pieces[i] {
            Piece::Text { .. } => lexer.text(&mut pieces, i)?,
            Piece::Trimmed { .. } => i + 1,
            Piece::Output { go, .. } => {
                let at = go.start;
                lexer.output(&mut pieces, i, at)?
            }
            Piece::Tag { .. } => {
                if let Some(r) = lexer.region.as_mut() {
                    r.crosses_tag = true;
                }
                i + 1
            }
        };
    }
    Ok((pieces, lexer.notes))
}

/// The quoting state of the template text read so far, as bash (commands) or
/// the VyOS parser (config) reads it.
struct Lexer {
    kind: TemplateKind,
    state: State,
    /// The open quoted string, in `State::Single` or `State::Double`.
    region: Option<Region>,
    /// Whether the previous character ends a word (for `#`).
    at_word_start: bool,
    notes: Vec<Removed>,
}

/// What a character does to the lexer's reading.
enum Step {
    Next,
    /// The next character is escaped (or is the second of a two-character opening).
    SkipNext,
    /// A quoted string holding interpolations ends here.
    Close(Region),
}

impl Lexer {
    /// Reads the text `pieces[i]`; returns the index of the piece to read next
    /// (a closed string is rewritten, and lexing goes on after its closing quote).
    fn text(&mut self, pieces: &mut Vec<Piece>, i: usize) -> Result<usize, Unconvertible> {
        let Piece::Text { text, .. } = &pieces[i] else {
            unreachable!("called on a text piece")
        };
        let chars: Vec<(usize, char)> = text.char_indices().collect();
        let mut k = 0;
        while k < chars.len() {
            let (offset, c) = chars[k];
            let next = chars.get(k + 1).map(|x| x.1);
            match self.step(c, next, (i, offset)) {
                Step::Close(r) => {
                    self.notes.push(quotes_removed(pieces, &r));
                    self.at_word_start = false;
                    return close(pieces, r, (i, offset), self.kind);
                }
                Step::SkipNext => k += 1,
                Step::Next => {}
            }
            self.at_word_start = c.is_whitespace() || matches!(c, ';' | '&' | '|' | '(' | ')' | '<' | '>');
            k += 1;
        }
        Ok(i + 1)
    }

    /// The character `c` at `pos` (piece, byte offset), followed by `next`.
    fn step(&mut self, c: char, next: Option<char>, pos: (usize, usize)) -> Step {
        match (self.state, self.kind) {
            (State::Normal, _) => return self.outside_quotes(c, next, pos),
            (State::Single, TemplateKind::Commands) => {
                if c == '\'' {
                    return self.close_quote();
                }
            }
            (State::Double, _) | (State::Single, TemplateKind::Config) => {
                if c == '\\' {
                    return Step::SkipNext;
                }
                if c == self.region.as_ref().map_or('"', |r| r.quote) {
                    return self.close_quote();
                }
            }
            (State::AnsiC, _) => {
                if c == '\\' {
                    return Step::SkipNext;
                }
                if c == '\'' {
                    self.state = State::Normal;
                }
            }
            (State::Comment, TemplateKind::Commands) => {
                if c == '\n' {
                    self.state = State::Normal;
                }
            }
            (State::Comment, TemplateKind::Config) => {
                if c == '*' && next == Some('/') {
                    self.state = State::Normal;
                    return Step::SkipNext;
                }
            }
            (State::HereDoc, _) => {}
        }
        Step::Next
    }

    /// What opens a quote, a comment or a here-document.
    fn outside_quotes(&mut self, c: char, next: Option<char>, pos: (usize, usize)) -> Step {
        let commands = self.kind == TemplateKind::Commands;
        match c {
            '\'' | '"' => {
                self.state = if c == '\'' { State::Single } else { State::Double };
                self.region = Some(Region {
                    open: pos,
                    quote: c,
                    outputs: 0,
                    crosses_tag: false,
                });
            }
            '$' if commands && next == Some('\'') => {
                self.state = State::AnsiC;
                return Step::SkipNext;
            }
            '\\' if commands => return Step::SkipNext,
            '#' if commands && self.at_word_start => self.state = State::Comment,
            '<' if commands && next == Some('<') => self.state = State::HereDoc,
            '/' if self.kind == TemplateKind::Config && next == Some('*') => {
                self.state = State::Comment;
                return Step::SkipNext;
            }
            _ => {}
        }
        Step::Next
    }

    fn close_quote(&mut self) -> Step {
        self.state = State::Normal;
        match self.region.take().filter(|r| r.outputs > 0) {
            Some(r) => Step::Close(r),
            None => Step::Next,
        }
    }

    /// Reads the interpolation `pieces[i]` (at `at` in the Go source); returns
    /// the index of the piece to read next.
    fn output(&mut self, pieces: &mut Vec<Piece>, i: usize, at: usize) -> Result<usize, Unconvertible> {
        match self.state {
            State::Single | State::Double => {
                if matches!(
                    pieces[i],
                    Piece::Output {
                        quotes_dropped: true,
                        ..
                    }
                ) {
                    let quote = self.region.as_ref().map_or('"', |r| r.quote);
                    return Err(Unconvertible {
                        at,
                        construct: format!("{quote}{{{{ … }}}}{quote}"),
                        reason: "the quotes this expression writes are inside quotes the template wrote, so                                  the Go operator's value kept them; values are quoted automatically: write                                  the expression without the outer quotes, or the value with its quotes as a param"
                            .into(),
                    });
                }
                if let Some(r) = self.region.as_mut() {
                    r.outputs += 1;
                }
            }
            State::AnsiC => {
                return Err(Unconvertible {
                    at,
                    construct: "$'…{{ … }}…'".into(),
                    reason: "an interpolation inside a `$'…'` string cannot be escaped; move it out of the quotes"
                        .into(),
                });
            }
            State::HereDoc => {
                return Err(Unconvertible {
                    at,
                    construct: "<<".into(),
                    reason:
                        "an interpolation in a here-document cannot be escaped; pass the value as a command argument"
                            .into(),
                });
            }
            State::Comment if self.kind == TemplateKind::Commands => {
                self.notes.push((
                    at,
                    "an interpolation inside a `#` comment was removed: a comment runs nothing, \
                     and a value with a newline would have ended it"
                        .to_owned(),
                ));
                pieces.remove(i);
                return Ok(i);
            }
            _ => {}
        }
        self.at_word_start = false;
        Ok(i + 1)
    }
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
        quotes_dropped: false,
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
        let (j, stop) = word_run(&pieces, i);
        i = merge_run(&mut out, &pieces, i..j, stop);
    }
    out
}

/// The run from the output `pieces[i]`: outputs, removed white space and plain
/// text, up to a tag or the first character of a text that ends the word. Returns
/// its end, and that text with the length of its plain start.
fn word_run(pieces: &[Piece], i: usize) -> (usize, Option<(usize, usize)>) {
    let mut j = i;
    while j < pieces.len() {
        match &pieces[j] {
            Piece::Output { .. } | Piece::Trimmed { .. } => j += 1,
            Piece::Text { text, .. } => {
                let plain_len = text.len() - text.trim_start_matches(plain).len();
                if plain_len < text.len() {
                    return (j, Some((j, plain_len)));
                }
                j += 1;
            }
            Piece::Tag { .. } => break,
        }
    }
    (j, None)
}

/// Writes the run `pieces[run]` to `out`, as one output if it joins with other
/// words or plain text before (at the end of `out`) or after (`stop`); returns
/// the index of the piece after it.
fn merge_run(out: &mut Vec<Piece>, pieces: &[Piece], run: Range<usize>, stop: Option<(usize, usize)>) -> usize {
    // The text before, past white space a trim marker removed.
    let before = out.iter().rposition(|p| !matches!(p, Piece::Trimmed { .. }));
    let prefix = match before.map(|b| &out[b]) {
        Some(Piece::Text { text, .. }) => text.len() - text.trim_end_matches(plain).len(),
        _ => 0,
    };
    let inner_words = pieces[run.clone()]
        .iter()
        .filter(|p| matches!(p, Piece::Output { .. }) || matches!(p, Piece::Text { text, .. } if !text.is_empty()))
        .count();
    let suffix = stop.map_or(0, |(_, len)| len);
    if inner_words + usize::from(prefix > 0) + usize::from(suffix > 0) < 2 {
        // A lone interpolation between separators: unchanged.
        out.extend(pieces[run.clone()].iter().cloned());
        return run.end;
    }
    let mut word = Word::starting_at(&pieces[run.start]);
    if prefix > 0 {
        // The removed white space between stays removed.
        out.truncate(before.expect("a text precedes") + 1);
        if let Some(Piece::Text { text, go }) = out.last_mut() {
            word.take_end_of(text, go, prefix);
        }
    }
    for piece in &pieces[run.clone()] {
        word.add(piece);
    }
    let mut next = run.end;
    let mut after = None;
    if let Some((k, len)) = stop {
        if let Piece::Text { text, go } = &pieces[k] {
            after = Some(word.take_start_of(text, go, len));
        }
        next = k + 1;
    }
    out.push(word.into_output());
    out.extend(after);
    next
}

/// The parts of one merged word, and the Go source it covers.
struct Word {
    parts: Vec<Te>,
    go: Range<usize>,
    trim_left: bool,
    trim_right: bool,
}

impl Word {
    fn starting_at(output: &Piece) -> Word {
        let Piece::Output { go, trim_left, .. } = output else {
            unreachable!("runs start at an output")
        };
        Word {
            parts: Vec::new(),
            go: go.start..go.start,
            trim_left: *trim_left,
            trim_right: false,
        }
    }

    /// Moves the last `len` bytes of the text before (`text`, from `go`) into
    /// the word.
    fn take_end_of(&mut self, text: &mut String, go: &mut Range<usize>, len: usize) {
        let cut = text.len() - len;
        self.parts.push(Te::Str(text[cut..].to_owned()));
        self.go = go.start + cut..go.start + cut;
        text.truncate(cut);
        go.end = go.start + cut;
        self.trim_left = false;
    }

    fn add(&mut self, piece: &Piece) {
        match piece {
            Piece::Output { te, go, trim_right, .. } => {
                self.parts.push(te.clone());
                self.go.end = go.end;
                self.trim_right = *trim_right;
            }
            Piece::Text { text, go } if !text.is_empty() => {
                self.parts.push(Te::Str(text.clone()));
                self.go.end = go.end;
                self.trim_right = false;
            }
            _ => {}
        }
    }

    /// Adds the first `len` bytes of the text after (`text`, from `go`) to the
    /// word; returns the rest of that text.
    fn take_start_of(&mut self, text: &str, go: &Range<usize>, len: usize) -> Piece {
        if len > 0 {
            self.parts.push(Te::Str(text[..len].to_owned()));
            self.go.end = go.start + len;
            self.trim_right = false;
        }
        Piece::Text {
            text: text[len..].to_owned(),
            go: go.start + len..go.end,
        }
    }

    fn into_output(self) -> Piece {
        Piece::Output {
            te: Te::Concat(self.parts),
            trim_left: self.trim_left,
            trim_right: self.trim_right,
            go: self.go,
            quotes_dropped: false,
        }
    }
}
