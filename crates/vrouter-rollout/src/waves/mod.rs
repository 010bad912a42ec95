//! Waves: the targets, in `targetRefs` order, cut into batches (an optional
//! canary batch first). A wave is written whole; the next one starts only
//! once every config of the current one holds its render and is Applied for
//! its current generation or Failed, after an optional pause between waves
//! (a duration, or until a person changes the resume token). A wave whose
//! Failed configs pass its threshold halts the walk.
//!
//! The walk derives where it stands from the configs themselves; the only
//! state it keeps ([`WaveProgress`], stored in the binding's status) is the
//! last wave it dispatched and the resume token a hold began with, which is
//! what a pause between waves needs to tell "before" from "after" a resume.

mod plan;
mod state;
mod walk;

pub use plan::{Size, WavePolicy, plan};
pub use state::{WaveDecision, WaveProgress, WaveState};
pub use walk::{WaveRollout, decide_waves};
