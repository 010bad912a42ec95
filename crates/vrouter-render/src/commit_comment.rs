//! The comment an apply's commit carries (VyOS `commit comment <text>`), so
//! the router's own commit log (`show system commit`) says which object,
//! generation and apply changed it.
//!
//! VyOS keeps the comment in its commit log as one `|`-separated field and
//! writes a `|` in it as `%%`, reading `%%` back as `|` (vyos-1x
//! `python/vyos/config_mgmt.py`, `_new_log_entry` and `_get_log_entry`), so a
//! comment holds neither. It reaches the router as one single-quoted bash word
//! ([`crate::escape::command_word`]); the names it is built from are cut down
//! to characters that need no quoting at all, so no object name can end that
//! word, and none of `'`, `|`, `%`, NUL or a newline ever occurs in it.

use std::fmt;

/// The longest comment: the parts are Kubernetes names (namespace 63,
/// name 253) and an apply id (64); longer parts are cut.
pub const MAX_COMMENT_CHARS: usize = 512;

/// The longest a single part (a name) may be in a comment.
const MAX_PART_CHARS: usize = 253;

/// What a commit comment is built from: the object applied and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitOrigin<'a> {
    /// The VRouterConfig's namespace.
    pub namespace: &'a str,
    /// The VRouterConfig's name.
    pub config: &'a str,
    /// The VRouterBinding that rendered it; `None` for a config written
    /// directly.
    pub binding: Option<&'a str>,
    /// The VRouterConfig's `metadata.generation` being applied.
    pub generation: i64,
    /// The apply id the router records the apply under.
    pub apply: &'a str,
}

/// A commit comment whose text is safe as one bash word and as one VyOS
/// commit-log field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitComment(String);

impl CommitComment {
    /// `vrouter-operator binding=<ns>/<binding> config=<ns>/<config>
    /// generation=<n> apply=<id>`, without the `binding=` part for a config
    /// written directly.
    ///
    /// ```
    /// use vrouter_render::{CommitComment, CommitOrigin};
    /// let comment = CommitComment::describe(&CommitOrigin {
    ///     namespace: "net", config: "bgp.r1", binding: Some("bgp"), generation: 4, apply: "g4-0a1b",
    /// });
    /// assert_eq!(comment.text(), "vrouter-operator binding=net/bgp config=net/bgp.r1 generation=4 apply=g4-0a1b");
    /// assert_eq!(comment.to_string(), "'vrouter-operator binding=net/bgp config=net/bgp.r1 generation=4 apply=g4-0a1b'");
    /// ```
    pub fn describe(origin: &CommitOrigin<'_>) -> Self {
        let ns = safe_part(origin.namespace);
        let mut text = String::from("vrouter-operator");
        if let Some(binding) = origin.binding {
            text.push_str(&format!(" binding={ns}/{}", safe_part(binding)));
        }
        text.push_str(&format!(
            " config={ns}/{} generation={} apply={}",
            safe_part(origin.config),
            origin.generation,
            safe_part(origin.apply)
        ));
        text.truncate(MAX_COMMENT_CHARS);
        CommitComment(text)
    }

    /// The comment as the router's commit log shows it.
    pub fn text(&self) -> &str {
        &self.0
    }
}

/// The comment as one bash word: single-quoted (it holds spaces and `=`,
/// and never a single quote).
impl fmt::Display for CommitComment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match crate::escape::command_word(&self.0) {
            Ok(word) => f.write_str(&word),
            // Unreachable: `safe_part` leaves no quote or NUL. Writing
            // nothing would run `commit comment` without its text, which
            // VyOS refuses, so the word is quoted empty instead.
            Err(_) => f.write_str("''"),
        }
    }
}

/// Characters a part keeps: those of Kubernetes names and apply ids. Any
/// other (a label value a person wrote on a config, say) becomes `_`.
fn safe_part(part: &str) -> String {
    let kept: String = part
        .chars()
        .take(MAX_PART_CHARS)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if kept.is_empty() { "_".into() } else { kept }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin<'a>(namespace: &'a str, config: &'a str, binding: Option<&'a str>, apply: &'a str) -> CommitOrigin<'a> {
        CommitOrigin {
            namespace,
            config,
            binding,
            generation: 7,
            apply,
        }
    }

    #[test]
    fn a_direct_config_names_itself_without_a_binding() {
        let comment = CommitComment::describe(&origin("ns", "edge", None, "g7-ff"));
        assert_eq!(
            comment.text(),
            "vrouter-operator config=ns/edge generation=7 apply=g7-ff"
        );
    }

    #[test]
    fn hostile_parts_cannot_leave_the_word_or_the_log_field() {
        let table = [
            "x'; reboot; '",
            "a|b",
            "50%%",
            "line\nbreak",
            "nul\0byte",
            "$(reboot)",
            "`id`",
            "",
            "ünïcode",
        ];
        for hostile in table {
            let comment = CommitComment::describe(&origin(hostile, hostile, Some(hostile), hostile));
            let text = comment.text();
            for bad in ['\'', '|', '%', '\n', '\0', '$', '`'] {
                assert!(!text.contains(bad), "{hostile:?} left {bad:?} in {text:?}");
            }
            let word = comment.to_string();
            assert_eq!(word, format!("'{text}'"), "{hostile:?}");
        }
    }

    #[test]
    fn a_very_long_name_is_cut_to_the_limit() {
        let long = "a".repeat(10_000);
        let comment = CommitComment::describe(&origin(&long, &long, Some(&long), &long));
        assert!(comment.text().len() <= MAX_COMMENT_CHARS);
        assert!(comment.text().starts_with("vrouter-operator binding="));
    }
}
