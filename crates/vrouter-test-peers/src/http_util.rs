//! Small HTTP helpers shared by the fake servers.

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;

/// Decodes `a=b&c=%2Fd` into pairs (`+` is a space).
pub fn parse_query(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

pub fn query_value(query: &[(String, String)], key: &str) -> Option<String> {
    query.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
}

pub fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                    }
                    None => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A response with a custom reason phrase (Proxmox puts its error text there).
pub fn response(status: StatusCode, reason: Option<&str>, content_type: &str, body: Vec<u8>) -> Response<Full<Bytes>> {
    let mut resp = Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, content_type)
        .body(Full::new(Bytes::from(body)))
        .expect("a valid response");
    if let Some(reason) = reason {
        let sanitized: String = reason
            .chars()
            .map(|c| if c.is_ascii() && !c.is_ascii_control() { c } else { '?' })
            .collect();
        if let Ok(phrase) = hyper::ext::ReasonPhrase::try_from(sanitized.into_bytes()) {
            resp.extensions_mut().insert(phrase);
        }
    }
    resp
}
