//! Deadline arithmetic on timestamps, exact and without overflow.

use std::time::Duration;

use jiff::Timestamp;

/// A wait that has not elapsed yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Remaining {
    pub after: Duration,
    pub until: Timestamp,
}

/// How long is left of `wait` started at `since`, or `None` once `now` has
/// reached the deadline. Computed in i128 nanoseconds so neither a huge
/// duration nor a `since` in the future (clock skew) can overflow; a deadline
/// beyond jiff's range is reported as `Timestamp::MAX`.
pub(crate) fn remaining(since: Timestamp, wait: Duration, now: Timestamp) -> Option<Remaining> {
    let deadline = since.as_nanosecond() + wait.as_nanos() as i128;
    let left = deadline - now.as_nanosecond();
    if left <= 0 {
        return None;
    }
    const NANOS_PER_SECOND: i128 = 1_000_000_000;
    let after = match u64::try_from(left / NANOS_PER_SECOND) {
        Ok(seconds) => Duration::new(seconds, (left % NANOS_PER_SECOND) as u32),
        Err(_) => Duration::MAX,
    };
    Some(Remaining {
        after,
        until: Timestamp::from_nanosecond(deadline).unwrap_or(Timestamp::MAX),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::at;

    #[test]
    fn remaining_counts_down_to_the_deadline_and_then_elapses() {
        let cases = [
            (0, 60, 0, Some(60)),
            (0, 60, 59, Some(1)),
            (0, 60, 60, None),
            (0, 60, 61, None),
            (0, 0, 0, None),
            // A stamp in the future (clock skew) extends the wait.
            (10, 60, 0, Some(70)),
        ];
        for (since, wait, now, expected) in cases {
            let got = remaining(at(since), Duration::from_secs(wait), at(now));
            assert_eq!(
                got.map(|r| r.after),
                expected.map(Duration::from_secs),
                "since={since} wait={wait} now={now}"
            );
            if let Some(r) = got {
                assert_eq!(r.until, at(since + wait as i64));
            }
        }
    }

    #[test]
    fn remaining_saturates_instead_of_overflowing() {
        let got = remaining(Timestamp::MAX, Duration::MAX, Timestamp::MIN).unwrap();
        assert_eq!(got.after, Duration::MAX);
        assert_eq!(got.until, Timestamp::MAX);
    }
}
