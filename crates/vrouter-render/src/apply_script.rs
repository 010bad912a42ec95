//! The vbash script that applies a VRouterConfig inside the router (spec §7.4).
//!
//! `config` reaches `load` through a quoted heredoc, so nothing in it is expanded;
//! the only way out of a heredoc is a line equal to its delimiter, so the delimiter
//! is random (from the OS CSPRNG), checked against the config, and never a fixed
//! fallback.

use crate::commit_comment::CommitComment;

/// Every heredoc delimiter starts with this; the rest is random hex.
pub const DELIMITER_PREFIX: &str = "VROUTER_CONFIG_EOF_";

/// Random bytes in the first delimiter candidate (32 hex digits).
const FIRST_RANDOM_BYTES: usize = 16;

/// How many candidates are tried, each with twice the random bytes of the last.
pub const DELIMITER_ATTEMPTS: u32 = 8;

/// Why an apply script could not be rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScriptError {
    /// bash cannot carry a NUL byte in a script, so the text would not arrive as
    /// written.
    #[error("{field} contains a NUL byte at byte {offset}; a vbash script cannot carry it")]
    NulByte {
        /// `config` or `commands`.
        field: &'static str,
        /// Byte offset of the first NUL.
        offset: usize,
    },
    /// Every random delimiter tried also occurred in the config.
    #[error(
        "no heredoc delimiter absent from the config was found in {attempts} attempts; \
         refusing to fall back to a fixed one"
    )]
    DelimiterExhausted {
        /// How many candidates were tried.
        attempts: u32,
    },
    /// The random source failed.
    #[error("the OS random number generator failed: {0}")]
    Entropy(String),
}

/// Where delimiter randomness comes from. [`OsEntropy`] in production; tests supply
/// fixed bytes to provoke collisions.
pub trait Entropy {
    /// Fills `buf` with random bytes.
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), ScriptError>;
}

/// The operating system's CSPRNG, through `getrandom`.
#[derive(Debug, Clone, Copy, Default)]
pub struct OsEntropy;

impl Entropy for OsEntropy {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), ScriptError> {
        getrandom::fill(buf).map_err(|e| ScriptError::Entropy(e.to_string()))
    }
}

impl<F: FnMut(&mut [u8]) -> Result<(), ScriptError>> Entropy for F {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), ScriptError> {
        self(buf)
    }
}

/// How an apply script ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Commit {
    /// `commit`, then `save` when `save` is true.
    Plain {
        /// Whether `save` follows the commit.
        save: bool,
    },
    /// `commit-confirm <minutes>` and no `save`: the router rolls the commit
    /// back unless [`render_confirm_script`] runs within `minutes`. Saving
    /// now would make the change survive the rollback where the rollback
    /// reboots into the saved config (VyOS 1.4), so `save` waits for the
    /// confirmation.
    Confirmed {
        /// The minutes `commit-confirm` waits before it rolls back.
        minutes: u32,
    },
}

/// The answer the script feeds to `commit-confirm`'s question.
///
/// VyOS 1.4/1.5 `commit-confirm` asks "Proceed ?" through `ask_yes_no`
/// (vyos-1x `python/vyos/utils/io.py`, lines 57-76) unless given `-y`, which
/// vyatta-cfg's `vyatta_config_commit-confirm` never passes
/// (`functions/interpreter/vyatta-cfg-run`, lines 134-162); on end of input
/// `ask_yes_no` asks again forever, so a script whose stdin is empty would
/// never commit. VyOS 1.3 asks through `prompt("Proceed? [confirm]")`
/// (vyatta-config-mgmt `scripts/vyatta-config-mgmt.pl`, line 398). Both
/// take `y`.
pub const COMMIT_CONFIRM_ANSWER: &str = "y";

/// Whether the configure session holds changes, as vyatta-cfg's own
/// `commit-confirm` asks (`cli-shell-api sessionChanged`; script-template
/// names the program `/bin/cli-shell-api`).
pub const SESSION_CHANGED: &str = "/bin/cli-shell-api sessionChanged";

/// Renders the apply script for `config`, `commands` and `save`.
///
/// `load` reads `config` through the heredoc exactly, except that a heredoc always
/// ends its last line: a config without a final newline arrives with one. An empty
/// config loads `/opt/vyatta/etc/config.boot.default` instead; empty commands add
/// nothing; `commit` always runs and `save` only when `save` is true.
///
/// ```
/// let script = vrouter_render::render_apply_script("system {\n}\n", "set system host-name r1\n", true)?;
/// assert!(script.starts_with("#!/bin/vbash\n"));
/// assert!(script.contains("load /dev/stdin <<'VROUTER_CONFIG_EOF_"));
/// assert!(script.ends_with("set system host-name r1\n\ncommit\nsave\n"));
/// # Ok::<(), vrouter_render::ScriptError>(())
/// ```
pub fn render_apply_script(config: &str, commands: &str, save: bool) -> Result<String, ScriptError> {
    render_apply_script_with(config, commands, save, &mut OsEntropy)
}

/// The apply script, ending as `commit` says.
///
/// ```
/// use vrouter_render::{Commit, render_apply_script_as};
/// let script = render_apply_script_as("", "set system host-name r1\n", Commit::Confirmed { minutes: 5 })?;
/// assert!(script.ends_with(
///     "set system host-name r1\n\nif /bin/cli-shell-api sessionChanged; then\n    \
///      commit-confirm 5 <<<'y'\nelse\n    commit\nfi\n"
/// ));
/// # Ok::<(), vrouter_render::ScriptError>(())
/// ```
pub fn render_apply_script_as(config: &str, commands: &str, commit: Commit) -> Result<String, ScriptError> {
    render_script_with(config, commands, commit, &mut OsEntropy)
}

/// The script that ends a confirmed apply whose checks passed: `confirm`
/// (which stops the router's rollback timer), then `save` when `save`.
///
/// ```
/// let script = vrouter_render::render_confirm_script(true);
/// assert!(script.ends_with("configure\nconfirm\nsave\n"));
/// ```
pub fn render_confirm_script(save: bool) -> String {
    let mut script = String::from(PREAMBLE);
    script.push_str("confirm\n");
    if save {
        script.push_str("save\n");
    }
    script
}

/// Every script's start: into the `vyattacfg` group, the configure-mode
/// functions, a configure session.
const PREAMBLE: &str = concat!(
    "#!/bin/vbash\n",
    "if [ \"$(id -g -n)\" != 'vyattacfg' ] ; then\n",
    "    exec sg vyattacfg -c \"/bin/vbash $(readlink -f $0) $@\"\n",
    "fi\n",
    "source /opt/vyatta/etc/functions/script-template\n",
    "configure\n",
);

/// [`render_apply_script`] with the delimiter's randomness supplied by the caller.
pub fn render_apply_script_with(
    config: &str,
    commands: &str,
    save: bool,
    entropy: &mut (impl Entropy + ?Sized),
) -> Result<String, ScriptError> {
    render_script_with(config, commands, Commit::Plain { save }, entropy)
}

/// [`render_apply_script_as`] with the delimiter's randomness supplied by the caller.
pub fn render_script_with(
    config: &str,
    commands: &str,
    commit: Commit,
    entropy: &mut (impl Entropy + ?Sized),
) -> Result<String, ScriptError> {
    render_commented_script_with(config, commands, commit, None, entropy)
}

/// The apply script, ending as `commit` says, its commit carrying `comment`
/// (`commit comment '…'`, `commit-confirm N comment '…'`) so the router's
/// commit log names who changed it.
///
/// ```
/// use vrouter_render::{Commit, CommitComment, CommitOrigin, render_commented_script};
/// let comment = CommitComment::describe(&CommitOrigin {
///     namespace: "net", config: "edge", binding: None, generation: 2, apply: "g2-00",
/// });
/// let script = render_commented_script("", "set system host-name r1\n", Commit::Plain { save: true }, Some(&comment))?;
/// assert!(script.ends_with("\ncommit comment 'vrouter-operator config=net/edge generation=2 apply=g2-00'\nsave\n"));
/// # Ok::<(), vrouter_render::ScriptError>(())
/// ```
pub fn render_commented_script(
    config: &str,
    commands: &str,
    commit: Commit,
    comment: Option<&CommitComment>,
) -> Result<String, ScriptError> {
    render_commented_script_with(config, commands, commit, comment, &mut OsEntropy)
}

/// [`render_commented_script`] with the delimiter's randomness supplied by the caller.
pub fn render_commented_script_with(
    config: &str,
    commands: &str,
    commit: Commit,
    comment: Option<&CommitComment>,
    entropy: &mut (impl Entropy + ?Sized),
) -> Result<String, ScriptError> {
    check_script_text(config, commands)?;
    let mut script = String::with_capacity(config.len() + commands.len() + 512);
    script.push_str(PREAMBLE);
    script.push_str("\n# --- config section ---\n");
    if config.is_empty() {
        script.push_str("load /opt/vyatta/etc/config.boot.default\n");
    } else {
        let delimiter = heredoc_delimiter(config, entropy)?;
        script.push_str("load /dev/stdin <<'");
        script.push_str(&delimiter);
        script.push_str("'\n");
        script.push_str(config);
        if !config.ends_with('\n') {
            script.push('\n');
        }
        script.push_str(&delimiter);
        script.push('\n');
    }
    script.push_str("\n# --- commands section (optional) ---\n");
    if !commands.is_empty() {
        script.push_str(commands);
        if !commands.ends_with('\n') {
            script.push('\n');
        }
    }
    push_commit(&mut script, commit, comment);
    Ok(script)
}

/// The script's ending: the commit (with its comment), then `save` where
/// the commit is plain and `save` is asked for.
fn push_commit(script: &mut String, commit: Commit, comment: Option<&CommitComment>) {
    // `commit` takes no argument or exactly `comment <text>`; `commit-confirm`
    // hands everything after its minutes to `commit` (vyatta-cfg
    // `functions/interpreter/vyatta-cfg-run`, `vyatta_config_commit` and
    // `vyatta_config_commit-confirm`).
    let comment = comment.map(|c| format!(" comment {c}")).unwrap_or_default();
    match commit {
        Commit::Plain { save } => {
            script.push_str(&format!("\ncommit{comment}\n"));
            if save {
                script.push_str("save\n");
            }
        }
        Commit::Confirmed { minutes } => {
            // `commit-confirm` refuses a session without changes ("No
            // configuration changes to commit", status 1: vyatta-cfg-run,
            // lines 136-139), where `commit` succeeds; a re-apply of the
            // config the router already runs must not fail for that.
            script.push_str(&format!(
                "\nif {SESSION_CHANGED}; then\n    commit-confirm {minutes}{comment} <<<'{COMMIT_CONFIRM_ANSWER}'\nelse\n    commit{comment}\nfi\n"
            ));
        }
    }
}

/// Whether `config` and `commands` can travel inside a vbash script at all, as
/// this crate's script and the vrouter-daemon agent's script both carry them.
pub fn check_script_text(config: &str, commands: &str) -> Result<(), ScriptError> {
    for (field, text) in [("config", config), ("commands", commands)] {
        if let Some(offset) = text.find('\0') {
            return Err(ScriptError::NulByte { field, offset });
        }
    }
    Ok(())
}

/// A delimiter that occurs nowhere in `config` — stricter than bash needs (a whole
/// line equal to it), so a near miss such as the delimiter followed by `\r` is
/// rejected too.
pub fn heredoc_delimiter(config: &str, entropy: &mut (impl Entropy + ?Sized)) -> Result<String, ScriptError> {
    let mut random_bytes = FIRST_RANDOM_BYTES;
    for _ in 0..DELIMITER_ATTEMPTS {
        let mut buf = vec![0u8; random_bytes];
        entropy.fill(&mut buf)?;
        let candidate = format!("{DELIMITER_PREFIX}{}", hex(&buf));
        if !config.contains(&candidate) {
            return Ok(candidate);
        }
        random_bytes *= 2;
    }
    Err(ScriptError::DelimiterExhausted {
        attempts: DELIMITER_ATTEMPTS,
    })
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    bytes
        .iter()
        .flat_map(|b| [DIGITS[usize::from(b >> 4)] as char, DIGITS[usize::from(b & 15)] as char])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed(byte: u8) -> impl FnMut(&mut [u8]) -> Result<(), ScriptError> {
        move |buf: &mut [u8]| {
            buf.fill(byte);
            Ok(())
        }
    }

    #[test]
    fn the_script_has_the_structure_of_spec_7_4() {
        let script = render_apply_script_with("a b\n", "set x\n", true, &mut fixed(0xab)).unwrap();
        let delimiter = format!("{DELIMITER_PREFIX}{}", "ab".repeat(16));
        let expected = format!(
            "#!/bin/vbash\n\
             if [ \"$(id -g -n)\" != 'vyattacfg' ] ; then\n    \
             exec sg vyattacfg -c \"/bin/vbash $(readlink -f $0) $@\"\n\
             fi\n\
             source /opt/vyatta/etc/functions/script-template\n\
             configure\n\
             \n\
             # --- config section ---\n\
             load /dev/stdin <<'{delimiter}'\n\
             a b\n\
             {delimiter}\n\
             \n\
             # --- commands section (optional) ---\n\
             set x\n\
             \n\
             commit\n\
             save\n"
        );
        assert_eq!(script, expected);
    }

    #[test]
    fn no_config_loads_the_default_and_no_save_omits_save() {
        let script = render_apply_script_with("", "", false, &mut fixed(1)).unwrap();
        assert!(script.contains("\n# --- config section ---\nload /opt/vyatta/etc/config.boot.default\n\n"));
        assert!(script.ends_with("# --- commands section (optional) ---\n\ncommit\n"));
        assert!(!script.contains("<<"));
    }

    #[test]
    fn a_confirmed_apply_commits_with_commit_confirm_answers_its_question_and_never_saves() {
        let confirmed = render_script_with("a\n", "set x\n", Commit::Confirmed { minutes: 7 }, &mut fixed(3)).unwrap();
        let plain = render_script_with("a\n", "set x\n", Commit::Plain { save: false }, &mut fixed(3)).unwrap();
        // Everything up to the commit is the plain script's.
        let ending = "if /bin/cli-shell-api sessionChanged; then\n    commit-confirm 7 <<<'y'\nelse\n    commit\nfi\n";
        assert_eq!(confirmed.strip_suffix(ending), plain.strip_suffix("commit\n"));
        assert!(!confirmed.contains("\nsave"), "{confirmed}");
    }

    #[test]
    fn a_comment_goes_on_every_commit_and_changes_nothing_else() {
        let comment = CommitComment::describe(&crate::CommitOrigin {
            namespace: "ns",
            config: "b.r1",
            binding: Some("b"),
            generation: 9,
            apply: "g9-aa",
        });
        let word = "'vrouter-operator binding=ns/b config=ns/b.r1 generation=9 apply=g9-aa'";
        let plain = |c| render_commented_script_with("a\n", "set x\n", Commit::Plain { save: true }, c, &mut fixed(4));
        let with = plain(Some(&comment)).unwrap();
        let without = plain(None).unwrap();
        assert_eq!(
            with.strip_suffix(&format!("commit comment {word}\nsave\n")),
            without.strip_suffix("commit\nsave\n")
        );
        let confirmed = |c| render_commented_script_with("a\n", "", Commit::Confirmed { minutes: 3 }, c, &mut fixed(4));
        let with = confirmed(Some(&comment)).unwrap();
        assert!(with.ends_with(&format!(
            "then\n    commit-confirm 3 comment {word} <<<'y'\nelse\n    commit comment {word}\nfi\n"
        )));
        assert_eq!(with.replace(&format!(" comment {word}"), ""), confirmed(None).unwrap());
    }

    #[test]
    fn the_confirm_script_confirms_then_saves_only_when_asked() {
        let head = "#!/bin/vbash\nif [ \"$(id -g -n)\" != 'vyattacfg' ] ; then\n    \
                    exec sg vyattacfg -c \"/bin/vbash $(readlink -f $0) $@\"\nfi\n\
                    source /opt/vyatta/etc/functions/script-template\nconfigure\n";
        assert_eq!(render_confirm_script(true), format!("{head}confirm\nsave\n"));
        assert_eq!(render_confirm_script(false), format!("{head}confirm\n"));
    }

    #[test]
    fn a_missing_final_newline_is_added_for_config_and_commands() {
        let script = render_apply_script_with("x", "set y", true, &mut fixed(2)).unwrap();
        let delimiter = format!("{DELIMITER_PREFIX}{}", "02".repeat(16));
        assert!(script.contains(&format!("'{delimiter}'\nx\n{delimiter}\n")));
        assert!(script.contains("---\nset y\n\ncommit\n"));
    }

    #[test]
    fn a_colliding_candidate_is_grown_and_retried() {
        let first = format!("{DELIMITER_PREFIX}{}", "00".repeat(16));
        let mut calls = Vec::new();
        let mut entropy = |buf: &mut [u8]| {
            calls.push(buf.len());
            buf.fill(if calls.len() == 1 { 0 } else { 0x11 });
            Ok(())
        };
        let delimiter = heredoc_delimiter(&format!("x\n{first}\ny"), &mut entropy).unwrap();
        assert_eq!(delimiter, format!("{DELIMITER_PREFIX}{}", "11".repeat(32)));
        assert_eq!(calls, vec![16, 32]);
    }

    #[test]
    fn rendering_fails_when_every_candidate_collides() {
        // Fixed bytes make every candidate a prefix of the longest, so one config
        // line holding the longest collides with all of them.
        let longest = format!("{DELIMITER_PREFIX}{}", "00".repeat(16 << (DELIMITER_ATTEMPTS - 1)));
        let err = render_apply_script_with(&longest, "", true, &mut fixed(0)).unwrap_err();
        assert_eq!(
            err,
            ScriptError::DelimiterExhausted {
                attempts: DELIMITER_ATTEMPTS
            }
        );
    }

    #[test]
    fn an_entropy_failure_is_reported_not_papered_over() {
        let mut failing = |_: &mut [u8]| Err(ScriptError::Entropy("no entropy".into()));
        let err = render_apply_script_with("x", "", true, &mut failing).unwrap_err();
        assert_eq!(err.to_string(), "the OS random number generator failed: no entropy");
    }

    #[test]
    fn nul_bytes_are_refused_with_their_field_and_offset() {
        let err = render_apply_script("ab\0", "", true).unwrap_err();
        assert_eq!(
            err,
            ScriptError::NulByte {
                field: "config",
                offset: 2
            }
        );
        let err = render_apply_script("", "set \0", true).unwrap_err();
        assert_eq!(
            err,
            ScriptError::NulByte {
                field: "commands",
                offset: 4
            }
        );
    }

    #[test]
    fn os_delimiters_differ_between_renders() {
        let a = heredoc_delimiter("", &mut OsEntropy).unwrap();
        let b = heredoc_delimiter("", &mut OsEntropy).unwrap();
        assert_ne!(a, b);
        assert_eq!(a.len(), DELIMITER_PREFIX.len() + 32);
        assert!(a[DELIMITER_PREFIX.len()..].bytes().all(|b| b.is_ascii_hexdigit()));
    }
}
