//! The few calls a test makes to etcd itself, through etcd's v3 JSON
//! gateway (grpc-gateway, served on the client URL next to gRPC): a put,
//! to move the store's revision, and a compaction, which is what makes old
//! resource versions expire for the API server.

use base64::Engine as _;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::Error;

/// Puts `value` at `key`; returns the store's revision after the put.
pub(crate) async fn put(etcd_url: &str, key: &str, value: &str) -> Result<i64, Error> {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let answer = post(etcd_url, "/v3/kv/put", &json!({"key": b64(key), "value": b64(value)})).await?;
    revision(&answer)
}

/// Compacts the store at `revision`, physically (etcd returns only once
/// the old revisions are gone from its backend).
pub(crate) async fn compact(etcd_url: &str, revision: i64) -> Result<(), Error> {
    // int64 fields travel as JSON strings in the gateway's protobuf mapping.
    post(
        etcd_url,
        "/v3/kv/compaction",
        &json!({"revision": revision.to_string(), "physical": true}),
    )
    .await
    .map(drop)
}

/// `header.revision` of a gateway answer.
fn revision(answer: &Value) -> Result<i64, Error> {
    answer["header"]["revision"]
        .as_str()
        .and_then(|r| r.parse().ok())
        .or_else(|| answer["header"]["revision"].as_i64())
        .ok_or_else(|| Error::Etcd(format!("no header.revision in {answer}")))
}

/// One HTTP/1.1 POST of `body` to `path` on its own connection; the answer's
/// JSON body when the status is 200.
async fn post(etcd_url: &str, path: &str, body: &Value) -> Result<Value, Error> {
    let host = etcd_url.trim_start_matches("http://").trim_end_matches('/');
    let io = |what: &str| Error::io(format!("{what} etcd's gateway at {host}{path}"));
    let mut stream = TcpStream::connect(host).await.map_err(io("connecting to"))?;
    let body = body.to_string();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.map_err(io("writing to"))?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.map_err(io("reading from"))?;
    let answer = String::from_utf8_lossy(&answer);
    let (head, rest) = answer
        .split_once("\r\n\r\n")
        .ok_or_else(|| Error::Etcd(format!("not an HTTP answer from {path}: {answer:?}")))?;
    if head.split_whitespace().nth(1) != Some("200") {
        return Err(Error::Etcd(format!("{path} answered {head}: {rest}")));
    }
    let json = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        dechunk(rest)
    } else {
        rest.to_owned()
    };
    serde_json::from_str(&json).map_err(|e| Error::Etcd(format!("{path} answered {json:?}: {e}")))
}

/// The body of a chunked answer (sizes in hex, each chunk on its line).
fn dechunk(mut rest: &str) -> String {
    let mut body = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 || after.len() < size {
            break;
        }
        body.push_str(&after[..size]);
        rest = after[size..].trim_start_matches("\r\n");
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revisions_are_read_as_the_gateway_writes_them() {
        assert_eq!(revision(&json!({"header": {"revision": "42"}})).unwrap(), 42);
        assert_eq!(revision(&json!({"header": {"revision": 7}})).unwrap(), 7);
        assert!(revision(&json!({"header": {}})).is_err());
    }

    #[test]
    fn chunked_bodies_are_joined() {
        assert_eq!(dechunk("4\r\n{\"a\"\r\n3\r\n:1}\r\n0\r\n\r\n"), "{\"a\":1}");
    }
}
