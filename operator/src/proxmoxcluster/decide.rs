//! The ProxmoxCluster sync (spec §7.3) as pure decisions: when to sync, which
//! node hosts a VM, and whether an uptime reading means the guest rebooted.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

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

/// Parses the first field of `/proc/uptime` (`"12345.67 23456.78"`).
pub fn parse_proc_uptime(text: &str) -> Option<Duration> {
    let first = text.split_whitespace().next()?;
    let secs: f64 = first.parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
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

    #[test]
    fn step4c_guest_uptime_parses_from_proc_uptime() {
        assert_eq!(parse_proc_uptime("12.50 40.00\n"), Some(Duration::from_millis(12_500)));
        assert_eq!(parse_proc_uptime(""), None);
        assert_eq!(parse_proc_uptime("abc 1"), None);
        assert_eq!(parse_proc_uptime("-1 0"), None);
    }
}
