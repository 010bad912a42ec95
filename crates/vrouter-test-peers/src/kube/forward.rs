//! Sending a request the fake does not serve on to the real API server,
//! and its answer back as it arrives: a watch streams for as long as the
//! API server keeps it open.

use bytes::Bytes;
use http::{Request, Response, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// An answer whose body may still be arriving.
pub(super) type Streamed = Response<UnsyncBoxBody<Bytes, BoxError>>;

/// One of the fake's own whole answers, as a [`Streamed`] one.
pub(super) fn whole(answer: Response<Full<Bytes>>) -> Streamed {
    answer.map(|body| body.map_err(|never| match never {}).boxed_unsync())
}

/// Headers that belong to one connection, not to the request or answer:
/// each side of the relay has its own. The caller's credentials are the
/// upstream client's to supply.
const NOT_RELAYED: [header::HeaderName; 5] = [
    header::HOST,
    header::CONNECTION,
    header::AUTHORIZATION,
    header::CONTENT_LENGTH,
    header::TRANSFER_ENCODING,
];

/// `req` sent to `upstream` as it came (method, path and query, headers,
/// body), with the upstream's answer.
pub(super) async fn send(upstream: &kube::Client, req: Request<Incoming>) -> Streamed {
    let (parts, body) = req.into_parts();
    let body = match body.collect().await {
        Ok(collected) => collected.to_bytes().to_vec(),
        Err(e) => return whole(super::status(400, "BadRequest", &format!("reading the request: {e}"))),
    };
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut relayed = Request::builder().method(parts.method.clone()).uri(path);
    for (name, value) in &parts.headers {
        if !NOT_RELAYED.contains(name) {
            relayed = relayed.header(name, value);
        }
    }
    let relayed = match relayed.body(kube::client::Body::from(body)) {
        Ok(relayed) => relayed,
        Err(e) => return whole(super::status(400, "BadRequest", &format!("relaying the request: {e}"))),
    };
    match upstream.send(relayed).await {
        Ok(answer) => {
            let (mut parts, body) = answer.into_parts();
            for name in &NOT_RELAYED {
                parts.headers.remove(name);
            }
            Response::from_parts(parts, body.map_err(|e| Box::new(e) as BoxError).boxed_unsync())
        }
        Err(e) => whole(super::status(
            502,
            "BadGateway",
            &format!("relaying {} {path} to the API server: {e}", parts.method),
        )),
    }
}
