//! Builders that keep the table rows short: times in seconds after a fixed
//! start, specs as numbers, configs in the states §7.2 gives them.

#![allow(dead_code)] // each test file uses its own subset

use vrouter_rollout::{
    AppliedCondition, ConditionStatus, Decision, ExistingConfig, Frontier, Phase, Policy, Rollout, RolloutError,
    Target, Wait, decide,
};

pub const BINDING: &str = "mybinding";

pub use vrouter_rollout::sim::{at, secs};

pub fn wait_for_applied(poll: u64, soak: u64) -> Policy {
    Policy::WaitForApplied {
        poll_interval: secs(poll),
        wait_after_applied: secs(soak),
    }
}

pub fn fixed_interval(interval: u64) -> Policy {
    Policy::FixedInterval {
        wait_interval: secs(interval),
    }
}

pub fn frontier(target: &str, stamped: i64) -> Option<Frontier> {
    Some(Frontier {
        target: target.to_owned(),
        stamped_at: at(stamped),
    })
}

/// A target whose config does not exist yet.
pub fn new_target(name: &str, desired: u64) -> Target<u64> {
    Target {
        name: name.to_owned(),
        desired,
        existing: None,
    }
}

/// A target whose config holds `spec` at generation `generation`, Applied
/// for it since `since`.
pub fn applied(name: &str, desired: u64, spec: u64, generation: i64, since: i64) -> Target<u64> {
    with_config(
        name,
        desired,
        spec,
        generation,
        Phase::Applied,
        condition(ConditionStatus::True, generation, since),
    )
}

/// A target whose config holds `spec` and whose apply for it failed.
pub fn failed(name: &str, desired: u64, spec: u64, generation: i64, since: i64) -> Target<u64> {
    with_config(
        name,
        desired,
        spec,
        generation,
        Phase::Failed,
        condition(ConditionStatus::False, generation, since),
    )
}

/// A target whose config holds `spec`, with its apply dispatched at `since`
/// and still running.
pub fn applying(name: &str, desired: u64, spec: u64, generation: i64, since: i64) -> Target<u64> {
    with_config(
        name,
        desired,
        spec,
        generation,
        Phase::Applying,
        condition(ConditionStatus::False, generation, since),
    )
}

/// A target whose config holds `spec` and was never dispatched (VM stopped).
pub fn pending(name: &str, desired: u64, spec: u64, generation: i64) -> Target<u64> {
    with_config(name, desired, spec, generation, Phase::Pending, None)
}

/// A target whose config was rewritten to generation `generation` while its
/// Applied=True still names `generation - 1` (the stale True of §7.1).
pub fn stale_applied(name: &str, desired: u64, spec: u64, generation: i64, since: i64) -> Target<u64> {
    with_config(
        name,
        desired,
        spec,
        generation,
        Phase::Applied,
        condition(ConditionStatus::True, generation - 1, since),
    )
}

pub fn with_config(
    name: &str,
    desired: u64,
    spec: u64,
    generation: i64,
    phase: Phase,
    applied: Option<AppliedCondition>,
) -> Target<u64> {
    Target {
        name: name.to_owned(),
        desired,
        existing: Some(ExistingConfig {
            spec,
            generation,
            phase,
            applied,
        }),
    }
}

pub fn condition(status: ConditionStatus, generation: i64, since: i64) -> Option<AppliedCondition> {
    Some(AppliedCondition {
        status,
        observed_generation: Some(generation),
        last_transition_time: at(since),
    })
}

/// Runs the walk for binding [`BINDING`].
pub fn run(
    policy: Policy,
    frontier: &Option<Frontier>,
    targets: &[Target<u64>],
    now: i64,
) -> Result<Decision, RolloutError> {
    decide(
        &Rollout {
            binding: BINDING,
            policy,
            frontier: frontier.as_ref(),
            targets,
        },
        at(now),
    )
}

pub fn in_progress(message: &str) -> vrouter_rollout::Ready {
    ready(
        ConditionStatus::False,
        vrouter_rollout::Reason::RolloutInProgress,
        message,
    )
}

pub fn halted(message: &str) -> vrouter_rollout::Ready {
    ready(ConditionStatus::False, vrouter_rollout::Reason::RolloutHalted, message)
}

pub fn succeeded(message: &str) -> vrouter_rollout::Ready {
    ready(
        ConditionStatus::True,
        vrouter_rollout::Reason::ReconcileSucceeded,
        message,
    )
}

fn ready(status: ConditionStatus, reason: vrouter_rollout::Reason, message: &str) -> vrouter_rollout::Ready {
    vrouter_rollout::Ready {
        status,
        reason,
        message: message.to_owned(),
    }
}

/// A Requeue after `after` seconds on `wait`, holding back the write of
/// `blocked_write`, with Ready False/RolloutInProgress saying `message`.
pub fn requeue(after: u64, wait: Wait, blocked_write: Option<usize>, message: &str) -> Decision {
    Decision::Requeue {
        after: secs(after),
        wait,
        blocked_write,
        ready: in_progress(message),
    }
}

/// The rollout is finished: Ready True/ReconcileSucceeded saying `message`.
pub fn completed(message: &str) -> Decision {
    Decision::Completed {
        ready: succeeded(message),
    }
}

/// Halted on `targets[target]`, whose config `config` is Failed, polling
/// every `poll` seconds; Ready False/RolloutHalted names the config.
pub fn halted_on(target: usize, config: &str, poll: u64) -> Decision {
    Decision::Halted {
        target,
        config: config.to_owned(),
        requeue_after: secs(poll),
        ready: halted(&format!(r#"VRouterConfig "{config}" is Failed"#)),
    }
}

pub fn not_applied(frontier: &str) -> Wait {
    Wait::NotApplied {
        frontier: frontier.to_owned(),
    }
}

pub fn not_all_applied(target: &str) -> Wait {
    Wait::NotAllApplied {
        target: target.to_owned(),
    }
}

pub fn soaking(frontier: &str, until: i64) -> Wait {
    Wait::Soaking {
        frontier: frontier.to_owned(),
        until: at(until),
    }
}

pub fn interval(frontier: &str, until: i64) -> Wait {
    Wait::Interval {
        frontier: frontier.to_owned(),
        until: at(until),
    }
}

pub fn evicted(frontier: &str, until: i64) -> Wait {
    Wait::EvictedFrontier {
        frontier: frontier.to_owned(),
        until: at(until),
    }
}

/// One row of a table test.
pub struct Row {
    pub case: &'static str,
    pub policy: Policy,
    pub frontier: Option<Frontier>,
    pub targets: Vec<Target<u64>>,
    pub now: i64,
    pub expected: Decision,
}

/// Runs every row and reports all mismatches at once, by case name.
pub fn check_table(rows: Vec<Row>) {
    let mut failures = Vec::new();
    for row in &rows {
        match run(row.policy, &row.frontier, &row.targets, row.now) {
            Ok(got) if got == row.expected => {}
            got => failures.push(format!(
                "{}:\n  expected {:?}\n  got      {got:?}",
                row.case, row.expected
            )),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} rows failed:\n{}",
        failures.len(),
        rows.len(),
        failures.join("\n")
    );
}

/// A StampThenWrite of `targets[index]` at `now`.
pub fn stamp_then_write(targets: &[Target<u64>], index: usize, now: i64, requeue: u64, message: &str) -> Decision {
    Decision::StampThenWrite {
        target: index,
        frontier: Frontier {
            target: targets[index].name.clone(),
            stamped_at: at(now),
        },
        requeue_after: secs(requeue),
        ready: in_progress(message),
    }
}
