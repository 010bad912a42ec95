//! What the admission check costs: generated templates of chosen nesting and
//! size, and the check's own count of the work it did on one.

use crate::{TemplateEngine, TemplateError, TemplateKind};

/// A commands template of `loops` nested `for` loops around `ifs` sibling `if`
/// blocks, with `lines` lines of `set` commands spread over the `if` bodies (and
/// after them, when there are no `if`s). Every line holds `values_per_line`
/// interpolations, each a whole argument of `set`, so the check accepts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NestedTemplate {
    /// Nested `{% for %}` loops.
    pub loops: usize,
    /// Sibling `{% if %}` blocks inside the innermost loop.
    pub ifs: usize,
    /// Lines of commands inside the innermost loop.
    pub lines: usize,
    /// Interpolations per line.
    pub values_per_line: usize,
}

impl NestedTemplate {
    /// The template's source.
    pub fn source(&self) -> String {
        let mut out = String::new();
        for level in 0..self.loops {
            out.push_str(&format!("{}{{% for l{level} in lists.l{level} %}}\n", indent(level)));
        }
        let inner = indent(self.loops);
        let mut written = 0;
        for block in 0..self.ifs {
            // Lines are shared out as evenly as they go; the last block takes the rest.
            let share = if block + 1 == self.ifs {
                self.lines - written
            } else {
                self.lines / self.ifs
            };
            out.push_str(&format!("{inner}{{% if flags.f{block} %}}\n"));
            for _ in 0..share {
                self.line(&mut out, written);
                written += 1;
            }
            out.push_str(&format!("{inner}{{% endif %}}\n"));
        }
        while written < self.lines {
            self.line(&mut out, written);
            written += 1;
        }
        for level in (0..self.loops).rev() {
            out.push_str(&format!("{}{{% endfor %}}\n", indent(level)));
        }
        out
    }

    fn line(&self, out: &mut String, n: usize) {
        out.push_str(&format!("{}set nat rule {n} source", indent(self.loops)));
        for v in 0..self.values_per_line {
            out.push_str(&format!(" {{{{ v{v} }}}}"));
        }
        out.push('\n');
    }
}

fn indent(level: usize) -> String {
    " ".repeat(level.min(8))
}

/// The admission check's work on one template, as it counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReviewWork {
    /// Control-flow walks through the template.
    pub walks: u64,
    /// Template nodes visited, over all walks.
    pub nodes: u64,
    /// Bytes of text written (and then read by the placement check), over all walks.
    pub bytes: u64,
    /// The most text one walk wrote.
    pub largest_walk: u64,
}

impl ReviewWork {
    /// Nodes visited plus bytes written: the check's unit of cost.
    pub fn units(&self) -> u64 {
        self.nodes + self.bytes
    }
}

/// Runs the placement check that [`TemplateEngine::review`] runs on `source` and
/// returns its work with its outcome. Errs only when `source` does not compile
/// (before the check runs).
pub fn review_work(
    engine: &TemplateEngine,
    kind: TemplateKind,
    source: &str,
) -> Result<(ReviewWork, Result<(), TemplateError>), TemplateError> {
    let (work, outcome) = engine.review_work(kind, source)?;
    Ok((
        ReviewWork {
            walks: work.walks,
            nodes: work.nodes,
            bytes: work.bytes,
            largest_walk: work.largest_walk,
        },
        outcome,
    ))
}
