//! What the walk reads: the recorded frontier and, per target, the desired
//! spec next to the generated VRouterConfig that exists today.
//!
//! These are deliberately plain types: the operator maps kube objects into
//! them field by field, and tests and the simulator build them by hand.

use std::fmt;
use std::str::FromStr;

use jiff::Timestamp;

use crate::error::RolloutError;

/// `status.rollout` of the binding: the last target the walk stamped, and
/// when. Written before the config itself (write-ahead), so it may name a
/// target whose write never happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frontier {
    pub target: String,
    pub stamped_at: Timestamp,
}

impl Frontier {
    /// `target` was stamped as the frontier at `stamped_at`.
    pub fn new(target: impl Into<String>, stamped_at: Timestamp) -> Frontier {
        Frontier {
            target: target.into(),
            stamped_at,
        }
    }

    /// Maps `status.rollout` as stored: an empty target name means no frontier
    /// was ever recorded. A name without a time (never written by the walk
    /// itself) is read as stamped at the Unix epoch, so its time gate has long
    /// elapsed while WaitForApplied still health-checks its config.
    pub fn from_status(target: &str, stamped_at: Option<Timestamp>) -> Option<Frontier> {
        if target.is_empty() {
            return None;
        }
        Some(Frontier {
            target: target.to_owned(),
            stamped_at: stamped_at.unwrap_or(Timestamp::UNIX_EPOCH),
        })
    }
}

/// One entry of `spec.targetRefs`, in order, with its freshly rendered spec
/// and the generated config that exists for it (if any).
///
/// `S` is whatever the caller compares specs by: the spec itself (or a
/// reference to it), or a fingerprint of it.
#[derive(Clone, Debug, PartialEq)]
pub struct Target<S> {
    pub name: String,
    pub desired: S,
    pub existing: Option<ExistingConfig<S>>,
}

impl<S> Target<S> {
    /// A target whose generated config does not exist yet.
    pub fn new(name: impl Into<String>, desired: S) -> Self {
        Target {
            name: name.into(),
            desired,
            existing: None,
        }
    }

    /// The same target, with the generated config that exists for it.
    pub fn with_existing(mut self, existing: ExistingConfig<S>) -> Self {
        self.existing = Some(existing);
        self
    }
}

impl<S: PartialEq> Target<S> {
    /// A missing config, or one whose spec differs from the render, needs a
    /// write.
    pub fn needs_write(&self) -> bool {
        self.existing.as_ref().is_none_or(|config| config.spec != self.desired)
    }
}

/// The generated VRouterConfig as it exists in the cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct ExistingConfig<S> {
    pub spec: S,
    /// `metadata.generation` (0 if the API server reported none).
    pub generation: i64,
    pub phase: Phase,
    /// The `Applied` condition, if the config controller has set one.
    pub applied: Option<AppliedCondition>,
}

impl<S> ExistingConfig<S> {
    /// A config holding `spec` at `generation` that no apply has finished
    /// for yet (Pending, no `Applied` condition).
    pub fn pending(spec: S, generation: i64) -> Self {
        ExistingConfig {
            spec,
            generation,
            phase: Phase::Pending,
            applied: None,
        }
    }

    /// A config holding `spec` at `generation`, Applied for that generation
    /// since `at`.
    pub fn applied_since(spec: S, generation: i64, at: Timestamp) -> Self {
        ExistingConfig {
            spec,
            generation,
            phase: Phase::Applied,
            applied: Some(AppliedCondition {
                status: ConditionStatus::True,
                observed_generation: Some(generation),
                last_transition_time: at,
            }),
        }
    }

    /// A config holding `spec` at `generation` whose apply Failed at `at`.
    pub fn failed_at(spec: S, generation: i64, at: Timestamp) -> Self {
        ExistingConfig {
            spec,
            generation,
            phase: Phase::Failed,
            applied: Some(AppliedCondition {
                status: ConditionStatus::False,
                observed_generation: Some(generation),
                last_transition_time: at,
            }),
        }
    }

    /// Applied for the spec it holds now: a True condition left over from an
    /// earlier generation does not count (§7.2 stamps the condition with the
    /// generation the apply was dispatched for).
    pub fn applied_for_current_generation(&self) -> Option<&AppliedCondition> {
        self.applied.as_ref().filter(|condition| {
            condition.status == ConditionStatus::True && condition.observed_generation == Some(self.generation)
        })
    }
}

/// The config's `Applied` condition, reduced to the fields the walk reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppliedCondition {
    pub status: ConditionStatus,
    /// The generation the apply was dispatched for.
    pub observed_generation: Option<i64>,
    /// When the status last changed: the soak after Applied runs from here,
    /// not from the frontier stamp, so a slow apply does not shorten it.
    pub last_transition_time: Timestamp,
}

/// The status of a Kubernetes condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

impl ConditionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }
}

impl fmt::Display for ConditionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ConditionStatus {
    type Err = RolloutError;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        match value {
            "True" => Ok(ConditionStatus::True),
            "False" => Ok(ConditionStatus::False),
            "Unknown" => Ok(ConditionStatus::Unknown),
            _ => Err(RolloutError::InvalidConditionStatus {
                value: value.to_owned(),
            }),
        }
    }
}

/// `status.phase` of a VRouterConfig. Only `Failed` matters to the walk: it
/// halts WaitForApplied. With the `serde` feature it is also the type
/// vrouter-api stores in the status, so the two can never disagree.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)
)]
pub enum Phase {
    #[default]
    Pending,
    Applying,
    Applied,
    Failed,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Applying => "Applying",
            Phase::Applied => "Applied",
            Phase::Failed => "Failed",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Phase {
    type Err = RolloutError;

    /// An empty phase is a config the config controller has not looked at
    /// yet, which is Pending.
    fn from_str(value: &str) -> Result<Self, Self::Err> {
        match value {
            "" | "Pending" => Ok(Phase::Pending),
            "Applying" => Ok(Phase::Applying),
            "Applied" => Ok(Phase::Applied),
            "Failed" => Ok(Phase::Failed),
            _ => Err(RolloutError::InvalidPhase {
                value: value.to_owned(),
            }),
        }
    }
}
