//! Proxmox providers built once per target and kept while what they were
//! built from stays the same.
//!
//! An idle 1,000-router fleet asks its providers about 11,000 times in five
//! minutes (uptime sweeps, VM polls, drift reads). Building each time —
//! parsing the token and endpoints, finding the cluster's shared client —
//! was a sixth of the idle operator's CPU. A kept provider is handed out
//! again only while the target's plan, its ProxmoxCluster's spec (uid and
//! generation: the cluster's status is written on every sync, its spec is
//! not) and its credentials Secret (uid and resourceVersion) are as they
//! were, all looked up on every call through the factory's lookup, so a
//! rotated token or a changed endpoint list takes effect as soon as the
//! lookup sees it, as it did when every call built.
//!
//! KubeVirt providers are built on every call: each resolves its VMI's
//! launcher pod once and would keep using a pod a migration retired.
//! vrouter-daemon providers are cheap to build (their channels are shared).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use vrouter_api::VRouterTarget;

use crate::error::ProviderError;
use crate::factory::{FactoryContext, ObjectLookup, Plan, ProxmoxSources, build_planned, plan};
use crate::provider::Provider;
use crate::proxmox::TrustSettings;

/// A kept provider not asked for in this long is dropped (its target was
/// deleted, or moved to another provider type).
pub const UNUSED_FOR: Duration = Duration::from_secs(600);

/// What a Proxmox provider was built from. Equal fingerprints build equal
/// providers, so one may stand for the other.
#[derive(Debug)]
struct Fingerprint {
    plan: Plan,
    cluster_uid: String,
    cluster_generation: i64,
    secret_uid: String,
    secret_version: String,
    /// With the CA bundle's text: a bundle rotated in its Secret builds anew.
    trust: TrustSettings,
}

impl Fingerprint {
    /// `None` when an object lacks what tells its versions apart (objects
    /// made in a test rather than read from an API server): such a provider
    /// is built every time.
    fn of(plan: &Plan, sources: &ProxmoxSources) -> Option<Fingerprint> {
        let cluster = &sources.cluster.metadata;
        let secret = &sources.secret.metadata;
        Some(Fingerprint {
            plan: plan.clone(),
            cluster_uid: cluster.uid.clone()?,
            cluster_generation: cluster.generation?,
            secret_uid: secret.uid.clone()?,
            secret_version: secret.resource_version.clone()?,
            trust: sources.trust.clone(),
        })
    }

    /// Whether `plan` and `sources` have this fingerprint (compared in
    /// place: every call for a provider asks).
    fn matches(&self, plan: &Plan, sources: &ProxmoxSources) -> bool {
        let cluster = &sources.cluster.metadata;
        let secret = &sources.secret.metadata;
        &self.plan == plan
            && cluster.uid.as_ref() == Some(&self.cluster_uid)
            && cluster.generation == Some(self.cluster_generation)
            && secret.uid.as_ref() == Some(&self.secret_uid)
            && secret.resource_version.as_ref() == Some(&self.secret_version)
            && sources.trust == self.trust
    }
}

struct Kept {
    fingerprint: Fingerprint,
    provider: Arc<dyn Provider>,
    used: Instant,
}

/// The providers kept per target (by uid: a target made again under its
/// old name starts afresh). One per [`FactoryContext`]: the context's
/// settings are not in the fingerprint.
#[derive(Default)]
pub struct KeptProviders {
    kept: Mutex<HashMap<String, Kept>>,
    swept: Mutex<Option<Instant>>,
}

impl KeptProviders {
    /// The provider of `target`: the kept one while its fingerprint holds,
    /// else a new one (kept for next time when it is a Proxmox provider).
    pub async fn provider(
        &self,
        target: &VRouterTarget,
        lookup: &dyn ObjectLookup,
        ctx: &FactoryContext,
    ) -> Result<Arc<dyn Provider>, ProviderError> {
        self.sweep_unused();
        let plan = plan(target)?;
        let Plan::Proxmox {
            vmid,
            cluster_namespace,
            cluster_name,
            cached_node,
        } = &plan
        else {
            return Ok(Arc::from(build_planned(plan, target, lookup, ctx).await?));
        };
        let sources = ProxmoxSources::look_up(cluster_namespace, cluster_name, target, lookup).await?;
        let uid = target.metadata.uid.as_deref();
        if let Some(provider) = uid.and_then(|uid| self.reuse(uid, &plan, &sources)) {
            return Ok(provider);
        }
        let provider: Arc<dyn Provider> = Arc::new(sources.provider(*vmid, cached_node.clone(), ctx)?);
        if let (Some(uid), Some(fingerprint)) = (uid, Fingerprint::of(&plan, &sources)) {
            let kept = Kept {
                fingerprint,
                provider: provider.clone(),
                used: Instant::now(),
            };
            self.lock().insert(uid.to_owned(), kept);
        }
        Ok(provider)
    }

    /// How many providers are kept.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Kept>> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn reuse(&self, uid: &str, plan: &Plan, sources: &ProxmoxSources) -> Option<Arc<dyn Provider>> {
        let mut kept = self.lock();
        let entry = kept.get_mut(uid).filter(|k| k.fingerprint.matches(plan, sources))?;
        entry.used = Instant::now();
        Some(entry.provider.clone())
    }

    /// Drops providers unused for [`UNUSED_FOR`]; looks at most once a
    /// minute, so a call costs one clock read.
    fn sweep_unused(&self) {
        let now = Instant::now();
        {
            let mut swept = self.swept.lock().unwrap_or_else(|e| e.into_inner());
            if swept.is_some_and(|at| now.duration_since(at) < Duration::from_secs(60)) {
                return;
            }
            *swept = Some(now);
        }
        self.lock().retain(|_, k| now.duration_since(k.used) < UNUSED_FOR);
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Secret;
    use serde_json::json;
    use vrouter_api::ProxmoxCluster;

    use super::*;
    use crate::factory::StaticLookup;

    /// A target, its ProxmoxCluster and the cluster's Secret, as an API
    /// server would hand them out (uids, generation, resourceVersions).
    #[derive(Clone)]
    struct World {
        target: VRouterTarget,
        cluster: ProxmoxCluster,
        secret: Secret,
    }

    impl World {
        fn new() -> Self {
            World {
                target: serde_json::from_value(json!({
                    "metadata": {"name": "r1", "namespace": "site-a", "uid": "t-1"},
                    "spec": {"provider": {"type": "proxmox", "proxmox": {"vmid": 100, "clusterRef": {"name": "pve"}}}},
                    "status": {"proxmoxNode": "pve1"},
                }))
                .unwrap(),
                cluster: serde_json::from_value(json!({
                    "metadata": {"name": "pve", "namespace": "site-a", "uid": "c-1", "generation": 1, "resourceVersion": "10"},
                    "spec": {"endpoints": ["https://127.0.0.1:8006"], "credentialsRef": {"name": "pve-token"}},
                }))
                .unwrap(),
                secret: serde_json::from_value(json!({
                    "metadata": {"name": "pve-token", "namespace": "site-a", "uid": "s-1", "resourceVersion": "20"},
                    "stringData": {"api-token-id": "op@pve!vrouter", "api-token-secret": "first"},
                }))
                .unwrap(),
            }
        }

        fn lookup(&self) -> StaticLookup {
            StaticLookup {
                secrets: vec![self.secret.clone()],
                proxmox_clusters: vec![self.cluster.clone()],
                namespaces: Vec::new(),
            }
        }
    }

    async fn provider_in(kept: &KeptProviders, world: &World) -> Result<Arc<dyn Provider>, ProviderError> {
        kept.provider(&world.target, &world.lookup(), &FactoryContext::default())
            .await
    }

    #[tokio::test]
    async fn a_provider_is_kept_exactly_while_what_it_was_built_from_stays() {
        type Change = fn(&mut World);
        // (what changed since the first provider was built, whether that
        // provider is handed out again)
        let cases: [(&str, Change, bool); 10] = [
            ("nothing", |_| {}, true),
            (
                "the cluster's status (a sync): resourceVersion, not generation",
                |w| w.cluster.metadata.resource_version = Some("11".into()),
                true,
            ),
            (
                "a label on the target",
                |w| {
                    w.target.metadata.labels = Some([("a".to_string(), "b".to_string())].into());
                },
                true,
            ),
            (
                "the Secret (a rotated token)",
                |w| {
                    w.secret.metadata.resource_version = Some("21".into());
                    w.secret
                        .string_data
                        .as_mut()
                        .unwrap()
                        .insert("api-token-secret".into(), "second".into());
                },
                false,
            ),
            (
                "the Secret deleted and made again",
                |w| w.secret.metadata.uid = Some("s-2".into()),
                false,
            ),
            (
                "the cluster's spec (endpoints)",
                |w| {
                    w.cluster.metadata.generation = Some(2);
                    w.cluster.spec.endpoints = vec!["https://127.0.0.2:8006".into()];
                },
                false,
            ),
            (
                "the cluster deleted and made again",
                |w| w.cluster.metadata.uid = Some("c-2".into()),
                false,
            ),
            (
                "the target's vmid",
                |w| w.target.spec.provider.proxmox.as_mut().unwrap().vmid = 101,
                false,
            ),
            (
                "the target's recorded node",
                |w| w.target.status.as_mut().unwrap().proxmox_node = "pve2".into(),
                false,
            ),
            (
                "the target's ProxmoxCluster",
                |w| {
                    w.target.spec.provider.proxmox.as_mut().unwrap().cluster_ref.name = "pve-b".into();
                    w.cluster.metadata.name = Some("pve-b".into());
                },
                false,
            ),
        ];
        for (change, apply, reused) in cases {
            let kept = KeptProviders::default();
            let mut world = World::new();
            let first = provider_in(&kept, &world).await.unwrap();
            assert!(
                Arc::ptr_eq(&first, &provider_in(&kept, &world).await.unwrap()),
                "{change}"
            );
            apply(&mut world);
            let next = provider_in(&kept, &world).await.unwrap();
            assert_eq!(Arc::ptr_eq(&first, &next), reused, "after {change}");
            assert_eq!(kept.len(), 1, "{change}: one provider per target");
            // What replaced it is kept in turn.
            assert!(
                Arc::ptr_eq(&next, &provider_in(&kept, &world).await.unwrap()),
                "{change}"
            );
        }
    }

    #[tokio::test]
    async fn a_kept_provider_is_not_handed_out_once_its_credentials_are_gone() {
        let kept = KeptProviders::default();
        let mut world = World::new();
        provider_in(&kept, &world).await.unwrap();
        world.secret.metadata.name = Some("other".into());
        let Err(error) = provider_in(&kept, &world).await else {
            panic!("the Secret is gone")
        };
        assert!(
            matches!(&error, ProviderError::ReferenceNotFound { kind: "Secret", .. }),
            "{error:?}"
        );
        world.secret.metadata.name = Some("pve-token".into());
        world.secret.string_data = Some([("api-token-id".to_string(), "op@pve!vrouter".to_string())].into());
        world.secret.metadata.resource_version = Some("22".into());
        let Err(error) = provider_in(&kept, &world).await else {
            panic!("the token secret is gone")
        };
        assert!(error.to_string().contains("api-token-secret"), "{error}");
    }

    #[tokio::test]
    async fn objects_without_uids_or_versions_are_never_kept() {
        type Unversion = fn(&mut World);
        let cases: [(&str, Unversion); 5] = [
            ("target uid", |w| w.target.metadata.uid = None),
            ("cluster uid", |w| w.cluster.metadata.uid = None),
            ("cluster generation", |w| w.cluster.metadata.generation = None),
            ("Secret uid", |w| w.secret.metadata.uid = None),
            ("Secret resourceVersion", |w| w.secret.metadata.resource_version = None),
        ];
        for (missing, unversion) in cases {
            let kept = KeptProviders::default();
            let mut world = World::new();
            unversion(&mut world);
            let first = provider_in(&kept, &world).await.unwrap();
            assert!(
                !Arc::ptr_eq(&first, &provider_in(&kept, &world).await.unwrap()),
                "no {missing}"
            );
            assert!(kept.is_empty(), "no {missing}");
        }
    }

    #[tokio::test]
    async fn other_providers_are_built_on_every_call() {
        let kept = KeptProviders::default();
        let target: VRouterTarget = serde_json::from_value(json!({
            "metadata": {"name": "d1", "namespace": "site-a", "uid": "t-9"},
            "spec": {"provider": {"type": "vrouter-daemon", "daemon": {"address": "127.0.0.1:50051", "agentID": "r1"}}},
        }))
        .unwrap();
        let ctx = FactoryContext::default();
        // Its namespace is granted the agent, as a daemon target needs.
        let granted: k8s_openapi::api::core::v1::Namespace = serde_json::from_value(json!({"metadata": {
            "name": "site-a",
            "annotations": {vrouter_api::daemon_access::ANNOTATION_ALLOWED_DAEMON_AGENTS: "127.0.0.1:50051/r1"},
        }}))
        .unwrap();
        let lookup = StaticLookup {
            namespaces: vec![granted],
            ..StaticLookup::default()
        };
        let first = kept.provider(&target, &lookup, &ctx).await.unwrap();
        let second = kept.provider(&target, &lookup, &ctx).await.unwrap();
        assert!(!Arc::ptr_eq(&first, &second));
        assert!(kept.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn providers_unused_for_ten_minutes_are_dropped() {
        let kept = KeptProviders::default();
        let mut world = World::new();
        provider_in(&kept, &world).await.unwrap();
        world.target.metadata.name = Some("r2".into());
        world.target.metadata.uid = Some("t-2".into());
        tokio::time::advance(UNUSED_FOR - Duration::from_secs(30)).await;
        provider_in(&kept, &world).await.unwrap();
        assert_eq!(kept.len(), 2, "r1 is not yet unused for long enough");
        tokio::time::advance(Duration::from_secs(61)).await;
        provider_in(&kept, &world).await.unwrap();
        assert_eq!(kept.len(), 1, "r1 is dropped, r2 stays");
    }
}
