//! Writing the converted pieces out as tera source.
//!
//! Go trims with `{{-`/`-}}` only spaces, tabs, carriage returns and newlines;
//! tera's `{%-`/`-%}` trims all Unicode white space. The translator applies every
//! Go trim to the text itself and keeps what it removed as [`Piece::Trimmed`];
//! here each removed run is put back, with a dash on its tag, only where tera
//! would remove exactly that run, so the converted template keeps the Go
//! template's layout and renders the same text. A comment takes the runs its
//! own trim markers removed inside it instead (`{# note\n#}`): tera drops the
//! comments at the very start of a template together with their dashes, and a
//! comment's body is never output anywhere.

use std::ops::Range;

use super::tera_expr::Te;

/// Which side of a tag a trimmed run of white space was on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// Before a tag that trims left (`{{- `).
    BeforeTag,
    /// After a tag that trims right (` -}}`).
    AfterTag,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TagKind {
    Statement,
    Comment,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Piece {
    /// Literal text, Go's trims already applied.
    Text { text: String, go: Range<usize> },
    /// White space a Go trim marker removed.
    Trimmed { text: String, side: Side },
    /// `{% … %}` or `{# … #}`.
    Tag {
        kind: TagKind,
        body: String,
        trim_left: bool,
        trim_right: bool,
        go: Range<usize>,
    },
    /// `{{ … }}`, printed after the context fixes.
    Output {
        te: Te,
        trim_left: bool,
        trim_right: bool,
        go: Range<usize>,
        /// The quotes Go's expression wrote around the value were dropped
        /// (`quote .x`): right only where bash or VyOS read them as quoting.
        quotes_dropped: bool,
    },
}

impl Piece {
    pub fn trims(&self) -> (bool, bool) {
        match self {
            Piece::Tag {
                trim_left, trim_right, ..
            }
            | Piece::Output {
                trim_left, trim_right, ..
            } => (*trim_left, *trim_right),
            _ => (false, false),
        }
    }

    pub fn is_tag(&self) -> bool {
        matches!(self, Piece::Tag { .. } | Piece::Output { .. })
    }

    fn is_comment(&self) -> bool {
        matches!(
            self,
            Piece::Tag {
                kind: TagKind::Comment,
                ..
            }
        )
    }

    /// The run a trim marker of a comment removed, when this piece is one.
    fn trimmed_by_comment(pieces: &[Piece], i: usize) -> Option<&str> {
        match pieces.get(i)? {
            Piece::Trimmed {
                text,
                side: Side::AfterTag,
            } if i > 0 && pieces[i - 1].is_comment() && pieces[i - 1].trims().1 => Some(text),
            Piece::Trimmed {
                text,
                side: Side::BeforeTag,
            } if pieces.get(i + 1).is_some_and(|p| p.is_comment() && p.trims().0) => Some(text),
            _ => None,
        }
    }
}

/// A tag as printed: `Output`s are printed by the caller first.
pub(crate) struct Printed {
    pub text: String,
    /// For each stretch of the output, the Go source it came from.
    pub map: Vec<(Range<usize>, Range<usize>)>,
}

/// Why the pieces cannot be written (text tera cannot hold even in `raw`).
#[derive(Debug, Clone)]
pub(crate) struct AssembleError {
    pub go: Range<usize>,
    pub reason: String,
}

/// `outputs[i]` is the printed expression of the i-th `Output` piece.
pub(crate) fn assemble(pieces: &[Piece], outputs: &[String]) -> Result<Printed, AssembleError> {
    let restore = restored_trims(pieces);
    let mut printed = Printed {
        text: String::new(),
        map: Vec::new(),
    };
    let mut outputs = outputs.iter();
    let mut i = 0;
    while i < pieces.len() {
        if pieces[i].is_tag() {
            printed.tag(pieces, i, &restore, &mut outputs);
            i += 1;
        } else {
            i = printed.text_node(pieces, i, &restore)?;
        }
    }
    Ok(printed)
}

/// Which trimmed runs go back (with a dash) and which stay removed, decided for
/// each tera text node (the pieces between two tags).
fn restored_trims(pieces: &[Piece]) -> Vec<bool> {
    let mut restore = vec![false; pieces.len()];
    let mut node_start = 0;
    while node_start < pieces.len() {
        if pieces[node_start].is_tag() {
            node_start += 1;
            continue;
        }
        let mut node_end = node_start;
        while node_end < pieces.len() && !pieces[node_end].is_tag() {
            node_end += 1;
        }
        decide_node(pieces, node_start, node_end, &mut restore);
        node_start = node_end;
    }
    restore
}

impl Printed {
    /// Prints the tag or output `pieces[i]`, with a dash on each side whose
    /// trimmed white space was restored.
    fn tag<'o>(
        &mut self,
        pieces: &[Piece],
        i: usize,
        restore: &[bool],
        outputs: &mut impl Iterator<Item = &'o String>,
    ) {
        let (trim_left, trim_right) = pieces[i].trims();
        let dash_left = trim_left
            && i > 0
            && restore[i - 1]
            && matches!(
                pieces[i - 1],
                Piece::Trimmed {
                    side: Side::BeforeTag,
                    ..
                }
            );
        let dash_right = trim_right
            && pieces.get(i + 1).is_some_and(|p| {
                matches!(
                    p,
                    Piece::Trimmed {
                        side: Side::AfterTag,
                        ..
                    }
                )
            })
            && restore[i + 1];
        let (open, close, body, go) = match &pieces[i] {
            Piece::Tag {
                kind: TagKind::Statement,
                body,
                go,
                ..
            } => ("{%", "%}", body.clone(), go.clone()),
            Piece::Tag {
                kind: TagKind::Comment,
                body,
                go,
                ..
            } => ("{#", "#}", comment_body(pieces, i, body), go.clone()),
            Piece::Output { go, .. } => {
                let body = outputs.next().expect("one printed expression per output").clone();
                ("{{", "}}", body, go.clone())
            }
            _ => unreachable!(),
        };
        let text = &mut self.text;
        let start = text.len();
        text.push_str(open);
        if dash_left {
            text.push('-');
        }
        text.push(' ');
        text.push_str(&body);
        text.push(' ');
        if dash_right {
            text.push('-');
        }
        text.push_str(close);
        self.map.push((start..text.len(), go));
    }

    /// Prints one tera text node, the pieces from `i` up to the next tag, in
    /// `{% raw %}` where tera would read it as a tag; returns where it ends.
    fn text_node(&mut self, pieces: &[Piece], i: usize, restore: &[bool]) -> Result<usize, AssembleError> {
        let mut end = i;
        let mut content = String::new();
        let mut go: Option<Range<usize>> = None;
        while end < pieces.len() && !pieces[end].is_tag() {
            match &pieces[end] {
                Piece::Text { text, go: g } => {
                    content.push_str(text);
                    go = Some(match go {
                        None => g.clone(),
                        Some(r) => r.start.min(g.start)..r.end.max(g.end),
                    });
                }
                Piece::Trimmed { text, .. } if restore[end] => content.push_str(text),
                _ => {}
            }
            end += 1;
        }
        let go = go.unwrap_or(0..0);
        let followed_by_tag = end < pieces.len();
        let text = &mut self.text;
        let start = text.len();
        if needs_raw(&content, followed_by_tag) {
            if content.contains("{% endraw %}") || content.contains("{%endraw%}") {
                return Err(AssembleError {
                    go,
                    reason: "the text contains `{% endraw %}`, which tera cannot write literally".into(),
                });
            }
            text.push_str("{% raw %}");
            text.push_str(&content);
            text.push_str("{% endraw %}");
        } else {
            text.push_str(&content);
        }
        self.map.push((start..text.len(), go));
        Ok(end)
    }
}

/// The body of the comment `pieces[i]`, holding the runs its trims removed.
fn comment_body(pieces: &[Piece], i: usize, body: &str) -> String {
    let before = i.checked_sub(1).and_then(|b| Piece::trimmed_by_comment(pieces, b));
    let after = Piece::trimmed_by_comment(pieces, i + 1);
    format!(
        "{}{}{}",
        before.unwrap_or(""),
        body.replace("#}", "# }"),
        after.unwrap_or("")
    )
}

/// Text tera would read as a tag: it must go in `{% raw %}`.
fn needs_raw(content: &str, followed_by_tag: bool) -> bool {
    content.contains("{{")
        || content.contains("{%")
        || content.contains("{#")
        || (followed_by_tag && content.ends_with('{'))
}

/// For one tera text node (pieces `start..end`, between tags), which trimmed runs
/// can be put back with a dash: tera must remove exactly that run, and the node
/// must stay plain text (a `{% raw %}` block takes no part in tera's trimming).
fn decide_node(pieces: &[Piece], start: usize, end: usize, restore: &mut [bool]) {
    let mut content = String::new();
    for p in &pieces[start..end] {
        if let Piece::Text { text, .. } = p {
            content.push_str(text);
        }
    }
    let followed_by_tag = end < pieces.len();
    let mut front = None;
    let mut back = None;
    // A run after the previous tag, at the start of this node.
    if let Some(Piece::Trimmed {
        text,
        side: Side::AfterTag,
    }) = pieces.get(start)
        && !text.is_empty()
        && start > 0
        && pieces[start - 1].trims().1
        && !pieces[start - 1].is_comment()
        && !content.starts_with(char::is_whitespace)
    {
        front = Some((start, text.as_str()));
    }
    // A run before the next tag, at the end of this node. With nothing else in
    // the node, tera removes both runs, as Go does.
    if end > start
        && let Some(Piece::Trimmed {
            text,
            side: Side::BeforeTag,
        }) = pieces.get(end - 1)
        && !text.is_empty()
        && followed_by_tag
        && pieces[end].trims().0
        && !pieces[end].is_comment()
        && !content.ends_with(char::is_whitespace)
    {
        back = Some((end - 1, text.as_str()));
    }
    let written = format!("{}{content}{}", front.map_or("", |f| f.1), back.map_or("", |b| b.1));
    if needs_raw(&written, followed_by_tag) {
        return;
    }
    for (index, _) in front.into_iter().chain(back) {
        restore[index] = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stmt(body: &str, l: bool, r: bool) -> Piece {
        Piece::Tag {
            kind: TagKind::Statement,
            body: body.into(),
            trim_left: l,
            trim_right: r,
            go: 0..0,
        }
    }

    fn text(t: &str) -> Piece {
        Piece::Text {
            text: t.into(),
            go: 0..0,
        }
    }

    fn trimmed(t: &str, side: Side) -> Piece {
        Piece::Trimmed { text: t.into(), side }
    }

    #[test]
    fn runs_go_back_with_dashes_where_tera_trims_the_same() {
        let pieces = [
            text("a"),
            trimmed(" \n", Side::BeforeTag),
            stmt("if x", true, true),
            trimmed("\n  ", Side::AfterTag),
            text("b"),
        ];
        assert_eq!(assemble(&pieces, &[]).unwrap().text, "a \n{%- if x -%}\n  b");
    }

    #[test]
    fn a_comment_holds_the_runs_its_trims_removed() {
        let comment = Piece::Tag {
            kind: TagKind::Comment,
            body: "header".into(),
            trim_left: true,
            trim_right: true,
            go: 0..0,
        };
        let pieces = [
            comment.clone(),
            trimmed("\n\n", Side::AfterTag),
            text("a"),
            trimmed(" \n", Side::BeforeTag),
            comment,
            text("b"),
        ];
        assert_eq!(
            assemble(&pieces, &[]).unwrap().text,
            "{# header\n\n #}a{#  \nheader #}b"
        );
    }

    #[test]
    fn runs_stay_removed_where_tera_would_trim_more() {
        // A no-break space before the run: Go keeps it, tera would remove it.
        let pieces = [
            text("a\u{a0}"),
            trimmed(" ", Side::BeforeTag),
            stmt("if x", true, false),
        ];
        assert_eq!(assemble(&pieces, &[]).unwrap().text, "a\u{a0}{% if x %}");
    }

    #[test]
    fn text_tera_would_read_as_a_tag_goes_in_raw() {
        let pieces = [text("a {% b {"), stmt("if x", false, false)];
        assert_eq!(
            assemble(&pieces, &[]).unwrap().text,
            "{% raw %}a {% b {{% endraw %}{% if x %}"
        );
    }
}
