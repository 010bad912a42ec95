//! The admission-time check: a template's text along its control-flow paths,
//! with a sentinel for each interpolation, through the same check renders use.
//!
//! Admission has no params, so it cannot render; instead it walks the compiled
//! template choosing a branch of every `if` and zero, one or two iterations of
//! every `for`, writes the literal text and a sentinel per interpolation, and
//! checks each text as a render would be checked. Every path is walked when there
//! are at most [`MAX_PATHS`]; beyond that the first [`MAX_PATHS`] in order plus
//! walks that take every branch position. This is early feedback: the render-time
//! check of the actual text is the guarantee.

use tera::ast::{Expr, ExprVal, Node};

use super::functions::TICK;
use super::{TemplateKind, sandbox};
use crate::verify::{self, Placement};

/// How many paths admission checks at most.
pub(crate) const MAX_PATHS: usize = 256;

/// What a `| safe` or `not …` interpolation stands for along a path: a plain
/// word, since its real text is only known when rendering.
const UNKNOWN_TRUSTED_TEXT: &str = "trusted";

/// Checks `ast` along its paths; on refusal, the interpolation's number (its
/// `id`) and why.
pub(crate) fn check(ast: &[Node], kind: TemplateKind, writer: &str) -> Result<(), (usize, Placement)> {
    let prefix = verify::sentinel_prefix();
    let mut forced: Vec<usize> = Vec::new();
    let mut walked = 0;
    loop {
        let walk = Walk::run(ast, Choices::Forced(&forced), writer, &prefix);
        walk.verify(kind, &prefix)?;
        walked += 1;
        let Some(next) = walk.next_path() else { break };
        if walked >= MAX_PATHS {
            break;
        }
        forced = next;
    }
    if walked >= MAX_PATHS {
        for k in 1..4 {
            Walk::run(ast, Choices::Every(k), writer, &prefix).verify(kind, &prefix)?;
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
}

struct Walk<'a> {
    choices: Choices<'a>,
    writer: &'a str,
    prefix: &'a str,
    /// (alternative taken, alternatives) at each decision, in order.
    taken: Vec<(usize, usize)>,
    text: String,
    /// The interpolation number of each sentinel written.
    interpolations: Vec<usize>,
}

impl<'a> Walk<'a> {
    fn run(ast: &[Node], choices: Choices<'a>, writer: &'a str, prefix: &'a str) -> Walk<'a> {
        let mut walk = Walk {
            choices,
            writer,
            prefix,
            taken: Vec::new(),
            text: String::new(),
            interpolations: Vec::new(),
        };
        walk.nodes(ast);
        walk
    }

    fn verify(&self, kind: TemplateKind, prefix: &str) -> Result<(), (usize, Placement)> {
        let count = self.interpolations.len();
        let checked = match kind {
            TemplateKind::Commands => verify::check_commands(&self.text, prefix, count),
            TemplateKind::Config => verify::check_config(&self.text, prefix, count),
        };
        checked.map(drop).map_err(|refusal| {
            (
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
        match node {
            Node::Text(text) | Node::Raw(_, text, _) => self.text.push_str(text),
            Node::VariableBlock(_, expr) => self.interpolation(expr),
            Node::If(if_node, _) => {
                let choice = self.choose(if_node.conditions.len() + 1);
                if let Some((_, _, body)) = if_node.conditions.get(choice) {
                    return self.nodes(body);
                }
                if let Some((_, body)) = &if_node.otherwise {
                    return self.nodes(body);
                }
            }
            Node::Forloop(_, for_loop, _) => {
                let iterations = self.choose(3);
                if iterations == 0
                    && let Some(body) = &for_loop.empty_body
                {
                    return self.nodes(body);
                }
                for _ in 0..iterations {
                    if self.nodes(&for_loop.body) == Flow::Break {
                        break;
                    }
                }
            }
            Node::Break(_) => return Flow::Break,
            Node::Continue(_) => return Flow::Continue,
            _ => {}
        }
        Flow::Normal
    }

    fn interpolation(&mut self, expr: &Expr) {
        if matches!(&expr.val, ExprVal::FunctionCall(call) if call.name == TICK) {
            return;
        }
        match sandbox::writer_id(expr, self.writer) {
            Some(id) => {
                self.text
                    .push_str(&verify::sentinel(self.prefix, self.interpolations.len()));
                self.interpolations.push(id);
            }
            None => self.text.push_str(UNKNOWN_TRUSTED_TEXT),
        }
    }
}
