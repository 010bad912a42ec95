//! Durations as Kubernetes writes them for Go's `metav1.Duration`: strings such
//! as `10s`, `1m30s` or `1h0m0s` on the wire, parsed with Go's
//! `time.ParseDuration` rules so manifests written for the Go operator keep
//! working unchanged.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;
use std::time::Duration as StdDuration;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A signed duration with nanosecond precision, serialized as a Go duration
/// string. Signed because the webhook must be able to see and reject a
/// negative `pollInterval` rather than have it fail to parse somewhere later.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Duration {
    nanos: i64,
}

/// Why a string is not a Go duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {input:?}: {why} (expected a Go duration such as \"10s\", \"1m30s\" or \"1h\")")]
pub struct ParseDurationError {
    input: String,
    why: &'static str,
}

const NANOS_PER_MICRO: i64 = 1_000;
const NANOS_PER_MILLI: i64 = 1_000_000;
const NANOS_PER_SECOND: i64 = 1_000_000_000;
const NANOS_PER_MINUTE: i64 = 60 * NANOS_PER_SECOND;
const NANOS_PER_HOUR: i64 = 60 * NANOS_PER_MINUTE;

impl Duration {
    pub const ZERO: Duration = Duration { nanos: 0 };

    pub const fn from_nanos(nanos: i64) -> Self {
        Duration { nanos }
    }

    pub const fn from_secs(secs: i64) -> Self {
        Duration {
            nanos: secs * NANOS_PER_SECOND,
        }
    }

    pub const fn from_millis(millis: i64) -> Self {
        Duration {
            nanos: millis * NANOS_PER_MILLI,
        }
    }

    pub const fn as_nanos(self) -> i64 {
        self.nanos
    }

    pub const fn is_negative(self) -> bool {
        self.nanos < 0
    }

    pub const fn is_positive(self) -> bool {
        self.nanos > 0
    }

    /// The duration as a std one; negative durations become zero, which is
    /// what every timer in the operator wants.
    pub fn to_std(self) -> StdDuration {
        StdDuration::from_nanos(self.nanos.max(0) as u64)
    }
}

impl From<StdDuration> for Duration {
    fn from(d: StdDuration) -> Self {
        Duration {
            nanos: i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        }
    }
}

fn unit_nanos(unit: &str) -> Option<i64> {
    Some(match unit {
        "ns" => 1,
        "us" | "\u{b5}s" | "\u{3bc}s" => NANOS_PER_MICRO,
        "ms" => NANOS_PER_MILLI,
        "s" => NANOS_PER_SECOND,
        "m" => NANOS_PER_MINUTE,
        "h" => NANOS_PER_HOUR,
        _ => return None,
    })
}

impl FromStr for Duration {
    type Err = ParseDurationError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let fail = |why| ParseDurationError {
            input: input.to_owned(),
            why,
        };
        let (negative, mut rest) = match input.as_bytes().first() {
            Some(b'-') => (true, &input[1..]),
            Some(b'+') => (false, &input[1..]),
            _ => (false, input),
        };
        if rest == "0" {
            return Ok(Duration::ZERO);
        }
        if rest.is_empty() {
            return Err(fail("empty"));
        }
        // Accumulate in i128 so an overflow is detected instead of wrapping.
        let mut total: i128 = 0;
        while !rest.is_empty() {
            let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
            let int_part = &rest[..int_len];
            rest = &rest[int_len..];
            let mut frac_part = "";
            if let Some(after_dot) = rest.strip_prefix('.') {
                let frac_len = after_dot.bytes().take_while(u8::is_ascii_digit).count();
                frac_part = &after_dot[..frac_len];
                rest = &after_dot[frac_len..];
            }
            if int_part.is_empty() && frac_part.is_empty() {
                return Err(fail("a number must come before each unit"));
            }
            let unit_len = rest
                .char_indices()
                .find(|(_, c)| c.is_ascii_digit() || *c == '.')
                .map_or(rest.len(), |(i, _)| i);
            let unit = &rest[..unit_len];
            rest = &rest[unit_len..];
            if unit.is_empty() {
                return Err(fail("missing unit (one of ns, us, ms, s, m, h)"));
            }
            let scale = unit_nanos(unit).ok_or_else(|| fail("unknown unit (one of ns, us, ms, s, m, h)"))?;
            let int_value: i128 = if int_part.is_empty() {
                0
            } else {
                int_part.parse().map_err(|_| fail("number out of range"))?
            };
            let mut value = int_value
                .checked_mul(i128::from(scale))
                .ok_or_else(|| fail("out of range"))?;
            // Fractions are truncated to whole nanoseconds, as Go does.
            let mut frac_scale = i128::from(scale);
            for digit in frac_part.bytes() {
                frac_scale /= 10;
                if frac_scale == 0 {
                    break;
                }
                value += i128::from(digit - b'0') * frac_scale;
            }
            total += value;
            if total > i128::from(i64::MAX) {
                return Err(fail("out of range"));
            }
        }
        let nanos = i64::try_from(if negative { -total } else { total }).map_err(|_| fail("out of range"))?;
        Ok(Duration { nanos })
    }
}

/// Formats like Go's `time.Duration.String()`, so what the operator writes
/// back reads the same as what `kubectl` users see from Go controllers.
impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let negative = self.nanos < 0;
        let abs = self.nanos.unsigned_abs();
        let sign = if negative { "-" } else { "" };
        if abs == 0 {
            return f.write_str("0s");
        }
        if abs < NANOS_PER_SECOND as u64 {
            let (value, unit, digits) = if abs < NANOS_PER_MICRO as u64 {
                return write!(f, "{sign}{abs}ns");
            } else if abs < NANOS_PER_MILLI as u64 {
                (abs, "\u{b5}s", 3)
            } else {
                (abs, "ms", 6)
            };
            return write!(f, "{sign}{}{unit}", fixed_point(value, digits));
        }
        let hours = abs / NANOS_PER_HOUR as u64;
        let minutes = (abs % NANOS_PER_HOUR as u64) / NANOS_PER_MINUTE as u64;
        let sub_minute = abs % NANOS_PER_MINUTE as u64;
        let seconds = fixed_point(sub_minute, 9);
        if hours > 0 {
            write!(f, "{sign}{hours}h{minutes}m{seconds}s")
        } else if minutes > 0 {
            write!(f, "{sign}{minutes}m{seconds}s")
        } else {
            write!(f, "{sign}{seconds}s")
        }
    }
}

/// `value` divided by 10^digits, printed without trailing zeros.
fn fixed_point(value: u64, digits: u32) -> String {
    let divisor = 10u64.pow(digits);
    let whole = value / divisor;
    let frac = value % divisor;
    if frac == 0 {
        return whole.to_string();
    }
    let frac = format!("{frac:0width$}", width = digits as usize);
    format!("{whole}.{}", frac.trim_end_matches('0'))
}

impl Serialize for Duration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = Cow::<str>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for Duration {
    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "description": "A Go duration string such as \"10s\", \"1m30s\" or \"1h\"."
        })
    }

    fn inline_schema() -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_go_duration_strings() {
        let cases = [
            ("0", 0),
            ("0s", 0),
            ("10s", 10 * NANOS_PER_SECOND),
            ("1m30s", 90 * NANOS_PER_SECOND),
            ("1h", NANOS_PER_HOUR),
            ("1.5h", 90 * NANOS_PER_MINUTE),
            ("300ms", 300 * NANOS_PER_MILLI),
            ("-1s", -NANOS_PER_SECOND),
            ("2h45m", 2 * NANOS_PER_HOUR + 45 * NANOS_PER_MINUTE),
            ("1us", 1_000),
            ("1\u{b5}s", 1_000),
            (".5s", 500 * NANOS_PER_MILLI),
        ];
        for (text, nanos) in cases {
            assert_eq!(text.parse::<Duration>().unwrap().as_nanos(), nanos, "{text}");
        }
    }

    #[test]
    fn formats_like_go() {
        let cases = [
            (0, "0s"),
            (10 * NANOS_PER_SECOND, "10s"),
            (90 * NANOS_PER_SECOND, "1m30s"),
            (60 * NANOS_PER_SECOND, "1m0s"),
            (5 * NANOS_PER_MINUTE, "5m0s"),
            (NANOS_PER_HOUR, "1h0m0s"),
            (1_500 * NANOS_PER_MILLI, "1.5s"),
            (300 * NANOS_PER_MILLI, "300ms"),
            (1_000, "1\u{b5}s"),
            (7, "7ns"),
            (-NANOS_PER_SECOND, "-1s"),
        ];
        for (nanos, text) in cases {
            assert_eq!(Duration::from_nanos(nanos).to_string(), text);
        }
    }

    #[test]
    fn rejects_what_go_rejects_with_the_reason() {
        for (text, why) in [
            ("", "empty"),
            ("10", "missing unit"),
            ("10x", "unknown unit"),
            ("s", "a number must come before"),
            ("abc", "a number must come before"),
            ("9999999999h", "out of range"),
        ] {
            let err = text.parse::<Duration>().unwrap_err().to_string();
            assert!(err.contains(why), "{text:?}: {err}");
            assert!(err.contains(&format!("{text:?}")), "error names the input: {err}");
        }
    }

    #[test]
    fn serde_round_trip_keeps_the_value() {
        for text in ["1m30s", "10s", "0s"] {
            let d: Duration = serde_json::from_value(serde_json::json!(text)).unwrap();
            assert_eq!(serde_json::to_value(d).unwrap(), serde_json::json!(text));
        }
    }

    proptest! {
        #[test]
        fn display_then_parse_is_identity(nanos in any::<i64>().prop_filter("i64::MIN has no positive twin", |n| *n != i64::MIN)) {
            let d = Duration::from_nanos(nanos);
            prop_assert_eq!(d.to_string().parse::<Duration>().unwrap(), d);
        }
    }
}
