//! The VRouterTargets a binding's references are checked against: a watch
//! of its own, run by every replica that serves the webhook (the
//! controllers' watches run only on the leader). A binding of 10,000
//! targets is then checked in memory instead of by 10,000 GETs, one after
//! another, which outlast the webhook timeout.
//!
//! A name the cache lacks may be a target created a moment ago whose event
//! has not arrived yet: misses are confirmed with the API server before
//! anything is refused (a GET each when few, one LIST of the namespace when
//! many). Before the cache's first list is in, every name is a miss. When
//! the API server cannot answer either, the check fails closed.

use std::collections::HashSet;

use futures::{FutureExt, StreamExt};
use kube::api::{Api, ListParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use vrouter_api::VRouterTarget;

/// Up to this many misses are confirmed by a GET each; more by one LIST.
const MAX_GETS: usize = 16;

/// The webhook's cache of VRouterTargets.
#[derive(Clone)]
pub struct TargetCache {
    store: Store<VRouterTarget>,
    /// The namespace watched; `None`: all of them.
    namespace: Option<String>,
}

impl TargetCache {
    /// Watches the targets of `namespace` (all namespaces when `None`) on
    /// the current runtime, for as long as the runtime runs.
    pub fn watch(client: kube::Client, namespace: Option<String>) -> TargetCache {
        let api = match &namespace {
            Some(ns) => Api::<VRouterTarget>::namespaced(client, ns),
            None => Api::all(client),
        };
        let (store, writer) = reflector::store();
        let events = watcher(api, watcher::Config::default())
            .modify(crate::runtime::watches::drop_managed_fields)
            .default_backoff()
            .reflect(writer);
        tokio::spawn(events.for_each(|event| {
            if let Err(error) = event {
                tracing::warn!(%error, "the webhook's VRouterTarget watch failed; retrying with backoff");
            }
            std::future::ready(())
        }));
        TargetCache { store, namespace }
    }

    /// A cache whose first list never comes in: every check goes to the
    /// API server.
    pub fn never_filled() -> TargetCache {
        TargetCache {
            store: reflector::store().0,
            namespace: None,
        }
    }

    fn holds(&self, namespace: &str) -> bool {
        let filled = matches!(self.store.wait_until_ready().now_or_never(), Some(Ok(())));
        filled && self.namespace.as_deref().is_none_or(|ns| ns == namespace)
    }

    /// Of `names`, those no VRouterTarget of `namespace` carries, in their
    /// order; `Err` (the denial message) when the API server, asked about
    /// the cache's misses, did not answer.
    pub async fn missing(&self, client: &kube::Client, namespace: &str, names: &[&str]) -> Result<Vec<String>, String> {
        let misses: Vec<&str> = match self.holds(namespace) {
            true => names
                .iter()
                .copied()
                .filter(|n| self.store.get(&ObjectRef::new(n).within(namespace)).is_none())
                .collect(),
            false => names.to_vec(),
        };
        if misses.is_empty() {
            return Ok(Vec::new());
        }
        let api = Api::<VRouterTarget>::namespaced(client.clone(), namespace);
        let existing = confirm(&api, &misses).await?;
        Ok(misses
            .into_iter()
            .filter(|n| !existing.contains(*n))
            .map(str::to_owned)
            .collect())
    }
}

/// Which of `misses` exist after all, by the API server.
async fn confirm(api: &Api<VRouterTarget>, misses: &[&str]) -> Result<HashSet<String>, String> {
    if misses.len() > MAX_GETS {
        let listed = api
            .list(&ListParams::default())
            .await
            .map_err(|e| format!("could not list VRouterTargets to check references: {e}"))?;
        return Ok(listed.items.into_iter().filter_map(|t| t.metadata.name).collect());
    }
    let mut existing = HashSet::new();
    for name in misses {
        let found = api
            .get_opt(name)
            .await
            .map_err(|e| format!("could not look up VRouterTarget {name:?}: {e}"))?;
        if found.is_some() {
            existing.insert((*name).to_owned());
        }
    }
    Ok(existing)
}
