//! The demo's output: one plain line per event, `[tag] text`, readable in
//! a terminal and easy to look for in a test. No colours, no cursor tricks.

use std::time::Duration;

pub fn say(tag: &str, text: impl AsRef<str>) {
    println!("[{tag}] {}", text.as_ref());
}

/// `2.3 s`
pub fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_seconds_with_one_decimal() {
        assert_eq!(secs(Duration::from_millis(2345)), "2.3 s");
        assert_eq!(secs(Duration::from_secs(90)), "90.0 s");
    }
}
