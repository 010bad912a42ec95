//! The sandbox's bounds, with the defaults the operator uses.

use std::time::Duration;

/// The most a render may produce, config and commands together: 768 KiB. A
/// VRouterConfig is one etcd object (etcd's default request limit is 1.5 MiB and the
/// API server stores the object as JSON, escaping newlines and quotes), so the rest
/// is headroom for that encoding, metadata and status.
pub const MAX_RENDERED_BYTES: usize = 768 * 1024;

/// Bounds on what one template may be and what one render may do.
///
/// A render that crosses one fails with [`crate::TemplateError::LimitExceeded`] naming
/// it; nothing hangs and nothing grows without bound. The crate README explains
/// each default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest template source, in bytes (checked before parsing).
    pub max_template_bytes: usize,
    /// Deepest nesting of `(`/`[` inside one tag. tera's parser backtracks
    /// exponentially in nested call arguments, so this stays small.
    pub max_expression_depth: usize,
    /// Most binary operators (`+`, `and`, `==`, …) in one tag: long chains nest
    /// deeply in tera's expression tree and overflow the stack.
    pub max_expression_operators: usize,
    /// Deepest nesting of `{% if %}`/`{% for %}` blocks.
    pub max_block_depth: usize,
    /// Most bytes one render writes, all templates of a binding together.
    pub max_output_bytes: usize,
    /// Largest value a filter, function, `~` or `set` may produce, in bytes.
    pub max_value_bytes: usize,
    /// Most loop iterations in one render, all loops and templates together.
    pub max_loop_iterations: u64,
    /// Most elements `range` may produce.
    pub max_range_len: usize,
    /// Most text the admission check writes along one control-flow path of a
    /// template (literal text, and a sentinel word per value; each `for` walked
    /// up to twice). Bounds the check's time and memory.
    pub max_review_bytes: usize,
    /// Wall-clock budget of one render, checked at every loop iteration, filter,
    /// function and write: a safety net behind the deterministic bounds above.
    pub time_limit: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_template_bytes: 64 * 1024,
            max_expression_depth: 3,
            max_expression_operators: 64,
            max_block_depth: 16,
            max_output_bytes: MAX_RENDERED_BYTES,
            max_value_bytes: MAX_RENDERED_BYTES,
            max_loop_iterations: 100_000,
            max_range_len: 10_000,
            max_review_bytes: 1024 * 1024,
            time_limit: Duration::from_secs(2),
        }
    }
}
