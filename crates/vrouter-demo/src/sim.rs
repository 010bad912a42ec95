//! The simulated routers and the services in front of them, all on
//! loopback: a simulated Proxmox VE API and KubeVirt API, with a real
//! qemu-ga and a guest sandbox (vbash = bash with stand-ins for VyOS's
//! config commands) per VM, and the real vrouter-daemon server with a real
//! vrouter-agent (running the same stand-ins) per daemon router.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use vrouter_providers::GuestPaths;

use vrouter_test_peers::daemon::{Agent, AgentFlags, Daemon};
use vrouter_test_peers::guest::GuestSandbox;
use vrouter_test_peers::kube::FakeKubeApi;
use vrouter_test_peers::proxmox::FakeProxmox;
use vrouter_test_peers::{AgentOptions, AgentProcess};

use crate::plan::{Loopback, SimRouter, Simulation};

/// The Proxmox node every simulated VM runs on.
pub const PROXMOX_NODE: &str = "pve1";
const KUBEVIRT_NODE: &str = "node-1";

/// Where drift detection reads each guest's startup config: relative, so
/// each qemu-ga resolves it in its own working directory (its "root").
/// The simulated guests share this machine's filesystem; one absolute
/// `/config/config.boot` would be the same file for all of them.
pub const CONFIG_BOOT_IN_GUEST: &str = "config.boot";

/// How drift detection asks each guest for its running config: the
/// sandbox's `cli-shell-api`, linked into the guest's own directory and run
/// from there, for the same reason as [`CONFIG_BOOT_IN_GUEST`].
pub const SHOW_RUNNING_IN_GUEST: [&str; 3] = ["./cli-shell-api", "showConfig", "--show-active-only"];

/// A VM's guest: its agent process and its sandbox.
pub struct Guest {
    pub agent: AgentProcess,
    pub sandbox: GuestSandbox,
    /// The agent's working directory; `config.boot` in it is the guest's
    /// startup config (a link to the sandbox's).
    pub root: PathBuf,
}

impl Guest {
    pub fn config_boot(&self) -> PathBuf {
        self.sandbox.dir().join("config.boot")
    }
}

pub struct Simulated {
    pub proxmox: FakeProxmox,
    pub kube_api: FakeKubeApi,
    pub daemon: Daemon,
    /// By target name; daemon routers have none.
    pub guests: HashMap<String, Guest>,
    /// The vrouter-daemon agents, by target name.
    pub agents: HashMap<String, Agent>,
    /// Holds the guests' roots; declared last so the agents stop first.
    _roots: tempfile::TempDir,
}

/// The startup config each simulated guest has before anything is applied.
pub fn initial_config_boot(target: &str) -> String {
    format!("system {{\n    host-name {target}\n}}\n")
}

impl Simulated {
    pub async fn start(routers: &[SimRouter], proxmox_token: (&str, &str)) -> anyhow::Result<Simulated> {
        let roots = tempfile::Builder::new()
            .prefix("vrouter-demo-guests-")
            .tempdir()
            .context("creating the guests' directory")?;
        let proxmox = FakeProxmox::start(proxmox_token.0, proxmox_token.1).await;
        let kube_api = FakeKubeApi::start().await;
        let daemon = Daemon::start();
        let mut guests = HashMap::new();
        let mut agents = HashMap::new();
        for (i, router) in routers.iter().enumerate() {
            let target = &router.target.name;
            if let Simulation::Daemon { agent_id } = &router.simulation {
                agents.insert(
                    target.clone(),
                    daemon.start_agent(agent_id, AgentFlags::default()).await,
                );
                continue;
            }
            let root = roots.path().join(target);
            std::fs::create_dir(&root).with_context(|| format!("creating {}", root.display()))?;
            let agent = start_agent_in(&root)?;
            let sandbox = GuestSandbox::new(agent.dir(), "vyos");
            let config_boot = sandbox.put_file("config.boot", initial_config_boot(target).as_bytes());
            std::os::unix::fs::symlink(&config_boot, root.join(CONFIG_BOOT_IN_GUEST))
                .context("linking the guest's config.boot")?;
            std::os::unix::fs::symlink(sandbox.dir().join("cli-shell-api"), root.join("cli-shell-api"))
                .context("linking the guest's cli-shell-api")?;
            if let Simulation::Proxmox { vmid } = &router.simulation {
                proxmox.add_vm(*vmid, PROXMOX_NODE, agent.socket_path());
            } else if let Simulation::KubeVirt { vmi_namespace, vmi } = &router.simulation {
                let uid = format!("00000000-0000-4000-8000-{i:012}");
                kube_api.put_vmi(vmi_namespace, vmi, &uid, "Running", KUBEVIRT_NODE);
                kube_api.put_launcher_pod(
                    vmi_namespace,
                    &format!("virt-launcher-{vmi}-demo"),
                    vmi,
                    &uid,
                    KUBEVIRT_NODE,
                    "Running",
                    Some(agent.socket_path()),
                );
            }
            guests.insert(target.clone(), Guest { agent, sandbox, root });
        }
        Ok(Simulated {
            proxmox,
            kube_api,
            daemon,
            guests,
            agents,
            _roots: roots,
        })
    }

    pub fn loopback(&self) -> Loopback {
        Loopback {
            proxmox_url: self.proxmox.url(0),
            daemon_address: self.daemon.address(),
            kube_api_url: self.kube_api.url(),
        }
    }

    pub fn guest_paths(&self) -> HashMap<String, GuestPaths> {
        self.guests
            .iter()
            .map(|(target, guest)| {
                let mut paths = guest.sandbox.paths();
                paths.config_boot = CONFIG_BOOT_IN_GUEST.into();
                paths.running_config = SHOW_RUNNING_IN_GUEST.map(str::to_owned).to_vec();
                (target.clone(), paths)
            })
            .collect()
    }
}

/// Starts a qemu-ga whose working directory is `root`: the agent inherits
/// this process's, so it is switched for the moment of the start (the demo
/// uses absolute paths everywhere else).
fn start_agent_in(root: &Path) -> anyhow::Result<AgentProcess> {
    let before = std::env::current_dir().context("reading the working directory")?;
    std::env::set_current_dir(root).with_context(|| format!("entering {}", root.display()))?;
    let agent = AgentProcess::start_with(AgentOptions {
        // As the test guests do: the OS id comes from the sandbox's
        // os-release, not from this machine's.
        blocked_rpcs: vec!["guest-get-osinfo".into()],
    });
    std::env::set_current_dir(&before).with_context(|| format!("returning to {}", before.display()))?;
    agent.map_err(|e| anyhow::anyhow!("cannot start qemu-ga for a simulated router: {e}"))
}
