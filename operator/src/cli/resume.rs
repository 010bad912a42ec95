//! `resume`: ends the hold of a binding rolling out in waves with
//! `untilResumed`, by writing a new value into `spec.rollout.waves.resume`
//! (the same field GitOps writes; the walk compares it with the value the
//! hold began with, which `status.waves.heldAtResume` shows).

use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use vrouter_api::{RolloutMode, VRouterBinding};

/// Why a binding could not be resumed.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    #[error("VRouterBinding {namespace}/{name} not found")]
    NotFound { namespace: String, name: String },
    #[error("VRouterBinding {namespace}/{name} does not roll out in waves (spec.rollout.mode is {mode:?}, not Waves)")]
    NotWaves {
        namespace: String,
        name: String,
        mode: RolloutMode,
    },
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
}

/// Writes a new resume token into the binding `namespace/name` and says
/// where its rollout stood.
pub async fn resume(client: &Client, namespace: &str, name: &str) -> Result<String, ResumeError> {
    let api = Api::<VRouterBinding>::namespaced(client.clone(), namespace);
    let binding = api.get_opt(name).await?.ok_or_else(|| ResumeError::NotFound {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    })?;
    let mode = binding.spec.effective_rollout_mode();
    if mode != RolloutMode::Waves {
        return Err(ResumeError::NotWaves {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            mode,
        });
    }
    let current = binding
        .spec
        .rollout
        .and_then(|r| r.waves)
        .map(|w| w.resume)
        .unwrap_or_default();
    let token = next_token(&current, &k8s_openapi::jiff::Timestamp::now().to_string());
    let patch = serde_json::json!({"spec": {"rollout": {"waves": {"resume": token}}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    let stood = binding
        .status
        .and_then(|s| s.waves)
        .map_or_else(|| "no rollout under way".to_owned(), |w| w.state);
    Ok(format!("resumed VRouterBinding {namespace}/{name} ({stood})"))
}

/// A token different from `current`: the time, or the time with a suffix
/// should the clock have given the same one twice.
fn next_token(current: &str, now: &str) -> String {
    if current == now {
        format!("{now}+1")
    } else {
        now.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_always_changes() {
        let cases = [("", "t"), ("t", "t"), ("older", "t")];
        for (current, now) in cases {
            assert_ne!(next_token(current, now), current, "{current:?} {now:?}");
        }
    }
}
