#![doc = include_str!("../README.md")]

mod assemble;
mod detect;
mod functions;
mod go_fmt;
mod parse;
mod quoting;
mod source;
pub mod sprig;
mod tera_expr;
mod translate;
mod value_quotes;

use std::fmt;

use assemble::Piece;
pub use detect::{GoSyntax, detect};
pub use source::{Location, TemplateKind};
use tera_expr::{Printer, Slot};

/// A converted template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conversion {
    /// The tera source.
    pub tera: String,
    /// Where the converted template deliberately differs from the Go one.
    pub notes: Vec<Note>,
}

/// A deliberate difference, located in the Go source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    pub location: Location,
    pub message: String,
}

impl Note {
    fn at(src: &str, offset: usize, message: String) -> Note {
        Note {
            location: location(src, offset),
            message,
        }
    }
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.location.line, self.location.column, self.message)
    }
}

/// Something that has no faithful tera form, located in the Go source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub location: Location,
    /// The construct, as written (shortened).
    pub construct: String,
    pub reason: String,
}

impl Problem {
    fn at(src: &str, offset: usize, construct: String, reason: String) -> Problem {
        Problem {
            location: location(src, offset),
            construct,
            reason,
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: `{}`: {}",
            self.location.line, self.location.column, self.construct, self.reason
        )
    }
}

/// Why a template was not converted: every problem found, in source order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
pub struct ConvertError {
    pub problems: Vec<Problem>,
}

/// What a converted template must pass: the checks admission makes. The
/// renderer's engine (`vrouter_render::TemplateEngine`) implements it; this
/// crate cannot call it, as the engine itself uses [`detect`].
pub trait Check {
    /// `Ok`, or why the engine refuses `tera` as a template of `kind`.
    fn check_conversion(&self, kind: TemplateKind, tera: &str) -> Result<(), Refusal>;
}

/// The engine's refusal of a converted template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Where in the tera source, when the engine names a place.
    pub location: Option<Location>,
    /// The engine's message.
    pub message: String,
}

/// Converts one Go template source (a VRouterTemplate's `config` or `commands`)
/// to tera, which must pass `check`.
pub fn convert(source: &str, kind: TemplateKind, check: &dyn Check) -> Result<Conversion, ConvertError> {
    convert_mapped(source, kind, check).map(|(conversion, _)| conversion)
}

/// [`convert`], with which stretch of the output came from which stretch of the
/// Go source.
type SourceMap = Vec<(std::ops::Range<usize>, std::ops::Range<usize>)>;

fn convert_mapped(
    source: &str,
    kind: TemplateKind,
    check: &dyn Check,
) -> Result<(Conversion, SourceMap), ConvertError> {
    let nodes = parse::parse(source).map_err(|e| ConvertError {
        problems: vec![Problem::at(
            source,
            e.at,
            snippet(source, e.at),
            format!("not a valid Go template: {}", e.message),
        )],
    })?;
    // A first pass finds the params the template reads, so that the second
    // names no variable after one of them.
    let mut first = translate::Translator::new(source, &nodes, Default::default());
    first.nodes(&nodes);
    let mut t = translate::Translator::new(source, &nodes, first.params_read);
    t.nodes(&nodes);
    let mut problems = std::mem::take(&mut t.problems);
    let mut notes = std::mem::take(&mut t.notes);
    let pieces = std::mem::take(&mut t.pieces);
    let fail = |mut problems: Vec<Problem>| {
        problems.sort_by_key(|p| (p.location.line, p.location.column));
        Err(ConvertError { problems })
    };
    if !problems.is_empty() {
        return fail(problems);
    }
    let (pieces, removed) = match quoting::fix(pieces, kind) {
        Ok(x) => x,
        Err(u) => return fail(vec![Problem::at(source, u.at, u.construct, u.reason)]),
    };
    notes.extend(removed.into_iter().map(|(at, m)| Note::at(source, at, m)));
    let pieces = quoting::merge_words(pieces);
    let (pieces, outputs) = match print_outputs(pieces, &mut t) {
        Ok(x) => x,
        Err(u) => return fail(vec![Problem::at(source, u.at, u.construct, u.reason)]),
    };
    let printed = match assemble::assemble(&pieces, &outputs) {
        Ok(p) => p,
        Err(e) => {
            return fail(vec![Problem::at(
                source,
                e.go.start,
                snippet(source, e.go.start),
                e.reason,
            )]);
        }
    };
    // The result must pass the checks admission makes.
    if let Err(refusal) = check.check_conversion(kind, &printed.text) {
        let at = refusal
            .location
            .map(|l| offset_of(&printed.text, l))
            .and_then(|offset| {
                printed
                    .map
                    .iter()
                    .find(|(out, _)| out.contains(&offset))
                    .map(|(_, go)| go.start)
            })
            .unwrap_or(0);
        problems.push(Problem::at(
            source,
            at,
            snippet(source, at),
            format!("the converted template is refused by the engine: {}", refusal.message),
        ));
        return fail(problems);
    }
    notes.sort_by_key(|n| (n.location.line, n.location.column));
    Ok((
        Conversion {
            tera: printed.text,
            notes,
        },
        printed.map,
    ))
}

/// Prints each output's expression; temporaries it needs become `set` tags
/// right before it.
fn print_outputs(
    pieces: Vec<Piece>,
    t: &mut translate::Translator<'_>,
) -> Result<(Vec<Piece>, Vec<String>), translate::Unconvertible> {
    let mut out = Vec::with_capacity(pieces.len());
    let mut printed = Vec::new();
    for piece in pieces {
        let Piece::Output {
            te,
            trim_left,
            trim_right,
            go,
            quotes_dropped,
        } = piece
        else {
            out.push(piece);
            continue;
        };
        let (prelude, text) = t.print_output(&te, go.start)?;
        let count = prelude.len();
        for (i, body) in prelude.into_iter().enumerate() {
            out.push(Piece::Tag {
                kind: assemble::TagKind::Statement,
                body,
                trim_left: trim_left && i == 0,
                trim_right: false,
                go: go.clone(),
            });
        }
        out.push(Piece::Output {
            te,
            trim_left: trim_left && count == 0,
            trim_right,
            go,
            quotes_dropped,
        });
        printed.push(text);
    }
    Ok((out, printed))
}

impl translate::Translator<'_> {
    fn print_output(
        &mut self,
        te: &tera_expr::Te,
        at: usize,
    ) -> Result<(Vec<String>, String), translate::Unconvertible> {
        let mut temp = || self.fresh_temp();
        let mut printer = Printer::new(&mut temp);
        let text = printer.print(te, Slot::Value).map_err(|e| translate::Unconvertible {
            at,
            construct: String::new(),
            reason: e.0,
        })?;
        Ok((printer.prelude, text))
    }
}

/// The line and column (in characters, from 1) of a byte offset.
fn location(src: &str, offset: usize) -> Location {
    let offset = offset.min(src.len());
    let before = &src[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |p| p + 1);
    Location {
        line,
        column: before[line_start..].chars().count() + 1,
    }
}

fn offset_of(src: &str, l: Location) -> usize {
    let mut offset = 0;
    for (i, line) in src.split_inclusive('\n').enumerate() {
        if i + 1 == l.line {
            return offset + line.char_indices().nth(l.column - 1).map_or(line.len(), |(o, _)| o);
        }
        offset += line.len();
    }
    src.len()
}

/// The source from `at`, cut to one short line, for naming a construct.
fn snippet(src: &str, at: usize) -> String {
    let rest = src.get(at..).unwrap_or("");
    let end = rest
        .find("}}")
        .map(|e| e + 2)
        .unwrap_or(rest.len())
        .min(rest.find('\n').unwrap_or(rest.len()));
    rest[..end].chars().take(60).collect()
}
