//! The agent's line protocol, as pure functions over bytes.
//!
//! The agent reads a stream of JSON objects and writes one reply per line.
//! Two things make a byte stream less simple than it looks:
//! - the stream outlives any one client, so a new client can find half a
//!   request in the agent's parser and stale replies in the channel. The
//!   cure is the QGA handshake: send `0xFF` (invalid UTF-8, which makes the
//!   agent's parser reset; the agent answers it with a parse error) and
//!   `guest-sync-delimited` with a random id; the agent puts `0xFF` before
//!   that reply, and everything before the `0xFF` and every reply until the
//!   one echoing the id is stale;
//! - a reply may not be the answer to the command just sent. Each command
//!   carries a random QMP `id`, which the agent echoes, so a reply with
//!   another id is recognised as stray and skipped. An error without an id
//!   is what the agent sends when it could not parse a request at all
//!   (it never saw the id).

use serde_json::Value;

use crate::command::Command;
use crate::reply::{AgentError, Reply};

/// The byte that resets the agent's parser and that prefixes a
/// `guest-sync-delimited` reply.
pub const DELIMITER: u8 = 0xFF;

/// One request line: the command with `id` added, then a newline.
pub fn request_line(command: &Command, id: i64) -> Vec<u8> {
    let mut value = serde_json::to_value(command).expect("a command is a JSON object");
    value
        .as_object_mut()
        .expect("a command is a JSON object")
        .insert("id".into(), Value::from(id));
    let mut line = serde_json::to_vec(&value).expect("a JSON value serialises");
    line.push(b'\n');
    line
}

/// The resynchronisation request: the parser-resetting `0xFF`, then
/// `guest-sync-delimited` with `id`.
pub fn sync_request(id: i64) -> Vec<u8> {
    let mut bytes = vec![DELIMITER];
    let command = serde_json::to_vec(&Command::sync_delimited(id)).expect("a command serialises");
    bytes.extend_from_slice(&command);
    bytes.push(b'\n');
    bytes
}

/// What one received line means for the call waiting on it.
#[derive(Debug, Clone, PartialEq)]
pub enum Disposition {
    /// The reply to the command sent with the expected id.
    Ours(Reply),
    /// An error the agent sent for a request it could not parse. After a
    /// resynchronisation nothing else is in flight, so it answers the
    /// current command; the channel must be resynchronised before reuse,
    /// because the rest of that request may still be in the agent's parser.
    Unparsed(AgentError),
    /// A reply to something else (another id, or no id and no error).
    Stray,
}

/// Reads one line (without its newline) as a reply envelope.
///
/// Everything up to the last `0xFF` is dropped first: it is either a stale
/// fragment or the delimiter of a sync reply. Blank lines are stray.
pub fn parse_line(line: &[u8]) -> Result<Option<(Option<Value>, Reply)>, String> {
    let start = line.iter().rposition(|&b| b == DELIMITER).map_or(0, |i| i + 1);
    let text = line[start..].trim_ascii();
    if text.is_empty() {
        return Ok(None);
    }
    let mut value: Value = serde_json::from_slice(text).map_err(|e| format!("{e} in {}", preview(text)))?;
    let id = value.as_object_mut().and_then(|object| object.remove("id"));
    let reply = Reply::from_envelope(value)?;
    Ok(Some((id, reply)))
}

/// Decides what a parsed line means for a call that sent `expected_id`.
pub fn classify(id: Option<Value>, reply: Reply, expected_id: i64) -> Disposition {
    match id {
        Some(id) if id.as_i64() == Some(expected_id) => Disposition::Ours(reply),
        Some(_) => Disposition::Stray,
        None => match reply {
            Reply::Error(error) => Disposition::Unparsed(error),
            Reply::Return(_) => Disposition::Stray,
        },
    }
}

/// Whether a parsed line is the reply to the sync request with `id`.
pub fn is_sync_reply(reply: &Reply, id: i64) -> bool {
    matches!(reply, Reply::Return(value) if value.as_i64() == Some(id))
}

/// The start of an unparsable line, for error messages.
fn preview(text: &[u8]) -> String {
    const SHOWN: usize = 80;
    let shown = String::from_utf8_lossy(&text[..text.len().min(SHOWN)]).into_owned();
    if text.len() > SHOWN {
        format!("{shown:?}… ({} bytes)", text.len())
    } else {
        format!("{shown:?}")
    }
}

/// Splits received bytes into lines, refusing to buffer a line longer than
/// `limit` bytes.
#[derive(Debug)]
pub struct LineSplitter {
    buffer: Vec<u8>,
    /// How far `buffer` is known to hold no newline, so a long line arriving
    /// in many reads is scanned once, not once per read.
    scanned: usize,
    limit: usize,
}

/// A line grew past the splitter's limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineTooLong {
    pub limit: usize,
}

impl LineSplitter {
    pub fn new(limit: usize) -> Self {
        LineSplitter {
            buffer: Vec::new(),
            scanned: 0,
            limit,
        }
    }

    pub fn push(&mut self, bytes: &[u8]) {
        self.buffer.extend_from_slice(bytes);
    }

    /// The next complete line without its newline, if one has arrived.
    pub fn next_line(&mut self) -> Result<Option<Vec<u8>>, LineTooLong> {
        match self.buffer[self.scanned..].iter().position(|&b| b == b'\n') {
            Some(offset) => {
                let end = self.scanned + offset;
                if end > self.limit {
                    return Err(LineTooLong { limit: self.limit });
                }
                let mut line: Vec<u8> = self.buffer.drain(..=end).collect();
                line.pop();
                self.scanned = 0;
                Ok(Some(line))
            }
            None => {
                self.scanned = self.buffer.len();
                if self.buffer.len() > self.limit {
                    return Err(LineTooLong { limit: self.limit });
                }
                Ok(None)
            }
        }
    }

    /// Bytes received after the last complete line.
    pub fn pending(&self) -> usize {
        self.buffer.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn request_line_adds_the_id_and_a_newline() {
        let line = request_line(&Command::exec_status(crate::Pid(42)), 7);
        assert_eq!(line.last(), Some(&b'\n'));
        let value: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(
            value,
            json!({"execute": "guest-exec-status", "arguments": {"pid": 42}, "id": 7})
        );
    }

    #[test]
    fn sync_request_starts_with_the_delimiter() {
        let bytes = sync_request(99);
        assert_eq!(bytes[0], DELIMITER);
        let value: Value = serde_json::from_slice(&bytes[1..]).unwrap();
        assert_eq!(
            value,
            json!({"execute": "guest-sync-delimited", "arguments": {"id": 99}})
        );
    }

    #[test]
    fn lines_classify_by_id() {
        let table: [(&[u8], Disposition); 7] = [
            (
                br#"{"return": {}, "id": 5}"#,
                Disposition::Ours(Reply::Return(json!({}))),
            ),
            (
                br#"{"id": 5, "error": {"class": "GenericError", "desc": "Invalid parameter 'pid'"}}"#,
                Disposition::Ours(Reply::Error(AgentError::new("GenericError", "Invalid parameter 'pid'"))),
            ),
            (br#"{"return": {}, "id": 6}"#, Disposition::Stray),
            (br#"{"return": {}, "id": "5"}"#, Disposition::Stray),
            (br#"{"return": 1000}"#, Disposition::Stray),
            (
                br#"{"error": {"class": "GenericError", "desc": "JSON token size limit exceeded"}}"#,
                Disposition::Unparsed(AgentError::new("GenericError", "JSON token size limit exceeded")),
            ),
            (
                b"\xff{\"return\": {}, \"id\": 5}",
                Disposition::Ours(Reply::Return(json!({}))),
            ),
        ];
        for (line, expected) in table {
            let (id, reply) = parse_line(line).unwrap().unwrap();
            assert_eq!(classify(id, reply, 5), expected, "{}", String::from_utf8_lossy(line));
        }
    }

    #[test]
    fn the_delimiter_discards_a_stale_fragment() {
        let line = b"{\"return\": {\"cou\xff{\"return\": 1234}";
        let (id, reply) = parse_line(line).unwrap().unwrap();
        assert_eq!(id, None);
        assert!(is_sync_reply(&reply, 1234));
        assert!(!is_sync_reply(&reply, 1235));
    }

    #[test]
    fn blank_lines_are_nothing_and_garbage_is_an_error() {
        assert_eq!(parse_line(b"").unwrap(), None);
        assert_eq!(parse_line(b"  \r").unwrap(), None);
        assert_eq!(parse_line(b"\xff").unwrap(), None);
        let message = parse_line(b"{\"return\": ").unwrap_err();
        assert!(message.contains("EOF"), "{message}");
        let message = parse_line(b"{\"id\": 1}").unwrap_err();
        assert!(message.contains("neither"), "{message}");
    }

    #[test]
    fn splitter_refuses_lines_over_the_limit() {
        let mut splitter = LineSplitter::new(4);
        splitter.push(b"abcd\nabcde");
        assert_eq!(splitter.next_line(), Ok(Some(b"abcd".to_vec())));
        assert_eq!(splitter.next_line(), Err(LineTooLong { limit: 4 }));
        let mut splitter = LineSplitter::new(4);
        splitter.push(b"abcdef\n");
        assert_eq!(splitter.next_line(), Err(LineTooLong { limit: 4 }));
    }

    proptest! {
        /// However the bytes are cut into reads, the same lines come out.
        #[test]
        fn splitting_is_independent_of_read_boundaries(
            lines in proptest::collection::vec(proptest::collection::vec(any::<u8>().prop_filter("no newline", |b| *b != b'\n'), 0..40), 0..8),
            cuts in proptest::collection::vec(1usize..17, 1..40),
        ) {
            let mut stream = Vec::new();
            for line in &lines {
                stream.extend_from_slice(line);
                stream.push(b'\n');
            }
            let mut splitter = LineSplitter::new(64);
            let mut seen = Vec::new();
            let mut rest = &stream[..];
            let mut cut = cuts.iter().cycle();
            while !rest.is_empty() {
                let n = (*cut.next().unwrap()).min(rest.len());
                splitter.push(&rest[..n]);
                rest = &rest[n..];
                while let Some(line) = splitter.next_line().unwrap() {
                    seen.push(line);
                }
            }
            prop_assert_eq!(seen, lines);
            prop_assert_eq!(splitter.pending(), 0);
        }
    }
}
