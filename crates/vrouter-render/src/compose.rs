//! Rendering several templates in order and joining their outputs.

use serde_json::Value;

use crate::template::{TemplateEngine, TemplateError, TemplateSource};

/// What a list of templates renders for one params map: the joined
/// `config` (config.boot fragments) and `commands` (configure-mode lines).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RenderedConfig {
    /// The config.boot fragments of all templates, in template order.
    pub config: String,
    /// The commands of all templates, in template order.
    pub commands: String,
}

/// Renders `templates` in order against one params map with the default engine.
///
/// Config and commands are joined separately. Newlines are defined so that no two
/// templates' outputs run together and nothing else changes: each template output
/// that is not empty is kept as it is, with a `\n` added when it does not already
/// end in one; empty sources and outputs that render empty are left out. So the
/// result is empty or ends in exactly the newlines its last template wrote (at
/// least one).
///
/// ```
/// use serde_json::json;
/// use vrouter_render::{TemplateSource, render_templates};
/// let rendered = render_templates(
///     &[
///         TemplateSource { name: "base", config: "", commands: "set system host-name {{ hostName }}" },
///         TemplateSource { name: "ntp", config: "", commands: "set service ntp server {{ ntp }}\n" },
///     ],
///     &json!({"hostName": "router-a", "ntp": "192.0.2.123"}),
/// )?;
/// assert_eq!(rendered.commands, "set system host-name router-a\nset service ntp server 192.0.2.123\n");
/// assert_eq!(rendered.config, "");
/// # Ok::<(), vrouter_render::TemplateError>(())
/// ```
pub fn render_templates(templates: &[TemplateSource<'_>], params: &Value) -> Result<RenderedConfig, TemplateError> {
    TemplateEngine::new().prepare(templates)?.render(params)
}

/// Joins rendered outputs by the rule documented on [`render_templates`].
pub(crate) fn join_parts(parts: Vec<String>) -> String {
    let mut joined = String::with_capacity(parts.iter().map(|p| p.len() + 1).sum());
    for part in parts.into_iter().filter(|p| !p.is_empty()) {
        joined.push_str(&part);
        if !part.ends_with('\n') {
            joined.push('\n');
        }
    }
    joined
}

#[cfg(test)]
mod tests {
    use super::join_parts;

    #[test]
    fn newline_handling_is_defined() {
        let cases: &[(&[&str], &str)] = &[
            (&[], ""),
            (&["", ""], ""),
            (&["a"], "a\n"),
            (&["a\n"], "a\n"),
            (&["a", "b"], "a\nb\n"),
            (&["a\n", "b\n"], "a\nb\n"),
            (&["a\n\n", "b"], "a\n\nb\n"),
            (&["a", "", "b"], "a\nb\n"),
            (&["\n", "b"], "\nb\n"),
            (&["a\r\n", "b"], "a\r\nb\n"),
        ];
        for (parts, joined) in cases {
            let parts = parts.iter().map(|p| p.to_string()).collect();
            assert_eq!(join_parts(parts), *joined);
        }
    }
}
