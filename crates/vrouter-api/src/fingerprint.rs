//! SHA-256 certificate fingerprints as users copy them: Proxmox VE shows
//! them as 32 colon-separated hex pairs (`pvenode cert info`, the node's
//! Certificates panel); `openssl x509 -fingerprint -sha256` prints the same
//! with a `sha256 Fingerprint=` prefix left off here. Plain hex (64 digits,
//! as `sha256sum` of the DER prints) is accepted too. Case does not matter.
//!
//! Parsed here, in the API crate, so admission refuses a malformed value
//! with the same words the provider would use at connect time.

use std::fmt;

/// The SHA-256 digest of a certificate's DER encoding.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sha256Fingerprint(pub [u8; 32]);

/// Why a fingerprint does not parse; names what was found, never guesses.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FingerprintError {
    #[error("is empty; write the SHA-256 fingerprint as 32 hex pairs such as AB:CD:…")]
    Empty,
    #[error("contains {0:?}, which is not a hex digit or ':'")]
    NotHex(char),
    #[error(
        "has {0} hex digits; a SHA-256 fingerprint has 64 (32 pairs), so this is not one (a SHA-1 fingerprint has 40)"
    )]
    WrongLength(usize),
    #[error("mixes ':' separators with unseparated digits; write AB:CD:… or ABCD… throughout")]
    Misplaced,
}

impl Sha256Fingerprint {
    /// `AB:CD:…` (case-insensitive) or 64 plain hex digits, with spaces
    /// around it ignored.
    pub fn parse(text: &str) -> Result<Self, FingerprintError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(FingerprintError::Empty);
        }
        if let Some(bad) = text.chars().find(|c| !c.is_ascii_hexdigit() && *c != ':') {
            return Err(FingerprintError::NotHex(bad));
        }
        let digits: Vec<u8> = text.bytes().filter(u8::is_ascii_hexdigit).collect();
        if digits.len() != 64 {
            return Err(FingerprintError::WrongLength(digits.len()));
        }
        if text.contains(':') && !text.split(':').all(|pair| pair.len() == 2) {
            return Err(FingerprintError::Misplaced);
        }
        let mut bytes = [0u8; 32];
        for (byte, pair) in bytes.iter_mut().zip(digits.chunks_exact(2)) {
            *byte = (hex_value(pair[0]) << 4) | hex_value(pair[1]);
        }
        Ok(Sha256Fingerprint(bytes))
    }
}

/// The value of one ASCII hex digit (checked by the caller).
fn hex_value(digit: u8) -> u8 {
    match digit {
        b'0'..=b'9' => digit - b'0',
        b'a'..=b'f' => digit - b'a' + 10,
        _ => digit - b'A' + 10,
    }
}

/// As Proxmox VE shows it: upper-case pairs joined by ':'.
impl fmt::Display for Sha256Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, byte) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{byte:02X}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Sha256Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sha256Fingerprint({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAIRS: &str =
        "0A:1B:2C:3D:4E:5F:60:71:82:93:A4:B5:C6:D7:E8:F9:0A:1B:2C:3D:4E:5F:60:71:82:93:A4:B5:C6:D7:E8:F9";

    #[test]
    fn fingerprints_parse_in_every_form_users_copy_and_print_as_proxmox_shows_them() {
        let want = Sha256Fingerprint::parse(PAIRS).unwrap();
        assert_eq!(want.0[0], 0x0A);
        assert_eq!(want.0[31], 0xF9);
        let plain = PAIRS.replace(':', "");
        let lower = PAIRS.to_lowercase();
        let padded = format!("  {PAIRS}\n");
        for form in [PAIRS, plain.as_str(), lower.as_str(), padded.as_str()] {
            assert_eq!(Sha256Fingerprint::parse(form), Ok(want), "{form:?}");
        }
        assert_eq!(want.to_string(), PAIRS);
    }

    #[test]
    fn malformed_fingerprints_are_refused_naming_what_is_wrong() {
        let sha1 = "AA:BB:CC:DD:EE:FF:00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD";
        let with_z = PAIRS.replacen('0', "Z", 1);
        let one_more = format!("{PAIRS}:00");
        let half_separated = format!("{}{}", &PAIRS[..6], PAIRS[6..].replace(':', ""));
        let cases: [(&str, FingerprintError); 6] = [
            ("", FingerprintError::Empty),
            ("   ", FingerprintError::Empty),
            (&with_z, FingerprintError::NotHex('Z')),
            ("sha256 Fingerprint=AB", FingerprintError::NotHex('s')),
            (sha1, FingerprintError::WrongLength(40)),
            (&one_more, FingerprintError::WrongLength(66)),
        ];
        for (text, want) in cases {
            assert_eq!(Sha256Fingerprint::parse(text), Err(want), "{text:?}");
        }
        assert_eq!(
            Sha256Fingerprint::parse(&half_separated),
            Err(FingerprintError::Misplaced)
        );
        assert!(
            FingerprintError::WrongLength(40).to_string().contains("SHA-1"),
            "a SHA-1 fingerprint (the other one Proxmox and openssl print) is named"
        );
    }
}
