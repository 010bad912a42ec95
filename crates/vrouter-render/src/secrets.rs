//! Hiding the secret values of a VyOS configuration before it is shown to a
//! person (a diff, a report): passwords, pre-shared keys, SNMP communities.
//!
//! In both forms a VyOS leaf holds its value at the end of the line
//! (`set … plaintext-password 'x'` and `plaintext-password x` in
//! config.boot), so a secret is everything after a secret node's name.

use std::collections::HashMap;

/// Node names whose value is a secret. `key` covers `authentication key`
/// and routing-protocol keys; masking a public key too costs nothing.
const SECRET_NODES: &[&str] = &[
    "password",
    "plaintext-password",
    "encrypted-password",
    "pre-shared-secret",
    "shared-secret",
    "secret",
    "key",
    "private-key",
    "preshared-key",
    "md5-password",
    "community",
    "passphrase",
];

/// Replaces secret values with `<masked#N>`. One masker numbers every
/// distinct value it has seen, so that masking both sides of a diff with the
/// same masker still shows a secret that changed (`<masked#1>` →
/// `<masked#2>`) without showing either value.
#[derive(Debug, Default)]
pub struct SecretMasker {
    seen: HashMap<String, usize>,
}

impl SecretMasker {
    pub fn new() -> Self {
        Self::default()
    }

    /// `text` with every secret value masked; other lines as they were.
    pub fn mask(&mut self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        for line in text.split_inclusive('\n') {
            let (body, end) = match line.strip_suffix('\n') {
                Some(body) => (body, "\n"),
                None => (line, ""),
            };
            out.push_str(&self.mask_line(body));
            out.push_str(end);
        }
        out
    }

    fn mask_line(&mut self, line: &str) -> String {
        // A secret param's placeholder names a Secret key, not a value:
        // shown as `<secret name/key>` wherever it stands, so a diff says
        // which Secret moves in, and a secret node holding one keeps it.
        let line = &crate::secret_params::shown_masked(line);
        let Some(start) = secret_value_start(line) else {
            return line.to_string();
        };
        let value = line[start..].trim_end();
        if value.is_empty() || crate::secret_params::is_masked_ref(value) {
            return line.to_string();
        }
        let next = self.seen.len() + 1;
        let n = *self.seen.entry(value.to_owned()).or_insert(next);
        format!("{}<masked#{n}>", &line[..start])
    }
}

/// Where the value of the first secret node of `line` starts: after the
/// node's name and the blanks that follow it.
fn secret_value_start(line: &str) -> Option<usize> {
    let mut offset = 0;
    let mut words = line.split_inclusive(char::is_whitespace).peekable();
    while let Some(word) = words.next() {
        offset += word.len();
        let name = word.trim_end();
        if SECRET_NODES.contains(&name) && words.peek().is_some() {
            let rest = &line[offset..];
            return Some(offset + (rest.len() - rest.trim_start().len()));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_values_are_masked_in_both_forms_and_nothing_else_changes() {
        let cases = [
            (
                "set system login user vyos authentication plaintext-password 'hunter 2'",
                "set system login user vyos authentication plaintext-password <masked#1>",
            ),
            (
                "        plaintext-password hunter2",
                "        plaintext-password <masked#2>",
            ),
            (
                "set vpn ipsec authentication psk s1 secret 'x y'",
                "set vpn ipsec authentication psk s1 secret <masked#3>",
            ),
            (
                "set service snmp community public authorization ro",
                "set service snmp community <masked#4>",
            ),
            ("set system host-name r1", "set system host-name r1"),
            (
                "set interfaces ethernet eth0 description password",
                "set interfaces ethernet eth0 description password",
            ),
            ("", ""),
        ];
        let mut masker = SecretMasker::new();
        for (input, expected) in cases {
            assert_eq!(masker.mask(input), expected, "{input:?}");
        }
    }

    #[test]
    fn one_masker_numbers_values_so_a_changed_secret_still_shows() {
        let mut masker = SecretMasker::new();
        let old = masker.mask("a\n  password one\r\nb\n");
        let same = masker.mask("  password one\n");
        let new = masker.mask("  password two\n");
        assert_eq!(old, "a\n  password <masked#1>\nb\n");
        assert_eq!(same, "  password <masked#1>\n");
        assert_eq!(new, "  password <masked#2>\n");
        assert!(!format!("{old}{same}{new}").contains("one"));
    }

    #[test]
    fn secret_param_placeholders_show_as_the_secret_they_name() {
        let mut masker = SecretMasker::new();
        let cases = [
            (
                "set system login user vyos authentication plaintext-password @vrouter-secret:db/pw@\n",
                "set system login user vyos authentication plaintext-password <secret db/pw>\n",
            ),
            (
                "set interfaces ethernet eth0 description @vrouter-secret:meta/desc.txt@\n",
                "set interfaces ethernet eth0 description <secret meta/desc.txt>\n",
            ),
            ("    password @vrouter-secret:db/pw@\n", "    password <secret db/pw>\n"),
        ];
        for (input, expected) in cases {
            assert_eq!(masker.mask(input), expected, "{input:?}");
        }
    }
}
