//! Recognising a Go template where tera is expected.
//!
//! The Go operator's users will paste their VRouterTemplates as they are. tera
//! refuses them with a grammar error about `.` or `range`, which says nothing
//! useful; so when tera cannot parse a source that parses as a Go template and
//! uses Go's syntax, the engine reports that instead, with the first Go
//! construct, its tera form, and the convert command.

use super::parse::{self, Node, Pipeline, Tag, Term};
use crate::{Check, Location, TemplateKind};

/// The first Go construct of a source tera cannot parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoSyntax {
    pub location: Location,
    /// The Go tag as written.
    pub go: String,
    /// What the converter writes for it, when the whole template converts.
    pub tera: Option<String>,
}

/// `Some` when `source` is a Go template using Go's syntax. `check` is what
/// [`crate::convert`] checks the tera form with.
pub fn detect(source: &str, kind: TemplateKind, check: &dyn Check) -> Option<GoSyntax> {
    if !source.contains("{{") {
        return None;
    }
    let nodes = parse::parse(source).ok()?;
    let tag = first_go_tag(&nodes)?;
    let go = source[tag.span.clone()].to_owned();
    let tera = super::convert_mapped(source, kind, check)
        .ok()
        .and_then(|(conversion, map)| {
            // What the tag became, possibly with the quotes around it or the word
            // it was part of.
            let parts: Vec<&str> = map
                .iter()
                .filter(|(out, g)| !out.is_empty() && g.start < tag.span.end && tag.span.start < g.end.max(g.start + 1))
                .map(|(out, _)| &conversion.tera[out.clone()])
                .filter(|t| t.starts_with("{{") || t.starts_with("{%") || t.starts_with("{#"))
                .collect();
            (!parts.is_empty()).then(|| parts.concat())
        });
    Some(GoSyntax {
        location: super::location(source, tag.span.start),
        go,
        tera,
    })
}

/// The first tag only Go reads: comments, control structures, `.` and `$`,
/// variables, calls with arguments. `{{ name }}` and `{{ "text" }}` read the same
/// in both, so they are not.
fn first_go_tag(nodes: &[Node]) -> Option<&Tag> {
    nodes.iter().find_map(|node| match node {
        Node::Text { .. } => None,
        Node::Comment { tag, .. }
        | Node::Break(tag)
        | Node::Continue(tag)
        | Node::OtherTemplate { tag, .. }
        | Node::Range { tag, .. } => Some(tag),
        Node::Conditional { branches, .. } => branches.first().map(|b| &b.tag),
        Node::Action { tag, pipe } => go_only(pipe).then_some(tag),
    })
}

fn go_only(pipe: &Pipeline) -> bool {
    !pipe.vars.is_empty()
        || pipe.cmds.iter().any(|cmd| {
            // `{{ default "x" .y }}`: a Go function with its arguments (not a
            // mistyped tera expression such as `{{ x y }}`).
            (cmd.args.len() > 1 && matches!(&cmd.args[0].term, Term::Ident(f) if super::functions::is_known(f)))
                || cmd.args.iter().any(|a| {
                    !a.fields.is_empty() || matches!(a.term, Term::Dot | Term::Variable(_) | Term::Pipe(_) | Term::Nil)
                })
        })
}
