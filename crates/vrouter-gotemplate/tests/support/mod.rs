//! Shared by the differential tests: the Go engine as the Go operator runs
//! it, and what a template renders on both sides.

#![allow(dead_code)]

pub mod differential;
pub mod go_oracle;

/// How many cases a property runs: `full`, or a tenth of it in the quick
/// loop (`cargo xtask test --quick` sets `VROUTER_QUICK_LOOP`), which trades
/// depth for a short edit-and-test cycle. CI runs them all.
pub fn property_cases(full: u32) -> u32 {
    if std::env::var_os("VROUTER_QUICK_LOOP").is_some() {
        (full / 10).max(1)
    } else {
        full
    }
}
