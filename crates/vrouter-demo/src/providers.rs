//! How the operator reaches the simulated routers: the production provider
//! factory, with each guest's helper programs in its own sandbox and
//! KubeVirt API calls sent to the simulated KubeVirt API.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use vrouter_api::VRouterTarget;
use vrouter_operator::runtime::context::Providers;
use vrouter_providers::proxmox::ProxmoxClients;
use vrouter_providers::{FactoryContext, GuestPaths, KeptProviders, KubeLookup, Provider, ProviderError};

pub struct DemoProviders {
    /// Looks up ProxmoxClusters and Secrets in the demo's API server.
    pub lookup: KubeLookup,
    /// The simulated KubeVirt API: the only Kubernetes API KubeVirt targets
    /// reach (the demo's API server has no KubeVirt).
    pub kubevirt_client: kube::Client,
    /// By target name.
    pub guest_paths: HashMap<String, GuestPaths>,
    /// Kept across reconciles, as the operator's factory keeps them.
    pub proxmox_clients: ProxmoxClients,
    /// Proxmox providers kept per target, as the operator's factory keeps them.
    pub kept: KeptProviders,
}

#[async_trait]
impl Providers for DemoProviders {
    async fn for_target(&self, target: &VRouterTarget) -> Result<Arc<dyn Provider>, ProviderError> {
        let name = target.metadata.name.as_deref().unwrap_or_default();
        let factory = FactoryContext {
            client: Some(self.kubevirt_client.clone()),
            guest_paths: self.guest_paths.get(name).cloned().unwrap_or_default(),
            proxmox_clients: self.proxmox_clients.clone(),
            ..FactoryContext::default()
        };
        self.kept.provider(target, &self.lookup, &factory).await
    }

    fn proxmox_clients(&self) -> ProxmoxClients {
        self.proxmox_clients.clone()
    }
}
