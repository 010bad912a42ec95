//! The admission-time check: a template's text along its control-flow paths,
//! with a sentinel for each interpolation, through the same check renders use.
//!
//! Admission has no params, so it cannot render; instead it walks the compiled
//! template choosing a branch of every `if` and zero, one or two iterations of
//! every `for`, writes the literal text and a sentinel per interpolation, and
//! checks each text as a render would be checked. This is early feedback: the
//! render-time check of the actual text is the guarantee.
//!
//! Its cost is linear in the template's size:
//! - A second iteration is walked with every loop inside it taking at most one
//!   iteration. The seam between two iterations of each loop is still read (in
//!   the first iteration of every enclosing loop), and no byte of the template
//!   is written more than (loops around it + 1) times in one walk, so one walk's
//!   text is linear in the template. (Letting nested loops all take two
//!   iterations doubles the text at every nesting level.)
//! - Each walk's text is bounded by [`crate::Limits::max_review_bytes`]; a walk
//!   that would cross it refuses the template naming the outermost loop it was
//!   repeating ([`Refused::TooLarge`]).
//! - Every path is walked while there are at most [`MAX_PATHS`] and their texts
//!   total at most [`ENUMERATION_BYTES`]; beyond that, the paths walked so far
//!   plus walks that take every branch position ([`Choices::Every`]).

use tera::ast::{Expr, ExprVal, Forloop, Node};

use super::functions::TICK;
use super::{TemplateKind, sandbox};
use crate::verify::{self, Placement};

/// How many paths admission checks at most.
pub(crate) const MAX_PATHS: usize = 256;

/// How much text (bytes written, summed over paths) the exhaustive part of the
/// walk may write before it falls back to the every-position walks.
pub(crate) const ENUMERATION_BYTES: u64 = 2 * 1024 * 1024;

/// What a `| safe` or `not …` interpolation stands for along a path: a plain
/// word, since its real text is only known when rendering.
const UNKNOWN_TRUSTED_TEXT: &str = "trusted";

/// Why the check refused a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The interpolation with this number (its `id`) lands in this place.
    Misplaced(usize, Placement),
    /// One walk's text would cross the limit while repeating the `for` loop with
    /// this ordinal (the template's `for` tags counted from 0 in source order),
    /// or outside any loop.
    TooLarge { for_ordinal: Option<usize> },
}

/// How much the check did: nodes visited and bytes written and read, over every
/// walk. Exposed to tests through `crate::testing` to prove the cost linear.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Work {
    pub walks: u64,
    pub nodes: u64,
    pub bytes: u64,
    /// The most text one walk wrote.
    pub largest_walk: u64,
}

/// What a review is checked against.
#[derive(Clone, Copy)]
pub(crate) struct Review<'a> {
    pub kind: TemplateKind,
    pub writer: &'a str,
    /// Most bytes one walk may write.
    pub max_walk_bytes: usize,
}

/// Checks `ast` along its paths, adding what it did to `work`.
pub(crate) fn check(ast: &[Node], review: Review<'_>, work: &mut Work) -> Result<(), Refused> {
    let prefix = verify::sentinel_prefix();
    let mut forced: Vec<usize> = Vec::new();
    let mut exhaustive = false;
    let mut walked = 0;
    let mut enumerated: u64 = 0;
    while walked < MAX_PATHS && enumerated <= ENUMERATION_BYTES {
        let walk = Walk::run(ast, Choices::Forced(&forced), review, &prefix, work)?;
        enumerated += walk.text.len() as u64;
        walk.verify(review.kind, &prefix)?;
        walked += 1;
        match walk.next_path() {
            Some(next) => forced = next,
            None => {
                exhaustive = true;
                break;
            }
        }
    }
    if !exhaustive {
        for k in 1..4 {
            Walk::run(ast, Choices::Every(k), review, &prefix, work)?.verify(review.kind, &prefix)?;
        }
    }
    Ok(())
}

#[derive(Clone, Copy)]
enum Choices<'a> {
    /// These choices first, then the first alternative.
    Forced(&'a [usize]),
    /// Alternative `k` modulo the number of alternatives, everywhere.
    Every(usize),
}

#[derive(PartialEq, Eq)]
enum Flow {
    Normal,
    Break,
    Continue,
    /// The walk's text reached its limit; nothing more is written.
    Full,
}

struct Walk<'a> {
    choices: Choices<'a>,
    writer: &'a str,
    prefix: &'a str,
    max_bytes: usize,
    /// (alternative taken, alternatives) at each decision, in order.
    taken: Vec<(usize, usize)>,
    text: String,
    /// The interpolation number of each sentinel written.
    interpolations: Vec<usize>,
    /// The loops being walked, outermost first.
    active: Vec<*const Forloop>,
    /// How many enclosing loops are in their second iteration: while any is,
    /// loops take at most one iteration.
    second_iterations: usize,
    /// The outermost loop being walked when the text reached its limit.
    full_in: Option<Option<*const Forloop>>,
    nodes: u64,
}

impl<'a> Walk<'a> {
    fn run(
        ast: &[Node],
        choices: Choices<'a>,
        review: Review<'a>,
        prefix: &'a str,
        work: &mut Work,
    ) -> Result<Walk<'a>, Refused> {
        let mut walk = Walk {
            choices,
            writer: review.writer,
            prefix,
            max_bytes: review.max_walk_bytes,
            taken: Vec::new(),
            text: String::new(),
            interpolations: Vec::new(),
            active: Vec::new(),
            second_iterations: 0,
            full_in: None,
            nodes: 0,
        };
        walk.nodes(ast);
        work.walks += 1;
        work.nodes += walk.nodes;
        work.bytes += walk.text.len() as u64;
        work.largest_walk = work.largest_walk.max(walk.text.len() as u64);
        match walk.full_in {
            Some(outermost) => Err(Refused::TooLarge {
                for_ordinal: outermost.and_then(|target| for_ordinal(ast, target)),
            }),
            None => Ok(walk),
        }
    }

    fn verify(&self, kind: TemplateKind, prefix: &str) -> Result<(), Refused> {
        let count = self.interpolations.len();
        let checked = match kind {
            TemplateKind::Commands => verify::check_commands(&self.text, prefix, count),
            TemplateKind::Config => verify::check_config(&self.text, prefix, count),
        };
        checked.map(drop).map_err(|refusal| {
            Refused::Misplaced(
                self.interpolations[refusal.index.min(count.saturating_sub(1))],
                refusal.placement,
            )
        })
    }

    /// The choices of the next path in order, or none after the last.
    fn next_path(&self) -> Option<Vec<usize>> {
        let last = self.taken.iter().rposition(|(taken, of)| taken + 1 < *of)?;
        let mut next: Vec<usize> = self.taken[..last].iter().map(|(taken, _)| *taken).collect();
        next.push(self.taken[last].0 + 1);
        Some(next)
    }

    fn choose(&mut self, alternatives: usize) -> usize {
        let choice = match self.choices {
            Choices::Forced(forced) => forced.get(self.taken.len()).copied().unwrap_or(0),
            Choices::Every(k) => k,
        } % alternatives;
        self.taken.push((choice, alternatives));
        choice
    }

    /// How many iterations the next loop takes: zero, one or two, or zero or
    /// one inside a second iteration (where the every-position walks take one,
    /// so that the text after each seam holds the loops inside it).
    fn iterations(&mut self) -> usize {
        match self.choices {
            Choices::Every(k) if self.second_iterations > 0 => {
                let choice = k.min(1);
                self.taken.push((choice, 2));
                choice
            }
            _ if self.second_iterations > 0 => self.choose(2),
            _ => self.choose(3),
        }
    }

    /// Appends `text` unless that would cross the walk's limit, which ends the
    /// walk instead.
    fn write(&mut self, text: &str) -> Flow {
        if self.text.len() + text.len() > self.max_bytes {
            self.full_in = Some(self.active.first().copied());
            return Flow::Full;
        }
        self.text.push_str(text);
        Flow::Normal
    }

    fn nodes(&mut self, nodes: &[Node]) -> Flow {
        for node in nodes {
            let flow = self.node(node);
            if flow != Flow::Normal {
                return flow;
            }
        }
        Flow::Normal
    }

    fn node(&mut self, node: &Node) -> Flow {
        self.nodes += 1;
        match node {
            Node::Text(text) | Node::Raw(_, text, _) => self.write(text),
            Node::VariableBlock(_, expr) => self.interpolation(expr),
            Node::If(if_node, _) => {
                let choice = self.choose(if_node.conditions.len() + 1);
                if let Some((_, _, body)) = if_node.conditions.get(choice) {
                    return self.nodes(body);
                }
                match &if_node.otherwise {
                    Some((_, body)) => self.nodes(body),
                    None => Flow::Normal,
                }
            }
            Node::Forloop(_, for_loop, _) => {
                self.active.push(for_loop);
                let flow = self.for_loop(for_loop);
                self.active.pop();
                flow
            }
            Node::Break(_) => Flow::Break,
            Node::Continue(_) => Flow::Continue,
            _ => Flow::Normal,
        }
    }

    /// Zero, one or two iterations (at most one inside a second iteration); the
    /// second walked with every loop inside it taking at most one.
    fn for_loop(&mut self, for_loop: &Forloop) -> Flow {
        let iterations = self.iterations();
        if iterations == 0 {
            return match &for_loop.empty_body {
                Some(body) => self.nodes(body),
                None => Flow::Normal,
            };
        }
        for iteration in 0..iterations {
            self.second_iterations += usize::from(iteration == 1);
            let flow = self.nodes(&for_loop.body);
            self.second_iterations -= usize::from(iteration == 1);
            match flow {
                Flow::Full => return Flow::Full,
                Flow::Break => break,
                Flow::Normal | Flow::Continue => {}
            }
        }
        Flow::Normal
    }

    fn interpolation(&mut self, expr: &Expr) -> Flow {
        if matches!(&expr.val, ExprVal::FunctionCall(call) if call.name == TICK) {
            return Flow::Normal;
        }
        match sandbox::writer_id(expr, self.writer) {
            Some(id) => {
                let flow = self.write(&verify::sentinel(self.prefix, self.interpolations.len()));
                if flow == Flow::Normal {
                    self.interpolations.push(id);
                }
                flow
            }
            None => self.write(UNKNOWN_TRUSTED_TEXT),
        }
    }
}

/// The ordinal of `target` among the `for` loops of `ast` in source order (the
/// AST's pre-order is the order of the `{% for %}` tags).
fn for_ordinal(ast: &[Node], target: *const Forloop) -> Option<usize> {
    fn visit(nodes: &[Node], target: *const Forloop, seen: &mut usize) -> Option<usize> {
        nodes.iter().find_map(|node| match node {
            Node::If(if_node, _) => if_node
                .conditions
                .iter()
                .find_map(|(_, _, body)| visit(body, target, seen))
                .or_else(|| {
                    if_node
                        .otherwise
                        .as_ref()
                        .and_then(|(_, body)| visit(body, target, seen))
                }),
            Node::Forloop(_, for_loop, _) => {
                if std::ptr::eq(for_loop, target) {
                    return Some(*seen);
                }
                *seen += 1;
                visit(&for_loop.body, target, seen).or_else(|| {
                    for_loop
                        .empty_body
                        .as_deref()
                        .and_then(|body| visit(body, target, seen))
                })
            }
            _ => None,
        })
    }
    visit(ast, target, &mut 0)
}
