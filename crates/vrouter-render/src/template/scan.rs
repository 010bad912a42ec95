//! A small lexer over tera source that runs before tera's own parser.
//!
//! tera's pest grammar backtracks: parse time grows exponentially with how deeply
//! function calls nest inside arguments (measured: 8 levels take a second), and long
//! operator chains or deep block nesting overflow the stack while parsing or
//! rendering. This scan finds every tag, bounds those shapes with a precise location,
//! and gives the quoted-interpolation check its view of the literal text.

use std::ops::Range;

use super::{Limit, Location};

/// What a stretch of template source is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SegmentKind {
    /// Literal text outside any tag.
    Text,
    /// `{{ … }}`
    Expression,
    /// `{% … %}`
    Statement,
    /// `{# … #}`
    Comment,
    /// The literal body of `{% raw %}…{% endraw %}`.
    Raw,
}

/// One stretch of source: `span` covers the whole tag, `inner` what is between its
/// delimiters (whitespace-control dashes excluded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Segment {
    pub kind: SegmentKind,
    pub span: Range<usize>,
    pub inner: Range<usize>,
}

/// Splits `source` into text, tags and raw bodies. An unterminated tag ends the scan
/// and is left to tera, which reports it as a syntax error with its position.
pub(crate) fn segments(source: &str) -> Vec<Segment> {
    let bytes = source.as_bytes();
    let mut out = Vec::new();
    let mut pos = 0;
    let mut text_start = 0;
    while let Some(open) = find_tag_open(bytes, pos) {
        let (kind, closer) = match bytes[open + 1] {
            b'{' => (SegmentKind::Expression, b'}'),
            b'%' => (SegmentKind::Statement, b'%'),
            _ => (SegmentKind::Comment, b'#'),
        };
        let mut inner_start = open + 2;
        if bytes.get(inner_start) == Some(&b'-') {
            inner_start += 1;
        }
        let Some((inner_end, end)) = find_tag_close(bytes, inner_start, kind, closer) else {
            break;
        };
        push_text(&mut out, text_start, open);
        out.push(Segment {
            kind,
            span: open..end,
            inner: inner_start..inner_end,
        });
        pos = end;
        text_start = end;
        if kind == SegmentKind::Statement && source[inner_start..inner_end].trim() == "raw" {
            // The body is literal until the first `{% endraw %}`, tags or not.
            match find_endraw(source, end) {
                Some((body_end, endraw)) => {
                    out.push(Segment {
                        kind: SegmentKind::Raw,
                        span: end..body_end,
                        inner: end..body_end,
                    });
                    out.push(endraw.clone());
                    pos = endraw.span.end;
                    text_start = pos;
                }
                None => return out,
            }
        }
    }
    push_text(&mut out, text_start, bytes.len());
    out
}

fn push_text(out: &mut Vec<Segment>, start: usize, end: usize) {
    if start < end {
        out.push(Segment {
            kind: SegmentKind::Text,
            span: start..end,
            inner: start..end,
        });
    }
}

fn find_tag_open(bytes: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while i + 1 < bytes.len() {
        if bytes[i] == b'{' && matches!(bytes[i + 1], b'{' | b'%' | b'#') {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// Finds the closing delimiter, skipping string literals inside expression and
/// statement tags. Returns (end of inner, end of tag).
fn find_tag_close(bytes: &[u8], from: usize, kind: SegmentKind, closer: u8) -> Option<(usize, usize)> {
    let mut i = from;
    while i + 1 < bytes.len() {
        let b = bytes[i];
        if kind != SegmentKind::Comment && matches!(b, b'"' | b'\'' | b'`') {
            i = skip_string(bytes, i)?;
            continue;
        }
        if b == closer && bytes[i + 1] == b'}' {
            let inner_end = if i > from && bytes[i - 1] == b'-' { i - 1 } else { i };
            return Some((inner_end, i + 2));
        }
        i += 1;
    }
    None
}

/// Returns the index just past the string literal starting at `start`.
fn skip_string(bytes: &[u8], start: usize) -> Option<usize> {
    let quote = bytes[start];
    bytes[start + 1..]
        .iter()
        .position(|&b| b == quote)
        .map(|p| start + 1 + p + 1)
}

fn find_endraw(source: &str, from: usize) -> Option<(usize, Segment)> {
    let bytes = source.as_bytes();
    let mut pos = from;
    loop {
        let open = source[pos..].find("{%").map(|p| p + pos)?;
        let mut inner_start = open + 2;
        if bytes.get(inner_start) == Some(&b'-') {
            inner_start += 1;
        }
        if let Some((inner_end, end)) = find_tag_close(bytes, inner_start, SegmentKind::Statement, b'%')
            && source[inner_start..inner_end].trim() == "endraw"
        {
            let tag = Segment {
                kind: SegmentKind::Statement,
                span: open..end,
                inner: inner_start..inner_end,
            };
            return Some((open, tag));
        }
        pos = open + 2;
    }
}

/// The 1-based line and column (in characters) of a byte offset.
pub(crate) fn location(source: &str, offset: usize) -> Location {
    Locator::new(source).locate(offset)
}

/// Locates offsets of one source, each from the one before when they come in
/// increasing order, so locating every tag of a template reads it once.
pub(crate) struct Locator<'a> {
    source: &'a str,
    offset: usize,
    at: Location,
}

impl<'a> Locator<'a> {
    pub(crate) fn new(source: &'a str) -> Self {
        Locator {
            source,
            offset: 0,
            at: Location { line: 1, column: 1 },
        }
    }

    /// The location of `offset` (clamped to the source).
    pub(crate) fn locate(&mut self, offset: usize) -> Location {
        let offset = offset.min(self.source.len());
        if offset < self.offset {
            *self = Locator::new(self.source);
        }
        for c in self.source[self.offset..offset].chars() {
            if c == '\n' {
                self.at = Location {
                    line: self.at.line + 1,
                    column: 1,
                };
            } else {
                self.at.column += 1;
            }
        }
        self.offset = offset;
        self.at
    }
}

/// Limits on the shape of tags, checked before tera parses anything.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ShapeLimits {
    pub expression_depth: usize,
    pub expression_operators: usize,
    pub block_depth: usize,
}

/// Checks every tag against `limits`; on failure returns the limit and where.
pub(crate) fn check_shape(source: &str, segments: &[Segment], limits: ShapeLimits) -> Result<(), (Limit, Location)> {
    let mut blocks = 0usize;
    for seg in segments {
        if !matches!(seg.kind, SegmentKind::Expression | SegmentKind::Statement) {
            continue;
        }
        let inner = &source[seg.inner.clone()];
        let stats = tag_stats(inner);
        let at = |rel: usize| location(source, seg.inner.start + rel);
        if let Some(rel) = stats.too_deep_at(limits.expression_depth) {
            return Err((
                Limit::ExpressionDepth {
                    limit: limits.expression_depth,
                },
                at(rel),
            ));
        }
        if stats.operators.len() > limits.expression_operators {
            let rel = stats.operators[limits.expression_operators];
            return Err((
                Limit::ExpressionOperators {
                    limit: limits.expression_operators,
                },
                at(rel),
            ));
        }
        if seg.kind == SegmentKind::Statement {
            match first_word(inner) {
                "if" | "for" | "filter" | "block" | "macro" => {
                    blocks += 1;
                    if blocks > limits.block_depth {
                        return Err((
                            Limit::BlockDepth {
                                limit: limits.block_depth,
                            },
                            location(source, seg.span.start),
                        ));
                    }
                }
                "endif" | "endfor" | "endfilter" | "endblock" | "endmacro" => blocks = blocks.saturating_sub(1),
                _ => {}
            }
        }
    }
    Ok(())
}

pub(crate) fn first_word(inner: &str) -> &str {
    let trimmed = inner.trim_start();
    let end = trimmed
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(trimmed.len());
    &trimmed[..end]
}

/// Bracket depths and binary operators of one tag, string literals skipped.
struct TagStats {
    /// (offset, depth reached) for each opening bracket.
    opens: Vec<(usize, usize)>,
    /// Offsets of binary operators.
    operators: Vec<usize>,
}

impl TagStats {
    fn too_deep_at(&self, limit: usize) -> Option<usize> {
        self.opens.iter().find(|(_, depth)| *depth > limit).map(|(at, _)| *at)
    }
}

fn tag_stats(inner: &str) -> TagStats {
    let bytes = inner.as_bytes();
    let mut stats = TagStats {
        opens: Vec::new(),
        operators: Vec::new(),
    };
    let mut depth = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b'"' | b'\'' | b'`' => {
                i = skip_string(bytes, i).unwrap_or(bytes.len());
                continue;
            }
            b'(' | b'[' => {
                depth += 1;
                stats.opens.push((i, depth));
            }
            b')' | b']' => depth = depth.saturating_sub(1),
            b'+' | b'-' | b'*' | b'/' | b'%' | b'<' | b'>' => stats.operators.push(i),
            b'=' | b'!' if bytes.get(i + 1) == Some(&b'=') => {
                stats.operators.push(i);
                i += 2;
                continue;
            }
            _ if b.is_ascii_alphabetic() || b == b'_' => {
                let start = i;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_' || bytes[i] == b'.') {
                    i += 1;
                }
                if matches!(&inner[start..i], "and" | "or" | "not") {
                    stats.operators.push(start);
                }
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(source: &str) -> Vec<(SegmentKind, &str)> {
        segments(source)
            .into_iter()
            .map(|s| (s.kind, &source[s.inner]))
            .collect()
    }

    #[test]
    fn splits_text_and_the_three_tag_kinds() {
        assert_eq!(
            kinds("a {{ x }} b {%- if y -%} c {# note #}"),
            vec![
                (SegmentKind::Text, "a "),
                (SegmentKind::Expression, " x "),
                (SegmentKind::Text, " b "),
                (SegmentKind::Statement, " if y "),
                (SegmentKind::Text, " c "),
                (SegmentKind::Comment, " note "),
            ]
        );
    }

    #[test]
    fn a_closing_delimiter_inside_a_string_does_not_end_the_tag() {
        assert_eq!(
            kinds(r#"{{ "}}" ~ '%}' }}"#),
            vec![(SegmentKind::Expression, r#" "}}" ~ '%}' "#)]
        );
    }

    #[test]
    fn raw_bodies_are_literal() {
        assert_eq!(
            kinds("{% raw %}{{ x }}{% endraw %}!"),
            vec![
                (SegmentKind::Statement, " raw "),
                (SegmentKind::Raw, "{{ x }}"),
                (SegmentKind::Statement, " endraw "),
                (SegmentKind::Text, "!"),
            ]
        );
    }

    #[test]
    fn locations_are_one_based_lines_and_character_columns() {
        let src = "ab\ncdé{{ x }}";
        assert_eq!(location(src, src.find("{{").unwrap()), Location { line: 2, column: 4 });
        assert_eq!(location(src, 0), Location { line: 1, column: 1 });
    }

    #[test]
    fn a_locator_agrees_with_location_in_any_order() {
        let src = "ab\ncdé{{ x }}\n\nxyz é\n";
        let offsets: Vec<usize> = src
            .char_indices()
            .map(|(i, _)| i)
            .chain([src.len(), src.len() + 5])
            .collect();
        let mut locator = Locator::new(src);
        for &offset in offsets.iter().chain(offsets.iter().rev()) {
            let mut fresh = src[..offset.min(src.len())].split('\n');
            let last = fresh.next_back().unwrap_or("");
            let expected = Location {
                line: src[..offset.min(src.len())].matches('\n').count() + 1,
                column: last.chars().count() + 1,
            };
            assert_eq!(locator.locate(offset), expected, "offset {offset}");
        }
    }

    fn shape(source: &str) -> Result<(), (Limit, Location)> {
        let limits = ShapeLimits {
            expression_depth: 3,
            expression_operators: 4,
            block_depth: 2,
        };
        check_shape(source, &segments(source), limits)
    }

    #[test]
    fn nesting_operators_and_blocks_are_bounded_with_a_location() {
        assert!(shape("{{ f(a=g(b=[1])) }}").is_ok());
        assert_eq!(
            shape("x\n  {{ f(a=g(b=h(c=[1]))) }}"),
            Err((Limit::ExpressionDepth { limit: 3 }, Location { line: 2, column: 18 }))
        );
        assert!(shape("{{ 1 + 2 + 3 + 4 + 5 }}").is_ok());
        assert!(shape("{{ 1 + 2 + 3 + 4 + 5 + 6 }}").is_err());
        assert!(shape("{{ '+ + + + + +' }}").is_ok());
        assert!(shape("{% if a %}{% for b in c %}{% endfor %}{% endif %}{% if d %}{% endif %}").is_ok());
        assert_eq!(
            shape("{% if a %}{% if b %}{% if c %}"),
            Err((Limit::BlockDepth { limit: 2 }, Location { line: 1, column: 21 }))
        );
    }
}
