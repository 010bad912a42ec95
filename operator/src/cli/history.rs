//! `history` and `rollback`: list a VRouterConfig's applied revisions (from
//! its Secret `<config>-history`, never printing their content), and ask
//! the config controller to apply one of them again by writing
//! `spec.rollbackTo`. The CLI never touches a router: the rollback is an
//! apply like any other (same delivery, lock, confirmation, status).

use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use vrouter_api::history::{self, History, Revision};
use vrouter_api::{VRouterBinding, VRouterConfig};

/// Why a history could not be listed or a rollback asked for.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("{0:?}: expected <namespace>/<name> or <name>")]
    BadRef(String),
    #[error("VRouterConfig {namespace}/{name} not found")]
    NotFound { namespace: String, name: String },
    #[error("VRouterConfig {namespace}/{name} has no revision history yet (Secret {secret:?} not found)")]
    NoHistory {
        namespace: String,
        name: String,
        secret: String,
    },
    #[error("revision {revision} of VRouterConfig {namespace}/{name} is not kept ({kept})")]
    NoSuchRevision {
        namespace: String,
        name: String,
        revision: u64,
        kept: String,
    },
    #[error("revision {revision} was too large to keep its content; it cannot be rolled back to")]
    ContentDropped { revision: u64 },
    #[error("{0}")]
    Unreadable(#[from] history::HistoryError),
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
}

/// `(namespace, name)` of `text` (`<namespace>/<name>` or `<name>`), the
/// namespace from `-n`, else the kubeconfig context's.
pub fn config_ref(text: &str, namespace: Option<&str>, default: &str) -> Result<(String, String), HistoryError> {
    let (ns, name) = match text.split_once('/') {
        Some((ns, name)) => (ns, name),
        None => (namespace.unwrap_or(default), text),
    };
    if ns.is_empty() || name.is_empty() || name.contains('/') || namespace.is_some_and(|n| n != ns) {
        return Err(HistoryError::BadRef(text.to_owned()));
    }
    Ok((ns.to_owned(), name.to_owned()))
}

/// The revisions of `namespace/name` as a table, oldest first.
pub async fn list(client: &Client, namespace: &str, name: &str) -> Result<String, HistoryError> {
    let history = read(client, namespace, name).await?;
    Ok(table(&history.revisions))
}

/// One line per revision; never the content.
pub fn table(revisions: &[Revision]) -> String {
    let mut out = String::from("REVISION\tTIME\tRESULT\tBINDING\tGENERATION\tAPPLY\tNOTE\n");
    for r in revisions {
        let d = &r.delivery;
        let mut note = d.rollback_of.map(|k| format!("rollback to {k}")).unwrap_or_default();
        if d.content_dropped {
            note = [note.as_str(), "content too large, not kept"].join(if note.is_empty() { "" } else { "; " });
        }
        out.push_str(&format!(
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
            r.revision,
            r.time.0,
            r.result,
            d.binding.as_deref().unwrap_or("-"),
            d.generation,
            d.apply_id,
            if note.is_empty() { "-" } else { &note },
        ));
    }
    out
}

/// Writes `spec.rollbackTo: {revision}` into `namespace/name` after
/// checking the revision is kept; a binding-owned config also records the
/// binding's generation, which holds the rollback until the binding changes.
pub async fn rollback(client: &Client, namespace: &str, name: &str, revision: u64) -> Result<String, HistoryError> {
    let configs = Api::<VRouterConfig>::namespaced(client.clone(), namespace);
    let config = configs.get_opt(name).await?.ok_or_else(|| HistoryError::NotFound {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    })?;
    let history = read(client, namespace, name).await?;
    match history.revision(revision) {
        None => {
            return Err(HistoryError::NoSuchRevision {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                revision,
                kept: history.kept(),
            });
        }
        Some(r) if r.delivery.content_dropped => return Err(HistoryError::ContentDropped { revision }),
        Some(_) => {}
    }
    let binding = config.controlling_binding().map(|o| o.name.clone());
    let binding_generation = match &binding {
        Some(b) => Api::<VRouterBinding>::namespaced(client.clone(), namespace)
            .get_opt(b)
            .await?
            .and_then(|b| b.metadata.generation),
        None => None,
    };
    let patch = serde_json::json!({"spec": {"rollbackTo": {
        "revision": revision,
        "bindingGeneration": binding_generation,
    }}});
    configs
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let hold = match (binding, binding_generation) {
        (Some(b), Some(g)) => format!(
            "; held while VRouterBinding {namespace}/{b} stays at generation {g} (any change to the binding ends it)"
        ),
        _ => String::new(),
    };
    Ok(format!(
        "VRouterConfig {namespace}/{name} rolls back to revision {revision}{hold}"
    ))
}

async fn read(client: &Client, namespace: &str, name: &str) -> Result<History, HistoryError> {
    let secret_name = history::secret_name(name);
    let secret = Api::<Secret>::namespaced(client.clone(), namespace)
        .get_opt(&secret_name)
        .await?
        .ok_or_else(|| HistoryError::NoHistory {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            secret: secret_name,
        })?;
    let bytes = secret
        .data
        .and_then(|mut d| d.remove(history::DATA_KEY))
        .map(|b| b.0)
        .unwrap_or_default();
    Ok(History::parse(&bytes)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_is_named_by_namespace_and_name_or_name_and_n() {
        type Case<'a> = (&'a str, Option<&'a str>, Result<(&'a str, &'a str), ()>);
        let table: [Case; 6] = [
            ("c", None, Ok(("ctx", "c"))),
            ("c", Some("net"), Ok(("net", "c"))),
            ("net/c", None, Ok(("net", "c"))),
            ("net/c", Some("net"), Ok(("net", "c"))),
            // Two namespaces that disagree.
            ("lab/c", Some("net"), Err(())),
            ("net/c/d", None, Err(())),
        ];
        for (text, ns, expected) in table {
            let got = config_ref(text, ns, "ctx").map_err(|_| ());
            let expected = expected.map(|(a, b)| (a.to_owned(), b.to_owned()));
            assert_eq!(got, expected, "{text} -n {ns:?}");
        }
    }

    #[test]
    fn the_table_lists_who_and_what_but_never_the_content() {
        let mut history = History::default();
        for (apply, rollback) in [("g1-a", None), ("g2-b", Some(1))] {
            history.stage(history::Delivery {
                apply_id: apply.into(),
                binding: Some("net/edge".into()),
                generation: 2,
                rollback_of: rollback,
                config: "secret-password-here".into(),
                ..Default::default()
            });
            history.record(
                apply,
                history::Outcome::Applied,
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                10,
            );
        }
        let out = table(&history.revisions);
        assert!(!out.contains("secret-password-here"), "{out}");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[1], "1\t1970-01-01T00:00:00Z\tApplied\tnet/edge\t2\tg1-a\t-");
        assert_eq!(
            lines[2],
            "2\t1970-01-01T00:00:00Z\tApplied\tnet/edge\t2\tg2-b\trollback to 1"
        );
    }
}
