//! `spec.targetSelector` of a VRouterBinding: a standard Kubernetes label
//! selector (`matchLabels` and `matchExpressions`) over the VRouterTargets
//! of the binding's namespace. Pure: what it checks and what it matches
//! never needs the API server, so admission, the controller and the
//! offline `render`/`diff` judge a target the same way.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Selects targets by their labels. Every `matchLabels` pair and every
/// `matchExpressions` requirement must hold (AND). An empty selector (`{}`)
/// selects every target of the namespace, as Kubernetes selectors do.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TargetSelector {
    /// Labels a target must carry with exactly these values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Requirements on a target's labels.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<SelectorRequirement>,
}

/// One requirement: `key` `operator` `values`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SelectorRequirement {
    /// The label key.
    pub key: String,
    /// One of `In`, `NotIn`, `Exists`, `DoesNotExist`.
    pub operator: String,
    /// Non-empty for `In` and `NotIn`; empty for `Exists` and `DoesNotExist`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// The operators of a requirement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

impl Operator {
    /// The operator spelled `text`, as Kubernetes spells it (case matters).
    pub fn parse(text: &str) -> Option<Operator> {
        match text {
            "In" => Some(Operator::In),
            "NotIn" => Some(Operator::NotIn),
            "Exists" => Some(Operator::Exists),
            "DoesNotExist" => Some(Operator::DoesNotExist),
            _ => None,
        }
    }

    fn takes_values(self) -> bool {
        matches!(self, Operator::In | Operator::NotIn)
    }
}

/// What is wrong with one field of a selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelectorProblem {
    /// The field, under the path the selector was checked at.
    pub field: String,
    pub message: String,
}

impl TargetSelector {
    /// Every problem of the selector, each naming its field under `at`
    /// (e.g. `spec.targetSelector`). A selector with none can be matched.
    pub fn problems(&self, at: &str) -> Vec<SelectorProblem> {
        let mut out = Vec::new();
        let mut push = |field: String, message: String| out.push(SelectorProblem { field, message });
        for (key, value) in &self.match_labels {
            let field = format!("{at}.matchLabels[{key:?}]");
            if let Err(m) = check_key(key) {
                push(field.clone(), m);
            }
            if let Err(m) = check_value(value) {
                push(field, m);
            }
        }
        for (i, r) in self.match_expressions.iter().enumerate() {
            let field = format!("{at}.matchExpressions[{i}]");
            if let Err(m) = check_key(&r.key) {
                push(format!("{field}.key"), m);
            }
            requirement_problems(r, &field, &mut push);
        }
        out
    }

    /// Whether a target with `labels` is selected. A requirement with an
    /// unknown operator matches nothing (admission refuses it before).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels.iter().all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| r.matches(labels))
    }
}

impl SelectorRequirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match Operator::parse(&self.operator) {
            Some(Operator::In) => value.is_some_and(|v| self.values.contains(v)),
            // As in Kubernetes: a target without the key is not in the set.
            Some(Operator::NotIn) => value.is_none_or(|v| !self.values.contains(v)),
            Some(Operator::Exists) => value.is_some(),
            Some(Operator::DoesNotExist) => value.is_none(),
            None => false,
        }
    }
}

fn requirement_problems(r: &SelectorRequirement, field: &str, push: &mut impl FnMut(String, String)) {
    let Some(operator) = Operator::parse(&r.operator) else {
        push(
            format!("{field}.operator"),
            format!(
                "{:?} is not an operator; use one of In, NotIn, Exists, DoesNotExist",
                r.operator
            ),
        );
        return;
    };
    match (operator.takes_values(), r.values.is_empty()) {
        (true, true) => push(
            format!("{field}.values"),
            format!("must list at least one value for {}", r.operator),
        ),
        (false, false) => push(format!("{field}.values"), format!("must be empty for {}", r.operator)),
        _ => {}
    }
    for (j, v) in r.values.iter().enumerate() {
        if let Err(m) = check_value(v) {
            push(format!("{field}.values[{j}]"), m);
        }
    }
}

/// A label key: an optional DNS-subdomain prefix and `/`, then a name of
/// at most 63 characters.
fn check_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        let ok = !prefix.is_empty()
            && prefix.len() <= 253
            && prefix.split('.').all(|part| {
                !part.is_empty()
                    && part
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !part.starts_with('-')
                    && !part.ends_with('-')
            });
        if !ok {
            return Err(format!(
                "label key {key:?}: the prefix must be a DNS subdomain (lowercase letters, digits, '-' and '.')"
            ));
        }
    }
    if name.is_empty() {
        return Err(format!("label key {key:?}: the name part must not be empty"));
    }
    check_name_part(name).map_err(|m| format!("label key {key:?}: {m}"))
}

/// A label value: empty, or a name of at most 63 characters.
fn check_value(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Ok(());
    }
    check_name_part(value).map_err(|m| format!("label value {value:?}: {m}"))
}

fn check_name_part(s: &str) -> Result<(), String> {
    if s.len() > 63 {
        return Err("must be at most 63 characters".into());
    }
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    let inner_ok = s
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !inner_ok || !alnum(s.chars().next()) || !alnum(s.chars().last()) {
        return Err("must be letters, digits, '-', '_' or '.', beginning and ending with a letter or digit".into());
    }
    Ok(())
}

#[cfg(test)]
#[path = "selector_tests.rs"]
mod tests;
