//! Apply latency: a VRouterConfig spec change until the config reports
//! Applied for that generation, through the in-test Proxmox API and a real
//! qemu-ga, one change after another.
//!
//! The test proves every change is applied and delivered byte for byte;
//! the time each one took is measured, printed and (with
//! `VROUTER_BENCH_OUT`) written for `cargo xtask bench`, which holds it to
//! the budget in docs/benchmarks.md. No timing is asserted here.
//!
//! Knobs (environment): `VROUTER_APPLY_COUNT` (10), `VROUTER_BENCH_OUT`.
//! Its own test binary, so its own API server.

mod common;

use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Patch, PatchParams};
use kube::runtime::watcher;
use serde_json::json;
use vrouter_api::{Phase, VRouterConfig};
use vrouter_operator::runtime::context::Settings;

use common::{create, site};

/// When the watch first saw generation `wanted` (or a later one) Applied.
async fn applied_generation(rx: &mut tokio::sync::mpsc::UnboundedReceiver<(i64, Instant)>, wanted: i64) -> Instant {
    let wait = async {
        loop {
            let (generation, at) = rx.recv().await.expect("the watch ended");
            if generation >= wanted {
                return at;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), wait)
        .await
        .unwrap_or_else(|_| panic!("generation {wanted} was not Applied within 60 s"))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_spec_change_is_applied_and_each_apply_is_timed() {
    let count: usize = std::env::var("VROUTER_APPLY_COUNT")
        .map(|v| v.parse().expect("VROUTER_APPLY_COUNT is a number"))
        .unwrap_or(10);
    let site = site("latency", &["r1"], Settings::default()).await;
    let ns = &site.ns;
    let api = ns.api::<VRouterConfig>();
    let body = |n: usize| format!("set system host-name r1\nset system description apply-{n}\n");
    create::<VRouterConfig>(
        ns,
        json!({"metadata": {"name": "c"}, "spec": {"targetRef": {"name": "r1"}, "commands": body(0)}}),
    )
    .await;

    // One watch on the config: each event says at once when an apply ended.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let events = watcher(api.clone(), watcher::Config::default().fields("metadata.name=c"));
    let watch = tokio::spawn(async move {
        let mut events = events.boxed();
        while let Some(event) = events.next().await {
            if let Ok(watcher::Event::Apply(c) | watcher::Event::InitApply(c)) = event {
                let status = c.status.clone().unwrap_or_default();
                if status.phase == Phase::Applied && c.metadata.generation == Some(status.observed_generation) {
                    let _ = tx.send((status.observed_generation, Instant::now()));
                }
            }
        }
    });
    applied_generation(&mut rx, 1).await;

    let guest = &site.routers["r1"].sandbox;
    let mut seconds = Vec::with_capacity(count);
    for n in 1..=count {
        let started = Instant::now();
        let patched = api
            .patch(
                "c",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"commands": body(n)}})),
            )
            .await
            .unwrap();
        let generation = patched.metadata.generation.expect("a generation");
        let at = applied_generation(&mut rx, generation).await;
        seconds.push(at.duration_since(started).as_secs_f64());
        let calls = guest.calls().join("\n");
        assert!(
            calls.contains(&format!("apply-{n}")),
            "apply {n} did not reach the router: {calls}"
        );
    }
    watch.abort();

    let mut sorted = seconds.clone();
    sorted.sort_by(f64::total_cmp);
    let report = json!({
        "applies": count,
        "median_seconds": percentile(&sorted, 50.0),
        "p99_seconds": percentile(&sorted, 99.0),
        "min_seconds": sorted[0],
        "max_seconds": sorted[sorted.len() - 1],
        "samples_seconds": seconds,
    });
    println!("{}", serde_json::to_string_pretty(&report).unwrap());
    if let Ok(path) = std::env::var("VROUTER_BENCH_OUT") {
        std::fs::write(&path, serde_json::to_string_pretty(&report).unwrap())
            .unwrap_or_else(|e| panic!("writing {path}: {e}"));
    }
}
