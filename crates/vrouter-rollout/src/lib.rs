#![doc = include_str!("../README.md")]

mod decision;
mod error;
mod gate;
mod halt;
mod input;
mod policy;
mod ready;
mod time;
mod walk;
pub mod waves;

#[cfg(feature = "sim")]
pub mod sim;

pub use decision::{Decision, Wait};
pub use error::RolloutError;
pub use input::{AppliedCondition, ConditionStatus, ExistingConfig, Frontier, Phase, Target};
pub use policy::Policy;
pub use ready::{Ready, Reason};
pub use walk::{Rollout, config_name, decide};

/// The time type of every input and output: the same `jiff::Timestamp` that
/// k8s-openapi's `metav1.Time` wraps, re-exported so callers need no direct
/// dependency on jiff.
pub use jiff::Timestamp;
