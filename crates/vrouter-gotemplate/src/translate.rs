//! Go template AST → tera pieces.
//!
//! Each Go tag becomes zero or more tera tags in the same place, with Go's trim
//! markers carried over (see `assemble`). Go's `.` (the data a block works on)
//! has no tera counterpart: the translator tracks what `.` is in each block (the
//! params root, a `range` element, a `with` value) and writes it as a tera
//! variable. Go variables get tera names that collide with no param the
//! template reads.

use std::collections::{HashMap, HashSet};
use std::ops::Range;

use super::assemble::{Piece, Side, TagKind};
use super::functions;
use super::parse::{Branch, Keyword, Node, Number, Operand, Pipeline, Tag, Term, is_go_space};
use super::tera_expr::{Inexpressible, Path, Printer, Seg, Slot, Te, is_variable_name};
use super::value_quotes;
use super::{Note, Problem};

/// Whether an expression's value or only its truth is needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ctx {
    Value,
    Condition,
}

/// What `.` is.
#[derive(Debug, Clone)]
enum Dot {
    Root,
    Value(Path),
}

#[derive(Debug, Clone)]
struct Var {
    go: String,
    /// `None` for `$`, the root.
    tera: Option<String>,
    loop_depth: usize,
}

pub(crate) struct Translator<'s> {
    pub src: &'s str,
    pub pieces: Vec<Piece>,
    pub problems: Vec<Problem>,
    pub notes: Vec<Note>,
    trim_right_ending_at: HashSet<usize>,
    trim_left_starting_at: HashSet<usize>,
    vars: Vec<Var>,
    dots: Vec<Dot>,
    loop_depth: usize,
    taken: HashSet<String>,
    counters: HashMap<String, usize>,
    /// `{% set %}` statements the tag being translated needs first.
    prelude: Vec<String>,
    /// The top-level params this translation read.
    pub params_read: HashSet<String>,
    /// The tera variables set to a value holding quotes the template wrote
    /// (`$d := quote .x`): writing one is refused (see `value_quotes`).
    quoted_vars: HashSet<String>,
    /// The tera variables that hold Go's own values, never a param's
    /// `json.Number`: a range's key (an index or a map key) and the counter of
    /// `range N`.
    pub go_valued_vars: HashSet<String>,
    /// Inside the `else` of a `range`: tera applies no whitespace control in a
    /// for loop's `else` body (tera 1.20), so Go's trims stay applied to the text
    /// and no tag gets a dash.
    no_dashes: usize,
}

/// A problem located at a byte offset, before it becomes a [`Problem`].
pub(crate) struct Unconvertible {
    pub at: usize,
    pub construct: String,
    pub reason: String,
}

type Result<T> = std::result::Result<T, Unconvertible>;

pub(crate) fn unconvertible<T>(at: usize, construct: impl Into<String>, reason: impl Into<String>) -> Result<T> {
    Err(Unconvertible {
        at,
        construct: construct.into(),
        reason: reason.into(),
    })
}

impl<'s> Translator<'s> {
    /// `params_read`: the top-level params the template reads (from a first
    /// pass), which no variable of the converted template may shadow.
    pub fn new(src: &'s str, nodes: &[Node], params_read: HashSet<String>) -> Self {
        let mut t = Translator {
            src,
            pieces: Vec::new(),
            problems: Vec::new(),
            notes: Vec::new(),
            trim_right_ending_at: HashSet::new(),
            trim_left_starting_at: HashSet::new(),
            vars: vec![Var {
                go: "$".into(),
                tera: None,
                loop_depth: 0,
            }],
            dots: vec![Dot::Root],
            loop_depth: 0,
            taken: params_read,
            counters: HashMap::new(),
            prelude: Vec::new(),
            params_read: HashSet::new(),
            quoted_vars: HashSet::new(),
            go_valued_vars: HashSet::new(),
            no_dashes: 0,
        };
        t.index(nodes);
        t
    }

    /// Records the trim markers of every tag.
    fn index(&mut self, nodes: &[Node]) {
        let mut tags = Vec::new();
        collect(nodes, &mut tags);
        for tag in tags {
            if tag.trim_right {
                self.trim_right_ending_at.insert(tag.span.end);
            }
            if tag.trim_left {
                self.trim_left_starting_at.insert(tag.span.start);
            }
        }
    }

    /// A tera name from `base` that nothing else uses.
    fn fresh(&mut self, base: &str) -> String {
        let mut base: String = base
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' })
            .collect();
        if !is_variable_name(&base) {
            base = format!("v_{base}");
        }
        let mut candidate = base.clone();
        while self.taken.contains(&candidate) || !is_variable_name(&candidate) {
            let n = self.counters.entry(base.clone()).or_insert(1);
            *n += 1;
            candidate = format!("{base}_{n}");
        }
        self.taken.insert(candidate.clone());
        candidate
    }

    pub fn fresh_temp(&mut self) -> String {
        self.fresh("tmp")
    }

    // ---------------------------------------------------------------- nodes

    pub fn nodes(&mut self, nodes: &[Node]) {
        for node in nodes {
            if let Err(u) = self.node(node) {
                self.problem(u);
            }
        }
    }

    pub fn problem(&mut self, u: Unconvertible) {
        self.prelude.clear();
        self.problems.push(Problem::at(self.src, u.at, u.construct, u.reason));
    }

    fn note(&mut self, at: usize, message: impl Into<String>) {
        self.notes.push(Note::at(self.src, at, message.into()));
    }

    fn text_of(&self, span: &Range<usize>) -> &'s str {
        &self.src[span.clone()]
    }

    fn node(&mut self, node: &Node) -> Result<()> {
        match node {
            Node::Text { span } => {
                self.text(span.clone());
                Ok(())
            }
            Node::Comment { tag, body } => {
                self.push_tag(
                    TagKind::Comment,
                    body.trim().to_owned(),
                    tag.trim_left,
                    tag.trim_right,
                    tag.span.clone(),
                );
                Ok(())
            }
            Node::Action { tag, pipe } => self.action(tag, pipe),
            Node::Conditional {
                keyword,
                branches,
                otherwise,
                end,
            } => self.conditional(*keyword, branches, otherwise.as_ref(), end),
            Node::Range {
                tag,
                pipe,
                body,
                otherwise,
                end,
            } => self.range(tag, pipe, body, otherwise.as_ref(), end),
            Node::Break(tag) => {
                self.push_tag(
                    TagKind::Statement,
                    "break".into(),
                    tag.trim_left,
                    tag.trim_right,
                    tag.span.clone(),
                );
                Ok(())
            }
            Node::Continue(tag) => {
                self.push_tag(
                    TagKind::Statement,
                    "continue".into(),
                    tag.trim_left,
                    tag.trim_right,
                    tag.span.clone(),
                );
                Ok(())
            }
            Node::OtherTemplate { tag, keyword } => unconvertible(
                tag.span.start,
                format!("{{{{ {} }}}}", keyword.as_str()),
                "a VRouterTemplate renders alone: there are no other templates to define or call; \
                 list several templates in the binding's templateRefs instead",
            ),
        }
    }

    /// Literal text with Go's trims applied; the removed white space is kept as
    /// `Trimmed` pieces so the output can keep the layout.
    fn text(&mut self, span: Range<usize>) {
        let text = self.text_of(&span);
        let mut start = 0;
        let mut end = text.len();
        if self.trim_right_ending_at.contains(&span.start) {
            start = text.len() - text.trim_start_matches(is_go_space).len();
        }
        if self.trim_left_starting_at.contains(&span.end) {
            end = text.trim_end_matches(is_go_space).len().max(start);
        }
        if start > 0 {
            self.pieces.push(Piece::Trimmed {
                text: text[..start].to_owned(),
                side: Side::AfterTag,
            });
        }
        self.pieces.push(Piece::Text {
            text: text[start..end].to_owned(),
            go: span.start + start..span.start + end,
        });
        if end < text.len() {
            self.pieces.push(Piece::Trimmed {
                text: text[end..].to_owned(),
                side: Side::BeforeTag,
            });
        }
    }

    fn push_tag(&mut self, kind: TagKind, body: String, trim_left: bool, trim_right: bool, go: Range<usize>) {
        let dashes = self.no_dashes == 0;
        self.pieces.push(Piece::Tag {
            kind,
            body,
            trim_left: trim_left && dashes,
            trim_right: trim_right && dashes,
            go,
        });
    }

    /// Emits the statements one Go tag becomes, preceded by its prelude; the first
    /// carries the tag's left trim and the last its right trim.
    fn emit(&mut self, tag: &Tag, statements: Vec<String>) {
        let mut all: Vec<String> = self.prelude.drain(..).collect();
        all.extend(statements);
        let count = all.len();
        for (i, body) in all.into_iter().enumerate() {
            self.push_tag(
                TagKind::Statement,
                body,
                tag.trim_left && i == 0,
                tag.trim_right && i + 1 == count,
                tag.span.clone(),
            );
        }
    }

    /// Prints `te` for `slot`; what it hoists joins the prelude.
    fn print(&mut self, te: &Te, slot: Slot, at: usize) -> Result<String> {
        let (printed, prelude) = {
            let mut next = || self.fresh_temp();
            let mut printer = Printer::new(&mut next);
            let printed = printer.print(te, slot);
            (printed, printer.prelude)
        };
        self.prelude.extend(prelude);
        printed.map_err(|Inexpressible(reason)| Unconvertible {
            at,
            construct: self
                .src
                .get(at..)
                .map_or(String::new(), |s| s.chars().take(40).collect()),
            reason,
        })
    }

    fn action(&mut self, tag: &Tag, pipe: &Pipeline) -> Result<()> {
        if !pipe.vars.is_empty() {
            let te = self.pipeline(pipe, Ctx::Value)?;
            let statements = self.bind(pipe, te)?;
            self.emit(tag, statements);
            return Ok(());
        }
        self.output(tag, pipe)
    }

    /// `$x := value` / `$x = value` as `set` statements.
    fn bind(&mut self, pipe: &Pipeline, te: Te) -> Result<Vec<String>> {
        let (name, span) = &pipe.vars[pipe.vars.len() - 1];
        let value = self.print(&te, Slot::Value, pipe.span.start)?;
        let holds_quotes = value_quotes::writer(&te, &self.quoted_vars).is_some();
        if pipe.assign {
            let Some(var) = self.vars.iter().rev().find(|v| &v.go == name).cloned() else {
                return unconvertible(
                    span.start,
                    format!("{name} = …"),
                    format!("assigns {name}, which is not declared here (Go fails when this line runs)"),
                );
            };
            let Some(tera) = var.tera else {
                return unconvertible(span.start, name.clone(), "`$` cannot be assigned");
            };
            let verb = if var.loop_depth == self.loop_depth {
                "set"
            } else if var.loop_depth == 0 {
                "set_global"
            } else {
                return unconvertible(
                    span.start,
                    format!("{name} = …"),
                    "assigns, inside a nested range, a variable declared in an outer range; \
                     tera can only assign a loop's own variables or the template's top-level ones",
                );
            };
            if holds_quotes {
                self.quoted_vars.insert(tera.clone());
            }
            self.go_valued_vars.remove(&tera);
            Ok(vec![format!("{verb} {tera} = {value}")])
        } else {
            let tera = self.declare(name);
            if holds_quotes {
                self.quoted_vars.insert(tera.clone());
            }
            Ok(vec![format!("set {tera} = {value}")])
        }
    }

    fn declare(&mut self, go: &str) -> String {
        let tera = self.fresh(go.trim_start_matches('$'));
        self.vars.push(Var {
            go: go.to_owned(),
            tera: Some(tera.clone()),
            loop_depth: self.loop_depth,
        });
        tera
    }

    /// `{{ pipeline }}`: what it writes.
    fn output(&mut self, tag: &Tag, pipe: &Pipeline) -> Result<()> {
        let last = pipe.cmds.last().expect("a pipeline has a command");
        // A constant writes itself: it becomes literal text.
        if pipe.cmds.len() == 1 && last.args.len() == 1 && last.args[0].fields.is_empty() {
            let literal = match &last.args[0].term {
                Term::String(s) => Some(s.clone()),
                Term::Number(n) => Some(number_text(*n)),
                Term::Bool(b) => Some(b.to_string()),
                _ => None,
            };
            if let Some(text) = literal {
                self.literal_output(tag, text);
                return Ok(());
            }
        }
        // `printf` with a constant format: its literal parts become text, so the
        // words the format writes stay separate words.
        if let Some((format, args)) = self.printf_parts(pipe)? {
            return self.split_printf(tag, &format, args, pipe.span.start);
        }
        let te = self.pipeline(pipe, Ctx::Value)?;
        let (te, quotes_dropped) = self.written_value(te, tag, pipe.span.start)?;
        let prelude: Vec<String> = self.prelude.drain(..).collect();
        let count = prelude.len();
        for (i, body) in prelude.into_iter().enumerate() {
            self.push_tag(
                TagKind::Statement,
                body,
                tag.trim_left && i == 0,
                false,
                tag.span.clone(),
            );
        }
        let dashes = self.no_dashes == 0;
        self.pieces.push(Piece::Output {
            te,
            trim_left: tag.trim_left && count == 0 && dashes,
            trim_right: tag.trim_right && dashes,
            go: tag.span.clone(),
            quotes_dropped,
        });
        Ok(())
    }

    /// A value an output writes, without the quotes Go wrote around all of it
    /// (noted); refused where quotes the template wrote are inside it. Whether
    /// quotes were dropped is returned with it.
    fn written_value(&mut self, te: Te, tag: &Tag, at: usize) -> Result<(Te, bool)> {
        let (te, dropped) = match value_quotes::unwrap(&te) {
            Some((inner, function)) => {
                self.note(
                    at,
                    format!(
                        "the quotes `{function}` wrote were dropped: values are quoted automatically for where \
                         they are written, so bash or VyOS reads the value Go's quotes held (and a `$` or a quote \
                         inside it is no longer read as code)"
                    ),
                );
                (inner, true)
            }
            None => (te, false),
        };
        if let Some(writer) = value_quotes::writer(&te, &self.quoted_vars) {
            let construct: String = self.text_of(&tag.span).chars().take(60).collect();
            return unconvertible(
                tag.span.start,
                construct,
                format!(
                    "{writer} writes quote characters into the value: the Go operator's output had bash or \
                     VyOS read them as quoting, but values are quoted automatically here, so they would \
                     reach VyOS as part of the value; write the quotes in the template text or drop them"
                ),
            );
        }
        Ok((te, dropped))
    }

    /// A constant output: text that no trim of its own tag touches.
    fn literal_output(&mut self, tag: &Tag, text: String) {
        self.pieces.push(Piece::Text {
            text,
            go: tag.span.clone(),
        });
    }

    /// `printf "format" args…` as the whole pipeline (or with the last argument
    /// piped in), with a format whose verbs each take the next argument.
    fn printf_parts(&mut self, pipe: &Pipeline) -> Result<Option<(String, Vec<Te>)>> {
        let Some((first, rest)) = pipe.cmds.split_first() else {
            return Ok(None);
        };
        if rest.len() > 1 || first.args.is_empty() {
            return Ok(None);
        }
        let (printf_cmd, piped) = match rest {
            [] => (first, None),
            [second] => (second, Some(first)),
            _ => return Ok(None),
        };
        if !matches!(&printf_cmd.args[0].term, Term::Ident(n) if n == "printf") {
            return Ok(None);
        }
        let Some(Operand {
            term: Term::String(format),
            fields,
            ..
        }) = printf_cmd.args.get(1)
        else {
            return Ok(None);
        };
        if !fields.is_empty() || format.contains('*') || format.contains('[') {
            return Ok(None);
        }
        let mut args = Vec::new();
        for a in &printf_cmd.args[2..] {
            args.push(self.operand(a, Ctx::Value)?);
        }
        if let Some(p) = piped {
            args.push(self.command(p, None, Ctx::Value)?);
        }
        let Some(parts) = verbs(format) else {
            return Ok(None);
        };
        if parts.len() != args.len() {
            return Ok(None);
        }
        // Literal text that is one word with the values keeps them in that word
        // (an empty value stays part of it); text with spaces or shell or
        // config syntax becomes template text, as Go wrote it.
        let mut literal = String::new();
        let mut pos = 0;
        for (range, _) in &parts {
            literal.push_str(&format[pos..range.start]);
            pos = range.end;
        }
        literal.push_str(&format[pos..]);
        // A `%q`, or a quoted argument, is split out too: the quotes are dropped
        // from the value it writes.
        let quotes =
            parts.iter().any(|(_, verb)| verb == "%q") || args.iter().any(|a| value_quotes::unwrap(a).is_some());
        if !quotes
            && literal
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '/' | '@' | '%' | '+' | ',' | '-'))
        {
            return Ok(None);
        }
        Ok(Some((format.clone(), args)))
    }

    fn split_printf(&mut self, tag: &Tag, format: &str, args: Vec<Te>, at: usize) -> Result<()> {
        let parts = verbs(format).expect("checked by printf_parts");
        let mut args = args.into_iter();
        let mut pos = 0;
        let mut outputs: Vec<Piece> = Vec::new();
        for (range, verb) in parts {
            if range.start > pos {
                outputs.push(Piece::Text {
                    text: format[pos..range.start].replace("%%", "%"),
                    go: tag.span.clone(),
                });
            }
            let arg = args.next().expect("one argument per verb");
            if let Some(reason) = functions::verb_refusal(&verb, &arg, &self.go_valued_vars) {
                return unconvertible(at, "printf", reason);
            }
            let te = if verb == "%s" || verb == "%v" {
                arg
            } else {
                Te::call(
                    "printf",
                    vec![("format", Te::Str(verb.clone())), ("args", Te::Array(vec![arg]))],
                )
            };
            let (te, quotes_dropped) = self.written_value(te, tag, at)?;
            outputs.push(Piece::Output {
                te,
                trim_left: false,
                trim_right: false,
                go: tag.span.clone(),
                quotes_dropped,
            });
            pos = range.end;
        }
        if pos < format.len() {
            outputs.push(Piece::Text {
                text: format[pos..].replace("%%", "%"),
                go: tag.span.clone(),
            });
        }
        let prelude: Vec<String> = self.prelude.drain(..).collect();
        for body in prelude {
            self.push_tag(TagKind::Statement, body, false, false, tag.span.clone());
        }
        self.pieces.extend(outputs);
        Ok(())
    }

    // ---------------------------------------------------------------- control

    fn conditional(
        &mut self,
        keyword: Keyword,
        branches: &[Branch],
        otherwise: Option<&(Tag, Vec<Node>)>,
        end: &Tag,
    ) -> Result<()> {
        let vars_before = self.vars.len();
        let mut open_ifs = 0;
        for (i, branch) in branches.iter().enumerate() {
            let head = self.branch_head(branch);
            let (cond, dot) = match head {
                Ok(x) => x,
                Err(u) => {
                    self.problem(u);
                    // Still look for problems in the body.
                    let mark = self.pieces.len();
                    self.dots.push(Dot::Root);
                    self.nodes(&branch.body);
                    self.dots.pop();
                    self.pieces.truncate(mark);
                    continue;
                }
            };
            if i == 0 || open_ifs == 0 {
                self.emit(&branch.tag, vec![format!("if {cond}")]);
                open_ifs = 1;
            } else if self.prelude.is_empty() {
                self.emit(&branch.tag, vec![format!("elif {cond}")]);
            } else {
                // What the condition needs first cannot go before an `elif`.
                let mut statements = vec!["else".to_owned()];
                statements.append(&mut self.prelude);
                statements.push(format!("if {cond}"));
                self.emit(&branch.tag, statements);
                open_ifs += 1;
            }
            self.dots.push(dot);
            self.nodes(&branch.body);
            self.dots.pop();
        }
        if let Some((else_tag, body)) = otherwise {
            if open_ifs > 0 {
                self.emit(else_tag, vec!["else".into()]);
            }
            self.nodes(body);
        }
        if open_ifs > 0 {
            self.emit(end, vec!["endif".to_owned(); open_ifs]);
        }
        self.vars.truncate(vars_before);
        let _ = keyword;
        Ok(())
    }

    /// The condition of an `if`/`with` branch and what `.` is in its body.
    fn branch_head(&mut self, branch: &Branch) -> Result<(String, Dot)> {
        let at = branch.pipe.span.start;
        match branch.keyword {
            Keyword::If => {
                let cond = if branch.pipe.vars.is_empty() {
                    let te = self.pipeline(&branch.pipe, Ctx::Condition)?;
                    self.print(&te, Slot::Condition, at)?
                } else {
                    let te = self.pipeline(&branch.pipe, Ctx::Value)?;
                    let statements = self.bind(&branch.pipe, te)?;
                    self.prelude.extend(statements);
                    let (name, _) = &branch.pipe.vars[branch.pipe.vars.len() - 1];
                    self.var_path(name, at)?.map_or_else(|| "true".to_owned(), |p| p.root)
                };
                let dot = self.dots.last().cloned().expect("a dot");
                Ok((cond, dot))
            }
            _ => {
                let te = self.pipeline(&branch.pipe, Ctx::Value)?;
                let path = if !branch.pipe.vars.is_empty() {
                    let statements = self.bind(&branch.pipe, te)?;
                    self.prelude.extend(statements);
                    let (name, _) = &branch.pipe.vars[branch.pipe.vars.len() - 1];
                    self.var_path(name, at)?.expect("a declared variable has a tera name")
                } else if let Te::Path(p) = te {
                    p
                } else {
                    let value = self.print(&te, Slot::Value, at)?;
                    let name = self.fresh("value");
                    self.prelude.push(format!("set {name} = {value}"));
                    Path::var(name)
                };
                let cond = self.print(&Te::Path(path.clone()), Slot::Condition, at)?;
                Ok((cond, Dot::Value(path)))
            }
        }
    }

    fn range(
        &mut self,
        tag: &Tag,
        pipe: &Pipeline,
        body: &[Node],
        otherwise: Option<&(Tag, Vec<Node>)>,
        end: &Tag,
    ) -> Result<()> {
        let vars_before = self.vars.len();
        let head = self.range_head(pipe);
        // The variables of the range belong to the loop: declared at its depth.
        for v in &mut self.vars[vars_before..] {
            v.loop_depth += 1;
        }
        match head {
            Ok((statements, dot)) => {
                self.emit(tag, statements);
                self.loop_body(dot, body);
                match otherwise {
                    Some((else_tag, else_body)) => self.range_else(else_tag, else_body, end),
                    None => self.emit(end, vec!["endfor".into()]),
                }
            }
            Err(u) => {
                // The body is still translated, for its problems, and dropped.
                self.problem(u);
                let mark = self.pieces.len();
                self.loop_body(Dot::Root, body);
                if let Some((_, else_body)) = otherwise {
                    self.nodes(else_body);
                }
                self.pieces.truncate(mark);
            }
        }
        self.vars.truncate(vars_before);
        Ok(())
    }

    /// The statements that open the tera loop for `range pipe`, and what `.` is
    /// in its body.
    fn range_head(&mut self, pipe: &Pipeline) -> Result<(Vec<String>, Dot)> {
        let at = pipe.span.start;
        let container = self.pipeline_cmds(pipe, Ctx::Value)?;
        // `range 5` (Go 1.22): 0 to 4.
        if let (Te::Int(n), 0 | 1) = (&container, pipe.vars.len()) {
            let n = *n;
            if n < 0 {
                return unconvertible(at, format!("range {n}"), "a negative count");
            }
            let name = match pipe.vars.first() {
                Some((go, _)) => self.declare(go),
                None => self.fresh("i"),
            };
            self.go_valued_vars.insert(name.clone());
            return Ok((
                vec![format!("for {name} in range(end={n})")],
                Dot::Value(Path::var(name)),
            ));
        }
        if pipe.vars.len() <= 1 {
            let name = match pipe.vars.first() {
                Some((go, _)) => self.declare(go),
                None => {
                    let base = element_name(&container);
                    self.fresh(&base)
                }
            };
            let c = self.print(&container.filter("values", vec![]), Slot::Container, at)?;
            return Ok((vec![format!("for {name} in {c}")], Dot::Value(Path::var(name))));
        }
        let entry = self.fresh("entry");
        let c = self.print(&container.filter("entries", vec![]), Slot::Container, at)?;
        let key = self.declare(&pipe.vars[0].0);
        self.go_valued_vars.insert(key.clone());
        let value = self.declare(&pipe.vars[1].0);
        Ok((
            vec![
                format!("for {entry} in {c}"),
                format!("set {key} = {entry}.0"),
                format!("set {value} = {entry}.1"),
            ],
            Dot::Value(Path::var(value)),
        ))
    }

    /// A loop body, with `.` as `dot`.
    fn loop_body(&mut self, dot: Dot, body: &[Node]) {
        self.loop_depth += 1;
        self.dots.push(dot);
        self.nodes(body);
        self.dots.pop();
        self.loop_depth -= 1;
    }

    /// A range's `else` branch and its `end`.
    fn range_else(&mut self, else_tag: &Tag, else_body: &[Node], end: &Tag) {
        // tera ignores the dashes of a for loop's `else` and of everything in
        // its body, and the left dash of its `endfor` trims the loop body
        // instead.
        self.no_dashes += 1;
        self.emit(else_tag, vec!["else".into()]);
        self.nodes(else_body);
        self.emit(end, vec!["endfor".into()]);
        self.no_dashes -= 1;
        if end.trim_right
            && self.no_dashes == 0
            && let Some(Piece::Tag { trim_right, .. }) = self.pieces.last_mut()
        {
            *trim_right = true;
        }
    }

    // ---------------------------------------------------------------- expressions

    /// A pipeline's value (its declarations are the caller's).
    pub fn pipeline(&mut self, pipe: &Pipeline, ctx: Ctx) -> Result<Te> {
        self.pipeline_cmds(pipe, ctx)
    }

    fn pipeline_cmds(&mut self, pipe: &Pipeline, ctx: Ctx) -> Result<Te> {
        let mut piped: Option<Te> = None;
        let last = pipe.cmds.len() - 1;
        for (i, cmd) in pipe.cmds.iter().enumerate() {
            let c = if i == last { ctx } else { Ctx::Value };
            piped = Some(self.command(cmd, piped, c)?);
        }
        Ok(piped.expect("a pipeline has a command"))
    }

    fn command(&mut self, cmd: &super::parse::Command, piped: Option<Te>, ctx: Ctx) -> Result<Te> {
        let first = &cmd.args[0];
        if let (Term::Ident(name), true) = (&first.term, first.fields.is_empty()) {
            // `index . "key"`: the root has no tera value, only named params.
            if name == "index"
                && let Some(base) = cmd.args.get(1)
                && base.fields.is_empty()
                && self.dot_is_root(&base.term)
            {
                let mut keys = Vec::new();
                for a in &cmd.args[2..] {
                    keys.push(self.operand(a, Ctx::Value)?);
                }
                if let Some(p) = piped {
                    keys.push(p);
                }
                return functions::index(self, None, keys, first.span.start);
            }
            if matches!(name.as_str(), "and" | "or")
                && cmd.args.len() + usize::from(piped.is_some()) > 2
                && let Some(te) = self.lazy_logic(name, &cmd.args[1..], piped.clone(), ctx)?
            {
                return Ok(te);
            }
            let mut args = Vec::new();
            let logic = matches!(name.as_str(), "and" | "or" | "not") && ctx == Ctx::Condition;
            for a in &cmd.args[1..] {
                args.push(self.operand(a, if logic { Ctx::Condition } else { Ctx::Value })?);
            }
            let literal_args: Vec<Option<&Term>> = cmd.args[1..]
                .iter()
                .map(|a| a.fields.is_empty().then_some(&a.term))
                .chain(piped.as_ref().map(|_| None))
                .collect();
            if let Some(p) = piped {
                args.push(p);
            }
            return functions::call(self, name, args, &literal_args, ctx, first.span.start);
        }
        if piped.is_some() || cmd.args.len() > 1 {
            return unconvertible(
                first.span.start,
                self.text_of(&cmd.span).to_owned(),
                "can't give argument to non-function",
            );
        }
        self.operand(first, ctx)
    }

    /// Go's `and` and `or` stop at the first argument that decides: the later
    /// ones are not evaluated, and may fail when they would be. Where a later
    /// argument is more than a variable or a constant, the result is computed in
    /// `set` statements under `if`s, so it is only evaluated when needed. `None`
    /// when the arguments need no such care.
    fn lazy_logic(&mut self, name: &str, args: &[Operand], piped: Option<Te>, ctx: Ctx) -> Result<Option<Te>> {
        let at = args.first().map_or(0, |a| a.span.start);
        let mut translated: Vec<(Vec<String>, Te)> = Vec::new();
        for a in args {
            let saved = std::mem::take(&mut self.prelude);
            let te = self.operand(a, Ctx::Value);
            let own = std::mem::replace(&mut self.prelude, saved);
            translated.push((own, te?));
        }
        if let Some(p) = piped {
            translated.push((Vec::new(), p));
        }
        let simple = |te: &Te| match te {
            Te::Path(_) | Te::Str(_) | Te::Int(_) | Te::Float(_) | Te::Bool(_) => true,
            // A condition on variables evaluates them lazily in tera too.
            Te::Cmp(_, l, r) => matches!(
                (&**l, &**r),
                (
                    Te::Path(_) | Te::Str(_) | Te::Int(_) | Te::Bool(_),
                    Te::Path(_) | Te::Str(_) | Te::Int(_) | Te::Bool(_)
                )
            ),
            _ => false,
        };
        let needs_care = translated[1..].iter().any(|(prelude, te)| {
            !prelude.is_empty() || !(simple(te) || (ctx == Ctx::Condition && matches!(te, Te::Test(..) | Te::Not(_))))
        });
        if !needs_care {
            // The plain form: the first argument's statements come back.
            let (first_prelude, _) = &translated[0];
            self.prelude.extend(first_prelude.iter().cloned());
            return Ok(None);
        }
        let result = self.fresh_temp();
        let mut statements = Vec::new();
        for (i, (prelude, te)) in translated.into_iter().enumerate() {
            let (hoisted, value) = self.print_isolated(&te, at)?;
            if i > 0 {
                statements.push(if name == "or" {
                    format!("if not {result}")
                } else {
                    format!("if {result}")
                });
            }
            statements.extend(prelude);
            statements.extend(hoisted);
            statements.push(format!("set {result} = {value}"));
            if i > 0 {
                statements.push("endif".into());
            }
        }
        self.prelude.extend(statements);
        Ok(Some(Te::Path(Path::var(result))))
    }

    /// Prints `te` as a value, returning the statements it needs itself.
    fn print_isolated(&mut self, te: &Te, at: usize) -> Result<(Vec<String>, String)> {
        let saved = std::mem::take(&mut self.prelude);
        let printed = self.print(te, Slot::Value, at);
        let own = std::mem::replace(&mut self.prelude, saved);
        Ok((own, printed?))
    }

    fn operand(&mut self, op: &Operand, ctx: Ctx) -> Result<Te> {
        let at = op.span.start;
        let base: Te = match &op.term {
            Term::Dot => match self.dots.last().cloned().expect("a dot") {
                Dot::Root => {
                    if op.fields.is_empty() {
                        return self.root_unconvertible(at, ".");
                    }
                    return self.root_path(&op.fields, at);
                }
                Dot::Value(p) => Te::Path(p),
            },
            Term::Variable(name) => match self.var_path(name, at)? {
                None => {
                    if op.fields.is_empty() {
                        return self.root_unconvertible(at, "$");
                    }
                    return self.root_path(&op.fields, at);
                }
                Some(p) => Te::Path(p),
            },
            Term::Pipe(pipe) => {
                let te = self.pipeline(pipe, ctx)?;
                if op.fields.is_empty() {
                    return Ok(te);
                }
                match te {
                    Te::Path(p) => Te::Path(p),
                    other => {
                        let value = self.print(&other, Slot::Value, at)?;
                        let name = self.fresh_temp();
                        self.prelude.push(format!("set {name} = {value}"));
                        Te::Path(Path::var(name))
                    }
                }
            }
            Term::Ident(name) => {
                if !op.fields.is_empty() {
                    return unconvertible(at, self.text_of(&op.span).to_owned(), "a field of a function's result");
                }
                return functions::call(self, name, Vec::new(), &[], ctx, at);
            }
            Term::String(s) => Te::Str(s.clone()),
            Term::Number(n) => number_te(*n, at)?,
            Term::Bool(b) => Te::Bool(*b),
            Term::Nil => {
                return unconvertible(
                    at,
                    "nil",
                    "tera has no nil constant; test for a missing value with `if`",
                );
            }
        };
        if op.fields.is_empty() {
            return Ok(base);
        }
        let Te::Path(mut path) = base else {
            unreachable!("fields follow only paths")
        };
        path.segs.extend(op.fields.iter().map(|f| Seg::Key(f.clone())));
        Ok(Te::Path(path))
    }

    fn root_unconvertible(&self, at: usize, what: &str) -> Result<Te> {
        unconvertible(
            at,
            what.to_owned(),
            "the whole params object has no name in tera; name the params you need (`.asn`, `.neighbors`)",
        )
    }

    /// `.a.b` at the params root.
    pub fn root_path(&mut self, fields: &[String], at: usize) -> Result<Te> {
        let root = &fields[0];
        self.params_read.insert(root.clone());
        if !is_variable_name(root) {
            return unconvertible(
                at,
                format!(".{root}"),
                format!(
                    "tera cannot name a top-level param called {root:?}; rename the param \
                     (top-level names must be ASCII letters, digits and `_`, not starting with \
                     a digit, `__`, `true` or `false`, and not a tera keyword)"
                ),
            );
        }
        let mut path = Path::var(root.clone());
        path.segs.extend(fields[1..].iter().map(|f| Seg::Key(f.clone())));
        Ok(Te::Path(path))
    }

    /// The tera path of a Go variable; `None` for `$`.
    fn var_path(&self, name: &str, at: usize) -> Result<Option<Path>> {
        match self.vars.iter().rev().find(|v| v.go == name) {
            Some(Var { tera: None, .. }) => Ok(None),
            Some(Var { tera: Some(t), .. }) => Ok(Some(Path::var(t.clone()))),
            None => unconvertible(at, name.to_owned(), "undefined variable"),
        }
    }

    /// The data root's path, for functions that index `.`/`$` directly.
    pub fn dot_is_root(&self, term: &Term) -> bool {
        match term {
            Term::Dot => matches!(self.dots.last(), Some(Dot::Root)),
            Term::Variable(v) => self
                .vars
                .iter()
                .rev()
                .find(|x| &x.go == v)
                .is_some_and(|x| x.tera.is_none()),
            _ => false,
        }
    }

    pub fn hoist(&mut self, te: &Te, at: usize) -> Result<Path> {
        let value = self.print(te, Slot::Value, at)?;
        let name = self.fresh_temp();
        self.prelude.push(format!("set {name} = {value}"));
        Ok(Path::var(name))
    }
}

/// Every tag, in source order.
fn collect<'n>(nodes: &'n [Node], tags: &mut Vec<&'n Tag>) {
    for node in nodes {
        match node {
            Node::Text { .. } => {}
            Node::Comment { tag, .. }
            | Node::Break(tag)
            | Node::Continue(tag)
            | Node::OtherTemplate { tag, .. }
            | Node::Action { tag, .. } => tags.push(tag),
            Node::Conditional {
                branches,
                otherwise,
                end,
                ..
            } => {
                for b in branches {
                    tags.push(&b.tag);
                    collect(&b.body, tags);
                }
                if let Some((t, body)) = otherwise {
                    tags.push(t);
                    collect(body, tags);
                }
                tags.push(end);
            }
            Node::Range {
                tag,
                body,
                otherwise,
                end,
                ..
            } => {
                tags.push(tag);
                collect(body, tags);
                if let Some((t, body)) = otherwise {
                    tags.push(t);
                    collect(body, tags);
                }
                tags.push(end);
            }
        }
    }
}

/// A loop variable's name from what it loops over: `neighbors` → `neighbor`.
fn element_name(container: &Te) -> String {
    let last = match container {
        Te::Path(p) => match p.segs.last() {
            Some(Seg::Key(k)) => k.clone(),
            _ => p.root.clone(),
        },
        _ => return "item".into(),
    };
    let singular = if let Some(stem) = last.strip_suffix("ies") {
        format!("{stem}y")
    } else if ["sses", "shes", "ches", "xes", "zes"].iter().any(|s| last.ends_with(s)) {
        last[..last.len() - 2].to_owned()
    } else if let Some(stem) = last.strip_suffix('s').filter(|s| !s.ends_with('s')) {
        stem.to_owned()
    } else {
        String::new()
    };
    if singular.len() >= 3 && is_variable_name(&singular) {
        singular
    } else if is_variable_name(&last) {
        format!("{last}_item")
    } else {
        "item".into()
    }
}

fn number_te(n: Number, at: usize) -> Result<Te> {
    Ok(match n {
        Number::Int(i) | Number::Char(i) => Te::Int(i),
        Number::Float(f) => Te::Float(f),
        Number::Uint(u) => {
            return unconvertible(at, u.to_string(), "tera integer constants stop at 9223372036854775807");
        }
    })
}

/// How Go prints a constant.
pub(crate) fn number_text(n: Number) -> String {
    match n {
        Number::Int(i) | Number::Char(i) => i.to_string(),
        Number::Uint(u) => u.to_string(),
        Number::Float(f) => go_float_v(f),
    }
}

/// Go's `%v` of a float64 constant.
pub(crate) fn go_float_v(f: f64) -> String {
    crate::go_fmt::format_g(f, None, false)
}

/// The verbs of a printf format with their byte ranges; `None` when it has
/// anything `printf` splitting cannot keep (`%%` is kept as literal text).
pub(crate) fn verbs(format: &str) -> Option<Vec<(Range<usize>, String)>> {
    let mut out = Vec::new();
    let bytes = format.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'%' {
            i += 1;
            continue;
        }
        let start = i;
        i += 1;
        if bytes.get(i) == Some(&b'%') {
            i += 1;
            continue;
        }
        while i < bytes.len() && matches!(bytes[i], b'#' | b'0' | b'+' | b'-' | b' ' | b'.' | b'0'..=b'9') {
            i += 1;
        }
        let c = format[i..].chars().next()?;
        if !c.is_ascii_alphabetic() {
            return None;
        }
        i += 1;
        out.push((start..i, format[start..i].to_owned()));
    }
    Some(out)
}
