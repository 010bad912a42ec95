//! Recognising a failed apply from its output (spec §7.4).
//!
//! A `set` that fails validation prints an error, yet `commit` still exits 0 when
//! `load` left a committable change, so the exit code alone can report success.
//! These markers, printed by the router's config validator, catch that case.
//!
//! A `load` that VyOS's parser refuses leaves the running config in the
//! session, so the `commit` after it succeeds too: the parser's refusal
//! (`ConfigTree` in vyos-1x `python/vyos/configtree.py` raises
//! `Failed to parse config: …`) is a marker as well, or a config the router
//! never loaded would be reported as applied.

/// The markers, in the case the router prints them. Matching ignores ASCII case.
pub const FAILURE_MARKERS: [&str; 4] = ["Set failed", "Commit failed", "Delete failed", "Failed to parse config"];

/// The first marker found in the apply's stdout or stderr, in [`FAILURE_MARKERS`]
/// order. Each stream is searched on its own, so text split across the two cannot
/// form a marker.
///
/// ```
/// use vrouter_render::find_failure_marker;
/// assert_eq!(find_failure_marker("", "COMMIT FAILED\n"), Some("Commit failed"));
/// assert_eq!(find_failure_marker("Set failed", ""), Some("Set failed"));
/// assert_eq!(find_failure_marker("failed to resolve\n", ""), None);
/// ```
pub fn find_failure_marker(stdout: &str, stderr: &str) -> Option<&'static str> {
    FAILURE_MARKERS
        .into_iter()
        .find(|marker| contains_ignore_ascii_case(stdout, marker) || contains_ignore_ascii_case(stderr, marker))
}

fn contains_ignore_ascii_case(haystack: &str, needle: &str) -> bool {
    haystack
        .as_bytes()
        .windows(needle.len())
        .any(|window| window.eq_ignore_ascii_case(needle.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_marker_matches_in_any_case_in_either_stream() {
        for marker in FAILURE_MARKERS {
            for variant in [marker.to_owned(), marker.to_uppercase(), marker.to_lowercase()] {
                let line = format!("  ...\n[edit]\n{variant}: invalid value\n");
                assert_eq!(find_failure_marker(&line, ""), Some(marker));
                assert_eq!(find_failure_marker("", &line), Some(marker));
            }
        }
    }

    #[test]
    fn near_misses_and_clean_output_do_not_match() {
        for output in [
            "",
            "Commit complete\n",
            "Setting failed",
            "Set  failed",
            "Setfailed",
            "failed",
            "Failed to parse",
        ] {
            assert_eq!(find_failure_marker(output, output), None, "{output:?}");
        }
    }

    #[test]
    fn a_marker_split_across_stdout_and_stderr_does_not_match() {
        assert_eq!(find_failure_marker("... Set", " failed"), None);
    }

    #[test]
    fn the_first_marker_in_list_order_is_reported() {
        assert_eq!(
            find_failure_marker("delete failed\ncommit failed\n", "set failed"),
            Some("Set failed")
        );
    }
}
