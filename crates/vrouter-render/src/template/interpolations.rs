//! The `{{ … }}` tags of a template source, in order: where each is, and whether
//! it opts out of escaping with `| safe`.

use super::Location;
use super::scan::{Locator, Segment, SegmentKind};

/// One interpolation and whether it ends with `| safe`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Interpolation {
    pub location: Location,
    pub safe: bool,
}

/// Every interpolation in `source`, in source order — the order the engine
/// numbers them in (`sandbox::instrument`).
pub(crate) fn interpolations(source: &str, segments: &[Segment]) -> Vec<Interpolation> {
    let mut locator = Locator::new(source);
    segments
        .iter()
        .filter(|s| s.kind == SegmentKind::Expression)
        .map(|s| Interpolation {
            location: locator.locate(s.span.start),
            safe: is_marked_safe(&source[s.inner.clone()]),
        })
        .collect()
}

/// `{{ value | safe }}`: the template's explicit opt-out from escaping.
pub(crate) fn is_marked_safe(inner: &str) -> bool {
    inner.trim_end().strip_suffix("safe").is_some_and(|rest| {
        rest.trim_end().ends_with('|') && !rest.ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_is_the_last_filter_only() {
        assert!(is_marked_safe(" x | safe "));
        assert!(is_marked_safe("x|safe"));
        assert!(!is_marked_safe(" unsafe "));
        assert!(!is_marked_safe(" x | unsafe "));
        assert!(!is_marked_safe(" x | safe | upper "));
    }
}
