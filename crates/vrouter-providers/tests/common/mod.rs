//! The routers the provider tests talk to, one module per provider: a real
//! qemu-ga and its guest sandbox behind the KubeVirt or Proxmox VE peer, or
//! a vrouter-daemon ControlService.

#![allow(dead_code)] // each test file uses its own subset

use std::time::Duration;

use vrouter_providers::GuestTiming;
use vrouter_test_peers::AgentProcess;
use vrouter_test_peers::guest::GuestSandbox;

/// How the tests poll guest helper commands: quickly, with room for a
/// loaded machine.
pub fn timing() -> GuestTiming {
    GuestTiming {
        poll_interval: Duration::from_millis(20),
        command_timeout: Duration::from_secs(20),
    }
}

/// A config.boot fragment with a quoted value and non-ASCII text.
pub const CONFIG: &str = "interfaces {\n    ethernet eth0 {\n        address 10.0.0.1/24\n        description \"Zürich uplink ✓\"\n    }\n}\nsystem {\n    host-name r1\n}\n";

/// A config larger than what one guest-agent write carries on either
/// carrier (48 KiB per `guest-file-write` through virsh, 46 KiB of content
/// per Proxmox `agent/file-write`): it arrives in several. Every leaf is on a
/// line of its own, as VyOS's parser requires, and no node has more than a
/// few hundred children: the parser's time grows with the square of a
/// node's children (4,000 siblings take it minutes).
pub fn large_config() -> String {
    let mut config = String::from("firewall {\n    group {\n");
    for group in 0..600 {
        config.push_str(&format!("        address-group g{group} {{\n"));
        for host in 0..10 {
            config.push_str(&format!("            address 192.0.{}.{host}\n", group % 250));
        }
        config.push_str(&format!(
            "            description \"ünïcode group {group}\"\n        }}\n"
        ));
    }
    config.push_str("    }\n}\n");
    assert!(config.len() > 4 * 48 * 1024);
    config
}

pub mod kubevirt {
    use vrouter_providers::kubevirt::{KubeVirtOptions, KubeVirtProvider};
    use vrouter_test_peers::kube::FakeKubeApi;
    use vrouter_test_peers::start_agent;

    use super::*;

    pub const NS: &str = "routers";
    pub const VM: &str = "vyos-a";
    pub const UID: &str = "6f0c1a52-0b1e-4f3a-9c1d-2a3b4c5d6e7f";

    /// A running VMI whose launcher pod's `virsh` reaches a real qemu-ga.
    pub struct Guest {
        pub agent: AgentProcess,
        pub sandbox: GuestSandbox,
        pub api: FakeKubeApi,
    }

    pub async fn guest(os_id: &str) -> Guest {
        let agent = start_agent();
        let sandbox = GuestSandbox::new(agent.dir(), os_id);
        let api = FakeKubeApi::start().await;
        api.put_vmi(NS, VM, UID, "Running", "node-a");
        api.put_launcher_pod(
            NS,
            "virt-launcher-vyos-a-x1",
            VM,
            UID,
            "node-a",
            "Running",
            Some(agent.socket_path()),
        );
        Guest { agent, sandbox, api }
    }

    impl Guest {
        pub fn provider(&self) -> KubeVirtProvider {
            KubeVirtProvider::new(
                self.api.client(),
                VM,
                NS,
                self.sandbox.paths(),
                timing(),
                KubeVirtOptions {
                    call_timeout: Duration::from_secs(20),
                    api_timeout: Duration::from_secs(20),
                    ..KubeVirtOptions::default()
                },
            )
            .unwrap()
        }
    }
}

pub mod proxmox {
    use vrouter_providers::proxmox::{ApiToken, ProxmoxProvider, ProxmoxSettings};
    use vrouter_test_peers::proxmox::FakeProxmox;
    use vrouter_test_peers::start_agent;

    use super::*;

    pub const TOKEN_ID: &str = "root@pam!vrouter";
    pub const TOKEN_SECRET: &str = "5f1c0b1e-7d2a-4c59-9a55-secret-value";
    pub const VMID: i64 = 100;

    /// A running VM on node `pve1` of a Proxmox VE API whose agent
    /// endpoints reach a real qemu-ga.
    pub struct Guest {
        pub agent: AgentProcess,
        pub sandbox: GuestSandbox,
        pub pve: FakeProxmox,
    }

    pub async fn guest(os_id: &str) -> Guest {
        let agent = start_agent();
        let sandbox = GuestSandbox::new(agent.dir(), os_id);
        let pve = FakeProxmox::start(TOKEN_ID, TOKEN_SECRET).await;
        pve.add_vm(VMID, "pve1", agent.socket_path());
        Guest { agent, sandbox, pve }
    }

    impl Guest {
        pub fn settings(&self, endpoints: Vec<String>) -> ProxmoxSettings {
            let mut s = ProxmoxSettings::new(endpoints, ApiToken::new(TOKEN_ID, TOKEN_SECRET), VMID);
            s.trust.insecure_skip_verify = true;
            s.cached_node = "pve1".into();
            s.connect_timeout = Duration::from_millis(500);
            s.request_timeout = Duration::from_secs(20);
            s.paths = self.sandbox.paths();
            s.timing = timing();
            s
        }

        pub fn provider(&self) -> ProxmoxProvider {
            ProxmoxProvider::new(self.settings(vec![self.pve.url(0)])).unwrap()
        }
    }
}

pub mod daemon {
    use std::sync::Arc;

    use vrouter_api::DaemonConfig;
    use vrouter_providers::daemon::{DaemonOptions, DaemonProvider, ExecRegistry};
    use vrouter_test_peers::daemon::Daemon;

    use super::*;

    /// A provider for `agent` through the server at `address`, recording
    /// its applies in `registry` (one per operator process).
    pub fn provider_at(
        address: String,
        agent: &str,
        timeout_seconds: i32,
        registry: Arc<ExecRegistry>,
    ) -> DaemonProvider {
        let options = DaemonOptions {
            grace: Duration::from_secs(5),
            call_timeout: Duration::from_secs(10),
            registry,
        };
        DaemonProvider::new(
            &DaemonConfig {
                address,
                agent_id: agent.into(),
                timeout_seconds,
                ca_bundle: None,
            },
            options,
        )
        .unwrap()
    }

    /// A provider for `agent` through `daemon`'s server, as a fresh operator
    /// process has it.
    pub fn provider(daemon: &Daemon, agent: &str, timeout_seconds: i32) -> DaemonProvider {
        provider_at(daemon.address(), agent, timeout_seconds, Arc::new(ExecRegistry::new()))
    }
}
