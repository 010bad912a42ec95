//! The two lexers and grammars VyOS reads a config.boot with, re-implemented rule
//! for rule for tests (VyOS itself cannot run here), so a rendered config's node
//! structure can be compared with what the template wrote:
//!
//! - `vyos1x`: vyos/vyos1x-config `src/vyos1x_lexer.mll` and `src/vyos1x_parser.mly`
//!   (used by vyos-1x's `ConfigTree`, e.g. when `load` migrates the file);
//! - `cparse`: vyos/vyatta-cfg `src/cparse/cparse_lex.l` and `src/cparse/cparse.ypp`
//!   (used by `cli-shell-api loadFile`, which `load` ends in).
//!
//! Both produce the same tree shape: a node has a name, maybe one value (a leaf's
//! value or a tag node's tag), and maybe children.

#![allow(dead_code)]

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub name: String,
    pub value: Option<String>,
    pub children: Option<Vec<Node>>,
}

/// The tree with every value replaced by a placeholder: what must not depend on
/// the values a template interpolates.
pub fn skeleton(nodes: &[Node]) -> Vec<Node> {
    nodes
        .iter()
        .map(|n| Node {
            name: n.name.clone(),
            value: n.value.as_ref().map(|_| "<value>".to_owned()),
            children: n.children.as_deref().map(skeleton),
        })
        .collect()
}

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

    fn next(&mut self) -> Result<Tok, String> {
        loop {
            let Some(&c) = self.s.get(self.pos) else {
                return Ok(Tok::Eof);
            };
            match c {
                b' ' | b'\t' | b'\r' => self.pos += 1,
                b'\n' => {
                    self.pos += 1;
                    if self.inside_node {
                        self.inside_node = false;
                        return Ok(Tok::Newline);
                    }
                }
                b'"' | b'\'' => {
                    self.pos += 1;
                    let s = self.quoted(c)?;
                    self.inside_node = true;
                    return Ok(Tok::Str(s));
                }
                b'{' => {
                    self.pos += 1;
                    self.inside_node = false;
                    return Ok(Tok::LeftBrace);
                }
                b'}' => {
                    self.pos += 1;
                    self.inside_node = false;
                    return Ok(Tok::RightBrace);
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
                        return Ok(Tok::Comment);
                    }
                    if rest.starts_with(b"//") {
                        let line = rest.iter().take_while(|&&b| b != b'\n').count();
                        if line >= ident {
                            self.pos += line;
                            continue;
                        }
                    }
                    if ident == 0 {
                        return Err(format!("unexpected character {:?}", c as char));
                    }
                    let text = String::from_utf8(self.s[self.pos..self.pos + ident].to_vec()).unwrap();
                    self.pos += ident;
                    self.inside_node = true;
                    return Ok(Tok::Ident(text));
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

/// Parses config.boot text as vyos1x-config does.
pub fn parse_vyos1x(text: &str) -> Result<Vec<Node>, String> {
    let mut lexer = V1Lexer {
        s: text.as_bytes(),
        pos: 0,
        inside_node: false,
    };
    let mut tokens = Vec::new();
    loop {
        let t = lexer.next()?;
        let end = t == Tok::Eof;
        tokens.push(t);
        if end {
            break;
        }
    }
    let mut p = 0;
    let nodes = v1_contents(&tokens, &mut p)?;
    match tokens.get(p) {
        Some(Tok::Eof) => Ok(nodes),
        other => Err(format!("expected end of input, found {other:?}")),
    }
}

fn v1_contents(t: &[Tok], p: &mut usize) -> Result<Vec<Node>, String> {
    let mut nodes = Vec::new();
    loop {
        while t[*p] == Tok::Comment {
            *p += 1;
        }
        let Tok::Ident(name) = &t[*p] else {
            return Ok(nodes);
        };
        *p += 1;
        let value = match &t[*p] {
            Tok::Str(v) | Tok::Ident(v) => {
                *p += 1;
                Some(v.clone())
            }
            _ => None,
        };
        match &t[*p] {
            Tok::LeftBrace => {
                *p += 1;
                let children = v1_contents(t, p)?;
                if t[*p] != Tok::RightBrace {
                    return Err(format!("expected `}}` closing {name}, found {:?}", t[*p]));
                }
                *p += 1;
                nodes.push(Node {
                    name: name.clone(),
                    value,
                    children: Some(children),
                });
            }
            Tok::Newline => {
                *p += 1;
                nodes.push(Node {
                    name: name.clone(),
                    value,
                    children: None,
                });
            }
            Tok::Eof => nodes.push(Node {
                name: name.clone(),
                value,
                children: None,
            }),
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

fn cparse_lex(text: &str) -> Result<Vec<CTok>, String> {
    let s = text.as_bytes();
    let mut i = 0;
    let mut state = CState::Initial;
    let mut out = Vec::new();
    while i < s.len() {
        let c = s[i];
        match state {
            CState::Initial => {
                if s[i..].starts_with(b"/*") {
                    let end = s[i + 2..]
                        .windows(2)
                        .position(|w| w == b"*/")
                        .ok_or("unterminated comment")?;
                    i += 2 + end + 2;
                    out.push(CTok::Comment);
                } else if s[i..].starts_with(b"//") {
                    i += s[i..].iter().take_while(|&&b| b != b'\n').count();
                } else if c == b'!' || is_space(c) || c == b'\n' {
                    i += 1;
                } else if c == b'}' {
                    i += 1;
                    out.push(CTok::RightB);
                } else if c.is_ascii_alphanumeric() || c == b'-' || c == b'_' {
                    let n = s[i..]
                        .iter()
                        .take_while(|b| b.is_ascii_alphanumeric() || **b == b'-' || **b == b'_')
                        .count();
                    out.push(CTok::Node(text[i..i + n].to_owned()));
                    i += n;
                    state = CState::Id;
                } else {
                    return Err(format!("syntax error at {:?}", c as char));
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
                    out.push(CTok::LeftB);
                    state = CState::Initial;
                } else if c == b'\n' {
                    i += 1;
                    state = CState::Initial;
                } else {
                    return Err(format!("syntax error after a node name at {:?}", c as char));
                }
            }
            CState::Value => {
                if is_space(c) {
                    i += 1;
                } else if c == b'"' {
                    i += 1;
                    let mut value = Vec::new();
                    loop {
                        let Some(&q) = s.get(i) else {
                            return Err("unterminated quoted value".into());
                        };
                        if q == b'\\' && s.get(i + 1) == Some(&b'"') && s.get(i + 2) == Some(&b'\n') {
                            value.push(b'\\');
                            i += 3;
                            state = CState::Initial;
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
                    out.push(CTok::Value(String::from_utf8(value).map_err(|e| e.to_string())?));
                } else if c == b'{' {
                    i += 1;
                    out.push(CTok::LeftB);
                    state = CState::Initial;
                } else if c == b'\n' {
                    i += 1;
                    state = CState::Initial;
                } else {
                    let n = s[i..]
                        .iter()
                        .take_while(|b| !is_space(**b) && **b != b'{' && **b != b'\n')
                        .count();
                    out.push(CTok::Value(text[i..i + n].to_owned()));
                    i += n;
                }
            }
        }
    }
    Ok(out)
}

/// Parses config.boot text as vyatta-cfg's `loadFile` does.
pub fn parse_cparse(text: &str) -> Result<Vec<Node>, String> {
    let tokens = cparse_lex(text)?;
    let mut p = 0;
    let nodes = c_forest(&tokens, &mut p)?;
    while tokens.get(p) == Some(&CTok::Comment) {
        p += 1;
    }
    if p != tokens.len() {
        return Err(format!("unexpected {:?}", tokens[p]));
    }
    Ok(nodes)
}

fn c_forest(t: &[CTok], p: &mut usize) -> Result<Vec<Node>, String> {
    let mut nodes = Vec::new();
    loop {
        let mut q = *p;
        while t.get(q) == Some(&CTok::Comment) {
            q += 1;
        }
        let Some(CTok::Node(name)) = t.get(q) else {
            return Ok(nodes);
        };
        *p = q + 1;
        let value = match t.get(*p) {
            Some(CTok::Value(v)) => {
                *p += 1;
                Some(v.clone())
            }
            _ => None,
        };
        if t.get(*p) == Some(&CTok::LeftB) {
            *p += 1;
            let children = c_forest(t, p)?;
            while t.get(*p) == Some(&CTok::Comment) {
                *p += 1;
            }
            if t.get(*p) != Some(&CTok::RightB) {
                return Err(format!("expected `}}` closing {name}, found {:?}", t.get(*p)));
            }
            *p += 1;
            nodes.push(Node {
                name: name.clone(),
                value,
                children: Some(children),
            });
        } else {
            nodes.push(Node {
                name: name.clone(),
                value,
                children: None,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "interfaces {\n    ethernet eth0 {\n        address 192.0.2.1/24\n        description \"a \\\"b\\\" {c}\"\n    }\n}\n/* note */\nsystem {\n    host-name r1\n    disable\n}\n";

    fn leaf(name: &str, value: Option<&str>) -> Node {
        Node {
            name: name.into(),
            value: value.map(Into::into),
            children: None,
        }
    }

    #[test]
    fn both_parsers_read_a_sample_the_same_way() {
        let expected = vec![
            Node {
                name: "interfaces".into(),
                value: None,
                children: Some(vec![Node {
                    name: "ethernet".into(),
                    value: Some("eth0".into()),
                    children: Some(vec![
                        leaf("address", Some("192.0.2.1/24")),
                        leaf("description", Some("a \"b\" {c}")),
                    ]),
                }]),
            },
            Node {
                name: "system".into(),
                value: None,
                children: Some(vec![leaf("host-name", Some("r1")), leaf("disable", None)]),
            },
        ];
        assert_eq!(parse_vyos1x(SAMPLE).unwrap(), expected);
        // cparse keeps escapes as written.
        let cparse = parse_cparse(SAMPLE).unwrap();
        assert_eq!(skeleton(&cparse), skeleton(&expected));
        assert_eq!(values(&cparse)[2], "a \\\"b\\\" {c}");
    }

    #[test]
    fn an_unescaped_brace_in_a_value_changes_the_structure() {
        // What escaping prevents: the same text unquoted opens a node.
        let injected = "system {\n    host-name r1 }\ninterfaces {\n}\n";
        assert!(parse_vyos1x(injected).is_err() || skeleton(&parse_vyos1x(injected).unwrap()).len() != 1);
        let closed = "system {\n    host-name \"r1\"\n}\ninterfaces {\n}\n";
        assert_eq!(parse_vyos1x(closed).unwrap().len(), 2);
    }
}
