//! `spec.rollout.waves` and `status.waves` of a VRouterBinding: a rollout in
//! batches, with an optional canary batch, a pause between batches and a
//! failure threshold (mode `Waves`).

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use vrouter_rollout::waves::{Size, WavePolicy, WaveProgress};

use crate::duration::Duration;

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WavesSpec {
    /// Targets per wave: a count (`5`) or a percentage of the targets
    /// (`"10%"`, rounded up).
    pub batch_size: IntOrString,
    /// The size of a first, canary wave (a count or a percentage); absent
    /// means no canary wave.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<IntOrString>,
    /// The least time between the end of one wave and the start of the next.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause: Option<Duration>,
    /// Hold before every wave after the first until `resume` changes
    /// (`kubectl vrouter resume`, or any new value written by hand or GitOps).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub until_resumed: bool,
    /// A wave whose Failed configs are more than this halts the rollout: a
    /// count or a percentage of the wave (rounded down). Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_failures: Option<IntOrString>,
    /// Any value; a hold shown in `status.waves` ends when this differs from
    /// the value it had when the hold began.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resume: String,
}

/// Where a rollout in waves stands; absent when none is under way.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WavesStatus {
    /// The last wave dispatched, counted from 1.
    pub wave: u32,
    /// How many waves the targets make.
    pub waves: u32,
    /// Where it is, as people read it ("wave 3 of 20 done, paused until resumed").
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub state: String,
    /// While holding until resumed: `spec.rollout.waves.resume` as it was
    /// when the hold began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_at_resume: Option<String>,
}

/// Why a wave size is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} {value:?} is invalid: expected a count (5) or a percentage (\"10%\")")]
pub struct WaveSizeError {
    pub field: &'static str,
    pub value: String,
}

/// A count or a `"N%"` string as the walk's [`Size`]; ranges are the walk's
/// to check ([`WavePolicy::validate`]).
pub fn size(field: &'static str, value: &IntOrString) -> Result<Size, WaveSizeError> {
    let bad = || WaveSizeError {
        field,
        value: match value {
            IntOrString::Int(n) => n.to_string(),
            IntOrString::String(s) => s.clone(),
        },
    };
    match value {
        IntOrString::Int(n) => u32::try_from(*n).map(Size::Count).map_err(|_| bad()),
        IntOrString::String(s) => s
            .strip_suffix('%')
            .and_then(|p| p.trim().parse::<u32>().ok())
            .map(Size::Percent)
            .ok_or_else(bad),
    }
}

impl WavesSpec {
    /// The walk's policy, or what is wrong with a size.
    pub fn policy(&self, poll_interval: Duration) -> Result<WavePolicy, WaveSizeError> {
        let policy = WavePolicy {
            batch: size("spec.rollout.waves.batchSize", &self.batch_size)?,
            canary: self
                .canary
                .as_ref()
                .map(|c| size("spec.rollout.waves.canary", c))
                .transpose()?,
            pause: self.pause.unwrap_or_default().to_std(),
            until_resumed: self.until_resumed,
            max_failures: self
                .max_failures
                .as_ref()
                .map(|m| size("spec.rollout.waves.maxFailures", m))
                .transpose()?
                .unwrap_or(Size::Count(0)),
            poll_interval: poll_interval.to_std(),
        };
        Ok(policy)
    }
}

impl WavesStatus {
    /// The walk's stored state, read back.
    pub fn progress(&self) -> WaveProgress {
        WaveProgress {
            wave: (self.wave as usize).saturating_sub(1),
            hold: self.held_at_resume.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_counts_or_percentages() {
        let cases = [
            (IntOrString::Int(5), Some(Size::Count(5))),
            (IntOrString::String("10%".into()), Some(Size::Percent(10))),
            (IntOrString::String("10".into()), None),
            (IntOrString::String("ten%".into()), None),
            (IntOrString::Int(-1), None),
        ];
        for (value, want) in cases {
            assert_eq!(size("f", &value).ok(), want, "{value:?}");
        }
        let err = size("spec.rollout.waves.canary", &IntOrString::String("x".into())).unwrap_err();
        assert_eq!(
            err.to_string(),
            "spec.rollout.waves.canary \"x\" is invalid: expected a count (5) or a percentage (\"10%\")"
        );
    }
}
