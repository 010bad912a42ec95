//! The Proxmox HTTP clients kept across reconciles: one per ProxmoxCluster,
//! for its current endpoints, credential and TLS setting.
//!
//! Every reconcile builds the provider of its target, and every VRouterStatus
//! sync and ProxmoxCluster sweep builds one too; a client built with each
//! would open a new TCP+TLS connection for each of them. Kept here, the
//! client (and the connections its pool holds open) serves every VM of the
//! cluster. A changed ProxmoxCluster (endpoints, trust settings, the CA
//! bundle in its Secret) or a rotated token in its Secret is a different [`Key`]: the next build
//! gets a new client at once, and the old one closes its connections when
//! the last provider holding it is done. A cluster unused for [`UNUSED_FOR`]
//! is forgotten, so deleted clusters do not keep connections open.
//!
//! The cluster's VM listing snapshot ([`VmList`]) lives beside its client,
//! under the same key, so whatever replaces the client (a changed cluster or
//! Secret) drops the snapshot taken with the old settings too.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::http::{ApiToken, Client, Endpoint, Timeouts};
use super::tls;
use super::trust::{self, TrustSettings};
use super::vm_list::VmList;
use crate::error::ProviderError;

/// How long a cluster's client is kept with no provider built for it.
pub const UNUSED_FOR: Duration = Duration::from_secs(600);

/// Whose client: a cluster, for the timeouts its user asked for. The
/// timeouts are the process's configuration, not the cluster's, so a user
/// with other timeouts (a test, the cluster sync) gets a client beside this
/// one instead of replacing it on every call.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Slot {
    cluster: String,
    timeouts: Timeouts,
}

/// What a client is built from; any change means a new client. Holds the
/// token, so it is never printed (no `Debug`).
#[derive(Clone, PartialEq, Eq)]
struct Key {
    endpoints: Vec<Endpoint>,
    token_id: String,
    token_secret: String,
    trust: TrustSettings,
}

struct Entry {
    key: Key,
    kept: Kept,
    used: Instant,
}

/// A cluster's client and its VM listing snapshot, replaced together.
#[derive(Clone, Debug)]
pub(crate) struct Kept {
    pub client: Arc<Client>,
    pub vms: Arc<VmList>,
}

/// The clients of every ProxmoxCluster in use, by cluster (`namespace/name`).
/// Cheap to clone; clones share the clients.
#[derive(Clone, Default)]
pub struct ProxmoxClients {
    clusters: Arc<Mutex<HashMap<Slot, Entry>>>,
}

impl std::fmt::Debug for ProxmoxClients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxmoxClients")
            .field("clusters", &self.lock().len())
            .finish()
    }
}

/// Where a provider takes its client from: `clients`, under `cluster`.
#[derive(Clone, Debug)]
pub struct SharedClient {
    pub clients: ProxmoxClients,
    /// The ProxmoxCluster, as `namespace/name`.
    pub cluster: String,
}

impl ProxmoxClients {
    /// How many clients are kept now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The client of `cluster` for these settings: the one kept when it was
    /// built from the same, else a new one that replaces it.
    pub(crate) fn client(
        &self,
        cluster: &str,
        endpoints: &[Endpoint],
        token: &ApiToken,
        trust: &TrustSettings,
        timeouts: Timeouts,
    ) -> Result<Kept, ProviderError> {
        let key = Key {
            endpoints: endpoints.to_vec(),
            token_id: token.id().to_owned(),
            token_secret: token.secret().to_owned(),
            trust: trust.clone(),
        };
        let slot = Slot {
            cluster: cluster.to_owned(),
            timeouts,
        };
        let now = Instant::now();
        let mut clusters = self.lock();
        clusters.retain(|_, entry| now.duration_since(entry.used) < UNUSED_FOR);
        if let Some(entry) = clusters.get_mut(&slot).filter(|entry| entry.key == key) {
            entry.used = now;
            return Ok(entry.kept.clone());
        }
        let kept = Kept {
            client: Arc::new(build(endpoints, token, trust, timeouts)?),
            vms: Arc::default(),
        };
        clusters.insert(
            slot,
            Entry {
                key,
                kept: kept.clone(),
                used: now,
            },
        );
        Ok(kept)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Slot, Entry>> {
        self.clusters.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A client (and snapshot) of its own (no sharing), or the shared ones of `shared`.
pub(crate) fn client_for(
    shared: Option<&SharedClient>,
    endpoints: &[Endpoint],
    token: &ApiToken,
    trust: &TrustSettings,
    timeouts: Timeouts,
) -> Result<Kept, ProviderError> {
    match shared {
        Some(shared) => shared
            .clients
            .client(&shared.cluster, endpoints, token, trust, timeouts),
        None => Ok(Kept {
            client: Arc::new(build(endpoints, token, trust, timeouts)?),
            vms: Arc::default(),
        }),
    }
}

/// A client for these settings; trust settings that give no plan are
/// [`ProviderError::InvalidTls`], before any connection is made.
fn build(
    endpoints: &[Endpoint],
    token: &ApiToken,
    trust: &TrustSettings,
    timeouts: Timeouts,
) -> Result<Client, ProviderError> {
    let invalid_tls = |reason: String| ProviderError::InvalidTls { reason };
    let plan = trust::decide(trust).map_err(|e| invalid_tls(e.to_string()))?;
    let tls = tls::client_config(&plan).map_err(|e| invalid_tls(format!("TLS configuration: {e}")))?;
    Client::new(endpoints.to_vec(), token.clone(), tls, timeouts).map_err(|reason| ProviderError::InvalidTarget {
        target: "ProxmoxCluster".into(),
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn insecure(skip: bool) -> TrustSettings {
        TrustSettings::insecure(skip)
    }

    fn endpoints(urls: &[&str]) -> Vec<Endpoint> {
        urls.iter().map(|u| Endpoint::parse(u).unwrap()).collect()
    }

    #[test]
    fn a_cluster_keeps_its_client_until_what_it_was_built_from_changes() {
        let clients = ProxmoxClients::default();
        let one = endpoints(&["https://127.0.0.1:8006"]);
        let token = ApiToken::new("op@pve!t", "s1");
        let t = Timeouts::default();
        let first = clients.client("ns/pve", &one, &token, &insecure(true), t).unwrap();
        let again = clients.client("ns/pve", &one, &token, &insecure(true), t).unwrap();
        assert!(
            Arc::ptr_eq(&first.client, &again.client),
            "same settings: the same client"
        );
        assert!(Arc::ptr_eq(&first.vms, &again.vms), "and the same VM snapshot");

        let pinned = TrustSettings {
            certificate_fingerprints: vec!["AB".repeat(32)],
            ..TrustSettings::default()
        };
        let changes: [(&str, Vec<Endpoint>, ApiToken, TrustSettings); 5] = [
            (
                "a rotated token",
                one.clone(),
                ApiToken::new("op@pve!t", "s2"),
                insecure(true),
            ),
            (
                "another token id",
                one.clone(),
                ApiToken::new("op@pve!u", "s1"),
                insecure(true),
            ),
            (
                "an endpoint added",
                endpoints(&["https://127.0.0.1:8006", "https://127.0.0.2:8006"]),
                token.clone(),
                insecure(true),
            ),
            (
                "TLS verification turned on",
                one.clone(),
                token.clone(),
                insecure(false),
            ),
            ("a certificate pinned", one.clone(), token.clone(), pinned),
        ];
        for (change, endpoints, token, insecure) in changes {
            let changed = clients.client("ns/pve", &endpoints, &token, &insecure, t).unwrap();
            assert!(!Arc::ptr_eq(&first.client, &changed.client), "{change}: a new client");
            assert!(
                !Arc::ptr_eq(&first.vms, &changed.vms),
                "{change}: the snapshot taken with the old settings is dropped too"
            );
            assert_eq!(
                clients.len(),
                1,
                "{change}: the old client is replaced, not kept beside it"
            );
        }
        let other = clients.client("ns/pve2", &one, &token, &insecure(true), t).unwrap();
        assert!(
            !Arc::ptr_eq(&first.client, &other.client),
            "another cluster has its own"
        );
        assert!(!Arc::ptr_eq(&first.vms, &other.vms), "and its own snapshot");
        assert_eq!(clients.len(), 2);
    }

    #[test]
    fn a_user_with_other_timeouts_gets_a_client_beside_the_cluster_s_not_instead() {
        let clients = ProxmoxClients::default();
        let one = endpoints(&["https://127.0.0.1:8006"]);
        let token = ApiToken::new("op@pve!t", "s1");
        let t = Timeouts::default();
        let slower = Timeouts {
            request: t.request * 2,
            ..t
        };
        let first = clients.client("ns/pve", &one, &token, &insecure(true), t).unwrap();
        let beside = clients.client("ns/pve", &one, &token, &insecure(true), slower).unwrap();
        assert!(!Arc::ptr_eq(&first.client, &beside.client));
        let again = clients.client("ns/pve", &one, &token, &insecure(true), t).unwrap();
        assert!(
            Arc::ptr_eq(&first.client, &again.client),
            "the first client was not replaced"
        );
        assert_eq!(clients.len(), 2);
    }

    #[test]
    fn the_key_is_never_printed() {
        let clients = ProxmoxClients::default();
        let token = ApiToken::new("op@pve!t", "s3cret-value");
        clients
            .client(
                "ns/pve",
                &endpoints(&["https://127.0.0.1:8006"]),
                &token,
                &insecure(true),
                Timeouts::default(),
            )
            .unwrap();
        let printed = format!("{clients:?}");
        assert!(!printed.contains("s3cret-value"), "{printed}");
    }
}
