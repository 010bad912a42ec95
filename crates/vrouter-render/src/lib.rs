#![doc = include_str!("../README.md")]

mod apply_script;
mod commit_comment;
mod compose;
mod config_boot;
pub mod escape;
mod failure_markers;
mod merge;
pub mod secret_params;
pub mod secrets;
pub mod template;
#[cfg(feature = "test-support")]
pub mod testing;
mod verify;
mod vyos_reading;

pub use apply_script::{
    COMMIT_CONFIRM_ANSWER, Commit, SESSION_CHANGED, ScriptError, check_script_text, render_apply_script,
    render_apply_script_as, render_commented_script, render_confirm_script,
};
pub use commit_comment::{CommitComment, CommitOrigin, MAX_COMMENT_CHARS};
pub use compose::{RenderedConfig, render_templates};
pub use config_boot::normalize_config_boot;
pub use failure_markers::find_failure_marker;
pub use merge::{MergeError, merge, merge_into, merge_layers};
pub use template::{
    Limit, Limits, Location, MAX_RENDERED_BYTES, PreparedTemplates, TemplateEngine, TemplateError, TemplateId,
    TemplateKind, TemplateSource, TemplateWarning,
};
pub use verify::Placement;
pub use vyos_reading::vyos_set_commands;

/// The apply script's heredoc delimiter, in detail: how it is drawn and
/// checked. [`render_apply_script`] is what callers use; this is for tests
/// that must provoke a collision with chosen randomness.
pub mod delimiter {
    pub use crate::apply_script::{
        DELIMITER_ATTEMPTS, DELIMITER_PREFIX, Entropy, OsEntropy, heredoc_delimiter, render_apply_script_with,
        render_commented_script_with, render_script_with,
    };
}
