//! One decision over 10,000 targets, the size of a large fleet, with specs
//! as long as a real router config so comparing them costs what it does in
//! the operator.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use vrouter_rollout::{
    AppliedCondition, ConditionStatus, Decision, ExistingConfig, Frontier, Phase, Policy, Rollout, Target, Timestamp,
    decide,
};

const TARGETS: usize = 10_000;

/// About 1.5 KiB of VyOS config, different for every router.
fn config_text(router: usize, render: usize) -> String {
    (0..30)
        .map(|line| {
            format!(
                "set interfaces ethernet eth{line} address 10.{}.{}.1/24 # r{render}\n",
                router / 250,
                router % 250
            )
        })
        .collect()
}

/// Every target Applied for its current render since `t`, except that the
/// last one's render changed if `last_changed`.
fn fleet(last_changed: bool, t: Timestamp) -> Vec<Target<String>> {
    (0..TARGETS)
        .map(|i| {
            let render = usize::from(last_changed && i == TARGETS - 1);
            Target {
                name: format!("router-{i:05}"),
                desired: config_text(i, render),
                existing: Some(ExistingConfig {
                    // A separate allocation, as in the operator: equality
                    // compares the bytes.
                    spec: config_text(i, 0),
                    generation: 3,
                    phase: Phase::Applied,
                    applied: Some(AppliedCondition {
                        status: ConditionStatus::True,
                        observed_generation: Some(3),
                        last_transition_time: t,
                    }),
                }),
            }
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let t = Timestamp::from_second(1_784_160_000).unwrap();
    let now = Timestamp::from_second(1_784_170_000).unwrap();
    let policy = Policy::WaitForApplied {
        poll_interval: Duration::from_secs(10),
        wait_after_applied: Duration::from_secs(60),
    };
    let frontier = Frontier {
        target: format!("router-{:05}", TARGETS - 2),
        stamped_at: t,
    };

    let changed = fleet(true, t);
    let rollout = Rollout {
        binding: "edge",
        policy,
        frontier: Some(&frontier),
        targets: &changed,
    };
    assert!(matches!(
        decide(&rollout, now),
        Ok(Decision::StampThenWrite { target, .. }) if target == TARGETS - 1
    ));
    c.bench_function("decide/wait_for_applied/10000_targets/write_last", |b| {
        b.iter(|| decide(black_box(&rollout), black_box(now)))
    });

    let done = fleet(false, t);
    let rollout = Rollout {
        targets: &done,
        ..rollout
    };
    assert!(matches!(decide(&rollout, now), Ok(Decision::Completed { .. })));
    c.bench_function("decide/wait_for_applied/10000_targets/completed", |b| {
        b.iter(|| decide(black_box(&rollout), black_box(now)))
    });
}

/// The same completed fleet with specs compared by a 64-bit fingerprint (a
/// hash the operator could keep per config): what the walk itself costs.
fn bench_fingerprints(c: &mut Criterion) {
    let t = Timestamp::from_second(1_784_160_000).unwrap();
    let now = Timestamp::from_second(1_784_170_000).unwrap();
    let done: Vec<Target<u64>> = fleet(false, t)
        .into_iter()
        .enumerate()
        .map(|(i, target)| Target {
            name: target.name,
            desired: i as u64,
            existing: target.existing.map(|config| ExistingConfig {
                spec: i as u64,
                generation: config.generation,
                phase: config.phase,
                applied: config.applied,
            }),
        })
        .collect();
    let frontier = Frontier {
        target: format!("router-{:05}", TARGETS - 2),
        stamped_at: t,
    };
    let rollout = Rollout {
        binding: "edge",
        policy: Policy::WaitForApplied {
            poll_interval: Duration::from_secs(10),
            wait_after_applied: Duration::from_secs(60),
        },
        frontier: Some(&frontier),
        targets: &done,
    };
    assert!(matches!(decide(&rollout, now), Ok(Decision::Completed { .. })));
    c.bench_function("decide/wait_for_applied/10000_targets/completed_fingerprints", |b| {
        b.iter(|| decide(black_box(&rollout), black_box(now)))
    });
}

criterion_group!(benches, bench, bench_fingerprints);
criterion_main!(benches);
