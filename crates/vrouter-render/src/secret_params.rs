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
    /// `secretKeyRef` must hold exactly a `name` and a `key`, both valid;
    /// `path` names the field at fault.
    #[error("param {path}: {reason}")]
    BadRef { path: String, reason: String },
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
    ref_of(map).map_err(|(field, reason)| SecretParamError::BadRef {
        path: format!("{path}{field}").trim_start_matches('.').to_owned(),
        reason,
    })
}

/// The reference a `{"secretKeyRef": …}` object holds, or the field at
/// fault (a suffix of the param's path) and why. No field names a
/// namespace: a Secret is always read from the object's own namespace.
fn ref_of(map: &serde_json::Map<String, Value>) -> Result<SecretKeyRef, (String, String)> {
    if let Some(other) = map.keys().find(|k| *k != "secretKeyRef") {
        return Err((
            format!(".{other}"),
            "a secret param holds secretKeyRef alone".to_owned(),
        ));
    }
    let Some(Value::Object(inner)) = map.get("secretKeyRef") else {
        return Err((".secretKeyRef".to_owned(), "must be an object {name, key}".to_owned()));
    };
    if let Some(other) = inner.keys().find(|k| !["name", "key"].contains(&k.as_str())) {
        let why = match other.as_str() {
            "namespace" => {
                "a secret param names a Secret of its object's own namespace only; no namespace can be given"
            }
            _ => "unknown field: secretKeyRef holds name and key only",
        };
        return Err((format!(".secretKeyRef.{other}"), why.to_owned()));
    }
    let name = match inner.get("name") {
        Some(Value::String(name)) if valid_name(name) => name,
        _ => {
            return Err((
                ".secretKeyRef.name".to_owned(),
                "must be a Secret name (lowercase letters, digits, '-' and '.', at most 253)".to_owned(),
            ));
        }
    };
    let key = match inner.get("key") {
        Some(Value::String(key)) if valid_key(key) => key,
        _ => {
            return Err((
                ".secretKeyRef.key".to_owned(),
                "must be a Secret key (letters, digits, '-', '_' and '.', at most 253)".to_owned(),
            ));
        }
    };
    Ok(SecretKeyRef {
        name: name.clone(),
        key: key.clone(),
    })
}

/// Every malformed `secretKeyRef` in `params` (not only the first), as
/// (field path under `base`, reason): for admission, which names each.
pub fn malformed_refs(params: &Value, base: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    check(params, base, &mut found);
    found
}

fn check(value: &Value, path: &str, found: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) if map.contains_key("secretKeyRef") => {
            if let Err((field, reason)) = ref_of(map) {
                found.push((format!("{path}{field}"), reason));
            }
        }
        Value::Object(map) => map.iter().for_each(|(k, v)| check(v, &format!("{path}.{k}"), found)),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .for_each(|(i, v)| check(v, &format!("{path}[{i}]"), found)),
        _ => {}
    }
}

/// `text` with each placeholder shown as `<secret name/key>`: for output
/// read by a person (a diff), where the placeholder's syntax is noise.
pub fn shown_masked(text: &str) -> Cow<'_, str> {
    placeholder_regex().replace_all(text, "<secret $1/$2>")
}

/// Whether `value` is exactly what [`shown_masked`] makes of a placeholder.
pub fn is_masked_ref(value: &str) -> bool {
    value.starts_with("<secret ") && value.ends_with('>') && !value[8..value.len() - 1].contains(char::is_whitespace)
}

/// `text` with every written form of each secret value (plain, base64,
/// JSON-escaped, shell-quoted, config-quoted) replaced by `<secret
/// name/key>`: for router output (an error, a check's excerpt) on its way
/// to a status or an Event. Longer forms go first, so a quoted form is
/// replaced whole rather than leaving its quotes around a replaced core.
pub fn redact<'a>(text: &'a str, secrets: &[(SecretKeyRef, String)]) -> Cow<'a, str> {
    use base64::Engine as _;
    let mut forms: Vec<(String, String)> = Vec::new();
    for (reference, value) in secrets.iter().filter(|(_, v)| !v.is_empty()) {
        let shown = format!("<secret {}/{}>", reference.name, reference.key);
        let json = serde_json::to_string(value).unwrap_or_default();
        let candidates = [
            Some(value.clone()),
            Some(base64::engine::general_purpose::STANDARD.encode(value)),
            Some(json.trim_matches('"').to_owned()),
            command_word(value).ok().map(Cow::into_owned),
            config_value(value).ok().map(Cow::into_owned),
        ];
        forms.extend(candidates.into_iter().flatten().map(|form| (form, shown.clone())));
    }
    forms.sort_by_key(|(form, _)| std::cmp::Reverse(form.len()));
    if !forms.iter().any(|(form, _)| text.contains(form.as_str())) {
        return Cow::Borrowed(text);
    }
    let mut out = text.to_owned();
    for (form, shown) in forms {
        out = out.replace(&form, &shown);
    }
    Cow::Owned(out)
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
    fn a_malformed_ref_is_refused_naming_its_field() {
        let table = [
            (json!({"p": {"secretKeyRef": {"name": "db"}}}), "p.secretKeyRef.key"),
            (json!({"p": {"secretKeyRef": {"key": "k"}}}), "p.secretKeyRef.name"),
            (
                json!({"p": {"secretKeyRef": {"name": "db", "key": "k", "extra": 1}}}),
                "p.secretKeyRef.extra",
            ),
            (
                json!({"p": {"secretKeyRef": {"name": "db", "key": "k", "namespace": "kube-system"}}}),
                "p.secretKeyRef.namespace",
            ),
            (
                json!({"p": {"secretKeyRef": {"name": "DB", "key": "k"}}}),
                "p.secretKeyRef.name",
            ),
            (
                json!({"p": {"secretKeyRef": {"name": "db", "key": "k/../x"}}}),
                "p.secretKeyRef.key",
            ),
            (
                json!({"p": {"secretKeyRef": {"name": "db", "key": 7}}}),
                "p.secretKeyRef.key",
            ),
            (json!({"p": {"secretKeyRef": "db"}}), "p.secretKeyRef"),
            (
                json!({"p": {"secretKeyRef": {"name": "db", "key": "k"}, "other": 1}}),
                "p.other",
            ),
            (
                json!({"l": [0, {"secretKeyRef": {"name": "db"}}]}),
                "l[1].secretKeyRef.key",
            ),
        ];
        for (params, field) in table {
            let err = replace_secret_refs(&mut params.clone()).unwrap_err();
            assert!(
                matches!(&err, SecretParamError::BadRef { path, .. } if path == field),
                "{params}: {err}"
            );
            let found = malformed_refs(&params, "spec.params");
            assert_eq!(found.len(), 1, "{params}");
            assert_eq!(found[0].0, format!("spec.params.{field}"), "{params}");
        }
        let two = json!({"a": {"secretKeyRef": {"name": "db"}}, "b": {"secretKeyRef": {"name": "x", "key": "k"}}, "c": {"secretKeyRef": {"key": "k"}}});
        assert_eq!(malformed_refs(&two, "spec.params").len(), 2);
        let namespaced = malformed_refs(
            &json!({"p": {"secretKeyRef": {"name": "db", "key": "k", "namespace": "x"}}}),
            "s",
        );
        assert!(namespaced[0].1.contains("own namespace"), "{namespaced:?}");
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
    fn every_written_form_of_a_value_is_redacted() {
        use base64::Engine as _;
        let value = "Pa$$ w0rd;\"x\\y";
        let db = SecretKeyRef {
            name: "db".into(),
            key: "pw".into(),
        };
        let secrets = [(db, value.to_owned())];
        let json = serde_json::to_string(value).unwrap();
        let table = [
            format!("Set failed: {value}"),
            format!("output: {}", base64::engine::general_purpose::STANDARD.encode(value)),
            format!("{{\"error\": {json}}}"),
            format!("+ set a {}", command_word(value).unwrap()),
            format!("    password {}", config_value(value).unwrap()),
        ];
        for text in table {
            let redacted = redact(&text, &secrets);
            assert!(redacted.contains("<secret db/pw>"), "{text} -> {redacted}");
            assert!(!redacted.contains("w0rd"), "{text} -> {redacted}");
        }
        assert!(matches!(
            redact("nothing here", &secrets),
            Cow::Borrowed("nothing here")
        ));
        let empty = [(secrets[0].0.clone(), String::new())];
        assert_eq!(redact("abc", &empty), "abc", "an empty value hides nothing");
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
