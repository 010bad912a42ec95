//! Sandboxed tera templates (spec §5).

mod budget;
mod engine;
mod error;
mod functions;
pub(crate) mod go_fmt;
mod interpolations;
mod limits;
mod paths;
mod sandbox;
mod scan;
pub(crate) mod sprig;

pub use engine::{PreparedTemplates, TemplateEngine, TemplateSource};
pub use error::{Limit, Location, TemplateError, TemplateId, TemplateKind, TemplateWarning};
pub use limits::{Limits, MAX_RENDERED_BYTES};
