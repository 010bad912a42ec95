//! How many targets each wave holds, and how many failures a wave tolerates.

use std::ops::Range;
use std::time::Duration;

use crate::error::RolloutError;

/// A count of targets, or a percentage of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    Count(u32),
    Percent(u32),
}

impl Size {
    /// A size of at least one target (at most `total`): a percentage rounds
    /// up, so 5 % of 10 targets is one target, not none.
    fn targets(self, total: usize) -> usize {
        let wanted = match self {
            Size::Count(n) => n as usize,
            Size::Percent(p) => (total * p as usize).div_ceil(100),
        };
        wanted.clamp(1, total.max(1))
    }

    /// The failures a wave of `size` targets tolerates: a percentage rounds
    /// down, so 10 % of a wave of 5 tolerates none.
    pub fn tolerated(self, size: usize) -> usize {
        match self {
            Size::Count(n) => n as usize,
            Size::Percent(p) => size * p as usize / 100,
        }
    }

    fn check(self, field: &'static str, allow_zero: bool) -> Result<(), RolloutError> {
        let bad = match self {
            Size::Count(0) | Size::Percent(0) => !allow_zero,
            Size::Percent(p) => p > 100,
            Size::Count(_) => false,
        };
        if bad {
            return Err(RolloutError::InvalidWaveSize {
                field,
                value: self.to_string(),
            });
        }
        Ok(())
    }
}

impl std::fmt::Display for Size {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Size::Count(n) => write!(f, "{n}"),
            Size::Percent(p) => write!(f, "{p}%"),
        }
    }
}

/// `spec.rollout.waves`, reduced to what the walk needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WavePolicy {
    /// Targets per wave (after the canary).
    pub batch: Size,
    /// The first wave's size, when there is a canary wave.
    pub canary: Option<Size>,
    /// The least time between the end of one wave and the start of the next.
    pub pause: Duration,
    /// Hold before each wave after the first until the resume token changes.
    pub until_resumed: bool,
    /// A wave halts the walk when more of its configs than this are Failed.
    pub max_failures: Size,
    /// How often to look again while a wave is in flight.
    pub poll_interval: Duration,
}

impl WavePolicy {
    /// Refuses sizes that cannot cut a fleet into waves.
    pub fn validate(&self) -> Result<(), RolloutError> {
        self.batch.check("batchSize", false)?;
        if let Some(canary) = self.canary {
            canary.check("canary", false)?;
        }
        self.max_failures.check("maxFailures", true)
    }
}

/// The waves over `total` targets, as ranges of positions in `targetRefs`
/// order: consecutive, non-empty, covering every position exactly once.
pub fn plan(policy: &WavePolicy, total: usize) -> Vec<Range<usize>> {
    let mut waves = Vec::new();
    let mut start = 0;
    if let Some(canary) = policy.canary
        && total > 0
    {
        start = canary.targets(total);
        waves.push(0..start);
    }
    let batch = policy.batch.targets(total);
    while start < total {
        let end = (start + batch).min(total);
        waves.push(start..end);
        start = end;
    }
    waves
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(batch: Size, canary: Option<Size>) -> WavePolicy {
        WavePolicy {
            batch,
            canary,
            pause: Duration::ZERO,
            until_resumed: false,
            max_failures: Size::Count(0),
            poll_interval: Duration::from_secs(1),
        }
    }

    #[test]
    fn waves_cut_the_targets_in_order_with_the_canary_first() {
        use Size::*;
        // (batch, canary, total, wave sizes)
        let cases: [(Size, Option<Size>, usize, &[usize]); 8] = [
            (Count(2), None, 5, &[2, 2, 1]),
            (Count(2), Some(Count(1)), 5, &[1, 2, 2]),
            (Percent(25), None, 10, &[3, 3, 3, 1]),
            (Percent(5), Some(Percent(1)), 10, &[1, 1, 1, 1, 1, 1, 1, 1, 1, 1]),
            (Count(10), Some(Count(20)), 4, &[4]),
            (Percent(100), None, 3, &[3]),
            (Count(3), None, 0, &[]),
            (Count(3), Some(Count(1)), 0, &[]),
        ];
        for (batch, canary, total, sizes) in cases {
            let got: Vec<usize> = plan(&policy(batch, canary), total).iter().map(|r| r.len()).collect();
            assert_eq!(got, sizes, "batch={batch} canary={canary:?} total={total}");
        }
    }

    #[test]
    fn a_percentage_of_failures_rounds_down() {
        let cases = [
            (Size::Count(0), 5, 0),
            (Size::Count(2), 5, 2),
            (Size::Percent(10), 5, 0),
            (Size::Percent(50), 5, 2),
            (Size::Percent(100), 5, 5),
        ];
        for (size, wave, tolerated) in cases {
            assert_eq!(size.tolerated(wave), tolerated, "{size} of {wave}");
        }
    }

    #[test]
    fn sizes_that_cannot_cut_a_fleet_are_refused_by_name() {
        let cases = [
            (policy(Size::Count(0), None), Some("batchSize")),
            (policy(Size::Percent(0), None), Some("batchSize")),
            (policy(Size::Percent(101), None), Some("batchSize")),
            (policy(Size::Count(1), Some(Size::Count(0))), Some("canary")),
            (policy(Size::Count(1), None), None),
        ];
        for (p, field) in cases {
            let got = p.validate().err().map(|e| match e {
                RolloutError::InvalidWaveSize { field, .. } => field,
                other => panic!("{other}"),
            });
            assert_eq!(got, field, "{p:?}");
        }
        let mut failures = policy(Size::Count(1), None);
        failures.max_failures = Size::Percent(150);
        assert!(failures.validate().unwrap_err().to_string().contains("maxFailures"));
    }
}
