//! The seam to vrouter-render: the apply script the guest runs, and the
//! failure markers that fail an apply even when it exits 0 (spec §7.4).

use crate::error::ProviderError;

pub(crate) fn render_script(config: &str, commands: &str, save: bool) -> Result<String, ProviderError> {
    vrouter_render::render_apply_script(config, commands, save).map_err(|e| ProviderError::Render(e.to_string()))
}

pub(crate) fn render_confirmed_script(config: &str, commands: &str, minutes: u32) -> Result<String, ProviderError> {
    vrouter_render::render_apply_script_as(config, commands, vrouter_render::Commit::Confirmed { minutes })
        .map_err(|e| ProviderError::Render(e.to_string()))
}

pub(crate) fn render_commented_script(
    config: &str,
    commands: &str,
    commit: vrouter_render::Commit,
    comment: &vrouter_render::CommitComment,
) -> Result<String, ProviderError> {
    vrouter_render::render_commented_script(config, commands, commit, Some(comment))
        .map_err(|e| ProviderError::Render(e.to_string()))
}

pub(crate) fn failure_marker(stdout: &str, stderr: &str) -> Option<String> {
    vrouter_render::find_failure_marker(stdout, stderr)
        .map(|marker| format!("the apply output contains the failure marker {marker:?}"))
}
