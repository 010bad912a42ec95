//! The one engine configuration behind both rendering and the admission check.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::rc::Rc;

use serde_json::Value;
use tera::{Context, Tera};

use super::budget::{ActiveBudget, BoundedWriter, Budget, Written, kind_slot};
use super::scan::{self, SegmentKind, ShapeLimits};
use super::{
    Limit, Limits, Location, TemplateError, TemplateId, TemplateKind, TemplateWarning, functions, interpolations,
    paths, sandbox,
};
use crate::compose::{RenderedConfig, join_parts};
use crate::merge::json_kind;
use crate::verify;

/// One template as a VRouterTemplate spells it: a name and its two sources, either
/// of which may be empty (an empty source contributes nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TemplateSource<'a> {
    /// The template's name, used in every error about it.
    pub name: &'a str,
    /// `spec.config`: a config.boot fragment template.
    pub config: &'a str,
    /// `spec.commands`: a configure-mode commands template.
    pub commands: &'a str,
}

/// The sandboxed tera configuration: the functions, filters and tests templates can
/// use, the bounds they run under, and how values are written per
/// [`TemplateKind`]. [`TemplateEngine::check`] (the admission webhook) and
/// [`TemplateEngine::prepare`] (the controller) share it, so a template accepted
/// at admission renders under exactly the rules it was checked against.
#[derive(Clone)]
pub struct TemplateEngine {
    limits: Limits,
    base: Tera,
}

impl Default for TemplateEngine {
    fn default() -> Self {
        TemplateEngine::new()
    }
}

impl std::fmt::Debug for TemplateEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TemplateEngine")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl TemplateEngine {
    /// The engine with the default [`Limits`].
    pub fn new() -> TemplateEngine {
        TemplateEngine::with_limits(Limits::default())
    }

    /// The engine with other bounds.
    pub fn with_limits(limits: Limits) -> TemplateEngine {
        let mut base = Tera::default();
        // Escaping is the engine's own per-kind writer, never tera's HTML escaping.
        base.autoescape_on(vec![]);
        functions::install(&mut base);
        TemplateEngine { limits, base }
    }

    /// The bounds templates are checked and rendered under.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Checks one template source as admission does: size and shape bounds, syntax
    /// (with line and column), the sandbox's allowlists, and, along the template's
    /// control-flow paths, that every interpolation lands where its escaping holds
    /// (a whole argument of an allowed command, a whole config value) as bash or
    /// the VyOS parsers read the text. Rendering checks the actual text again.
    ///
    /// ```
    /// use vrouter_render::{TemplateEngine, TemplateError, TemplateKind};
    /// let engine = TemplateEngine::new();
    /// engine.check("bgp", TemplateKind::Commands, "set protocols bgp {{ asn }}")?;
    /// let err = engine.check("bgp", TemplateKind::Commands, "set x\n{{ get_env(name=\"HOME\") }}").unwrap_err();
    /// assert!(matches!(err, TemplateError::NotAllowed { .. }));
    /// assert_eq!(
    ///     err.to_string(),
    ///     "template `bgp` (commands) at line 2, column 4: the function `get_env` is not allowed: \
    ///      templates have no access to the environment, clock or randomness"
    /// );
    /// let err = engine.check("base", TemplateKind::Commands, "set system host-name '{{ name }}'").unwrap_err();
    /// assert!(matches!(err, TemplateError::MisplacedInterpolation { .. }));
    /// # Ok::<(), TemplateError>(())
    /// ```
    pub fn check(&self, name: &str, kind: TemplateKind, source: &str) -> Result<(), TemplateError> {
        self.review(name, kind, source).map(drop)
    }

    /// [`TemplateEngine::check`], returning what admission should warn about when
    /// it accepts: every interpolation marked `| safe`, which is written unescaped.
    ///
    /// ```
    /// use vrouter_render::{TemplateEngine, TemplateKind};
    /// let warnings = TemplateEngine::new().review("t", TemplateKind::Commands, "set a {{ x }}\n{{ raw | safe }}")?;
    /// assert_eq!(warnings.len(), 1);
    /// assert_eq!(warnings[0].location.line, 2);
    /// # Ok::<(), vrouter_render::TemplateError>(())
    /// ```
    pub fn review(&self, name: &str, kind: TemplateKind, source: &str) -> Result<Vec<TemplateWarning>, TemplateError> {
        let id = TemplateId {
            name: name.to_owned(),
            kind,
        };
        let compiled = self
            .compile(&id, "check", source)
            .map_err(|e| explain_go(&id, source, e))?;
        self.paths_check(&id, source, &compiled, &mut paths::Work::default())?;
        Ok(compiled
            .interpolations
            .into_iter()
            .filter(|i| i.safe)
            .map(|i| TemplateWarning {
                template: id.clone(),
                location: i.location,
                message: "this interpolation is marked `| safe` and is written without escaping; \
                          use it only for trusted template text, never for params"
                    .to_owned(),
            })
            .collect())
    }

    /// Checks and compiles the templates of a binding, in order, for rendering
    /// against many params maps (one per target) without parsing again.
    pub fn prepare(&self, templates: &[TemplateSource<'_>]) -> Result<PreparedTemplates, TemplateError> {
        let mut tera = self.base.clone();
        let mut parts = Vec::new();
        for (index, template) in templates.iter().enumerate() {
            for (kind, source) in [
                (TemplateKind::Config, template.config),
                (TemplateKind::Commands, template.commands),
            ] {
                if source.is_empty() {
                    continue;
                }
                let id = TemplateId {
                    name: template.name.to_owned(),
                    kind,
                };
                let key = format!("{index}/{kind}");
                let compiled = self
                    .compile(&id, &key, source)
                    .map_err(|e| explain_go(&id, source, e))?;
                // tera has no public way to add a parsed template; its registry is
                // a public (doc-hidden) field, and nothing here uses inheritance.
                tera.templates.insert(key.clone(), compiled.template);
                let locations = compiled.interpolations.iter().map(|i| i.location).collect();
                parts.push(Part { key, id, locations });
            }
        }
        Ok(PreparedTemplates {
            tera,
            parts,
            limits: self.limits,
        })
    }

    /// [`TemplateEngine::check`] without recognising Go syntax: the converter's
    /// own check of what it wrote.
    pub(crate) fn check_converted(&self, kind: TemplateKind, source: &str) -> Result<(), TemplateError> {
        let id = TemplateId {
            name: "converted".to_owned(),
            kind,
        };
        let compiled = self.compile(&id, "check", source)?;
        self.paths_check(&id, source, &compiled, &mut paths::Work::default())
    }

    /// How much work [`TemplateEngine::review`]'s path check does on `source`
    /// (for tests that prove it linear), with its outcome.
    #[cfg(feature = "test-support")]
    pub(crate) fn review_work(
        &self,
        kind: TemplateKind,
        source: &str,
    ) -> Result<(paths::Work, Result<(), TemplateError>), TemplateError> {
        let id = TemplateId {
            name: "measured".to_owned(),
            kind,
        };
        let compiled = self.compile(&id, "check", source)?;
        let mut work = paths::Work::default();
        let outcome = self.paths_check(&id, source, &compiled, &mut work);
        Ok((work, outcome))
    }

    /// The placement check along the compiled template's paths.
    fn paths_check(
        &self,
        id: &TemplateId,
        source: &str,
        compiled: &Compiled,
        work: &mut paths::Work,
    ) -> Result<(), TemplateError> {
        let review = paths::Review {
            kind: id.kind,
            writer: writer(id.kind),
            max_walk_bytes: self.limits.max_review_bytes,
        };
        paths::check(&compiled.template.ast, review, work).map_err(|refused| match refused {
            paths::Refused::Misplaced(interpolation, placement) => TemplateError::MisplacedInterpolation {
                location: compiled.location(interpolation),
                template: id.clone(),
                placement,
            },
            paths::Refused::TooLarge { for_ordinal } => TemplateError::LimitExceeded {
                template: id.clone(),
                limit: Limit::ReviewText {
                    limit: self.limits.max_review_bytes,
                },
                location: for_ordinal.and_then(|n| for_tag_location(source, n)),
            },
        })
    }

    fn compile(&self, id: &TemplateId, key: &str, source: &str) -> Result<Compiled, TemplateError> {
        let limits = &self.limits;
        if source.len() > limits.max_template_bytes {
            return Err(TemplateError::LimitExceeded {
                template: id.clone(),
                limit: Limit::TemplateSize {
                    limit: limits.max_template_bytes,
                    size: source.len(),
                },
                location: None,
            });
        }
        let segments = scan::segments(source);
        let shape = ShapeLimits {
            expression_depth: limits.max_expression_depth,
            expression_operators: limits.max_expression_operators,
            block_depth: limits.max_block_depth,
        };
        scan::check_shape(source, &segments, shape).map_err(|(limit, location)| TemplateError::LimitExceeded {
            template: id.clone(),
            limit,
            location: Some(location),
        })?;
        let mut template = tera::Template::new(key, None, source).map_err(|e| syntax_error(id, source, &e))?;
        sandbox::validate(&template.ast).map_err(|v| TemplateError::NotAllowed {
            template: id.clone(),
            what: v.what,
            location: locate_in_tags(source, &segments, &v.needle),
            why: v.why,
        })?;
        let mut numbered = 0;
        sandbox::instrument(&mut template.ast, Some(writer(id.kind)), &mut numbered);
        let interpolations = interpolations::interpolations(source, &segments);
        // Both count `{{ }}` tags in source order; if they ever disagreed, errors
        // would point at the wrong tag, so they point at none.
        let interpolations = if interpolations.len() == numbered {
            interpolations
        } else {
            Vec::new()
        };
        Ok(Compiled {
            template,
            interpolations,
        })
    }
}

fn writer(kind: TemplateKind) -> &'static str {
    match kind {
        TemplateKind::Commands => functions::COMMAND_WORD,
        TemplateKind::Config => functions::CONFIG_VALUE,
    }
}

struct Compiled {
    template: tera::Template,
    interpolations: Vec<interpolations::Interpolation>,
}

impl Compiled {
    fn location(&self, interpolation: usize) -> Location {
        self.interpolations
            .get(interpolation)
            .map_or(Location { line: 1, column: 1 }, |i| i.location)
    }
}

struct Part {
    key: String,
    id: TemplateId,
    /// Where each interpolation of the source is, by its number.
    locations: Vec<Location>,
}

/// A binding's templates, checked and compiled, ready to render for each target.
pub struct PreparedTemplates {
    tera: Tera,
    parts: Vec<Part>,
    limits: Limits,
}

impl std::fmt::Debug for PreparedTemplates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<_> = self.parts.iter().map(|p| p.id.to_string()).collect();
        f.debug_struct("PreparedTemplates")
            .field("templates", &ids)
            .finish_non_exhaustive()
    }
}

impl PreparedTemplates {
    /// Renders every template against `params`; see [`crate::render_templates`] for
    /// how the outputs are joined.
    pub fn render(&self, params: &Value) -> Result<RenderedConfig, TemplateError> {
        if !params.is_object() {
            return Err(TemplateError::ParamsNotObject {
                found: json_kind(params),
            });
        }
        let context = Context::from_value(params.clone()).expect("tera accepts any JSON object as a context");
        let budget = Budget::new(self.limits);
        let _active = ActiveBudget::install(budget.clone());
        let mut config = Vec::new();
        let mut commands = Vec::new();
        for (index, part) in self.parts.iter().enumerate() {
            budget.part.set(index);
            let text = self.render_part(part, &context, &budget)?;
            match part.id.kind {
                TemplateKind::Config => config.push(text),
                TemplateKind::Commands => commands.push(text),
            }
        }
        let rendered = RenderedConfig {
            config: self.verified(TemplateKind::Config, &join_parts(config), &budget)?,
            commands: self.verified(TemplateKind::Commands, &join_parts(commands), &budget)?,
        };
        if rendered.config.len() + rendered.commands.len() > self.limits.max_output_bytes {
            // Only the newlines the join adds can get here; the writer bounds the rest.
            let last = self
                .parts
                .last()
                .map(|p| p.id.clone())
                .expect("output needs a template");
            return Err(TemplateError::LimitExceeded {
                template: last,
                limit: Limit::Output {
                    limit: self.limits.max_output_bytes,
                },
                location: None,
            });
        }
        Ok(rendered)
    }

    /// The rendered text of one kind with its values in place, once the check
    /// (`crate::verify`) accepts where every sentinel landed in the joined text —
    /// the text the router will read, control flow resolved.
    fn verified(&self, kind: TemplateKind, text: &str, budget: &Budget) -> Result<String, TemplateError> {
        let written = budget.written[kind_slot(kind)].borrow();
        let checked = match kind {
            TemplateKind::Config => verify::check_config(text, &budget.prefix, written.len()),
            TemplateKind::Commands => verify::check_commands(text, &budget.prefix, written.len()),
        };
        match checked {
            Ok(spans) => Ok(verify::substitute(text, &spans, |i| written[i].text.as_str())),
            Err(refusal) => Err(self.refusal(&written[refusal.index], refusal.placement)),
        }
    }

    fn refusal(&self, written: &Written, placement: verify::Placement) -> TemplateError {
        let part = &self.parts[written.part];
        TemplateError::MisplacedInterpolation {
            template: part.id.clone(),
            location: part
                .locations
                .get(written.interpolation)
                .copied()
                .unwrap_or(Location { line: 1, column: 1 }),
            placement,
        }
    }

    fn render_part(&self, part: &Part, context: &Context, budget: &Rc<Budget>) -> Result<String, TemplateError> {
        let mut writer = BoundedWriter::new(budget.clone());
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            self.tera.render_to(&part.key, context, &mut writer)
        }));
        match outcome {
            Ok(Ok(())) => Ok(String::from_utf8(writer.buf).expect("tera writes only str data")),
            Ok(Err(error)) => Err(render_error(part, &error, budget)),
            Err(panic) => {
                let detail = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                Err(TemplateError::Render {
                    template: part.id.clone(),
                    message: format!("the template engine failed on this template: {detail}"),
                })
            }
        }
    }
}

/// A tera syntax error in a Go template becomes [`TemplateError::GoSyntax`], which
/// names the Go construct, its tera form and the converter.
fn explain_go(id: &TemplateId, source: &str, error: TemplateError) -> TemplateError {
    if !matches!(error, TemplateError::Syntax { .. }) {
        return error;
    }
    match vrouter_gotemplate::detect(source, id.kind, &TemplateEngine::new()) {
        Some(go) => TemplateError::GoSyntax {
            template: id.clone(),
            location: go.location,
            go: go.go,
            tera: go.tera,
        },
        None => error,
    }
}

/// The messages of a tera error and its sources, outermost first.
fn message_chain(error: &tera::Error) -> Vec<String> {
    let mut messages = vec![error.to_string()];
    let mut source = std::error::Error::source(error);
    while let Some(inner) = source {
        messages.push(inner.to_string());
        source = inner.source();
    }
    messages
}

fn render_error(part: &Part, error: &tera::Error, budget: &Budget) -> TemplateError {
    let template = part.id.clone();
    if let Some(limit) = budget.tripped() {
        return TemplateError::LimitExceeded {
            template,
            limit,
            location: None,
        };
    }
    if let Some(reason) = budget.refused() {
        return TemplateError::Unrepresentable { template, reason };
    }
    let messages = message_chain(error);
    for message in &messages {
        if let Some(rest) = message.strip_prefix("Variable `")
            && let Some(end) = rest.find("` not found in context")
        {
            return TemplateError::UndefinedVariable {
                template,
                variable: rest[..end].to_owned(),
            };
        }
    }
    let internal = format!("'{}'", part.key);
    let public = format!("`{}`", part.id.name);
    let message = messages
        .iter()
        .filter(|m| !m.starts_with("Failed to render '"))
        .map(|m| m.replace(&internal, &public))
        .collect::<Vec<_>>()
        .join(": ");
    TemplateError::Render { template, message }
}

/// Turns tera's parse error into a located syntax error. pest errors carry
/// ` --> line:column`; tera's own (e.g. an integer literal out of range) quote the
/// offending text in backticks, which is looked up in the source instead.
fn syntax_error(id: &TemplateId, source: &str, error: &tera::Error) -> TemplateError {
    let text = message_chain(error).join("\n");
    let pest_location = text.split_once(" --> ").and_then(|(_, rest)| {
        let coords: String = rest.chars().take_while(|c| c.is_ascii_digit() || *c == ':').collect();
        let (line, column) = coords.split_once(':')?;
        Some(Location {
            line: line.parse().ok()?,
            column: column.parse().ok()?,
        })
    });
    let expected = text
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("= "))
        .map(str::to_owned);
    let quoted = text.split('`').nth(1).filter(|q| !q.is_empty());
    let location = pest_location.or_else(|| quoted.and_then(|q| source.find(q)).map(|at| scan::location(source, at)));
    TemplateError::Syntax {
        template: id.clone(),
        location,
        message: expected.unwrap_or(text),
    }
}

/// Where `needle` first appears as a word inside a tag, for pointing at a construct
/// the AST does not locate.
fn locate_in_tags(source: &str, segments: &[scan::Segment], needle: &str) -> Option<Location> {
    segments
        .iter()
        .filter(|s| matches!(s.kind, SegmentKind::Expression | SegmentKind::Statement))
        .find_map(|s| {
            let inner = &source[s.inner.clone()];
            find_word(inner, needle).map(|at| scan::location(source, s.inner.start + at))
        })
}

/// Where the `n`th (from 0) `{% for %}` tag of `source` starts.
fn for_tag_location(source: &str, n: usize) -> Option<Location> {
    scan::segments(source)
        .iter()
        .filter(|s| s.kind == SegmentKind::Statement && scan::first_word(&source[s.inner.clone()]) == "for")
        .nth(n)
        .map(|s| scan::location(source, s.span.start))
}

fn find_word(haystack: &str, word: &str) -> Option<usize> {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    haystack.match_indices(word).map(|(at, _)| at).find(|&at| {
        let before = haystack[..at].chars().next_back();
        let after = haystack[at + word.len()..].chars().next();
        !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_panic_inside_the_engine_becomes_a_render_error() {
        // No reachable tera path is known to panic; a filter that does stands in for
        // one, to prove the guard around rendering.
        let engine = TemplateEngine::new();
        let mut prepared = engine
            .prepare(&[TemplateSource {
                name: "t",
                config: "",
                commands: "{{ 'x' | upper }}",
            }])
            .unwrap();
        prepared.tera.register_filter(
            "upper",
            |_: &Value, _: &std::collections::HashMap<String, Value>| -> tera::Result<Value> { panic!("boom") },
        );
        let err = prepared.render(&json!({})).unwrap_err();
        assert_eq!(
            err,
            TemplateError::Render {
                template: TemplateId {
                    name: "t".into(),
                    kind: TemplateKind::Commands
                },
                message: "the template engine failed on this template: boom".into(),
            }
        );
    }

    #[test]
    fn engines_and_prepared_templates_can_be_shared_across_threads() {
        fn shareable<T: Send + Sync>() {}
        shareable::<TemplateEngine>();
        shareable::<PreparedTemplates>();
    }

    #[test]
    fn the_engine_registers_no_environment_function() {
        let engine = TemplateEngine::new();
        let get_env = engine.base.get_function("get_env").unwrap();
        let err = get_env.call(&std::collections::HashMap::new()).unwrap_err();
        assert!(err.to_string().contains("no access to the environment"), "{err}");
    }
}
