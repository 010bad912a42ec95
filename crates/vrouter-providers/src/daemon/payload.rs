//! What `ApplyConfig` carries, and what the real daemon does with it.
//!
//! The server re-encodes our `config_payload` (Go's `encoding/json`, keeping
//! only `config`, `commands` and `disconnect_policy`) into an `apply_config`
//! message on the agent's stream, and the agent renders its own script:
//! `load /dev/stdin <<'VYOS_CONFIG_EOF'`, the config, a newline, the fixed
//! delimiter, the commands, `commit`, and always `save`. So, before anything
//! is sent:
//!
//! - `save: false` cannot be honoured, and is refused;
//! - a config line equal to the fixed delimiter would end the heredoc early
//!   and run the rest as vbash commands, and is refused;
//! - a NUL byte cannot travel in a script (the same rule as our own script);
//! - one final newline of the config is dropped, because the agent always
//!   adds one: `load` then reads the same bytes as from the QGA providers'
//!   script;
//! - the message to the agent must fit gRPC's default 4 MiB receive limit
//!   after Go's re-encoding (which writes `<`, `>`, `&`, U+2028 and U+2029 as
//!   six-byte escapes); a larger one would make the agent drop its
//!   connection instead of answering.
//!
//! `disconnect_policy` is never sent: it would change the agent's policy
//! for as long as it runs, for every later apply too.

use prost::Message;
use serde::Serialize;

use super::proto::ApplyConfigRequest;
use crate::error::ProviderError;

/// The heredoc delimiter the agent's script template uses.
pub const AGENT_HEREDOC_DELIMITER: &str = "VYOS_CONFIG_EOF";

/// gRPC's default largest message a receiver accepts (grpc-go's server for
/// our request, the agent's client for the message it is re-encoded into).
pub const GRPC_MAX_MESSAGE: usize = 4 * 1024 * 1024;

/// The message type and the request id (a UUID) the server puts beside the
/// payload on the agent's stream.
const AGENT_MESSAGE_TYPE: &str = "apply_config";
const REQUEST_ID_LEN: usize = 36;

/// The JSON `config_payload` of `ApplyConfig`, as the server's dispatcher reads it.
#[derive(Serialize)]
struct Payload<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    config: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    commands: &'a str,
}

/// The `ApplyConfig` request for `config`, `commands` and `save`, or why the
/// real daemon cannot carry them as asked.
pub fn apply_request(
    agent_id: &str,
    config: &str,
    commands: &str,
    save: bool,
    timeout_seconds: i32,
) -> Result<ApplyConfigRequest, ProviderError> {
    if !save {
        return Err(ProviderError::NotSupported {
            provider: "vrouter-daemon",
            what: "spec.save: false (the vrouter-daemon agent always runs `save` after `commit`)".into(),
        });
    }
    vrouter_render::check_script_text(config, commands).map_err(|e| ProviderError::Render(e.to_string()))?;
    if let Some(line) = config.split('\n').position(|l| l == AGENT_HEREDOC_DELIMITER) {
        return Err(ProviderError::Render(format!(
            "line {} of the config is {AGENT_HEREDOC_DELIMITER:?}, the fixed heredoc delimiter of the \
             vrouter-daemon agent's script: the config would end there and its remaining lines would run as commands",
            line + 1
        )));
    }
    let config = agent_config(config);
    let agent_message = agent_message_len(config, commands);
    if agent_message > GRPC_MAX_MESSAGE {
        return Err(too_large(
            agent_message,
            "the vrouter-daemon agent accepts in one message",
        ));
    }
    let payload = serde_json::to_vec(&Payload { config, commands })
        .map_err(|e| ProviderError::Render(format!("encoding the daemon payload: {e}")))?;
    let request = ApplyConfigRequest {
        agent_id: agent_id.to_string(),
        config_payload: payload,
        timeout_seconds,
    };
    if request.encoded_len() > GRPC_MAX_MESSAGE {
        return Err(too_large(
            request.encoded_len(),
            "the vrouter-daemon server accepts in one ApplyConfig request",
        ));
    }
    Ok(request)
}

fn too_large(size: usize, why: &str) -> ProviderError {
    ProviderError::TooLarge {
        what: "the config and commands, as sent to the vrouter-daemon".into(),
        size,
        limit: GRPC_MAX_MESSAGE,
        why: why.into(),
    }
}

/// The config as sent: the agent ends it with a newline of its own, so one
/// final newline is dropped (unless nothing would be left: an empty config
/// means "load the default config" to the agent).
fn agent_config(config: &str) -> &str {
    match config.strip_suffix('\n') {
        Some(rest) if !rest.is_empty() => rest,
        _ => config,
    }
}

/// The length of `text` as a JSON string written by Go's `encoding/json`
/// (HTML-safe escaping), quotes included.
pub fn go_json_string_len(text: &str) -> usize {
    2 + text
        .chars()
        .map(|c| match c {
            '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => 6,
            c if (c as u32) < 0x20 => 6,
            c => c.len_utf8(),
        })
        .sum::<usize>()
}

/// The length of a protobuf length-delimited field (tag, length, bytes).
fn field_len(len: usize) -> usize {
    1 + prost::encoding::encoded_len_varint(len as u64) + len
}

/// The size of the `ServerMessage` the server writes to the agent's stream
/// for this config and these commands.
fn agent_message_len(config: &str, commands: &str) -> usize {
    let encoded = |text: &str| (!text.is_empty()).then(|| go_json_string_len(text));
    agent_message_len_of(encoded(config), encoded(commands))
}

/// [`agent_message_len`] from the JSON-encoded lengths of the fields sent.
fn agent_message_len_of(config_json: Option<usize>, commands_json: Option<usize>) -> usize {
    // {"id":"<uuid>","config":...,"commands":...}
    let json = "{\"id\":\"\"}".len()
        + REQUEST_ID_LEN
        + config_json.map_or(0, |len| ",\"config\":".len() + len)
        + commands_json.map_or(0, |len| ",\"commands\":".len() + len);
    field_len(AGENT_MESSAGE_TYPE.len()) + field_len(REQUEST_ID_LEN) + field_len(json)
}

/// The longest config of one-byte characters that needs no escaping (and no
/// commands) the agent still accepts.
pub fn largest_plain_config() -> usize {
    (0..GRPC_MAX_MESSAGE)
        .rev()
        .find(|n| agent_message_len_of(Some(n + 2), None) <= GRPC_MAX_MESSAGE)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload_json(config: &str, commands: &str) -> serde_json::Value {
        let request = apply_request("r1", config, commands, true, 60).unwrap();
        serde_json::from_slice(&request.config_payload).unwrap()
    }

    #[test]
    fn the_payload_carries_config_and_commands_only() {
        assert_eq!(
            payload_json("interfaces {\n}", "set system host-name r1\n"),
            serde_json::json!({"config": "interfaces {\n}", "commands": "set system host-name r1\n"})
        );
        assert_eq!(payload_json("", ""), serde_json::json!({}));
    }

    #[test]
    fn one_final_newline_of_the_config_is_left_to_the_agent() {
        for (given, sent) in [("a\n", "a"), ("a", "a"), ("a\n\n", "a\n"), ("\n", "\n"), ("", "")] {
            let json = payload_json(given, "");
            assert_eq!(
                json.get("config").and_then(|c| c.as_str()).unwrap_or(""),
                sent,
                "{given:?}"
            );
        }
    }

    #[test]
    fn what_the_agent_cannot_carry_is_refused() {
        let no_save = apply_request("r1", "a", "", false, 60).unwrap_err();
        assert!(matches!(no_save, ProviderError::NotSupported { .. }), "{no_save}");
        assert!(no_save.to_string().contains("always runs `save`"), "{no_save}");

        let delimiter = apply_request("r1", "a {\n}\nVYOS_CONFIG_EOF\nset x", "", true, 60).unwrap_err();
        assert!(matches!(delimiter, ProviderError::Render(_)), "{delimiter}");
        assert!(delimiter.to_string().contains("line 3"), "{delimiter}");
        // Only a whole line ends the heredoc.
        for fine in [
            "VYOS_CONFIG_EOF ",
            " VYOS_CONFIG_EOF",
            "x VYOS_CONFIG_EOF",
            "VYOS_CONFIG_EOF\r",
        ] {
            apply_request("r1", fine, "", true, 60).unwrap();
        }
        // The delimiter as the last line, with or without its newline.
        for bad in ["VYOS_CONFIG_EOF", "a\nVYOS_CONFIG_EOF\n"] {
            apply_request("r1", bad, "", true, 60).unwrap_err();
        }

        let nul = apply_request("r1", "", "set a\0b", true, 60).unwrap_err();
        assert!(nul.to_string().contains("NUL byte"), "{nul}");
    }

    #[test]
    fn go_escapes_html_characters_and_line_separators() {
        assert_eq!(go_json_string_len(""), 2);
        assert_eq!(go_json_string_len("abc"), 5);
        assert_eq!(go_json_string_len("a\"b\\c\n\t"), 2 + 3 + 2 * 4);
        assert_eq!(go_json_string_len("<>&"), 2 + 18);
        assert_eq!(go_json_string_len("\u{2028}é"), 2 + 6 + 2);
        assert_eq!(go_json_string_len("\u{1}\u{7f}"), 2 + 6 + 1);
    }

    #[test]
    fn the_size_limit_is_the_agents_message_after_go_reencodes_it() {
        let fits = largest_plain_config();
        assert_eq!(agent_message_len(&"a".repeat(fits), ""), GRPC_MAX_MESSAGE);
        apply_request("r1", &"a".repeat(fits), "", true, 60).unwrap();
        let err = apply_request("r1", &"a".repeat(fits + 1), "", true, 60).unwrap_err();
        assert!(matches!(err, ProviderError::TooLarge { .. }), "{err}");
        // Six bytes per `<` on the agent's side: a sixth of the size is too much.
        let err = apply_request("r1", &"<".repeat(fits / 6 + 1), "", true, 60).unwrap_err();
        assert!(matches!(err, ProviderError::TooLarge { .. }), "{err}");
    }
}
