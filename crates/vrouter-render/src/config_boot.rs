//! The two lexers and grammars VyOS reads a config.boot with, rule for rule, with
//! the byte span of every value, so the render check can tell where a value landed
//! and the tests can compare a rendered config's node structure with the
//! template's:
//!
//! - `vyos1x`: vyos/vyos1x-config `src/vyos1x_lexer.mll` and `src/vyos1x_parser.mly`
//!   at commit `406158f` (used by vyos-1x's `ConfigTree`, e.g. when `load` migrates
//!   the file);
//! - `cparse`: vyos/vyatta-cfg `src/cparse/cparse_lex.l` and `src/cparse/cparse.ypp`
//!   at commit `0a5b58a` (used by `cli-shell-api loadFile`, which `load` ends in).
//!
//! Both produce the same tree shape: a node has a name, maybe one value (a leaf's
//! value or a tag node's tag), and maybe children. `docs/security.md` summarises
//! the rules that matter for escaping.

use std::ops::Range;

/// One config node as a VyOS parser reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// The node's name (`host-name`, `ethernet`).
    pub name: String,
    /// Where the name is in the text.
    pub name_span: Range<usize>,
    /// Its value: a leaf's value or a tag node's tag, decoded as the lexer does.
    pub value: Option<String>,
    /// Where the value's token is in the text, quotes included.
    pub value_span: Option<Range<usize>>,
    /// Its children, when it has a `{ }` block.
    pub children: Option<Vec<Node>>,
}

#[cfg_attr(not(feature = "test-support"), allow(dead_code))]
/// The tree with every value replaced by a placeholder and spans cleared: what
/// must not depend on the values a template interpolates.
pub fn skeleton(nodes: &[Node]) -> Vec<Node> {
    nodes
        .iter()
        .map(|n| Node {
            name: n.name.clone(),
            name_span: 0..0,
            value: n.value.as_ref().map(|_| "<value>".to_owned()),
            value_span: None,
            children: n.children.as_deref().map(skeleton),
        })
        .collect()
}

#[cfg_attr(not(feature = "test-support"), allow(dead_code))]
/// Every value, depth first, in source order.
pub fn values(nodes: &[Node]) -> Vec<String> {
    let mut out = Vec::new();
    for n in nodes {
        out.extend(n.value.clone());
        if let Some(children) = &n.children {
            out.extend(values(children));
        }
    }
    out
}

/// Every value's span, depth first.
pub(crate) fn value_spans(nodes: &[Node], out: &mut Vec<Range<usize>>) {
    for n in nodes {
        out.extend(n.value_span.clone());
        if let Some(children) = &n.children {
            value_spans(children, out);
        }
    }
}

/// Every node name's span, depth first.
pub(crate) fn name_spans(nodes: &[Node], out: &mut Vec<Range<usize>>) {
    for n in nodes {
        out.push(n.name_span.clone());
        if let Some(children) = &n.children {
            name_spans(children, out);
        }
    }
}

/// Tokens with their spans, or where lexing failed and why.
type Lexed<T> = Result<Vec<T>, (usize, String)>;

/// A token of either lexer, with what it is, for saying where a value landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TokenKind {
    Word,
    Quoted,
    Comment,
}

// ---------------------------------------------------------------- vyos1x

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Str(String),
    Comment,
    LeftBrace,
    RightBrace,
    Newline,
    Eof,
}

struct V1Lexer<'a> {
    s: &'a [u8],
    pos: usize,
    inside_node: bool,
}

impl V1Lexer<'_> {
    fn ident_len(&self, from: usize) -> usize {
        self.s[from..]
            .iter()
            .take_while(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b'{' | b'}' | b'"' | b'\''))
            .count()
    }

    /// The next token and where it starts.
    fn next(&mut self) -> Result<(Tok, usize), String> {
        loop {
            let start = self.pos;
            let Some(&c) = self.s.get(self.pos) else {
                return Ok((Tok::Eof, start));
            };
            match c {
                b' ' | b'\t' | b'\r' => self.pos += 1,
                b'\n' => {
                    self.pos += 1;
                    if self.inside_node {
                        self.inside_node = false;
                        return Ok((Tok::Newline, start));
                    }
                }
                b'"' | b'\'' => {
                    self.pos += 1;
                    let s = self.quoted(c)?;
                    self.inside_node = true;
                    return Ok((Tok::Str(s), start));
                }
                b'{' => {
                    self.pos += 1;
                    self.inside_node = false;
                    return Ok((Tok::LeftBrace, start));
                }
                b'}' => {
                    self.pos += 1;
                    self.inside_node = false;
                    return Ok((Tok::RightBrace, start));
                }
                _ => {
                    // ocamllex: longest match, earlier rule on a tie.
                    let ident = self.ident_len(self.pos);
                    let rest = &self.s[self.pos..];
                    if rest.starts_with(b"/*") && ident <= 2 {
                        let end = rest[2..]
                            .windows(2)
                            .position(|w| w == b"*/")
                            .ok_or("unterminated comment")?;
                        self.pos += 2 + end + 2;
                        self.inside_node = false;
                        return Ok((Tok::Comment, start));
                    }
                    if rest.starts_with(b"//") {
                        let line = rest.iter().take_while(|&&b| b != b'\n').count();
                        if line >= ident {
                            self.pos += line;
                            return Ok((Tok::Comment, start));
                        }
                    }
                    if ident == 0 {
                        return Err(format!("unexpected character {:?}", c as char));
                    }
                    let text = String::from_utf8_lossy(&self.s[self.pos..self.pos + ident]).into_owned();
                    self.pos += ident;
                    self.inside_node = true;
                    return Ok((Tok::Ident(text), start));
                }
            }
        }
    }

    fn quoted(&mut self, quote: u8) -> Result<String, String> {
        let mut out = Vec::new();
        loop {
            let Some(&c) = self.s.get(self.pos) else {
                return Err("quoted string is missing its closing quote".into());
            };
            self.pos += 1;
            if c == quote {
                return String::from_utf8(out).map_err(|e| e.to_string());
            }
            if c == b'\\' {
                let Some(&e) = self.s.get(self.pos) else {
                    return Err("backslash at end of input".into());
                };
                self.pos += 1;
                out.push(match e {
                    b'/' => b'/',
                    b'\\' => b'\\',
                    b'b' => 8,
                    b'f' => 12,
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    b'\'' => b'\'',
                    b'"' => b'"',
                    other => return Err(format!("lexing: empty token at backslash + {:?}", other as char)),
                });
            } else {
                out.push(c);
            }
        }
    }
}

/// Every vyos1x token's span and kind (comments included), for locating a value.
pub(crate) fn vyos1x_tokens(text: &str) -> Lexed<(Range<usize>, TokenKind)> {
    let mut lexer = V1Lexer {
        s: text.as_bytes(),
        pos: 0,
        inside_node: false,
    };
    let mut out = Vec::new();
    loop {
        let (t, start) = lexer.next().map_err(|e| (lexer.pos, e))?;
        let kind = match t {
            Tok::Eof => return Ok(out),
            Tok::Ident(_) => TokenKind::Word,
            Tok::Str(_) => TokenKind::Quoted,
            Tok::Comment => TokenKind::Comment,
            _ => continue,
        };
        out.push((start..lexer.pos, kind));
    }
}

/// Parses config.boot text as vyos1x-config does.
pub fn parse_vyos1x(text: &str) -> Result<Vec<Node>, String> {
    let mut lexer = V1Lexer {
        s: text.as_bytes(),
        pos: 0,
        inside_node: false,
    };
    let mut tokens = Vec::new();
    loop {
        let (t, start) = lexer.next()?;
        let end = t == Tok::Eof;
        // `//` comments are skipped by the grammar's lexer rule itself.
        if t == Tok::Comment && text.as_bytes()[start..].starts_with(b"//") {
            continue;
        }
        tokens.push((t, start..lexer.pos));
        if end {
            break;
        }
    }
    let mut p = 0;
    let nodes = v1_contents(&tokens, &mut p)?;
    match tokens.get(p) {
        Some((Tok::Eof, _)) => Ok(nodes),
        other => Err(format!("expected end of input, found {:?}", other.map(|t| &t.0))),
    }
}

fn v1_contents(t: &[(Tok, Range<usize>)], p: &mut usize) -> Result<Vec<Node>, String> {
    let mut nodes = Vec::new();
    loop {
        let comment_at = *p;
        while t[*p].0 == Tok::Comment {
            *p += 1;
        }
        let (Tok::Ident(name), name_span) = &t[*p] else {
            // The grammar reads `/* … */` comments only as the comments of the
            // node after them: one before `}` or the end is a syntax error.
            if *p > comment_at {
                return Err(format!("a comment must be followed by a node, found {:?}", t[*p].0));
            }
            return Ok(nodes);
        };
        *p += 1;
        let (value, value_span) = match &t[*p] {
            (Tok::Str(v) | Tok::Ident(v), span) => {
                *p += 1;
                (Some(v.clone()), Some(span.clone()))
            }
            _ => (None, None),
        };
        let node = |children| Node {
            name: name.clone(),
            name_span: name_span.clone(),
            value: value.clone(),
            value_span: value_span.clone(),
            children,
        };
        match &t[*p].0 {
            Tok::LeftBrace => {
                *p += 1;
                let children = v1_contents(t, p)?;
                if t[*p].0 != Tok::RightBrace {
                    return Err(format!("expected `}}` closing {name}, found {:?}", t[*p].0));
                }
                *p += 1;
                nodes.push(node(Some(children)));
            }
            Tok::Newline => {
                *p += 1;
                nodes.push(node(None));
            }
            Tok::Eof => nodes.push(node(None)),
            other => return Err(format!("unexpected {other:?} after {name}")),
        }
    }
}

// ---------------------------------------------------------------- cparse

#[derive(Debug, Clone, PartialEq)]
enum CTok {
    Node(String),
    Value(String),
    Comment,
    LeftB,
    RightB,
}

#[derive(Clone, Copy, PartialEq)]
enum CState {
    Initial,
    Id,
    Value,
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | 0x0b | 0x0c)
}

/// Where a comment starting at `i` (`/* … */` or `// …` to the line's
/// end) ends; `None` when none starts there.
fn comment_end(s: &[u8], i: usize) -> Result<Option<usize>, (usize, String)> {
    if s[i..].starts_with(b"/*") {
        let end = s[i + 2..]
            .windows(2)
            .position(|w| w == b"*/")
            .ok_or((i, "unterminated comment".to_owned()))?;
        Ok(Some(i + 2 + end + 2))
    } else if s[i..].starts_with(b"//") {
        Ok(Some(i + s[i..].iter().take_while(|&&b| b != b'\n').count()))
    } else {
        Ok(None)
    }
}

/// The quoted value whose opening `"` is at `start`: its text (escapes
/// kept as written), where it ends, and whether a `\"` at the end of the
/// line ended the value and the line together.
fn quoted_value(s: &[u8], start: usize) -> Result<(String, usize, bool), (usize, String)> {
    let mut i = start + 1;
    let mut value = Vec::new();
    let mut line_ended = false;
    loop {
        let Some(&q) = s.get(i) else {
            return Err((start, "unterminated quoted value".into()));
        };
        if q == b'\\' && s.get(i + 1) == Some(&b'"') && s.get(i + 2) == Some(&b'\n') {
            value.push(b'\\');
            i += 3;
            line_ended = true;
            break;
        } else if q == b'\\' && s.get(i + 1).is_some_and(|b| *b != b'\n') {
            value.extend_from_slice(&s[i..i + 2]);
            i += 2;
        } else if q == b'"' {
            i += 1;
            break;
        } else {
            value.push(q);
            i += 1;
        }
    }
    let value = String::from_utf8(value).map_err(|e| (start, e.to_string()))?;
    Ok((value, i, line_ended))
}

fn cparse_lex(text: &str) -> Lexed<(CTok, Range<usize>)> {
    let s = text.as_bytes();
    let mut i = 0;
    let mut state = CState::Initial;
    let mut out = Vec::new();
    while i < s.len() {
        let c = s[i];
        let start = i;
        match state {
            CState::Initial => {
                if let Some(end) = comment_end(s, i)? {
                    i = end;
                    out.push((CTok::Comment, start..i));
                } else if c == b'!' || is_space(c) || c == b'\n' {
                    i += 1;
                } else if c == b'}' {
                    i += 1;
                    out.push((CTok::RightB, start..i));
                } else if c.is_ascii_alphanumeric() || c == b'-' || c == b'_' {
                    let n = s[i..]
                        .iter()
                        .take_while(|b| b.is_ascii_alphanumeric() || **b == b'-' || **b == b'_')
                        .count();
                    out.push((CTok::Node(text[i..i + n].to_owned()), start..i + n));
                    i += n;
                    state = CState::Id;
                } else {
                    return Err((i, format!("syntax error at {:?}", c as char)));
                }
            }
            CState::Id => {
                // `:?{SPACE}+[^{\n]` (longest) or `{SPACE}+`, `{`, `\n`.
                let colon = usize::from(c == b':');
                let spaces = s[i + colon..].iter().take_while(|b| is_space(**b)).count();
                if spaces > 0 && s.get(i + colon + spaces).is_some_and(|b| *b != b'{' && *b != b'\n') {
                    i += colon + spaces;
                    state = CState::Value;
                } else if spaces > 0 && colon == 0 {
                    i += spaces;
                } else if c == b'{' {
                    i += 1;
                    out.push((CTok::LeftB, start..i));
                    state = CState::Initial;
                } else if c == b'\n' {
                    i += 1;
                    state = CState::Initial;
                } else {
                    return Err((i, format!("syntax error after a node name at {:?}", c as char)));
                }
            }
            CState::Value => {
                if is_space(c) {
                    i += 1;
                } else if c == b'"' {
                    let (value, end, line_ended) = quoted_value(s, start)?;
                    i = end;
                    if line_ended {
                        state = CState::Initial;
                    }
                    out.push((CTok::Value(value), start..i));
                } else if c == b'{' {
                    i += 1;
                    out.push((CTok::LeftB, start..i));
                    state = CState::Initial;
                } else if c == b'\n' {
                    i += 1;
                    state = CState::Initial;
                } else {
                    let n = s[i..]
                        .iter()
                        .take_while(|b| !is_space(**b) && **b != b'{' && **b != b'\n')
                        .count();
                    out.push((CTok::Value(text[i..i + n].to_owned()), start..i + n));
                    i += n;
                }
            }
        }
    }
    Ok(out)
}

/// Parses config.boot text as vyatta-cfg's `loadFile` does.
pub fn parse_cparse(text: &str) -> Result<Vec<Node>, String> {
    let tokens = cparse_lex(text).map_err(|(_, e)| e)?;
    let mut p = 0;
    let nodes = c_forest(&tokens, &mut p)?;
    while tokens.get(p).is_some_and(|t| t.0 == CTok::Comment) {
        p += 1;
    }
    if p != tokens.len() {
        return Err(format!("unexpected {:?}", tokens[p].0));
    }
    Ok(nodes)
}

fn c_forest(t: &[(CTok, Range<usize>)], p: &mut usize) -> Result<Vec<Node>, String> {
    let is = |p: usize, tok: &CTok| t.get(p).is_some_and(|x| &x.0 == tok);
    let mut nodes = Vec::new();
    loop {
        let mut q = *p;
        while is(q, &CTok::Comment) {
            q += 1;
        }
        let Some((CTok::Node(name), name_span)) = t.get(q) else {
            return Ok(nodes);
        };
        *p = q + 1;
        let (value, value_span) = match t.get(*p) {
            Some((CTok::Value(v), span)) => {
                *p += 1;
                (Some(v.clone()), Some(span.clone()))
            }
            _ => (None, None),
        };
        let children = if is(*p, &CTok::LeftB) {
            *p += 1;
            let children = c_forest(t, p)?;
            while is(*p, &CTok::Comment) {
                *p += 1;
            }
            if !is(*p, &CTok::RightB) {
                return Err(format!(
                    "expected `}}` closing {name}, found {:?}",
                    t.get(*p).map(|x| &x.0)
                ));
            }
            *p += 1;
            Some(children)
        } else {
            None
        };
        nodes.push(Node {
            name: name.clone(),
            name_span: name_span.clone(),
            value,
            value_span,
            children,
        });
    }
}

/// Every cparse token's span and kind, for locating a value.
pub(crate) fn cparse_tokens(text: &str) -> Lexed<(Range<usize>, TokenKind)> {
    Ok(cparse_lex(text)?
        .into_iter()
        .filter_map(|(t, span)| match t {
            CTok::Node(_) => Some((span, TokenKind::Word)),
            CTok::Value(_) if span.start < span.end && matches!(text.as_bytes()[span.start], b'"') => {
                Some((span, TokenKind::Quoted))
            }
            CTok::Value(_) => Some((span, TokenKind::Word)),
            CTok::Comment => Some((span, TokenKind::Comment)),
            _ => None,
        })
        .collect())
}

/// `text` (a config.boot, or a fragment of one) in one layout, so that two
/// configs VyOS reads as the same tree print the same and a diff of two
/// shows only what differs: VyOS's tree (same-named siblings merged,
/// children in VyOS's lexical-numeric order), four spaces a level, comments
/// and blank lines dropped, a value in double quotes when it is empty or
/// holds a blank, a quote, a brace, `#` or `;`
/// (`crate::vyos_reading`, docs/vyos-config-reading.md). Fails with the
/// parser's message when vyos1x-config would not read `text`.
pub fn normalize_config_boot(text: &str) -> Result<String, String> {
    crate::vyos_reading::normalized(&parse_vyos1x(text)?)
}

pub(crate) fn quote_value(value: &str) -> String {
    let plain = !value.is_empty()
        && !value
            .chars()
            .any(|c| c.is_whitespace() || matches!(c, '"' | '\'' | '{' | '}' | '#' | ';' | '\\'));
    if plain {
        return value.to_owned();
    }
    let escaped = value.replace('\\', "\\\\").replace('"', "\\\"");
    format!("\"{escaped}\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_vyos_reads_alike_normalize_alike() {
        let terse = "system {\n\thost-name r1\n  ntp {\n server \"192.0.2.1\"\n}\n}\n\n/* c */\ninterfaces {\n ethernet \"eth0\" {\n  description \"a b\"\n }\n}";
        let normalized = normalize_config_boot(terse).unwrap();
        assert_eq!(
            normalized,
            "interfaces {\n    ethernet eth0 {\n        description \"a b\"\n    }\n}\nsystem {\n    host-name r1\n    ntp {\n        server 192.0.2.1\n    }\n}\n"
        );
        assert_eq!(normalize_config_boot(&normalized).unwrap(), normalized, "a fixed point");
        assert_eq!(
            normalize_config_boot(SAMPLE).unwrap(),
            "interfaces {\n    ethernet eth0 {\n        address 192.0.2.1/24\n        description \"a \\\"b\\\" {c}\"\n    }\n}\nsystem {\n    disable\n    host-name r1\n}\n"
        );
        assert_eq!(
            normalize_config_boot("b {\n  x 1\n}\na 2\nb {\n  y 1\n}\na 1\n").unwrap(),
            "a 2\na 1\nb {\n    x 1\n    y 1\n}\n",
            "siblings merge and sort as VyOS's tree does"
        );
        assert!(normalize_config_boot("system {\n").is_err());
    }

    const SAMPLE: &str = "interfaces {\n    ethernet eth0 {\n        address 192.0.2.1/24\n        description \"a \\\"b\\\" {c}\"\n    }\n}\n/* note */\nsystem {\n    host-name r1\n    disable\n}\n";

    #[test]
    fn both_parsers_read_a_sample_the_same_way() {
        let v1 = parse_vyos1x(SAMPLE).unwrap();
        let cparse = parse_cparse(SAMPLE).unwrap();
        assert_eq!(skeleton(&cparse), skeleton(&v1));
        assert_eq!(values(&v1), vec!["eth0", "192.0.2.1/24", "a \"b\" {c}", "r1"]);
        // cparse keeps escapes as written.
        assert_eq!(values(&cparse)[2], "a \\\"b\\\" {c}");
        let mut spans = Vec::new();
        value_spans(&v1, &mut spans);
        assert_eq!(&SAMPLE[spans[0].clone()], "eth0");
        assert_eq!(&SAMPLE[spans[2].clone()], "\"a \\\"b\\\" {c}\"");
        let mut cspans = Vec::new();
        value_spans(&cparse, &mut cspans);
        assert_eq!(spans, cspans);
    }

    #[test]
    fn an_unescaped_brace_in_a_value_changes_the_structure() {
        let injected = "system {\n    host-name r1 }\ninterfaces {\n}\n";
        assert!(parse_vyos1x(injected).is_err() || skeleton(&parse_vyos1x(injected).unwrap()).len() != 1);
        let closed = "system {\n    host-name \"r1\"\n}\ninterfaces {\n}\n";
        assert_eq!(parse_vyos1x(closed).unwrap().len(), 2);
    }
}
