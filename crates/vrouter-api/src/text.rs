//! Bounding text that a peer chose (a guest's output, an agent's error, a
//! file's content) before it reaches a status message, an Event or a log
//! line. A guest may answer with megabytes; what the operator writes about
//! it stays short, valid UTF-8, and says that it was cut.

use std::borrow::Cow;

/// The longest `status.message` (and condition message) the operator
/// writes, in bytes: enough for a reason and an excerpt of what a guest
/// said, far under the API server's 32 KiB for a condition message.
pub const MAX_MESSAGE_BYTES: usize = 1024;

/// How much of one peer-given value (a file's content, a command's output)
/// is quoted inside a longer message, in bytes.
pub const MAX_QUOTE_BYTES: usize = 120;

/// The marker that ends a cut text.
pub const CUT_MARKER: &str = "… [cut]";

/// `text` when it fits in `max` bytes; otherwise its longest prefix that
/// ends on a character boundary and leaves room for [`CUT_MARKER`],
/// followed by the marker. The result never exceeds `max` bytes when `max`
/// is at least the marker's length.
pub fn cut(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let mut end = max.saturating_sub(CUT_MARKER.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}{CUT_MARKER}", &text[..end]))
}

/// `text` [`cut`] to `max` bytes in place; no copy when it fits.
pub fn bound(text: &mut String, max: usize) {
    if text.len() > max {
        *text = cut(text, max).into_owned();
    }
}

/// A status or condition message: [`cut`] to [`MAX_MESSAGE_BYTES`].
pub fn message(text: &str) -> Cow<'_, str> {
    cut(text, MAX_MESSAGE_BYTES)
}

/// Bytes a peer sent, quoted for a message: read as UTF-8 (an invalid
/// sequence becomes U+FFFD), cut to [`MAX_QUOTE_BYTES`], and written as a
/// Rust string literal so control characters show as escapes.
pub fn quote(bytes: &[u8]) -> String {
    // Only the head is decoded: a huge answer is not copied whole.
    let head = &bytes[..bytes.len().min(MAX_QUOTE_BYTES + 4)];
    let text = String::from_utf8_lossy(head);
    if bytes.len() <= MAX_QUOTE_BYTES {
        return format!("{text:?}");
    }
    let mut end = MAX_QUOTE_BYTES.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{:?}{CUT_MARKER} ({} bytes)", &text[..end], bytes.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_keeps_what_fits_and_marks_what_it_cuts() {
        let cases: [(&str, usize, &str); 6] = [
            ("short", 20, "short"),
            ("", 0, ""),
            ("exactly-ten", 11, "exactly-ten"),
            ("abcdefghijklmnopqrstuvwxyz", 12, "abc… [cut]"),
            // "é" is two bytes: the cut never splits it.
            ("éééééééééé", 13, "éé… [cut]"),
            // A bound below the marker still never panics.
            ("abcdefghijklmnopqrstuvwxyz", 3, "… [cut]"),
        ];
        for (text, max, want) in cases {
            assert_eq!(cut(text, max), want, "{text:?} at {max}");
        }
    }

    #[test]
    fn cut_never_exceeds_its_bound_and_is_a_prefix() {
        let text = "a€b😀c".repeat(50);
        for max in CUT_MARKER.len()..text.len() + 2 {
            let out = cut(&text, max);
            assert!(out.len() <= max, "{max}: {out}");
            let kept = out.strip_suffix(CUT_MARKER).unwrap_or(&out);
            assert!(text.starts_with(kept), "{max}: {out}");
        }
    }

    #[test]
    fn bound_cuts_in_place_only_what_is_too_long() {
        let mut short = String::from("fits");
        bound(&mut short, 4);
        assert_eq!(short, "fits");
        let mut long = "x".repeat(50);
        bound(&mut long, 20);
        assert_eq!(long, format!("{}{CUT_MARKER}", "x".repeat(20 - CUT_MARKER.len())));
    }

    #[test]
    fn message_is_bounded() {
        let long = "x".repeat(10 * MAX_MESSAGE_BYTES);
        assert_eq!(message(&long).len(), MAX_MESSAGE_BYTES);
        assert!(message(&long).ends_with(CUT_MARKER));
        assert_eq!(message("fine"), "fine");
    }

    #[test]
    fn quote_escapes_decodes_lossily_and_bounds() {
        assert_eq!(quote(b"1e20 0\n"), "\"1e20 0\\n\"");
        assert_eq!(quote(b"\xff\xfe1"), "\"\u{fffd}\u{fffd}1\"");
        let huge = vec![b'9'; 1 << 20];
        let quoted = quote(&huge);
        assert!(quoted.len() < MAX_QUOTE_BYTES + 40, "{quoted}");
        assert!(quoted.ends_with(&format!("{CUT_MARKER} (1048576 bytes)")), "{quoted}");
        // A multi-byte character straddling the bound is dropped, not split.
        let mut straddling = vec![b'a'; MAX_QUOTE_BYTES - 1];
        straddling.extend_from_slice("é".repeat(10).as_bytes());
        assert!(quote(&straddling).starts_with(&format!("\"{}\"", "a".repeat(MAX_QUOTE_BYTES - 1))));
    }
}
