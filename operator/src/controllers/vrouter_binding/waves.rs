//! A binding in mode Waves: the shell around `vrouter_rollout::waves`. It
//! stores where the walk stands (`status.waves`, with `Ready`) before it
//! writes a wave's configs, so a crash in between is seen as the same wave
//! next time, and says in Events when a wave starts, pauses or halts.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use kube::api::Api;
use kube::runtime::events::EventType;
use vrouter_api::constants::{condition, event, reason};
use vrouter_api::{RolloutMode, VRouterBinding, VRouterConfig, WavesStatus};
use vrouter_rollout::waves::{WaveDecision, WavePolicy, WaveRollout, WaveState, decide_waves, plan};
use vrouter_rollout::{ConditionStatus, RolloutError};

use super::decide::walk_targets;
use super::error::Error;
use super::status::set_status_with;
use super::writes::write_all;
use super::{BindingContext, pause};
use crate::runtime::conditions::Wanted;

/// The wave policy of a binding in mode Waves; `None` in any other mode.
/// A size admission would have refused is the walk's error here too.
pub fn policy(binding: &VRouterBinding) -> Result<Option<WavePolicy>, Error> {
    let Some(rollout) = binding.spec.rollout.as_ref().filter(|r| r.mode == RolloutMode::Waves) else {
        return Ok(None);
    };
    let Some(waves) = &rollout.waves else {
        return Err(Error::NotOurs(
            "spec.rollout.waves is required when spec.rollout.mode is Waves".to_owned(),
        ));
    };
    let policy = waves.policy(rollout.poll_interval).map_err(|e| {
        Error::Rollout(RolloutError::InvalidWaveSize {
            field: e.field,
            value: e.value,
        })
    })?;
    policy.validate()?;
    Ok(Some(policy))
}

/// One step of the wave walk: decide, store, write. Returns when to look again.
pub async fn roll(
    ctx: &BindingContext,
    binding: &VRouterBinding,
    configs: &Api<VRouterConfig>,
    desired: &[VRouterConfig],
    existing: &HashMap<String, &VRouterConfig>,
    policy: &WavePolicy,
) -> Result<Option<Duration>, Error> {
    let targets = walk_targets(desired, existing)?;
    let stored = binding.status.as_ref().and_then(|s| s.waves.as_ref());
    let progress = stored.map(WavesStatus::progress);
    let resume = resume_token(binding);
    let rollout = WaveRollout {
        policy,
        progress: progress.as_ref(),
        resume,
        targets: &targets,
    };
    let decision = decide_waves(&rollout, Timestamp::now())?;
    let waves = plan(policy, targets.len()).len();
    let status = status_of(&decision, waves);
    let before = ready_reason(binding);
    let wanted = pause::ready_or_paused(binding, desired.len(), wanted(binding, &decision));
    let changed = set_status_with(ctx, binding, wanted, false, |s| s.waves = status).await?;
    if !decision.writes.is_empty() {
        let writes = decision
            .writes
            .iter()
            .map(|&i| {
                (
                    &desired[i],
                    existing
                        .get(&desired[i].metadata.name.clone().unwrap_or_default())
                        .copied(),
                )
            })
            .collect();
        write_all(configs, &ctx.own.config_writes, writes).await?;
    }
    if let Some((type_, why, note)) = event_of(&decision, changed, before.as_deref()) {
        ctx.event_of_action(binding, type_, why, &action_of(&decision.state), note)
            .await;
    }
    Ok(decision.requeue_after)
}

/// `spec.rollout.waves.resume` as it is now.
fn resume_token(binding: &VRouterBinding) -> &str {
    binding
        .spec
        .rollout
        .as_ref()
        .and_then(|r| r.waves.as_ref())
        .map_or("", |w| w.resume.as_str())
}

fn status_of(decision: &WaveDecision, waves: usize) -> Option<WavesStatus> {
    decision.progress.as_ref().map(|p| WavesStatus {
        wave: u32::try_from(p.wave + 1).unwrap_or(u32::MAX),
        waves: u32::try_from(waves).unwrap_or(u32::MAX),
        state: decision.state.summary(),
        held_at_resume: p.hold.clone(),
    })
}

fn wanted(binding: &VRouterBinding, decision: &WaveDecision) -> Wanted<'static> {
    let ready = decision.ready();
    Wanted {
        type_: condition::READY,
        status: ready.status == ConditionStatus::True,
        reason: ready.reason.as_str(),
        message: ready.message,
        observed_generation: binding.meta().generation,
    }
}

fn ready_reason(binding: &VRouterBinding) -> Option<String> {
    let status = binding.status.as_ref()?;
    let ready = status.conditions.iter().find(|c| c.type_ == condition::READY)?;
    Some(ready.reason.clone())
}

/// The Event's action: each wave's start its own (`Wave3`), so kube's
/// recorder keeps one series per wave, with that wave's note, rather than
/// folding every wave into the first one's.
fn action_of(state: &WaveState) -> String {
    match state {
        WaveState::Dispatching { wave, .. } => format!("Wave{wave}"),
        _ => "Reconcile".to_owned(),
    }
}

/// The Event a decision is worth: every wave started, and each change into
/// a pause, a halt or the end (told by the Ready reason before it).
fn event_of(decision: &WaveDecision, changed: bool, before: Option<&str>) -> Option<(EventType, &'static str, String)> {
    let note = decision.state.summary();
    let entered = |r: &str| changed && before != Some(r);
    match decision.state {
        WaveState::Dispatching { .. } => Some((EventType::Normal, event::WAVE_STARTED, note)),
        WaveState::PausedUntil { .. } | WaveState::PausedUntilResumed { .. } if entered(reason::ROLLOUT_PAUSED) => {
            Some((EventType::Normal, reason::ROLLOUT_PAUSED, note))
        }
        WaveState::Halted { .. } if entered(reason::ROLLOUT_HALTED) => {
            Some((EventType::Warning, reason::ROLLOUT_HALTED, note))
        }
        WaveState::Completed { .. } if entered(reason::RECONCILE_SUCCEEDED) => {
            Some((EventType::Normal, event::ROLLOUT_COMPLETED, note))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use vrouter_rollout::waves::WaveProgress;

    use super::*;

    fn decision(state: WaveState) -> WaveDecision {
        WaveDecision {
            writes: Vec::new(),
            progress: Some(WaveProgress { wave: 2, hold: None }),
            state,
            failed: Vec::new(),
            requeue_after: None,
        }
    }

    #[test]
    fn events_mark_each_wave_and_each_change_into_a_pause_halt_or_end() {
        let paused = WaveState::PausedUntilResumed { wave: 3, of: 20 };
        let halted = WaveState::Halted {
            wave: 1,
            of: 5,
            failed: 1,
            tolerated: 0,
        };
        let done = WaveState::Completed { waves: 5, failed: 0 };
        let started = WaveState::Dispatching {
            wave: 2,
            of: 5,
            writes: 3,
        };
        // (state, status changed, Ready reason before, the event's reason)
        let cases = [
            (started, false, Some("RolloutInProgress"), Some("WaveStarted")),
            (paused.clone(), true, Some("RolloutInProgress"), Some("RolloutPaused")),
            (paused, true, Some("RolloutPaused"), None),
            (halted.clone(), true, Some("RolloutInProgress"), Some("RolloutHalted")),
            (halted, false, Some("RolloutInProgress"), None),
            (done.clone(), true, Some("RolloutInProgress"), Some("RolloutCompleted")),
            (done, true, Some("ReconcileSucceeded"), None),
        ];
        for (state, changed, before, want) in cases {
            let got = event_of(&decision(state.clone()), changed, before).map(|(_, r, _)| r);
            assert_eq!(got, want, "{state:?}");
        }
    }

    #[test]
    fn each_wave_start_has_an_action_of_its_own() {
        let start = |wave| WaveState::Dispatching {
            wave,
            of: 20,
            writes: 5,
        };
        assert_eq!(action_of(&start(1)), "Wave1");
        assert_eq!(action_of(&start(20)), "Wave20");
        assert_eq!(action_of(&WaveState::Completed { waves: 20, failed: 0 }), "Reconcile");
    }

    #[test]
    fn the_status_says_which_wave_of_how_many_and_the_hold() {
        let mut d = decision(WaveState::PausedUntilResumed { wave: 3, of: 20 });
        d.progress = Some(WaveProgress {
            wave: 2,
            hold: Some("t1".into()),
        });
        let status = status_of(&d, 20).unwrap();
        assert_eq!((status.wave, status.waves), (3, 20));
        assert_eq!(status.state, "wave 3 of 20 done, paused until resumed");
        assert_eq!(status.held_at_resume.as_deref(), Some("t1"));
        assert_eq!(status.progress(), d.progress.unwrap(), "read back as stored");
    }
}
