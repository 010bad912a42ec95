//! A parser for Go `text/template` source, keeping every position.
//!
//! It follows the grammar of Go's `text/template/parse` (delimiters `{{ }}`, trim
//! markers, comments, actions, pipelines, declarations, the control keywords) and
//! refuses what Go refuses, with the byte offset of the problem. Unlike Go's it
//! does not check that functions exist: the converter decides what each name
//! becomes, and reports the ones it cannot convert.

use std::ops::Range;

/// A `{{ … }}` as written: where it is and which trim markers it has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tag {
    pub span: Range<usize>,
    /// `{{- `: the text before loses its trailing spaces, tabs and newlines.
    pub trim_left: bool,
    /// ` -}}`: the text after loses its leading spaces, tabs and newlines.
    pub trim_right: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node {
    /// Literal text, exactly as in the source (trim markers not applied).
    Text {
        span: Range<usize>,
    },
    Comment {
        tag: Tag,
        body: String,
    },
    Action {
        tag: Tag,
        pipe: Pipeline,
    },
    /// `if`/`with` with their `else if`/`else with` branches.
    Conditional {
        keyword: Keyword,
        branches: Vec<Branch>,
        otherwise: Option<(Tag, Vec<Node>)>,
        end: Tag,
    },
    Range {
        tag: Tag,
        pipe: Pipeline,
        body: Vec<Node>,
        otherwise: Option<(Tag, Vec<Node>)>,
        end: Tag,
    },
    Break(Tag),
    Continue(Tag),
    /// `template`, `define` and `block`: other templates, which a VRouterTemplate
    /// cannot have. Kept only to be reported.
    OtherTemplate {
        tag: Tag,
        keyword: Keyword,
    },
}

/// One `{{ if … }}` or `{{ else if … }}` (or `with`) and its body.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Branch {
    pub tag: Tag,
    /// Which keyword this branch's tag has: `if`, `with`, or `else`-chained.
    pub keyword: Keyword,
    pub pipe: Pipeline,
    pub body: Vec<Node>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keyword {
    If,
    With,
    Template,
    Define,
    Block,
}

impl Keyword {
    pub fn as_str(self) -> &'static str {
        match self {
            Keyword::If => "if",
            Keyword::With => "with",
            Keyword::Template => "template",
            Keyword::Define => "define",
            Keyword::Block => "block",
        }
    }
}

/// Variables with the spans of their names.
pub(crate) type Vars = Vec<(String, Range<usize>)>;

/// `$x := cmd | cmd …`
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Pipeline {
    pub span: Range<usize>,
    /// Declared (`:=`) or assigned (`=`) variables, with their spans.
    pub vars: Vars,
    pub assign: bool,
    pub cmds: Vec<Command>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Command {
    pub span: Range<usize>,
    pub args: Vec<Operand>,
}

/// A term with the fields read from it: `.a.b` is [`Term::Dot`] with `["a", "b"]`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Operand {
    pub span: Range<usize>,
    pub term: Term,
    pub fields: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Term {
    Dot,
    Nil,
    Bool(bool),
    Number(Number),
    String(String),
    /// A function name.
    Ident(String),
    /// `$` or `$name`, with the `$`.
    Variable(String),
    Pipe(Box<Pipeline>),
}

/// A number constant as Go reads it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Number {
    Int(i64),
    Uint(u64),
    Float(f64),
    /// `'a'`: Go's rune constant, an integer.
    Char(i64),
}

/// Why the source is not a Go template, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParseError {
    pub at: usize,
    pub message: String,
}

type Result<T> = std::result::Result<T, ParseError>;

fn fail<T>(at: usize, message: impl Into<String>) -> Result<T> {
    Err(ParseError {
        at,
        message: message.into(),
    })
}

/// Go's `isSpace` in the lexer: the characters trim markers remove.
pub(crate) fn is_go_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

fn is_alphanumeric(c: char) -> bool {
    c == '_' || c.is_alphabetic() || c.is_numeric()
}

// ------------------------------------------------------------------ lexer

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Space,
    RightDelim { trim: bool },
    Ident(String),
    Keyword(&'static str),
    Field(String),
    Variable(String),
    Dot,
    Bool(bool),
    Nil,
    Number(Number),
    String(String),
    Pipe,
    LeftParen,
    RightParen,
    Comma,
    Declare,
    Assign,
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    span: Range<usize>,
}

const KEYWORDS: &[&str] = &[
    "block", "break", "continue", "define", "else", "end", "if", "range", "template", "with",
];

/// Lexes the inside of one action, from just after `{{` (and a trim marker) to its
/// closing delimiter, which ends the returned list.
struct ActionLexer<'a> {
    src: &'a str,
    /// Where the action's `{{` is, for errors about the whole action.
    start: usize,
    pos: usize,
    paren_depth: usize,
}

impl ActionLexer<'_> {
    fn peek(&self) -> Option<char> {
        self.src[self.pos..].chars().next()
    }

    fn at_right_delim(&self) -> Option<bool> {
        let rest = &self.src[self.pos..];
        if rest.starts_with("}}") {
            return Some(false);
        }
        let mut chars = rest.chars();
        if chars.next().is_some_and(is_go_space) && chars.as_str().starts_with("-}}") {
            return Some(true);
        }
        None
    }

    fn at_terminator(&self) -> bool {
        match self.peek() {
            None => true,
            Some(c) if is_go_space(c) => true,
            Some('.' | ',' | '|' | ':' | ')' | '(') => true,
            Some('}') => self.src[self.pos..].starts_with("}}"),
            _ => false,
        }
    }

    fn tokens(&mut self) -> Result<Vec<Token>> {
        let mut out = Vec::new();
        loop {
            let start = self.pos;
            if let Some(trim) = self.at_right_delim() {
                if self.paren_depth > 0 {
                    return fail(start, "unclosed left paren");
                }
                self.pos += if trim { 4 } else { 2 };
                out.push(Token {
                    tok: Tok::RightDelim { trim },
                    span: start..self.pos,
                });
                return Ok(out);
            }
            let Some(c) = self.peek() else {
                return fail(self.start, "unclosed action");
            };
            if let Some(tok) = self.token(c, start)? {
                out.push(Token {
                    tok,
                    span: start..self.pos,
                });
            }
        }
    }

    /// The token starting with `c` (at `start`), or `None` for a single space
    /// that belongs to ` -}}`.
    fn token(&mut self, c: char, start: usize) -> Result<Option<Tok>> {
        let tok = match c {
            c if is_go_space(c) => {
                self.lex_space();
                if self.pos == start {
                    return Ok(None);
                }
                Tok::Space
            }
            '=' => {
                self.pos += 1;
                Tok::Assign
            }
            ':' => {
                if !self.src[self.pos..].starts_with(":=") {
                    return fail(start, "expected :=");
                }
                self.pos += 2;
                Tok::Declare
            }
            '|' => {
                self.pos += 1;
                Tok::Pipe
            }
            '"' => Tok::String(self.lex_quote()?),
            '`' => Tok::String(self.lex_raw_quote()?),
            '\'' => Tok::Number(Number::Char(self.lex_char()?)),
            '$' => self.lex_variable()?,
            '.' => self.lex_dot()?,
            '+' | '-' | '0'..='9' => Tok::Number(self.lex_number()?),
            '(' => {
                self.pos += 1;
                self.paren_depth += 1;
                Tok::LeftParen
            }
            ')' => {
                self.pos += 1;
                if self.paren_depth == 0 {
                    return fail(start, "unexpected right paren");
                }
                self.paren_depth -= 1;
                Tok::RightParen
            }
            ',' => {
                self.pos += 1;
                Tok::Comma
            }
            c if is_alphanumeric(c) => self.lex_identifier()?,
            c => return fail(start, format!("unexpected {c:?} in command")),
        };
        Ok(Some(tok))
    }

    /// `$name` (or `$`).
    fn lex_variable(&mut self) -> Result<Tok> {
        self.pos += 1;
        let name = self.lex_word();
        if !self.at_terminator() {
            return fail(self.pos, format!("bad character {:?}", self.peek().unwrap_or(' ')));
        }
        Ok(Tok::Variable(format!("${name}")))
    }

    /// `.`, `.field`, or a number such as `.5`.
    fn lex_dot(&mut self) -> Result<Tok> {
        if self.src[self.pos + 1..].starts_with(|c: char| c.is_ascii_digit()) {
            return Ok(Tok::Number(self.lex_number()?));
        }
        self.pos += 1;
        if self.at_terminator() {
            return Ok(Tok::Dot);
        }
        let name = self.lex_word();
        if name.is_empty() || !self.at_terminator() {
            return fail(self.pos, format!("bad character {:?}", self.peek().unwrap_or(' ')));
        }
        Ok(Tok::Field(name))
    }

    /// A function name, keyword, `true`, `false` or `nil`.
    fn lex_identifier(&mut self) -> Result<Tok> {
        let word = self.lex_word();
        if !self.at_terminator() {
            return fail(self.pos, format!("bad character {:?}", self.peek().unwrap_or(' ')));
        }
        Ok(match word.as_str() {
            "true" => Tok::Bool(true),
            "false" => Tok::Bool(false),
            "nil" => Tok::Nil,
            w => match KEYWORDS.iter().find(|k| **k == w) {
                Some(k) => Tok::Keyword(k),
                None => Tok::Ident(word),
            },
        })
    }

    fn lex_space(&mut self) {
        let start = self.pos;
        while let Some(c) = self.peek().filter(|c| is_go_space(*c)) {
            self.pos += c.len_utf8();
        }
        // The last space before `-}}` is part of the trim marker.
        if self.pos > start && self.src[self.pos..].starts_with("-}}") {
            self.pos -= 1;
        }
    }

    fn lex_word(&mut self) -> String {
        let start = self.pos;
        while let Some(c) = self.peek().filter(|c| is_alphanumeric(*c)) {
            self.pos += c.len_utf8();
        }
        self.src[start..self.pos].to_owned()
    }

    fn lex_quote(&mut self) -> Result<String> {
        let start = self.pos;
        self.pos += 1;
        loop {
            match self.peek() {
                None | Some('\n') => return fail(start, "unterminated quoted string"),
                Some('\\') => {
                    self.pos += 1;
                    match self.peek() {
                        None | Some('\n') => return fail(start, "unterminated quoted string"),
                        Some(c) => self.pos += c.len_utf8(),
                    }
                }
                Some('"') => {
                    self.pos += 1;
                    break;
                }
                Some(c) => self.pos += c.len_utf8(),
            }
        }
        unquote(&self.src[start + 1..self.pos - 1], '"').map_err(|message| ParseError { at: start, message })
    }

    fn lex_raw_quote(&mut self) -> Result<String> {
        let start = self.pos;
        let Some(len) = self.src[start + 1..].find('`') else {
            return fail(start, "unterminated raw quoted string");
        };
        self.pos = start + 1 + len + 1;
        // Go's strconv.Unquote drops carriage returns from raw strings.
        Ok(self.src[start + 1..start + 1 + len].replace('\r', ""))
    }

    fn lex_char(&mut self) -> Result<i64> {
        let start = self.pos;
        self.pos += 1;
        loop {
            match self.peek() {
                None | Some('\n') => return fail(start, "unterminated character constant"),
                Some('\\') => {
                    self.pos += 1;
                    match self.peek() {
                        None | Some('\n') => return fail(start, "unterminated character constant"),
                        Some(c) => self.pos += c.len_utf8(),
                    }
                }
                Some('\'') => {
                    self.pos += 1;
                    break;
                }
                Some(c) => self.pos += c.len_utf8(),
            }
        }
        let value =
            unquote(&self.src[start + 1..self.pos - 1], '\'').map_err(|message| ParseError { at: start, message })?;
        let mut chars = value.chars();
        match (chars.next(), chars.next()) {
            (Some(c), None) => Ok(i64::from(u32::from(c))),
            _ => fail(start, "malformed character constant"),
        }
    }

    /// Go's number syntax; complex and hexadecimal float constants are refused
    /// (no template value can hold them).
    fn lex_number(&mut self) -> Result<Number> {
        let start = self.pos;
        if self.peek().is_some_and(|c| c == '+' || c == '-') {
            self.pos += 1;
        }
        let digits_start = self.pos;
        let rest = &self.src[digits_start..];
        let (radix, prefix) = if rest.len() > 1 && rest.starts_with('0') {
            match rest.as_bytes()[1] {
                b'x' | b'X' => (16, 2),
                b'o' | b'O' => (8, 2),
                b'b' | b'B' => (2, 2),
                _ => (10, 0),
            }
        } else {
            (10, 0)
        };
        self.pos += prefix;
        let digit = |c: char| c == '_' || c.is_digit(radix);
        while self.peek().is_some_and(digit) {
            self.pos += 1;
        }
        let mut float = false;
        if radix == 10 {
            if self.peek() == Some('.') {
                float = true;
                self.pos += 1;
                while self.peek().is_some_and(digit) {
                    self.pos += 1;
                }
            }
            if self.peek().is_some_and(|c| c == 'e' || c == 'E') {
                float = true;
                self.pos += 1;
                if self.peek().is_some_and(|c| c == '+' || c == '-') {
                    self.pos += 1;
                }
                while self.peek().is_some_and(|c| c.is_ascii_digit() || c == '_') {
                    self.pos += 1;
                }
            }
        }
        if self.peek().is_some_and(is_alphanumeric) || self.peek() == Some('.') {
            let end = self.pos + self.peek().map_or(0, char::len_utf8);
            return fail(
                start,
                format!(
                    "bad number syntax: {:?} (complex and hexadecimal float constants are not supported)",
                    &self.src[start..end]
                ),
            );
        }
        let text = &self.src[start..self.pos];
        parse_number(text, radix, prefix, digits_start - start, float).ok_or_else(|| ParseError {
            at: start,
            message: format!("bad number syntax: {text:?}"),
        })
    }
}

fn parse_number(text: &str, radix: u32, prefix: usize, sign_len: usize, float: bool) -> Option<Number> {
    let negative = text.starts_with('-');
    let body = &text[sign_len..];
    if body.starts_with('_') || body.ends_with('_') || body.contains("__") {
        return None;
    }
    let clean: String = body[prefix..].chars().filter(|c| *c != '_').collect();
    if clean.is_empty() {
        return None;
    }
    if float {
        let value: f64 = clean.parse().ok()?;
        let value = if negative { -value } else { value };
        // Go keeps an integral float constant usable as an integer.
        return Some(Number::Float(value));
    }
    // A leading 0 (without a letter) is octal in Go.
    let (radix, digits) = if radix == 10 && clean.len() > 1 && clean.starts_with('0') {
        (8, &clean[1..])
    } else {
        (radix, clean.as_str())
    };
    let magnitude = u64::from_str_radix(digits, radix).ok()?;
    if negative {
        if magnitude <= i64::MAX as u64 + 1 {
            Some(Number::Int((magnitude as i128).wrapping_neg() as i64))
        } else {
            None
        }
    } else if let Ok(i) = i64::try_from(magnitude) {
        Some(Number::Int(i))
    } else {
        Some(Number::Uint(magnitude))
    }
}

/// The body of a Go interpreted string or rune literal, with its escapes.
fn unquote(body: &str, quote: char) -> std::result::Result<String, String> {
    let mut out = String::new();
    let mut chars = body.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let e = chars.next().ok_or("invalid syntax")?;
        let simple = match e {
            'a' => Some('\u{7}'),
            'b' => Some('\u{8}'),
            'f' => Some('\u{c}'),
            'n' => Some('\n'),
            'r' => Some('\r'),
            't' => Some('\t'),
            'v' => Some('\u{b}'),
            '\\' => Some('\\'),
            '\'' if quote == '\'' => Some('\''),
            '"' if quote == '"' => Some('"'),
            _ => None,
        };
        if let Some(s) = simple {
            out.push(s);
            continue;
        }
        let (count, radix) = match e {
            'x' => (2, 16),
            'u' => (4, 16),
            'U' => (8, 16),
            '0'..='7' => (2, 8),
            _ => return Err(format!("invalid escape \\{e} in a quoted string")),
        };
        let mut digits = String::new();
        if radix == 8 {
            digits.push(e);
        }
        for _ in 0..count {
            digits.push(chars.next().ok_or("invalid syntax")?);
        }
        let code = u32::from_str_radix(&digits, radix).map_err(|_| format!("invalid escape \\{e}{digits}"))?;
        if e == 'x' || radix == 8 {
            if code > 0x7f {
                // A byte that is not ASCII: not valid UTF-8 on its own.
                return Err(format!(
                    "the escape \\{} writes a byte that is not a character",
                    if radix == 8 { digits } else { format!("x{digits}") }
                ));
            }
            out.push(char::from_u32(code).expect("ASCII"));
        } else {
            out.push(char::from_u32(code).ok_or(format!("invalid escape: U+{code:X} is not a character"))?);
        }
    }
    Ok(out)
}

// ------------------------------------------------------------------ parser

/// Parses a whole template.
pub(crate) fn parse(src: &str) -> Result<Vec<Node>> {
    let mut parser = Parser {
        src,
        pos: 0,
        range_depth: 0,
        vars: vec!["$".to_owned()],
    };
    let (nodes, stop) = parser.list()?;
    match stop {
        Stop::Eof => Ok(nodes),
        Stop::End(tag) => fail(tag.span.start, "unexpected {{end}}"),
        Stop::Else(tag, _) => fail(tag.span.start, "unexpected {{else}}"),
    }
}

struct Parser<'a> {
    src: &'a str,
    pos: usize,
    range_depth: usize,
    /// Variables in scope, innermost last (Go checks uses at parse time).
    vars: Vec<String>,
}

/// What ended a list of nodes.
enum Stop {
    Eof,
    End(Tag),
    /// `{{ else }}`, or `{{ else if|with … }}` with the tokens after `else`.
    Else(Tag, Vec<Token>),
}

/// An opened tag: its start, whether it trims left, and its tokens (ending with
/// the right delimiter).
struct Opened {
    start: usize,
    trim_left: bool,
    tokens: Vec<Token>,
}

impl Opened {
    fn tag(&self) -> Tag {
        let Some(Token {
            tok: Tok::RightDelim { trim },
            span,
        }) = self.tokens.last()
        else {
            unreachable!("an action's tokens end with its right delimiter")
        };
        Tag {
            span: self.start..span.end,
            trim_left: self.trim_left,
            trim_right: *trim,
        }
    }
}

enum Piece {
    Text(Range<usize>),
    Comment(Tag, String),
    Action(Opened),
}

impl Parser<'_> {
    /// The next piece of source: literal text, a comment, or an action's tokens.
    fn next_piece(&mut self) -> Result<Option<Piece>> {
        if self.pos >= self.src.len() {
            return Ok(None);
        }
        let rest = &self.src[self.pos..];
        let Some(open) = rest.find("{{") else {
            let span = self.pos..self.src.len();
            self.pos = self.src.len();
            return Ok(Some(Piece::Text(span)));
        };
        if open > 0 {
            let span = self.pos..self.pos + open;
            self.pos += open;
            return Ok(Some(Piece::Text(span)));
        }
        let start = self.pos;
        self.pos += 2;
        let mut trim_left = false;
        {
            let after = &self.src[self.pos..];
            let mut chars = after.chars();
            if chars.next() == Some('-') && chars.next().is_some_and(is_go_space) {
                trim_left = true;
                self.pos += 2;
            }
        }
        if self.src[self.pos..].starts_with("/*") {
            let body_start = self.pos + 2;
            let Some(close) = self.src[body_start..].find("*/") else {
                return fail(start, "unclosed comment");
            };
            let body = self.src[body_start..body_start + close].to_owned();
            self.pos = body_start + close + 2;
            let after = &self.src[self.pos..];
            let trim_right = if after.starts_with("}}") {
                false
            } else if after.chars().next().is_some_and(is_go_space) && after[1..].starts_with("-}}") {
                true
            } else {
                return fail(start, "comment ends before closing delimiter");
            };
            self.pos += if trim_right { 4 } else { 2 };
            let tag = Tag {
                span: start..self.pos,
                trim_left,
                trim_right,
            };
            return Ok(Some(Piece::Comment(tag, body)));
        }
        let mut lexer = ActionLexer {
            src: self.src,
            start,
            pos: self.pos,
            paren_depth: 0,
        };
        let tokens = lexer.tokens()?;
        self.pos = lexer.pos;
        Ok(Some(Piece::Action(Opened {
            start,
            trim_left,
            tokens,
        })))
    }

    fn list(&mut self) -> Result<(Vec<Node>, Stop)> {
        let mut nodes = Vec::new();
        while let Some(piece) = self.next_piece()? {
            match piece {
                Piece::Text(span) => nodes.push(Node::Text { span }),
                Piece::Comment(tag, body) => nodes.push(Node::Comment { tag, body }),
                Piece::Action(opened) => {
                    let tag = opened.tag();
                    let mut toks = Tokens::new(&opened.tokens);
                    toks.skip_space();
                    match toks.peek_tok() {
                        Some(Tok::Keyword("end")) => {
                            toks.next();
                            toks.expect_close("end")?;
                            return Ok((nodes, Stop::End(tag)));
                        }
                        Some(Tok::Keyword("else")) => {
                            toks.next();
                            toks.skip_space();
                            let rest = toks.rest().to_vec();
                            return Ok((nodes, Stop::Else(tag, rest)));
                        }
                        _ => nodes.push(self.action(tag, toks)?),
                    }
                }
            }
        }
        Ok((nodes, Stop::Eof))
    }

    fn action(&mut self, tag: Tag, mut toks: Tokens<'_>) -> Result<Node> {
        let at = tag.span.start;
        match toks.peek_tok() {
            Some(Tok::Keyword("if")) => {
                toks.next();
                self.conditional(Keyword::If, tag, toks)
            }
            Some(Tok::Keyword("with")) => {
                toks.next();
                self.conditional(Keyword::With, tag, toks)
            }
            Some(Tok::Keyword("range")) => {
                toks.next();
                self.range(tag, toks)
            }
            Some(Tok::Keyword(k @ ("break" | "continue"))) => {
                let keyword = *k;
                toks.next();
                toks.expect_close(keyword)?;
                if self.range_depth == 0 {
                    return fail(at, format!("{{{{{keyword}}}}} outside {{{{range}}}}"));
                }
                Ok(if keyword == "break" {
                    Node::Break(tag)
                } else {
                    Node::Continue(tag)
                })
            }
            Some(Tok::Keyword("template")) => Ok(Node::OtherTemplate {
                tag,
                keyword: Keyword::Template,
            }),
            Some(Tok::Keyword(k @ ("define" | "block"))) => {
                let keyword = if *k == "define" {
                    Keyword::Define
                } else {
                    Keyword::Block
                };
                self.other_template_body(keyword, &tag)?;
                Ok(Node::OtherTemplate { tag, keyword })
            }
            _ => {
                let pipe = self.pipeline(&mut toks, "command", false)?;
                Ok(Node::Action { tag, pipe })
            }
        }
    }

    /// Skips the body of a `define` or `block` up to its `{{end}}`, so that the
    /// construct is reported at its own tag (its arguments are not parsed: the
    /// whole of it is unconvertible). Its body sees only `$`, as in Go.
    fn other_template_body(&mut self, keyword: Keyword, tag: &Tag) -> Result<()> {
        let outer = std::mem::replace(&mut self.vars, vec!["$".to_owned()]);
        let range_depth = std::mem::take(&mut self.range_depth);
        let (_, stop) = self.list()?;
        self.vars = outer;
        self.range_depth = range_depth;
        match stop {
            Stop::End(_) => Ok(()),
            Stop::Else(t, _) => fail(t.span.start, "unexpected {{else}}"),
            Stop::Eof => fail(
                tag.span.start,
                format!("unexpected EOF: {{{{{}}}}} has no {{{{end}}}}", keyword.as_str()),
            ),
        }
    }

    fn conditional(&mut self, keyword: Keyword, tag: Tag, mut toks: Tokens<'_>) -> Result<Node> {
        let scope = self.vars.len();
        let pipe = self.pipeline(&mut toks, keyword.as_str(), false)?;
        // As in Go's parser, variables declared anywhere in the structure stay
        // declared up to its `end`, else branches included (using one in a branch
        // where it was not set fails when rendering, in Go and in tera alike).
        let (body, mut stop) = self.list()?;
        let mut branches = vec![Branch {
            tag,
            keyword,
            pipe,
            body,
        }];
        let mut otherwise = None;
        loop {
            match stop {
                Stop::Eof => {
                    self.vars.truncate(scope);
                    return fail(
                        branches[0].tag.span.start,
                        format!("unexpected EOF: {{{{{}}}}} has no {{{{end}}}}", keyword.as_str()),
                    );
                }
                Stop::End(end) => {
                    self.vars.truncate(scope);
                    return Ok(Node::Conditional {
                        keyword,
                        branches,
                        otherwise,
                        end,
                    });
                }
                Stop::Else(else_tag, rest) => {
                    if otherwise.is_some() {
                        return fail(else_tag.span.start, "expected end; found {{else}}");
                    }
                    let mut toks = Tokens::new(&rest);
                    let chained = match toks.peek_tok() {
                        Some(Tok::Keyword("if")) => Some(Keyword::If),
                        Some(Tok::Keyword("with")) if keyword == Keyword::With => Some(Keyword::With),
                        _ => None,
                    };
                    match chained {
                        Some(k) => {
                            toks.next();
                            // Go scopes an else-if's variables like a nested if.
                            let pipe = self.pipeline(&mut toks, k.as_str(), false)?;
                            let (body, next) = self.list()?;
                            branches.push(Branch {
                                tag: else_tag,
                                keyword: k,
                                pipe,
                                body,
                            });
                            stop = next;
                        }
                        None => {
                            toks.expect_close("else")?;
                            let (body, next) = self.list()?;
                            otherwise = Some((else_tag, body));
                            stop = next;
                        }
                    }
                }
            }
        }
    }

    fn range(&mut self, tag: Tag, mut toks: Tokens<'_>) -> Result<Node> {
        let scope = self.vars.len();
        let pipe = self.pipeline(&mut toks, "range", true)?;
        self.range_depth += 1;
        let (body, stop) = self.list()?;
        self.range_depth -= 1;
        let (otherwise, end) = match stop {
            Stop::End(end) => (None, end),
            Stop::Else(else_tag, rest) => {
                Tokens::new(&rest).expect_close("else")?;
                let (body, stop) = self.list()?;
                match stop {
                    Stop::End(end) => (Some((else_tag, body)), end),
                    Stop::Else(t, _) => return fail(t.span.start, "expected end; found {{else}}"),
                    Stop::Eof => return fail(tag.span.start, "unexpected EOF: {{range}} has no {{end}}"),
                }
            }
            Stop::Eof => return fail(tag.span.start, "unexpected EOF: {{range}} has no {{end}}"),
        };
        self.vars.truncate(scope);
        Ok(Node::Range {
            tag,
            pipe,
            body,
            otherwise,
            end,
        })
    }

    /// A pipeline, up to the right delimiter (or `)` when `toks` is a paren's).
    fn pipeline(&mut self, toks: &mut Tokens<'_>, context: &str, in_range: bool) -> Result<Pipeline> {
        toks.skip_space();
        let start = toks.position(self.src.len());
        let (vars, assign) = self.declarations(toks, context, in_range)?;
        let mut cmds = Vec::new();
        loop {
            toks.skip_space();
            match toks.peek_tok() {
                None => return fail(start, format!("unclosed {context}")),
                Some(Tok::RightDelim { .. } | Tok::RightParen) => {
                    if cmds.is_empty() {
                        return fail(start, format!("missing value for {context}"));
                    }
                    let end = toks.peek().map_or(start, |t| t.span.start);
                    // Declarations take effect after the pipeline. Go's parser also
                    // declares an assigned variable it has not seen (the assignment
                    // fails only when it runs).
                    self.vars.extend(vars.iter().map(|(n, _)| n.clone()));
                    return Ok(Pipeline {
                        span: start..end,
                        vars,
                        assign,
                        cmds,
                    });
                }
                Some(Tok::Pipe) if !cmds.is_empty() => {
                    toks.next();
                }
                _ => {}
            }
            let cmd = self.command(toks)?;
            if !cmds.is_empty()
                && matches!(
                    cmd.args[0].term,
                    Term::Bool(_) | Term::Dot | Term::Nil | Term::Number(_) | Term::String(_)
                )
                && cmd.args[0].fields.is_empty()
            {
                return fail(
                    cmd.span.start,
                    format!("non executable command in pipeline stage {}", cmds.len() + 1),
                );
            }
            cmds.push(cmd);
        }
    }

    /// The variables a pipeline declares (`$x :=`), or assigns (`$x =`, then
    /// `true`); in range also `$i, $v :=`. Nothing, and no token taken, when it
    /// starts otherwise.
    fn declarations(&self, toks: &mut Tokens<'_>, context: &str, in_range: bool) -> Result<(Vars, bool)> {
        let mut vars = Vec::new();
        let mut assign = false;
        // `$x :=`, `$x =`, or in range `$i, $v :=`.
        let checkpoint = toks.index;
        if let Some(Token {
            tok: Tok::Variable(name),
            span,
        }) = toks.peek().cloned()
        {
            toks.next();
            toks.skip_space();
            match toks.peek_tok() {
                Some(Tok::Declare | Tok::Assign) => {
                    assign = toks.peek_tok() == Some(&Tok::Assign);
                    toks.next();
                    vars.push((name, span));
                }
                Some(Tok::Comma) if in_range => {
                    toks.next();
                    toks.skip_space();
                    let Some(Token {
                        tok: Tok::Variable(second),
                        span: second_span,
                    }) = toks.next().cloned()
                    else {
                        return fail(span.start, "range can only initialize variables");
                    };
                    toks.skip_space();
                    match toks.next().map(|t| &t.tok) {
                        Some(Tok::Declare) => {}
                        Some(Tok::Assign) => assign = true,
                        _ => return fail(span.start, "range can only initialize variables"),
                    }
                    vars.push((name, span));
                    vars.push((second, second_span));
                }
                Some(Tok::Comma) => return fail(span.start, format!("too many declarations in {context}")),
                _ => toks.index = checkpoint,
            }
        }
        Ok((vars, assign))
    }

    fn command(&mut self, toks: &mut Tokens<'_>) -> Result<Command> {
        let start = toks.position(self.src.len());
        let mut args = Vec::new();
        let mut end = start;
        loop {
            toks.skip_space();
            match toks.peek_tok() {
                None | Some(Tok::RightDelim { .. } | Tok::RightParen | Tok::Pipe) => break,
                _ => {}
            }
            let operand = self.operand(toks)?;
            end = operand.span.end;
            args.push(operand);
            match toks.peek_tok() {
                None | Some(Tok::Space | Tok::RightDelim { .. } | Tok::RightParen | Tok::Pipe) => {}
                Some(other) => {
                    let at = toks.peek().map_or(start, |t| t.span.start);
                    return fail(at, format!("unexpected {} in operand", describe(other)));
                }
            }
        }
        if args.is_empty() {
            return fail(start, "missing value for command");
        }
        if args.len() > 1 && !matches!(args[0].term, Term::Ident(_)) && args[0].fields.is_empty() {
            let what = match &args[0].term {
                Term::Nil => "nil is not a command".to_owned(),
                _ => "can't give argument to non-function".to_owned(),
            };
            return fail(args[0].span.start, what);
        }
        if args.len() == 1 && args[0].term == Term::Nil {
            return fail(args[0].span.start, "nil is not a command");
        }
        Ok(Command { span: start..end, args })
    }

    fn operand(&mut self, toks: &mut Tokens<'_>) -> Result<Operand> {
        let first = toks.next().cloned().expect("called with a token");
        let start = first.span.start;
        let mut end = first.span.end;
        let mut fields = Vec::new();
        let term = match first.tok {
            Tok::Dot => Term::Dot,
            Tok::Nil => Term::Nil,
            Tok::Bool(b) => Term::Bool(b),
            Tok::Number(n) => Term::Number(n),
            Tok::String(s) => Term::String(s),
            Tok::Ident(name) => Term::Ident(name),
            Tok::Field(name) => {
                fields.push(name);
                Term::Dot
            }
            Tok::Variable(name) => {
                if !self.vars.contains(&name) {
                    return fail(start, format!("undefined variable {name:?}"));
                }
                Term::Variable(name)
            }
            Tok::LeftParen => {
                let pipe = self.pipeline(toks, "parenthesized pipeline", false)?;
                match toks.next() {
                    Some(Token {
                        tok: Tok::RightParen,
                        span,
                    }) => end = span.end,
                    _ => return fail(start, "unclosed left paren"),
                }
                Term::Pipe(Box::new(pipe))
            }
            Tok::Keyword(k) => return fail(start, format!("unexpected <{k}> in command")),
            other => return fail(start, format!("unexpected {} in operand", describe(&other))),
        };
        while let Some(Token {
            tok: Tok::Field(name),
            span,
        }) = toks.peek().cloned()
        {
            toks.next();
            fields.push(name);
            end = span.end;
        }
        if !fields.is_empty() && matches!(term, Term::Bool(_) | Term::Number(_) | Term::String(_) | Term::Nil) {
            return fail(start, "unexpected . after term");
        }
        Ok(Operand {
            span: start..end,
            term,
            fields,
        })
    }
}

fn describe(tok: &Tok) -> String {
    match tok {
        Tok::Space => "space".into(),
        Tok::RightDelim { .. } => "}}".into(),
        Tok::Ident(s) | Tok::Variable(s) => format!("{s:?}"),
        Tok::Keyword(k) => format!("<{k}>"),
        Tok::Field(f) => format!("<.{f}>"),
        Tok::Dot => "<.>".into(),
        Tok::Bool(b) => b.to_string(),
        Tok::Nil => "nil".into(),
        Tok::Number(_) => "number".into(),
        Tok::String(_) => "string".into(),
        Tok::Pipe => "|".into(),
        Tok::LeftParen => "(".into(),
        Tok::RightParen => ")".into(),
        Tok::Comma => "\",\"".into(),
        Tok::Declare => ":=".into(),
        Tok::Assign => "=".into(),
    }
}

struct Tokens<'t> {
    toks: &'t [Token],
    index: usize,
}

impl<'t> Tokens<'t> {
    fn new(toks: &'t [Token]) -> Self {
        Tokens { toks, index: 0 }
    }

    fn peek(&self) -> Option<&'t Token> {
        self.toks.get(self.index)
    }

    fn peek_tok(&self) -> Option<&'t Tok> {
        self.peek().map(|t| &t.tok)
    }

    fn next(&mut self) -> Option<&'t Token> {
        let t = self.toks.get(self.index);
        self.index += 1;
        t
    }

    fn skip_space(&mut self) {
        while self.peek_tok() == Some(&Tok::Space) {
            self.index += 1;
        }
    }

    fn rest(&self) -> &'t [Token] {
        &self.toks[self.index.min(self.toks.len())..]
    }

    fn position(&self, fallback: usize) -> usize {
        self.peek().map_or(fallback, |t| t.span.start)
    }

    /// After a keyword that takes no arguments: only the right delimiter may follow.
    fn expect_close(&mut self, keyword: &str) -> Result<()> {
        self.skip_space();
        match self.next() {
            Some(Token {
                tok: Tok::RightDelim { .. },
                ..
            }) => Ok(()),
            Some(t) => fail(t.span.start, format!("unexpected {} in {keyword}", describe(&t.tok))),
            None => fail(0, format!("unclosed {keyword}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn action_pipe(src: &str) -> Pipeline {
        match parse(src).unwrap().remove(0) {
            Node::Action { pipe, .. } => pipe,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn fields_variables_and_trim_markers() {
        let nodes = parse("a {{- .x.y -}} b {{ $.z }}").unwrap();
        let Node::Action { tag, pipe } = &nodes[1] else {
            panic!()
        };
        assert!(tag.trim_left && tag.trim_right);
        assert_eq!(pipe.cmds[0].args[0].term, Term::Dot);
        assert_eq!(pipe.cmds[0].args[0].fields, ["x", "y"]);
        let Node::Action { pipe, .. } = &nodes[3] else { panic!() };
        assert_eq!(pipe.cmds[0].args[0].term, Term::Variable("$".into()));
        assert_eq!(pipe.cmds[0].args[0].fields, ["z"]);
    }

    #[test]
    fn a_dash_without_a_space_is_a_number() {
        let pipe = action_pipe("{{-3}}");
        assert_eq!(pipe.cmds[0].args[0].term, Term::Number(Number::Int(-3)));
    }

    #[test]
    fn pipelines_and_parens() {
        let pipe = action_pipe(r#"{{ default "a\tb" (index .m "k") | upper }}"#);
        assert_eq!(pipe.cmds.len(), 2);
        assert_eq!(pipe.cmds[0].args[1].term, Term::String("a\tb".into()));
        let Term::Pipe(inner) = &pipe.cmds[0].args[2].term else {
            panic!()
        };
        assert_eq!(inner.cmds[0].args[0].term, Term::Ident("index".into()));
    }

    #[test]
    fn numbers_as_go_reads_them() {
        for (src, n) in [
            ("0x1F", Number::Int(31)),
            ("017", Number::Int(15)),
            ("0o17", Number::Int(15)),
            ("1_000", Number::Int(1000)),
            ("1.5", Number::Float(1.5)),
            ("1e3", Number::Float(1000.0)),
            ("'a'", Number::Char(97)),
            ("18446744073709551615", Number::Uint(u64::MAX)),
        ] {
            let pipe = action_pipe(&format!("{{{{ {src} }}}}"));
            assert_eq!(pipe.cmds[0].args[0].term, Term::Number(n), "{src}");
        }
    }

    #[test]
    fn control_structures() {
        let nodes = parse(
            "{{ if .a }}1{{ else if .b }}2{{ else }}3{{ end }}{{ range $i, $v := .l }}{{ break }}{{ else }}e{{ end }}",
        )
        .unwrap();
        let Node::Conditional {
            branches, otherwise, ..
        } = &nodes[0]
        else {
            panic!()
        };
        assert_eq!(branches.len(), 2);
        assert!(otherwise.is_some());
        let Node::Range {
            pipe, body, otherwise, ..
        } = &nodes[1]
        else {
            panic!()
        };
        assert_eq!(pipe.vars.len(), 2);
        assert!(matches!(body[0], Node::Break(_)));
        assert!(otherwise.is_some());
    }

    #[test]
    fn comments() {
        let nodes = parse("a {{- /* note */ -}} b").unwrap();
        let Node::Comment { tag, body } = &nodes[1] else {
            panic!()
        };
        assert_eq!(body, " note ");
        assert!(tag.trim_left && tag.trim_right);
    }

    #[test]
    fn define_and_block_end_with_their_own_end() {
        let nodes =
            parse("{{ define \"x\" }}{{ if .a }}{{ $y := 1 }}{{ end }}{{ end }}b{{ block \"z\" . }}{{ end }}").unwrap();
        assert!(matches!(
            nodes.as_slice(),
            [
                Node::OtherTemplate {
                    keyword: Keyword::Define,
                    ..
                },
                Node::Text { .. },
                Node::OtherTemplate {
                    keyword: Keyword::Block,
                    ..
                }
            ]
        ));
        // A define's body sees only `$`.
        let err = parse("{{ $v := 1 }}{{ define \"x\" }}{{ $v }}{{ end }}").unwrap_err();
        assert!(err.message.contains("undefined variable"), "{err:?}");
        let err = parse("{{ define \"x\" }}a").unwrap_err();
        assert_eq!(
            (err.at, err.message.as_str()),
            (0, "unexpected EOF: {{define}} has no {{end}}")
        );
    }

    #[test]
    fn errors_go_reports() {
        for (src, message) in [
            ("{{ .x", "unclosed action"),
            ("{{ if .x }}", "has no {{end}}"),
            ("{{ end }}", "unexpected {{end}}"),
            ("{{ $x }}", "undefined variable"),
            ("{{ break }}", "outside {{range}}"),
            ("{{ (.x }}", "unclosed left paren"),
            ("{{ \"x\" .y }}", "can't give argument to non-function"),
            ("{{/* x */ }}", "comment ends before closing delimiter"),
            ("{{ 1 | 2 }}", "non executable command"),
        ] {
            let err = parse(src).unwrap_err();
            assert!(err.message.contains(message), "{src}: {err:?}");
        }
    }

    #[test]
    fn variables_are_scoped_to_their_block() {
        assert!(parse("{{ if 1 }}{{ $x := 1 }}{{ end }}{{ $x }}").is_err());
        // Go's parser keeps a body's variables declared in the else branches.
        assert!(parse("{{ if 1 }}{{ $x := 1 }}{{ else }}{{ $x }}{{ end }}").is_ok());
        assert!(parse("{{ $x := 1 }}{{ if 1 }}{{ $x = 2 }}{{ end }}{{ $x }}").is_ok());
        assert!(parse("{{ range $i, $v := .l }}{{ $i }}{{ end }}").is_ok());
    }
}
