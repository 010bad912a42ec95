//! Times for the table tests of the pure modules: seconds after a fixed
//! instant, so a row reads `at(30)` instead of a date.

use k8s_openapi::jiff::Timestamp;

/// `secs` seconds after 2027-01-15T08:00:00Z.
pub fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + secs).unwrap()
}
