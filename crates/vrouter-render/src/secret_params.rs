//! Params whose value lives in a Kubernetes Secret, so that the value never
//! sits in a rendered config.
//!
//! A param written `{"secretKeyRef": {"name": N, "key": K}}` renders as the
//! placeholder `@vrouter-secret:N/K@` ([`replace_secret_refs`]): every
//! character of it is plain for both escapes, so templates place it exactly as
//! they place any value, and the render-time placement check judges it. The
//! rendered config holds only the placeholder; just before delivery
//! [`resolve_placeholders`] puts the value in its place, escaped for where it
//! stands (a bash word in commands, a config.boot value in config).
//!
//! Invariant: an error here names the Secret and key, never the value.

use std::borrow::Cow;
use std::sync::OnceLock;

use regex::Regex;
use serde_json::Value;

use crate::escape::{Unrepresentable, command_word, config_value};

/// The placeholder's start; `@` and `:` keep it apart from any name.
pub const PLACEHOLDER_PREFIX: &str = "@vrouter-secret:";

/// Which text a placeholder stands in: the value is escaped as the text's
/// reader needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretContext {
    /// `spec.config` (config.boot).
    Config,
    /// `spec.commands` (configure-mode lines run by bash).
    Commands,
}

/// Why a secret param could not be rendered or resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretParamError {
    /// `secretKeyRef` must hold exactly a `name` and a `key`, both valid.
    #[error("param {path}: secretKeyRef must be {{name, key}} with a Secret name and a key of [-._a-zA-Z0-9]")]
    BadRef { path: String },
    /// The Secret or its key is not there.
    #[error("secret param: Secret {name:?} has no key {key:?} (or does not exist in this namespace)")]
    Missing { name: String, key: String },
    /// The value cannot be written where the template put it.
    #[error("secret param: the value of Secret {name:?} key {key:?} cannot be written in {context:?}: {reason}")]
    Unrepresentable {
        name: String,
        key: String,
        context: SecretContext,
        reason: String,
    },
    /// The placeholder is joined to other text (a filter or `~` in the
    /// template), so the value could not be escaped as one word.
    #[error(
        "secret param: Secret {name:?} key {key:?} must be interpolated alone as a whole value \
         (no filter, no joining with other text)"
    )]
    NotAWholeValue { name: String, key: String },
}

/// A Secret and key a rendered text refers to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SecretKeyRef {
    pub name: String,
    pub key: String,
}

impl SecretKeyRef {
    /// The placeholder the rendered config holds for this reference.
    pub fn placeholder(&self) -> String {
        format!("{PLACEHOLDER_PREFIX}{}/{}@", self.name, self.key)
    }
}

fn placeholder_regex() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r"@vrouter-secret:([a-z0-9][a-z0-9.-]{0,252})/([-._a-zA-Z0-9]{1,253})@").expect("a valid regex")
    })
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-')
}

fn valid_key(key: &str) -> bool {
    !key.is_empty() && key.len() <= 253 && key.chars().all(|c| c.is_ascii_alphanumeric() || "-._".contains(c))
}

/// Replaces, in merged params, every value of the form
/// `{"secretKeyRef": {"name": …, "key": …}}` with its placeholder; returns
/// the references, in the order met.
pub fn replace_secret_refs(params: &mut Value) -> Result<Vec<SecretKeyRef>, SecretParamError> {
    let mut found = Vec::new();
    walk(params, "", &mut found)?;
    Ok(found)
}

fn walk(value: &mut Value, path: &str, found: &mut Vec<SecretKeyRef>) -> Result<(), SecretParamError> {
    match value {
        Value::Object(map) if map.contains_key("secretKeyRef") => {
            let reference = parse_ref(map, path)?;
            *value = Value::String(reference.placeholder());
            found.push(reference);
        }
        Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                walk(child, &format!("{path}.{key}"), found)?;
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter_mut().enumerate() {
                walk(child, &format!("{path}[{i}]"), found)?;
            }
        }
        _ => {}
    }
    Ok(())
}

fn parse_ref(map: &serde_json::Map<String, Value>, path: &str) -> Result<SecretKeyRef, SecretParamError> {
    let bad = || SecretParamError::BadRef {
        path: path.trim_start_matches('.').to_owned(),
    };
    if map.len() != 1 {
        return Err(bad());
    }
    let Some(Value::Object(inner)) = map.get("secretKeyRef") else {
        return Err(bad());
    };
    let (Some(Value::String(name)), Some(Value::String(key)), 2) = (inner.get("name"), inner.get("key"), inner.len())
    else {
        return Err(bad());
    };
    if !valid_name(name) || !valid_key(key) {
        return Err(bad());
    }
    Ok(SecretKeyRef {
        name: name.clone(),
        key: key.clone(),
    })
}

/// The references `text` holds, each once, sorted.
pub fn referenced_secrets(text: &str) -> Vec<SecretKeyRef> {
    let mut refs: Vec<SecretKeyRef> = placeholder_regex()
        .captures_iter(text)
        .map(|c| SecretKeyRef {
            name: c[1].to_owned(),
            key: c[2].to_owned(),
        })
        .collect();
    refs.sort();
    refs.dedup();
    refs
}

/// Puts each referenced value in place of its placeholder, escaped for
/// `context`. `lookup` gives a Secret key's value. A placeholder must stand
/// alone between whitespace (or the text's ends): one joined to other text
/// was changed by the template and is refused.
pub fn resolve_placeholders<'a, F>(
    text: &'a str,
    context: SecretContext,
    mut lookup: F,
) -> Result<Cow<'a, str>, SecretParamError>
where
    F: FnMut(&SecretKeyRef) -> Option<String>,
{
    let re = placeholder_regex();
    if !re.is_match(text) {
        return Ok(Cow::Borrowed(text));
    }
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for caps in re.captures_iter(text) {
        let whole = caps.get(0).expect("group 0 always matches");
        let reference = SecretKeyRef {
            name: caps[1].to_owned(),
            key: caps[2].to_owned(),
        };
        if !stands_alone(text, whole.start(), whole.end()) {
            return Err(SecretParamError::NotAWholeValue {
                name: reference.name,
                key: reference.key,
            });
        }
        let value = lookup(&reference).ok_or_else(|| SecretParamError::Missing {
            name: reference.name.clone(),
            key: reference.key.clone(),
        })?;
        out.push_str(&text[last..whole.start()]);
        out.push_str(&escaped(&value, context, &reference)?);
        last = whole.end();
    }
    out.push_str(&text[last..]);
    Ok(Cow::Owned(out))
}

fn stands_alone(text: &str, start: usize, end: usize) -> bool {
    let before = text[..start].chars().next_back();
    let after = text[end..].chars().next();
    let apart = |c: Option<char>| matches!(c, None | Some(' ' | '\t' | '\n'));
    apart(before) && apart(after)
}

fn escaped(value: &str, context: SecretContext, reference: &SecretKeyRef) -> Result<String, SecretParamError> {
    let written = match context {
        SecretContext::Config => config_value(value),
        SecretContext::Commands => command_word(value),
    };
    written
        .map(Cow::into_owned)
        .map_err(|e| SecretParamError::Unrepresentable {
            name: reference.name.clone(),
            key: reference.key.clone(),
            context,
            reason: describe(&e),
        })
}

/// The reason without the value (an [`Unrepresentable`] names positions only).
fn describe(e: &Unrepresentable) -> String {
    e.to_string()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn lookup(r: &SecretKeyRef) -> Option<String> {
        match (r.name.as_str(), r.key.as_str()) {
            ("db", "password") => Some("s3cr3t; reboot".into()),
            ("db", "plain") => Some("plain".into()),
            ("db", "quote") => Some("it's".into()),
            _ => None,
        }
    }

    #[test]
    fn refs_in_params_become_placeholders_anywhere_in_the_tree() {
        let mut params = json!({
            "a": {"secretKeyRef": {"name": "db", "key": "password"}},
            "list": [1, {"nested": {"secretKeyRef": {"name": "db", "key": "plain"}}}],
            "other": "x",
        });
        let refs = replace_secret_refs(&mut params).unwrap();
        assert_eq!(params["a"], "@vrouter-secret:db/password@");
        assert_eq!(params["list"][1]["nested"], "@vrouter-secret:db/plain@");
        assert_eq!(params["other"], "x");
        assert_eq!(refs.len(), 2);
    }

    #[test]
    fn a_malformed_ref_is_refused_naming_its_path() {
        let table = [
            json!({"p": {"secretKeyRef": {"name": "db"}}}),
            json!({"p": {"secretKeyRef": {"name": "db", "key": "k", "extra": 1}}}),
            json!({"p": {"secretKeyRef": {"name": "DB", "key": "k"}}}),
            json!({"p": {"secretKeyRef": {"name": "db", "key": "k/../x"}}}),
            json!({"p": {"secretKeyRef": "db", "other": 1}}),
        ];
        for mut params in table {
            let err = replace_secret_refs(&mut params).unwrap_err();
            assert_eq!(err, SecretParamError::BadRef { path: "p".into() }, "{params}");
        }
    }

    #[test]
    fn values_are_escaped_for_where_they_stand() {
        let commands = "set system login user vyos authentication plaintext-password @vrouter-secret:db/password@\n";
        let resolved = resolve_placeholders(commands, SecretContext::Commands, lookup).unwrap();
        assert_eq!(
            resolved,
            "set system login user vyos authentication plaintext-password 's3cr3t; reboot'\n"
        );
        let config = "password @vrouter-secret:db/password@\nother @vrouter-secret:db/plain@\n";
        let resolved = resolve_placeholders(config, SecretContext::Config, lookup).unwrap();
        assert_eq!(resolved, "password \"s3cr3t; reboot\"\nother plain\n");
        assert!(matches!(
            resolve_placeholders("x", SecretContext::Config, lookup).unwrap(),
            Cow::Borrowed("x")
        ));
    }

    #[test]
    fn errors_name_secret_and_key_never_the_value() {
        let table = [
            ("set a @vrouter-secret:db/missing@", SecretContext::Commands),
            ("set a x@vrouter-secret:db/password@", SecretContext::Commands),
            ("set a '@vrouter-secret:db/password@'", SecretContext::Commands),
            ("set a @vrouter-secret:db/quote@", SecretContext::Commands),
            ("a @vrouter-secret:db/quote@", SecretContext::Config),
        ];
        for (text, context) in table {
            let err = resolve_placeholders(text, context, lookup).unwrap_err().to_string();
            assert!(err.contains("\"db\""), "{err}");
            for value in ["s3cr3t", "it's"] {
                assert!(!err.contains(value), "{err}");
            }
        }
    }

    #[test]
    fn referenced_secrets_are_listed_once_each() {
        let refs = referenced_secrets("a @vrouter-secret:db/k@ b @vrouter-secret:db/k@ @vrouter-secret:a/b@");
        assert_eq!(
            refs,
            vec![
                SecretKeyRef {
                    name: "a".into(),
                    key: "b".into()
                },
                SecretKeyRef {
                    name: "db".into(),
                    key: "k".into()
                }
            ]
        );
    }
}
