//! Where drift detection keeps the configs it reads from a router: a Secret
//! `vrs-<name>-config` of type [`SECRET_TYPE`] in the VRouterStatus's
//! namespace, owned by it (keys `startup` and `running`).
//!
//! The proposal stored them in a ConfigMap. A router's config holds its
//! secrets — password hashes, IPsec pre-shared keys, BGP passwords, SNMP
//! communities, WireGuard private keys — and ConfigMaps are read by roles
//! that were never meant to read secrets (`view`, most dashboards,
//! `kubectl describe`), are not encrypted at rest by an
//! EncryptionConfiguration that covers Secrets, and are often exported by
//! backup and GitOps tools. A Secret gets the protection a cluster already
//! gives credentials.
//!
//! The type is how the operator's writes are kept to its own Secrets: the
//! RBAC verbs on Secrets cannot be narrowed to "the ones it made", so the
//! shipped ValidatingAdmissionPolicy lets the operator's identity create
//! and patch only Secrets of this type (docs/security.md).
//!
//! Earlier versions left a ConfigMap of the same name, named by
//! `status.configMapRef`: it is deleted at the next sync (it holds a stale copy).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use vrouter_api::{ControllerRef, VRouterStatus, VRouterStatusStatus};

use super::decide::{self, Reading};
use super::read_config::{MAX_STORED_BYTES, ReadConfig};
use crate::runtime::context::FIELD_MANAGER;

/// The type of the Secrets drift detection writes; the only Secrets the
/// operator may create or change.
pub const SECRET_TYPE: &str = vrouter_api::constants::ROUTER_CONFIG_SECRET_TYPE;

fn is_ours(secret: &Secret) -> bool {
    secret.type_.as_deref() == Some(SECRET_TYPE)
}

/// Keeps the configs read from the router: stores them in the Secret
/// (`next.configSecretRef`, or why not in `next.message`) and removes the
/// ConfigMap an earlier version kept them in (named by `previous`).
pub async fn keep(
    client: &kube::Client,
    vrs: &VRouterStatus,
    previous: &VRouterStatusStatus,
    reading: &Reading,
    startup: &ReadConfig,
    running: &ReadConfig,
    next: &mut VRouterStatusStatus,
) -> Result<(), kube::Error> {
    let name = vrs.config_secret_name();
    next.config_secret_ref = if decide::secret_holds(previous, &name, reading) {
        name
    } else {
        store(client, vrs, startup, running, &mut next.message).await?
    };
    // An earlier version's ConfigMap goes whether or not the configs could
    // be stored now: it holds a stale copy of them.
    if !previous.config_map_ref.is_empty() {
        remove_legacy_config_map(client, vrs, &previous.config_map_ref).await?;
        next.config_map_ref.clear();
    }
    Ok(())
}

/// Stores both configs in the Secret and returns its name, or `""` with
/// the reason in `message` when they are not stored: too large for one
/// object (an existing Secret is emptied), or the name is taken by a Secret
/// that is not the operator's (left alone).
///
/// The Secret is written without reading it first: the usual case (a new
/// Secret, or new configs in the operator's own) needs no read. The name
/// being taken shows as the write refused (a Secret's type cannot change,
/// and the shipped policy refuses other types), and only then is the
/// Secret read, to say whose it is.
async fn store(
    client: &kube::Client,
    vrs: &VRouterStatus,
    startup: &ReadConfig,
    running: &ReadConfig,
    message: &mut String,
) -> Result<String, kube::Error> {
    let name = vrs.config_secret_name();
    let api: Api<Secret> = Api::namespaced(client.clone(), &vrs.namespace().unwrap_or_default());
    let refusal = decide::too_large_to_store(startup.len, running.len, MAX_STORED_BYTES);
    let refused_write = match refusal {
        Some(_) => None,
        // Within the limit, each config's bytes were kept.
        None => {
            let data = BTreeMap::from([
                ("startup".to_owned(), ByteString(startup.kept.clone())),
                ("running".to_owned(), ByteString(running.kept.clone())),
            ]);
            match apply(&api, vrs, &name, data).await {
                Ok(()) => return Ok(name),
                Err(kube::Error::Api(e)) if e.code == 403 || e.code == 422 => Some(e),
                Err(e) => return Err(e),
            }
        }
    };
    // A write refused, or configs too large: what holds the name decides.
    let existing = api.get_opt(&name).await?;
    if let Some(foreign) = existing.as_ref().filter(|s| !is_ours(s)) {
        *message = format!(
            "the Secret {name:?} exists and is not the operator's (type {:?}, not {SECRET_TYPE:?}); \
             the configs are not stored: delete or rename it",
            foreign.type_.as_deref().unwrap_or("")
        );
        return Ok(String::new());
    }
    if let Some(refused) = refused_write {
        return Err(kube::Error::Api(refused));
    }
    // Too large: an older, smaller copy would be taken for the current one,
    // so the Secret is emptied (not deleted: the operator needs no `delete`
    // on Secrets; garbage collection removes it with its VRouterStatus).
    if existing
        .as_ref()
        .is_some_and(|s| s.data.as_ref().is_some_and(|d| !d.is_empty()))
    {
        apply(&api, vrs, &name, BTreeMap::new()).await?;
    }
    *message = refusal.unwrap_or_default();
    Ok(String::new())
}

/// Writes the Secret `name` with `data` (server-side apply), owned by `vrs`.
async fn apply(
    api: &Api<Secret>,
    vrs: &VRouterStatus,
    name: &str,
    data: BTreeMap<String, ByteString>,
) -> Result<(), kube::Error> {
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            owner_references: vrs.controller_ref().map(|owner| vec![owner]),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/managed-by".to_owned(),
                FIELD_MANAGER.to_owned(),
            )])),
            ..Default::default()
        },
        type_: Some(SECRET_TYPE.to_owned()),
        data: Some(data),
        ..Default::default()
    };
    api.patch(name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&secret))
        .await
        .map(|_| ())
}

/// Deletes the ConfigMap an earlier version kept the configs in, named by
/// `status.configMapRef`. Only that name is ever deleted, and only when it
/// is the name those versions gave it.
async fn remove_legacy_config_map(
    client: &kube::Client,
    vrs: &VRouterStatus,
    config_map_ref: &str,
) -> Result<(), kube::Error> {
    if config_map_ref != vrs.config_secret_name() {
        return Ok(());
    }
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &vrs.namespace().unwrap_or_default());
    match api.delete(config_map_ref, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}
