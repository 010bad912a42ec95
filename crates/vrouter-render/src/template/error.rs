//! Errors of checking and rendering templates: each names the template and, where
//! the source has one, the line and column.

use std::fmt;
use std::time::Duration;

use crate::verify::Placement;

pub use vrouter_gotemplate::{Location, TemplateKind};

/// Which template an error is about: its name and which of its fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateId {
    /// The template's name (the VRouterTemplate's `metadata.name`).
    pub name: String,
    /// `config` or `commands`.
    pub kind: TemplateKind,
}

impl fmt::Display for TemplateId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "template `{}` ({})", self.name, self.kind)
    }
}

/// A sandbox bound. Each names its limit so the error says what to change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Limit {
    /// [`crate::Limits::max_template_bytes`]
    #[error("the template size limit of {limit} bytes (the template has {size})")]
    TemplateSize {
        /// The limit.
        limit: usize,
        /// The template's size.
        size: usize,
    },
    /// [`crate::Limits::max_expression_depth`]
    #[error("the limit of {limit} nested brackets or calls in one tag")]
    ExpressionDepth {
        /// The limit.
        limit: usize,
    },
    /// [`crate::Limits::max_expression_operators`]
    #[error("the limit of {limit} operators in one tag")]
    ExpressionOperators {
        /// The limit.
        limit: usize,
    },
    /// [`crate::Limits::max_block_depth`]
    #[error("the limit of {limit} nested if/for blocks")]
    BlockDepth {
        /// The limit.
        limit: usize,
    },
    /// [`crate::Limits::max_output_bytes`]
    #[error("the output limit of {limit} bytes (config and commands together must fit in one etcd object)")]
    Output {
        /// The limit.
        limit: usize,
    },
    /// [`crate::Limits::max_loop_iterations`]
    #[error("the limit of {limit} loop iterations")]
    LoopIterations {
        /// The limit.
        limit: u64,
    },
    /// [`crate::Limits::max_value_bytes`]
    #[error("the limit of {limit} bytes for one value")]
    ValueSize {
        /// The limit.
        limit: usize,
    },
    /// [`crate::Limits::max_range_len`]
    #[error("the limit of {limit} elements for `range` (asked for {requested})")]
    RangeLength {
        /// The limit.
        limit: usize,
        /// How many elements the call asked for.
        requested: u128,
    },
    /// [`crate::Limits::max_review_bytes`]
    #[error(
        "the admission check's limit of {limit} bytes of text along one path (each `for` read up to twice; \
         nest fewer loops or split the template)"
    )]
    ReviewText {
        /// The limit.
        limit: usize,
    },
    /// [`crate::Limits::time_limit`]
    #[error("the time limit of {limit:?}")]
    Time {
        /// The limit.
        limit: Duration,
    },
}

/// Why a template was rejected or failed to render.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TemplateError {
    /// The source does not parse.
    #[error("{template} has a syntax error{}: {message}", at(.location))]
    Syntax {
        /// The template.
        template: TemplateId,
        /// Where tera's parser stopped (always known for grammar errors; looked up
        /// in the source for tera's few other parse errors).
        location: Option<Location>,
        /// What the parser expected.
        message: String,
    },
    /// The source is a Go `text/template` (the Go vrouter-operator's syntax), not
    /// tera.
    #[error(
        "{template} at {location}: `{go}` is Go template syntax (the Go vrouter-operator's), and templates here \
         are tera{}; `vrouter-operator convert FILE` rewrites a manifest's VRouterTemplates in tera \
         (docs/migrating-from-go.md)",
        tera_form(.tera)
    )]
    GoSyntax {
        /// The template.
        template: TemplateId,
        /// Where the first Go construct is.
        location: Location,
        /// That construct, as written.
        go: String,
        /// Its tera form, when the whole template converts.
        tera: Option<String>,
    },
    /// The source parses but uses something the sandbox does not offer.
    #[error("{template}{}: {what} is not allowed: {why}", at(.location))]
    NotAllowed {
        /// The template.
        template: TemplateId,
        /// What was used, e.g. "the function `get_env`".
        what: String,
        /// Where it was found, when it can be pointed at.
        location: Option<Location>,
        /// Why it is not available.
        why: String,
    },
    /// An interpolation lands where its kind's escaping does not hold, as bash
    /// (commands) or the VyOS config parsers (config) read the rendered text:
    /// anywhere but a whole argument of an allowed command or a whole config value.
    #[error("{template} at {location}: this interpolation is {placement} (or mark trusted template text `| safe`)")]
    MisplacedInterpolation {
        /// The template.
        template: TemplateId,
        /// Where the interpolation starts.
        location: Location,
        /// Where it landed.
        placement: Placement,
    },
    /// A variable the template reads is not in the params.
    #[error("{template} uses the variable `{variable}`, which is not defined in the params")]
    UndefinedVariable {
        /// The template.
        template: TemplateId,
        /// The variable as written, e.g. `n.remoteAs`.
        variable: String,
    },
    /// A value cannot be written where the template puts it.
    #[error("{template}: {reason}")]
    Unrepresentable {
        /// The template.
        template: TemplateId,
        /// What the value is and why it cannot be written.
        reason: String,
    },
    /// A sandbox bound tripped.
    #[error("{template} exceeded {limit}{}", at(.location))]
    LimitExceeded {
        /// The template.
        template: TemplateId,
        /// The bound.
        limit: Limit,
        /// Where, for bounds checked before rendering.
        location: Option<Location>,
    },
    /// Any other failure while rendering, with tera's explanation.
    #[error("{template} failed to render: {message}")]
    Render {
        /// The template.
        template: TemplateId,
        /// tera's message chain, joined.
        message: String,
    },
    /// The params given to a render are not a JSON object.
    #[error("params must be a JSON object (a map of names to values), not {found}")]
    ParamsNotObject {
        /// What they were instead.
        found: &'static str,
    },
}

impl TemplateError {
    /// The template the error is about, if it is about one.
    pub fn template(&self) -> Option<&TemplateId> {
        match self {
            TemplateError::Syntax { template, .. }
            | TemplateError::GoSyntax { template, .. }
            | TemplateError::NotAllowed { template, .. }
            | TemplateError::MisplacedInterpolation { template, .. }
            | TemplateError::UndefinedVariable { template, .. }
            | TemplateError::Unrepresentable { template, .. }
            | TemplateError::LimitExceeded { template, .. }
            | TemplateError::Render { template, .. } => Some(template),
            TemplateError::ParamsNotObject { .. } => None,
        }
    }
}

fn tera_form(tera: &Option<String>) -> String {
    match tera {
        Some(t) => format!(", where it is `{t}`"),
        None => String::from(" (convert reports what has no tera form)"),
    }
}

fn at(location: &Option<Location>) -> String {
    location.map(|l| format!(" at {l}")).unwrap_or_default()
}

/// Something admission accepts but reports, such as an interpolation that opts out
/// of escaping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateWarning {
    /// The template.
    pub template: TemplateId,
    /// Where in it.
    pub location: Location,
    /// What to look at.
    pub message: String,
}

impl fmt::Display for TemplateWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at {}: {}", self.template, self.location, self.message)
    }
}
