//! Crash points for fault tests: with `VROUTER_CRASH_AT=<point>` in its
//! environment the process kills itself with SIGKILL the first time it
//! reaches `<point>`, the way a node failure or an OOM kill would stop it
//! there. Unset (always, in production) a crash point costs one comparison.

use std::sync::LazyLock;

/// The environment variable naming the crash point.
pub const ENV: &str = "VROUTER_CRASH_AT";

/// The moments of an apply where a crash used to cost a second run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashPoint {
    /// The apply id is written to status; the router is not touched yet.
    AfterWriteAhead,
    /// The router started the script; its handle is not stored yet.
    AfterDispatch,
    /// The script's result was read (the guest agent forgets it once read);
    /// it is not stored yet.
    AfterResult,
}

impl CrashPoint {
    pub const ALL: [CrashPoint; 3] = [
        CrashPoint::AfterWriteAhead,
        CrashPoint::AfterDispatch,
        CrashPoint::AfterResult,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CrashPoint::AfterWriteAhead => "after-write-ahead",
            CrashPoint::AfterDispatch => "after-dispatch",
            CrashPoint::AfterResult => "after-result",
        }
    }
}

static SELECTED: LazyLock<Option<String>> = LazyLock::new(|| std::env::var(ENV).ok());

/// Dies here with SIGKILL when `point` is the selected crash point.
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
