//! Crash points for fault tests: with `VROUTER_CRASH_AT=<point>` in its
//! environment the process kills itself with SIGKILL the first time it
//! reaches `<point>`, the way a node failure or an OOM kill would stop it
//! there. Only a build with the `crash-points` feature (the tests') has them:
//! without it `reached` is empty and the release binary holds no trace of them.

/// The environment variable naming the crash point.
pub const ENV: &str = "VROUTER_CRASH_AT";

/// The moments where a crash must cost neither a second run nor a lost
/// step: an apply's, where one used to cost a second run, and a serial
/// rollout's between its write-ahead stamp and the config it stamps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashPoint {
    /// The apply id is written to status; the router is not touched yet.
    AfterWriteAhead,
    /// The router started the script; its handle is not stored yet.
    AfterDispatch,
    /// The script's result was read (the guest agent forgets it once read);
    /// it is not stored yet.
    AfterResult,
    /// A serial rollout's frontier (the next target) is stamped in the
    /// binding's status; that target's config is not written yet.
    AfterRolloutStamp,
}

impl CrashPoint {
    /// The crash points of an apply, in the order an apply reaches them.
    pub const OF_AN_APPLY: [CrashPoint; 3] = [
        CrashPoint::AfterWriteAhead,
        CrashPoint::AfterDispatch,
        CrashPoint::AfterResult,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CrashPoint::AfterWriteAhead => "after-write-ahead",
            CrashPoint::AfterDispatch => "after-dispatch",
            CrashPoint::AfterResult => "after-result",
            CrashPoint::AfterRolloutStamp => "after-rollout-stamp",
        }
    }
}

/// Dies here with SIGKILL when `point` is the selected crash point (only in
/// a build with the `crash-points` feature).
pub fn reached(point: CrashPoint) {
    #[cfg(feature = "crash-points")]
    armed::reached(point);
    #[cfg(not(feature = "crash-points"))]
    let _ = point;
}

#[cfg(feature = "crash-points")]
mod armed {
    use std::sync::LazyLock;

    use super::{CrashPoint, ENV};

    static SELECTED: LazyLock<Option<String>> = LazyLock::new(|| std::env::var(ENV).ok());

    pub fn reached(point: CrashPoint) {
        if SELECTED.as_deref() != Some(point.name()) {
            return;
        }
        tracing::warn!(
            point = point.name(),
            "crash point reached: killing the process with SIGKILL"
        );
        // The workspace forbids `unsafe`, so kill(2) is reached through the
        // `kill` program; the signal is the same.
        let pid = std::process::id().to_string();
        if std::process::Command::new("kill")
            .args(["-KILL", &pid])
            .status()
            .is_err()
        {
            std::process::abort();
        }
        // Nothing past the crash point may run while the signal lands.
        loop {
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_point_has_its_own_name() {
        let all = [
            CrashPoint::AfterWriteAhead,
            CrashPoint::AfterDispatch,
            CrashPoint::AfterResult,
            CrashPoint::AfterRolloutStamp,
        ];
        let names: std::collections::HashSet<&str> = all.iter().map(|p| p.name()).collect();
        assert_eq!(names.len(), all.len());
        assert_eq!(CrashPoint::AfterRolloutStamp.name(), "after-rollout-stamp");
        assert!(!CrashPoint::OF_AN_APPLY.contains(&CrashPoint::AfterRolloutStamp));
    }
}
