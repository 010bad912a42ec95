//! The guard that keeps heavy peers out of the quick loop.
//!
//! `cargo xtask test --quick` runs every test target except those declared
//! with `required-features = ["heavy-tests"]`, and sets [`QUICK_LOOP_ENV`].
//! Each heavy harness (booting a guest, starting libvirtd, starting the test
//! node, starting the Go operator) calls [`refuse_heavy`] first, so a test
//! that needs one but was left out of the `heavy-tests` targets fails on the
//! first quick run, naming the fix, instead of making the loop slow.
//! Without the variable (CI, `cargo xtask test`) the guard does nothing.

/// Set (to any value) by `cargo xtask test --quick`.
pub const QUICK_LOOP_ENV: &str = "VROUTER_QUICK_LOOP";

/// A heavy peer was asked for inside the quick loop.
#[derive(Debug, thiserror::Error)]
#[error(
    "{what} is a heavy peer and {QUICK_LOOP_ENV} is set (`cargo xtask test --quick`): declare this \
     test target in its crate's Cargo.toml with `required-features = [\"heavy-tests\"]` \
     (docs/development.md, \"The quick loop\")"
)]
pub struct HeavyInQuickLoop {
    pub what: &'static str,
}

/// Fails when the quick loop is running; `what` names the heavy peer.
pub fn refuse_heavy(what: &'static str) -> Result<(), HeavyInQuickLoop> {
    refuse_heavy_when(std::env::var_os(QUICK_LOOP_ENV).is_some(), what)
}

fn refuse_heavy_when(quick: bool, what: &'static str) -> Result<(), HeavyInQuickLoop> {
    if quick {
        return Err(HeavyInQuickLoop { what });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_heavy_peer_is_refused_only_in_the_quick_loop() {
        assert!(refuse_heavy_when(false, "a real guest").is_ok());
        let error = refuse_heavy_when(true, "a real guest").unwrap_err().to_string();
        assert!(error.starts_with("a real guest is a heavy peer"), "{error}");
        assert!(error.contains("required-features = [\"heavy-tests\"]"), "{error}");
    }
}
