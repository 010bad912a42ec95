//! Which vrouter-daemon agents the VRouterTargets of a namespace may reach.
//!
//! A daemon target names an address and an agent id, and the operator
//! calls that daemon with its own network identity to run a router's whole
//! configuration on the agent. Without a check, whoever may create a
//! VRouterTarget in namespace A would control any router behind any daemon
//! the operator can reach. A daemon endpoint is not a Kubernetes object, so
//! no namespace owns it; its owner is whoever runs the operator and the
//! daemon: a cluster administrator. They grant, on the target namespace's
//! Namespace object, the annotation [`ANNOTATION_ALLOWED_DAEMON_AGENTS`]:
//! the `ENDPOINT/AGENT` pairs its targets may reach. A Namespace is
//! cluster-scoped, so a namespace admin cannot edit it and a tenant cannot
//! grant itself another tenant's routers. The webhook refuses a target
//! without the grant, and the provider factory refuses to reach the agent
//! (a grant can be withdrawn after the target was admitted).
//!
//! Every daemon target needs the grant, including one in the namespace the
//! daemon runs in: the address is free text and says nothing verifiable
//! about who owns the endpoint.

use std::collections::BTreeMap;
use std::fmt;

use crate::target::VRouterTarget;

/// Annotation on a Namespace: comma-separated `ENDPOINT/AGENT` entries
/// naming the daemon agents this namespace's VRouterTargets may reach.
/// `ENDPOINT` is the daemon's `host:port` (a scheme written before it is
/// ignored); `AGENT` is an agent id, `PREFIX*` for the ids starting with
/// `PREFIX`, or `*` for every agent of that endpoint.
pub const ANNOTATION_ALLOWED_DAEMON_AGENTS: &str = "vrouter.kojuro.date/allowed-daemon-agents";

/// A daemon agent reached from a target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DaemonReach {
    /// Where the VRouterTarget lives: the namespace that must be granted.
    pub target_namespace: String,
    /// The daemon's endpoint as [`endpoint_key`] spells it.
    pub endpoint: String,
    pub agent_id: String,
}

impl VRouterTarget {
    /// The daemon agent this target reaches, when its provider type selects
    /// a daemon block (every such reach needs a grant). A target without a
    /// namespace still reaches its agent, from a namespace no grant names.
    pub fn daemon_reach(&self) -> Option<DaemonReach> {
        let own = self.metadata.namespace.as_deref().unwrap_or_default();
        if self.spec.provider.type_ != crate::ProviderType::VRouterDaemon {
            return None;
        }
        let daemon = self.spec.provider.daemon.as_ref()?;
        Some(DaemonReach {
            target_namespace: own.to_owned(),
            endpoint: endpoint_key(&daemon.address),
            agent_id: daemon.agent_id.trim().to_owned(),
        })
    }
}

/// The endpoint an address names, for comparing a target with a grant:
/// without surrounding blanks, `http://` or `https://` scheme and trailing
/// `/`, in lower case (host names are case-insensitive). The scheme is
/// transport, not identity: the same daemon may be reached either way.
pub fn endpoint_key(address: &str) -> String {
    without_scheme(address.trim())
        .trim_end_matches('/')
        .to_ascii_lowercase()
}

/// `text` without a leading `http://` or `https://` (in any case).
fn without_scheme(text: &str) -> &str {
    ["http://", "https://"]
        .iter()
        .find_map(|scheme| {
            text.get(..scheme.len())
                .filter(|head| head.eq_ignore_ascii_case(scheme))
                .map(|_| &text[scheme.len()..])
        })
        .unwrap_or(text)
}

/// One entry of the annotation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DaemonGrant {
    pub endpoint: String,
    pub agent: String,
}

impl DaemonGrant {
    fn covers(&self, reach: &DaemonReach) -> bool {
        if self.endpoint != reach.endpoint {
            return false;
        }
        match self.agent.strip_suffix('*') {
            Some(prefix) => reach.agent_id.starts_with(prefix),
            None => self.agent == reach.agent_id,
        }
    }
}

/// The entries of an annotation value: the well-formed grants, and the
/// entries that grant nothing because they are not `ENDPOINT/AGENT`.
pub fn parse_grants(value: &str) -> (Vec<DaemonGrant>, Vec<String>) {
    let mut grants = Vec::new();
    let mut malformed = Vec::new();
    for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        match without_scheme(entry).trim_end_matches('/').split_once('/') {
            Some((endpoint, agent)) if !endpoint.is_empty() && !agent.is_empty() && !agent.contains('/') => {
                // Agent ids are compared exactly; only the host is case-insensitive.
                grants.push(DaemonGrant {
                    endpoint: endpoint_key(endpoint),
                    agent: agent.to_owned(),
                });
            }
            _ => malformed.push(entry.to_owned()),
        }
    }
    (grants, malformed)
}

/// Why a target may not reach a daemon agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DaemonAccessDenied {
    /// The target's namespace does not exist (it was deleted).
    NoSuchNamespace(DaemonReach),
    /// The target's namespace has no grant covering the agent.
    NotGranted {
        reach: DaemonReach,
        /// The annotation's current value, to extend rather than replace.
        current: Option<String>,
        /// Entries of that value that grant nothing.
        malformed: Vec<String>,
    },
}

/// The value for `kubectl annotate`, quoted for a POSIX shell when it holds
/// anything but plain name characters (a `*` would otherwise glob).
fn shell_word(value: &str) -> String {
    let plain = value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || ".,:/_-=".contains(c));
    if plain {
        value.to_owned()
    } else {
        format!("'{}'", value.replace('\'', r"'\''"))
    }
}

impl fmt::Display for DaemonAccessDenied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DaemonAccessDenied::NoSuchNamespace(reach) => write!(
                f,
                "namespace {:?} does not exist, so its VRouterTargets cannot reach agent {:?} of the vrouter-daemon at {:?}",
                reach.target_namespace, reach.agent_id, reach.endpoint
            ),
            DaemonAccessDenied::NotGranted {
                reach,
                current,
                malformed,
            } => {
                let mut wanted: Vec<String> = current
                    .as_deref()
                    .map(|v| {
                        v.split(',')
                            .map(str::trim)
                            .filter(|e| !e.is_empty())
                            .map(str::to_owned)
                            .collect()
                    })
                    .unwrap_or_default();
                wanted.push(format!("{}/{}", reach.endpoint, reach.agent_id));
                write!(
                    f,
                    "namespace {ns:?} is not granted agent {agent:?} of the vrouter-daemon at {endpoint:?} \
                     (a daemon agent is reached only with a grant a cluster administrator puts on the target's Namespace)",
                    ns = reach.target_namespace,
                    agent = reach.agent_id,
                    endpoint = reach.endpoint,
                )?;
                if !malformed.is_empty() {
                    write!(f, "; entries that grant nothing (not ENDPOINT/AGENT): {malformed:?}")?;
                }
                write!(
                    f,
                    "; someone who may edit Namespaces grants it with: kubectl annotate namespace {ns} --overwrite {key}={list}",
                    ns = reach.target_namespace,
                    key = ANNOTATION_ALLOWED_DAEMON_AGENTS,
                    list = shell_word(&wanted.join(",")),
                )
            }
        }
    }
}

impl std::error::Error for DaemonAccessDenied {}

/// Whether `reach` is granted by its namespace's annotations; `None` for
/// annotations means the namespace does not exist.
pub fn check_daemon_access(
    reach: &DaemonReach,
    target_namespace_annotations: Option<&BTreeMap<String, String>>,
) -> Result<(), DaemonAccessDenied> {
    let granting_namespace = target_namespace_annotations.filter(|_| !reach.target_namespace.is_empty());
    let Some(annotations) = granting_namespace else {
        return Err(DaemonAccessDenied::NoSuchNamespace(reach.clone()));
    };
    let current = annotations.get(ANNOTATION_ALLOWED_DAEMON_AGENTS);
    let (grants, malformed) = current.map(|v| parse_grants(v)).unwrap_or_default();
    if !reach.agent_id.is_empty() && grants.iter().any(|g| g.covers(reach)) {
        return Ok(());
    }
    Err(DaemonAccessDenied::NotGranted {
        reach: reach.clone(),
        current: current.cloned(),
        malformed,
    })
}

#[cfg(test)]
#[path = "daemon_access_tests.rs"]
mod tests;
