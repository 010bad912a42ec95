#![doc = include_str!("../README.md")]

mod apply_script;
mod compose;
mod config_boot;
pub mod escape;
mod failure_markers;
pub mod go_template;
mod merge;
mod template;
#[cfg(feature = "test-support")]
pub mod testing;
mod verify;

pub use apply_script::{
    DELIMITER_ATTEMPTS, DELIMITER_PREFIX, Entropy, OsEntropy, ScriptError, check_script_text, heredoc_delimiter,
    render_apply_script, render_apply_script_with,
};
pub use compose::{RenderedConfig, render_binding};
pub use failure_markers::{FAILURE_MARKERS, find_failure_marker};
pub use merge::{MergeError, merge, merge_into, merge_layers};
pub use template::{
    Limit, Limits, Location, MAX_RENDERED_BYTES, PreparedTemplates, TemplateEngine, TemplateError, TemplateId,
    TemplateKind, TemplateSource, TemplateWarning,
};
pub use verify::Placement;
