//! The ProxmoxCluster sync (spec §7.3) as pure decisions: when to sync, which
//! node hosts a VM, and whether an uptime reading means the guest rebooted.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use vrouter_api::VRouterTarget;

/// A boot time must be at least this much newer than the recorded one to
/// count as a new reboot: uptime is reported in whole seconds and read a
/// moment after it was sampled, so two readings of one boot differ slightly.
pub const REBOOT_TOLERANCE: SignedDuration = SignedDuration::from_secs(5);

/// One VM as `/cluster/resources?type=vm` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmResource {
    pub vmid: i64,
    pub node: String,
    /// Seconds since the QEMU process started; 0 when stopped.
    pub uptime_secs: u64,
}

/// How long until the next sync is due; `None` when it is due now.
pub fn sync_wait(last_sync: Option<&Time>, interval: Duration, now: Timestamp) -> Option<Duration> {
    let last = last_sync?.0;
    let due = last.checked_add(SignedDuration::try_from(interval).ok()?).ok()?;
    let remaining = due.duration_since(now);
    (remaining > SignedDuration::ZERO).then(|| Duration::try_from(remaining).unwrap_or_default())
}

/// vmid → resource, for the lookups of one sync.
pub fn index_by_vmid(resources: Vec<VmResource>) -> HashMap<i64, VmResource> {
    resources.into_iter().map(|r| (r.vmid, r)).collect()
}

/// The node hosting `vmid`, or `""` when the VM is gone: a stale node would
/// let a reused VMID on another host be reached on the wrong one.
pub fn node_for(index: &HashMap<i64, VmResource>, vmid: i64) -> String {
    index.get(&vmid).map(|r| r.node.clone()).unwrap_or_default()
}

/// The new `lastRebootTime`, if `uptime` (observed at `observed_at`) shows a
/// reboot newer than `recorded`.
///
/// Only a recent boot counts (0 < uptime ≤ 1.5 × sync interval): an older one
/// was already seen by an earlier sync or predates the operator. The boot
/// time is derived as `observed_at - uptime` rather than stamped with the
/// sync's clock, so every sync within one boot's window lands on the same
/// value and forces at most one re-apply.
pub fn detect_reboot(
    uptime: Duration,
    observed_at: Timestamp,
    sync_interval: Duration,
    recorded: Option<&Time>,
) -> Option<Time> {
    if uptime.is_zero() || uptime.as_secs_f64() > sync_interval.as_secs_f64() * 1.5 {
        return None;
    }
    let boot = observed_at.checked_sub(SignedDuration::try_from(uptime).ok()?).ok()?;
    match recorded {
        Some(previous) if boot.duration_since(previous.0) <= REBOOT_TOLERANCE => None,
        _ => Some(Time(boot)),
    }
}

/// The Synced condition's message after a sync: how many targets it
/// synced and, when guest uptimes could not be read (`unread`: target and
/// why, the why a guest's words), which — the first by name with its
/// reason. Bounded in length whatever the guests answered.
pub fn synced_message(targets: usize, unread: &[(String, String)]) -> String {
    let synced = format!("{targets} target(s) synced");
    let Some((first, why)) = unread.first() else {
        return synced;
    };
    let others = match unread.len() - 1 {
        0 => String::new(),
        n => format!(" and {n} other(s)"),
    };
    let why = vrouter_api::text::cut(why, vrouter_api::text::MAX_MESSAGE_BYTES / 2);
    let text = format!(
        "{synced}; guest uptime not read for {first}{others} ({why}), so a reboot inside those guests goes unseen"
    );
    vrouter_api::text::message(&text).into_owned()
}

/// Whether `target` is synced by the ProxmoxCluster `cluster` in
/// `namespace`: only a same-namespace reference counts (spec §6.2 rejects
/// others; one created before that rule is never followed across).
pub fn references(target: &VRouterTarget, namespace: &str, cluster: &str) -> bool {
    target.metadata.namespace.as_deref() == Some(namespace)
        && target
            .spec
            .provider
            .proxmox
            .as_ref()
            .is_some_and(|p| p.cluster_ref.name == cluster && !p.cluster_ref.crosses_namespace(namespace))
}

/// Whether a target was created after the last sync (whole seconds, as the
/// API server stores both), so that it gets its node without waiting out
/// the interval.
pub fn has_new_target<'a>(targets: impl IntoIterator<Item = &'a VRouterTarget>, last_sync: Option<&Time>) -> bool {
    let Some(last) = last_sync else { return true };
    targets
        .into_iter()
        .any(|t| t.metadata.creation_timestamp.as_ref().is_some_and(|c| c.0 > last.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::test_clock::at;

    fn target(namespace: &str, cluster_ref: serde_json::Value) -> VRouterTarget {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "vrouter.kojuro.date/v1", "kind": "VRouterTarget",
            "metadata": {"name": "r1", "namespace": namespace},
            "spec": {"provider": {"type": "proxmox", "proxmox": {"vmid": 100, "clusterRef": cluster_ref}}},
        }))
        .unwrap()
    }

    #[test]
    fn synced_messages_name_the_first_unread_uptime_in_bounded_length() {
        let unread = |n: usize, why: &str| -> Vec<(String, String)> {
            (0..n).map(|i| (format!("r{i}"), why.to_string())).collect()
        };
        let cases = [
            (3, unread(0, ""), "3 target(s) synced"),
            (
                3,
                unread(1, "bad"),
                "3 target(s) synced; guest uptime not read for r0 (bad), so a reboot inside those guests goes unseen",
            ),
            (
                3,
                unread(2, "bad"),
                "3 target(s) synced; guest uptime not read for r0 and 1 other(s) (bad), so a reboot inside those guests goes unseen",
            ),
        ];
        for (targets, unread, want) in cases {
            assert_eq!(synced_message(targets, &unread), want);
        }
        let huge = synced_message(1, &unread(1, &"é".repeat(100_000)));
        assert!(huge.len() <= vrouter_api::text::MAX_MESSAGE_BYTES, "{}", huge.len());
        assert!(huge.contains(vrouter_api::text::CUT_MARKER), "{huge}");
        assert!(
            huge.ends_with("goes unseen"),
            "the reason's cut keeps the sentence's end: {huge}"
        );
    }

    #[test]
    fn step4_only_same_namespace_references_to_this_cluster_count() {
        assert!(references(&target("a", serde_json::json!({"name": "pve"})), "a", "pve"));
        assert!(references(
            &target("a", serde_json::json!({"name": "pve", "namespace": "a"})),
            "a",
            "pve"
        ));
        assert!(!references(
            &target("a", serde_json::json!({"name": "other"})),
            "a",
            "pve"
        ));
        assert!(!references(
            &target("a", serde_json::json!({"name": "pve", "namespace": "b"})),
            "a",
            "pve"
        ));
        assert!(!references(
            &target("b", serde_json::json!({"name": "pve"})),
            "a",
            "pve"
        ));
    }

    #[test]
    fn step1_a_target_created_after_the_last_sync_is_synced_early() {
        let created_at = |secs: i64| {
            let mut t = target("a", serde_json::json!({"name": "pve"}));
            t.metadata.creation_timestamp = Some(Time(at(secs)));
            t
        };
        let last = Time(at(10));
        assert!(has_new_target(&[created_at(5), created_at(11)], Some(&last)));
        assert!(
            !has_new_target(&[created_at(5), created_at(10)], Some(&last)),
            "same second: not newer"
        );
        assert!(!has_new_target(&[], Some(&last)));
        assert!(has_new_target(&[], None), "never synced");
    }

    const MINUTE: Duration = Duration::from_secs(60);

    #[test]
    fn step1_sync_waits_for_the_interval_since_the_last_sync() {
        assert_eq!(sync_wait(None, MINUTE, at(0)), None, "never synced: now");
        assert_eq!(
            sync_wait(Some(&Time(at(0))), MINUTE, at(20)),
            Some(Duration::from_secs(40))
        );
        assert_eq!(sync_wait(Some(&Time(at(0))), MINUTE, at(60)), None);
        assert_eq!(sync_wait(Some(&Time(at(0))), MINUTE, at(90)), None);
    }

    #[test]
    fn step4a_node_is_set_from_the_map_and_cleared_when_the_vm_is_gone() {
        let index = index_by_vmid(vec![
            VmResource {
                vmid: 100,
                node: "pve1".into(),
                uptime_secs: 5,
            },
            VmResource {
                vmid: 101,
                node: "pve2".into(),
                uptime_secs: 0,
            },
        ]);
        assert_eq!(node_for(&index, 100), "pve1");
        assert_eq!(node_for(&index, 101), "pve2");
        assert_eq!(node_for(&index, 999), "");
    }

    #[test]
    fn step4b_a_recent_boot_is_derived_from_uptime() {
        let boot = detect_reboot(Duration::from_secs(30), at(100), MINUTE, None);
        assert_eq!(boot, Some(Time(at(70))));
    }

    #[test]
    fn step4b_only_uptimes_within_one_and_a_half_intervals_count() {
        assert_eq!(detect_reboot(Duration::ZERO, at(100), MINUTE, None), None, "stopped");
        assert!(detect_reboot(Duration::from_secs(90), at(100), MINUTE, None).is_some());
        assert_eq!(detect_reboot(Duration::from_secs(91), at(100), MINUTE, None), None);
    }

    #[test]
    fn step4b_repeated_syncs_of_one_boot_settle_on_one_value() {
        let first = detect_reboot(Duration::from_secs(10), at(100), MINUTE, None).unwrap();
        // The next sync sees the same boot, a little skewed by rounding.
        let again = detect_reboot(Duration::from_secs(69), at(162), MINUTE, Some(&first));
        assert_eq!(again, None, "within the 5 s tolerance");
        // A genuinely new boot is recorded.
        let new = detect_reboot(Duration::from_secs(10), at(300), MINUTE, Some(&first));
        assert_eq!(new, Some(Time(at(290))));
    }
}
