//! Sandboxed tera templates (spec §5).

mod budget;
mod engine;
mod error;
mod functions;
mod go_compat;
mod interpolations;
mod limits;
mod paths;
mod sandbox;
mod scan;

pub use engine::{PreparedTemplates, TemplateEngine, TemplateSource};
pub use error::{Limit, Location, TemplateError, TemplateId, TemplateKind, TemplateWarning};
pub use limits::{Limits, MAX_RENDERED_BYTES};
