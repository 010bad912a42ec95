//! Writing a binding's generated configs: create, or patch only what the
//! binding owns, never taking a config from another controller.

use futures::StreamExt;
use kube::ResourceExt;
use kube::api::{Api, Patch};
use vrouter_api::constants::{FINALIZER, LABEL_BINDING_PAUSED};
use vrouter_api::{VRouterConfig, VRouterConfigSpec};

use super::decide;
use super::error::Error;
use crate::runtime::own_writes::OwnWrites;
use crate::runtime::status_writes;

/// Config writes of one binding in flight at once.
const WRITE_CONCURRENCY: usize = 16;

/// Each (desired, existing) pair written as [`write_config`] does, up to
/// [`WRITE_CONCURRENCY`] at a time; the first error ends the batch.
pub async fn write_all(
    api: &Api<VRouterConfig>,
    own: &OwnWrites,
    writes: Vec<(&VRouterConfig, Option<&VRouterConfig>)>,
) -> Result<(), Error> {
    let mut pending = futures::stream::FuturesUnordered::new();
    let mut queue = writes.into_iter();
    loop {
        while pending.len() < WRITE_CONCURRENCY {
            let Some((desired, existing)) = queue.next() else { break };
            pending.push(write_config(api, own, desired, existing));
        }
        match pending.next().await {
            Some(result) => result?,
            None => return Ok(()),
        }
    }
}

/// Creates or patches one config; the object written is recorded in `own`,
/// so that the binding's next reconcile waits for the config store to hold it.
pub async fn write_config(
    api: &Api<VRouterConfig>,
    own: &OwnWrites,
    desired: &VRouterConfig,
    existing: Option<&VRouterConfig>,
) -> Result<(), Error> {
    match existing {
        None => match api
            .create(&crate::runtime::context::post_params(), &with_finalizer(desired))
            .await
        {
            Ok(created) => own.record(&created),
            // Existing configs are found by the binding's label: one of its
            // own whose label was removed is found only now. It is put
            // right; a config of that name the binding does not control is
            // not its to change, and the conflict is reported.
            Err(kube::Error::Api(e)) if e.code == 409 => {
                let current = api.get(&desired.name_any()).await?;
                if !decide::controlled_by_the_same_owner(&current, desired) {
                    return Err(kube::Error::Api(e).into());
                }
                patch_config(api, own, &current, desired).await?;
            }
            Err(e) => return Err(e.into()),
        },
        Some(current) if decide::needs_write(current, desired) => {
            // Carrying the binding's label does not make a config the
            // binding's to take from another controller.
            if let Some(other) = decide::other_controller(current, desired) {
                return Err(Error::NotOurs(format!(
                    "VRouterConfig {:?} carries this binding's label but is controlled by {other}",
                    desired.name_any()
                )));
            }
            patch_config(api, own, current, desired).await?
        }
        Some(_) => {}
    }
    Ok(())
}

/// `desired` with the config controller's finalizer, which the controller
/// would otherwise add with a write of its own to every new config (one
/// write in nine at creation, issue 25). A patch never sends finalizers, so
/// the controller alone removes it, when the config is deleted.
fn with_finalizer(desired: &VRouterConfig) -> VRouterConfig {
    let mut config = desired.clone();
    let finalizers = config.metadata.finalizers.get_or_insert_with(Vec::new);
    if !finalizers.iter().any(|f| f == FINALIZER) {
        finalizers.push(FINALIZER.to_owned());
    }
    config
}

async fn patch_config(
    api: &Api<VRouterConfig>,
    own: &OwnWrites,
    current: &VRouterConfig,
    desired: &VRouterConfig,
) -> Result<(), Error> {
    let mut labels = serde_json::json!(desired.metadata.labels);
    if let Some(labels) = labels.as_object_mut() {
        // A merge patch keeps a label it leaves out: the paused label the
        // desired config no longer has is removed by name.
        labels.entry(LABEL_BINDING_PAUSED).or_insert(serde_json::Value::Null);
    }
    let patch = serde_json::json!({
        "metadata": {
            "labels": labels,
            "ownerReferences": desired.metadata.owner_references,
        },
        // Only what changed, and `null` for what the desired spec no longer
        // has: its empty `config`/`commands` are left out when serialized,
        // and a merge patch that leaves a key out keeps the old value
        // (applied again with the next change).
        "spec": status_writes::merge_patch(&json_of(&current.spec), &json_of(&desired.spec)),
    });
    let written = api
        .patch(
            &desired.name_any(),
            &crate::runtime::context::patch_params(),
            &Patch::Merge(patch),
        )
        .await?;
    own.record(&written);
    Ok(())
}

fn json_of(spec: &VRouterConfigSpec) -> serde_json::Value {
    serde_json::to_value(spec).expect("a VRouterConfig spec serializes")
}
