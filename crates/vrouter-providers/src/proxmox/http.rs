//! The Proxmox VE REST client: every request tries the cluster's endpoints
//! in order until one answers.
//!
//! "Answers" means an HTTP response of any status: a 401 or 404 from the
//! first endpoint is the cluster's answer and is returned, not retried
//! elsewhere. An endpoint that refuses the connection, does not complete
//! TCP+TLS within the connect timeout, or fails TLS verification is skipped.
//! Once a request has been sent, a non-idempotent one (`agent/exec`) is never
//! re-sent to another endpoint: it may already have started a process.
//!
//! Connections stay open: a [`Client`] is `reqwest`'s, with a pool of idle
//! connections per endpoint, and one is kept per cluster and credential
//! ([`super::clients::ProxmoxClients`]). An apply's requests and its
//! exec-status polls (every 50-250 ms) reuse one TCP+TLS connection instead
//! of a handshake each (docs/decisions.md and benchmarks.md). The
//! order is unchanged: every request asks the first endpoint first, over a
//! pooled connection when one is open, else over a new one.

use std::error::Error as _;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderValue, Method, StatusCode, header};
use rustls::ClientConfig;

use super::large_answers::{self, LARGE_ANSWER_BYTES};
use super::verifier;
use crate::error::{Attempts, EndpointFailure, ProviderError};
use crate::memory_budget::Deadline;

/// Proxmox API token credentials. The secret is never printed: `Debug`
/// redacts it and it only ever leaves this type inside the request header.
#[derive(Clone)]
pub struct ApiToken {
    id: String,
    secret: String,
}

impl ApiToken {
    /// `id` is `USER@REALM!TOKENID`, `secret` the token's UUID.
    pub fn new(id: impl Into<String>, secret: impl Into<String>) -> Self {
        ApiToken {
            id: id.into(),
            secret: secret.into(),
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub(crate) fn secret(&self) -> &str {
        &self.secret
    }

    /// `text` with the token's id and secret replaced, for a message built
    /// by a server or library that may have echoed the request.
    pub fn redact(&self, text: &str) -> String {
        redact(text, &[&self.id, &self.secret])
    }

    fn header(&self) -> HeaderValue {
        let mut value = HeaderValue::from_str(&format!("PVEAPIToken={}={}", self.id, self.secret))
            .unwrap_or_else(|_| HeaderValue::from_static("PVEAPIToken=invalid"));
        value.set_sensitive(true);
        value
    }
}

impl std::fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiToken")
            .field("id", &self.id)
            .field("secret", &"<redacted>")
            .finish()
    }
}

/// `message` with every occurrence of each secret replaced, so an error a
/// server or library built from the request never carries a credential
/// into a condition or a log.
pub fn redact(message: &str, secrets: &[&str]) -> String {
    secrets
        .iter()
        .filter(|s| !s.is_empty())
        .fold(message.to_owned(), |m, s| m.replace(s, "<redacted>"))
}

/// The characters a token id or secret may not contain: they would break the
/// header or let a crafted Secret inject another header.
pub(crate) fn token_part_is_valid(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_graphic())
}

/// One parsed endpoint such as `https://pve1.example.com:8006`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Endpoint {
    /// As written, without a trailing slash; names the endpoint in errors.
    pub display: String,
    pub host: String,
    pub port: u16,
    /// A path prefix before `/api2/json`, usually empty.
    pub base_path: String,
}

impl Endpoint {
    /// `https://host:port/base`, the prefix of every request's URL.
    fn url_prefix(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        format!("https://{host}:{}{}", self.port, self.base_path)
    }

    pub(crate) fn parse(raw: &str) -> Result<Endpoint, String> {
        let display = raw.trim().trim_end_matches('/').to_string();
        let uri: http::Uri = display.parse().map_err(|e| format!("{raw:?} is not a URL: {e}"))?;
        match uri.scheme_str() {
            Some("https") => {}
            Some(other) => {
                return Err(format!(
                    "{raw:?} uses {other}://; the API token is only sent over https://"
                ));
            }
            None => return Err(format!("{raw:?} has no scheme; write https://host:8006")),
        }
        let host = uri
            .host()
            .ok_or_else(|| format!("{raw:?} has no host"))?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        Ok(Endpoint {
            port: uri.port_u16().unwrap_or(443),
            base_path: uri.path().trim_end_matches('/').to_string(),
            host,
            display,
        })
    }
}

/// Why one attempt failed, and whether the next endpoint may be tried.
enum AttemptError {
    /// Nothing reached the server: safe to try the next endpoint.
    NotSent(String),
    /// The server's certificate was refused during the handshake, before
    /// any request (the token included) was written: safe to try the next
    /// endpoint, and a person must look if none answers.
    Untrusted(String),
    /// The request was sent; the answer did not come.
    Sent { reason: String, timed_out: bool },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Timeouts {
    pub connect: Duration,
    pub request: Duration,
}

impl Timeouts {
    /// The most one attempt may take. reqwest bounds the connection (new
    /// or taken from the pool) by `connect`; whether this one was new is
    /// not told, so the answer gets `request` after the longest connect.
    fn whole_request(&self) -> Duration {
        self.connect + self.request
    }
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(5),
            request: Duration::from_secs(30),
        }
    }
}

/// The largest response body read (34 MiB). The largest answer the
/// provider asks for is an `agent/file-read` of the largest readable file
/// (16 MiB): Proxmox sends each byte as one character, so a text file
/// stays 16 MiB and one whose every byte is above 0x7F doubles (two bytes
/// of UTF-8 each); 2 MiB more hold the envelope. Anything larger (a file
/// of control bytes, six characters each as `\u00XX`; a peer that never
/// stops) is refused: at a few reads at once, a bigger bound would take
/// the operator past its 256 MiB memory limit.
pub(crate) const MAX_RESPONSE_BYTES: usize = 34 * 1024 * 1024;

/// How long an idle connection is kept for reuse. pveproxy closes a
/// keep-alive connection after 5 s idle (its handle timeout), after an
/// error answer and after 100 requests (those two say so in `Connection:
/// close`); a connection the server closed is seen as closed and not used.
/// Kept longer than those 5 s on purpose: a 4 s limit would keep an exec
/// clear of a server closing the connection at the very moment it is sent,
/// but reopened so many connections after each lull that the scale run
/// went over one handshake per apply (docs/decisions.md). The pool
/// hands out the connection returned last, so an exec, sent right after
/// its own file write, goes out on one used a moment ago.
const POOL_IDLE: Duration = Duration::from_secs(30);

/// A response: status, reason phrase (Proxmox puts its error message there),
/// body, and which endpoint gave it.
#[derive(Debug)]
pub(crate) struct Answer {
    pub endpoint: String,
    pub status: StatusCode,
    pub reason: String,
    pub body: Bytes,
    /// Held while a large answer is in memory ([`super::large_answers`]).
    pub _large: Option<crate::memory_budget::Lease<'static>>,
}

pub(crate) struct Client {
    endpoints: Vec<Endpoint>,
    token: ApiToken,
    http: reqwest::Client,
    timeouts: Timeouts,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field(
                "endpoints",
                &self.endpoints.iter().map(|e| &e.display).collect::<Vec<_>>(),
            )
            .field("token", &self.token)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// The client of one cluster and credential. HTTP/1.1 only (what
    /// pveproxy speaks), no redirects followed and no proxy taken from the
    /// environment (either would send the token somewhere the
    /// ProxmoxCluster does not name), and no retries of its own: which
    /// request may go to which endpoint is decided here, in [`Client::send`].
    pub(crate) fn new(
        endpoints: Vec<Endpoint>,
        token: ApiToken,
        tls: Arc<ClientConfig>,
        timeouts: Timeouts,
    ) -> Result<Self, String> {
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured((*tls).clone())
            .http1_only()
            .connect_timeout(timeouts.connect)
            .pool_idle_timeout(POOL_IDLE)
            .redirect(reqwest::redirect::Policy::none())
            .retry(reqwest::retry::never())
            .no_proxy()
            .build()
            .map_err(|e| format!("building the HTTP client: {}", causes(&e)))?;
        Ok(Client {
            endpoints,
            token,
            http,
            timeouts,
        })
    }

    /// Sends `method path` (path starts at `/api2/json/...`, query included)
    /// to the endpoints in order.
    pub(crate) async fn send(
        &self,
        method: Method,
        path: &str,
        json_body: Option<Vec<u8>>,
        idempotent: bool,
    ) -> Result<Answer, ProviderError> {
        let mut failures = Vec::new();
        let mut untrusted = false;
        for endpoint in &self.endpoints {
            match self.attempt(endpoint, &method, path, json_body.as_deref()).await {
                Ok(answer) => return Ok(answer),
                Err(AttemptError::NotSent(reason)) => failures.push(EndpointFailure {
                    endpoint: endpoint.display.clone(),
                    reason,
                }),
                Err(AttemptError::Untrusted(reason)) => {
                    untrusted = true;
                    failures.push(EndpointFailure {
                        endpoint: endpoint.display.clone(),
                        reason,
                    });
                }
                Err(AttemptError::Sent { reason, timed_out }) => {
                    if !idempotent {
                        return Err(if timed_out {
                            ProviderError::Timeout {
                                operation: format!("{method} {} on {}", strip_query(path), endpoint.display),
                                after: self.timeouts.whole_request(),
                            }
                        } else {
                            ProviderError::Unreachable {
                                attempts: Attempts(vec![EndpointFailure {
                                    endpoint: endpoint.display.clone(),
                                    reason: format!("{reason} (not retried elsewhere: the request may have run)"),
                                }]),
                            }
                        });
                    }
                    failures.push(EndpointFailure {
                        endpoint: endpoint.display.clone(),
                        reason,
                    });
                }
            }
        }
        let attempts = Attempts(failures);
        Err(if untrusted {
            ProviderError::CertificateNotTrusted { attempts }
        } else {
            ProviderError::Unreachable { attempts }
        })
    }

    async fn attempt(
        &self,
        endpoint: &Endpoint,
        method: &Method,
        path: &str,
        json_body: Option<&[u8]>,
    ) -> Result<Answer, AttemptError> {
        let mut request = self
            .http
            .request(method.clone(), format!("{}{path}", endpoint.url_prefix()))
            .header(header::AUTHORIZATION, self.token.header())
            .header(header::ACCEPT, "application/json");
        if let Some(body) = json_body {
            request = request
                .header(header::CONTENT_TYPE, "application/json")
                .body(body.to_vec());
        }
        // The limit stands still while a large answer waits for the budget.
        let deadline = Deadline::new(self.timeouts.whole_request());
        let exchange = async {
            let mut response = request.send().await.map_err(Failure::Http)?;
            let status = response.status();
            let reason = response
                .extensions()
                .get::<hyper::ext::ReasonPhrase>()
                .map(|r| String::from_utf8_lossy(r.as_bytes()).into_owned())
                .unwrap_or_default();
            // A declared length past the bound is refused before any of it
            // is read; one within it is reserved once, so the body is not
            // copied as it grows.
            let declared = response.content_length().and_then(|n| usize::try_from(n).ok());
            if declared.is_some_and(|n| n > MAX_RESPONSE_BYTES) {
                return Err(Failure::TooLarge);
            }
            // A large answer reserves what its reading costs before its body
            // is held: its declared length's cost, or the cap's while its
            // length is unknown, given back down to its length's once whole.
            let mut large = None;
            if let Some(n) = declared.filter(|&n| n > LARGE_ANSWER_BYTES) {
                large = Some(large_answers::admit(&deadline, n).await);
            }
            let mut body = BytesMut::with_capacity(declared.unwrap_or(0).min(MAX_RESPONSE_BYTES));
            while let Some(chunk) = response.chunk().await.map_err(Failure::Body)? {
                if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
                    return Err(Failure::TooLarge);
                }
                if large.is_none() && body.len() + chunk.len() > LARGE_ANSWER_BYTES {
                    large = Some(large_answers::admit(&deadline, MAX_RESPONSE_BYTES).await);
                }
                body.extend_from_slice(&chunk);
            }
            if let Some(lease) = large.as_mut() {
                lease.shrink_to(large_answers::cost_of(body.len()));
            }
            Ok((status, reason, body.freeze(), large))
        };
        match deadline.run(exchange).await.ok_or(()) {
            Ok(Ok((status, reason, body, large))) => Ok(Answer {
                endpoint: endpoint.display.clone(),
                status,
                reason,
                body,
                _large: large,
            }),
            Ok(Err(failure)) => Err(failure.classify(self.timeouts)),
            Err(_) => Err(AttemptError::Sent {
                reason: format!("no answer within {:?}", self.timeouts.whole_request()),
                timed_out: true,
            }),
        }
    }
}

/// How an exchange failed, before it is told whether the request was sent.
enum Failure {
    Http(reqwest::Error),
    Body(reqwest::Error),
    TooLarge,
}

impl Failure {
    fn classify(self, timeouts: Timeouts) -> AttemptError {
        match self {
            // No connection: nothing was sent. reqwest reports the TLS
            // handshake as part of connecting.
            Failure::Http(e) if e.is_connect() => {
                let tls = rustls_error(&e);
                if let Some(refused) = tls.and_then(verifier::refusal) {
                    return AttemptError::Untrusted(refused.to_string());
                }
                AttemptError::NotSent(if e.is_timeout() {
                    format!("no TCP+TLS connection within {:?}", timeouts.connect)
                } else if tls.is_some() {
                    format!("TLS handshake failed: {}", causes(&e))
                } else {
                    format!("TCP connect failed: {}", causes(&e))
                })
            }
            Failure::Http(e) => AttemptError::Sent {
                timed_out: e.is_timeout(),
                reason: format!("HTTP exchange failed: {}", causes(&e)),
            },
            Failure::Body(e) => AttemptError::Sent {
                timed_out: e.is_timeout(),
                reason: format!("reading the response body: {}", causes(&e)),
            },
            Failure::TooLarge => AttemptError::Sent {
                reason: format!("the response body is larger than {MAX_RESPONSE_BYTES} bytes"),
                timed_out: false,
            },
        }
    }
}

/// The causes under a reqwest error, innermost last, without reqwest's own
/// top line (which repeats the URL).
fn causes(error: &reqwest::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if parts.last().is_none_or(|last| !last.contains(&text)) {
            parts.push(text);
        }
        source = cause.source();
    }
    if parts.is_empty() {
        parts.push(error.to_string());
    }
    parts.join(": ")
}

/// The rustls error a connect error came from, if it came from TLS:
/// possibly inside I/O errors nested in each other (tokio-rustls reports it
/// as one, and reqwest's connector wraps that in another). An `io::Error`'s
/// `source()` skips the error it wraps, so those are opened with `get_ref`.
fn rustls_error(error: &reqwest::Error) -> Option<&rustls::Error> {
    fn inner_rustls<'e>(mut error: &'e (dyn std::error::Error + 'static)) -> Option<&'e rustls::Error> {
        loop {
            if let Some(tls) = error.downcast_ref::<rustls::Error>() {
                return Some(tls);
            }
            error = error.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref())?;
        }
    }
    let mut source = error.source();
    while let Some(cause) = source {
        if let Some(tls) = inner_rustls(cause) {
            return Some(tls);
        }
        source = cause.source();
    }
    None
}

fn strip_query(path: &str) -> &str {
    path.split('?').next().unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_message_never_carries_the_token() {
        let message = "401 for PVEAPIToken=op@pve!t=s3cret-value";
        assert_eq!(
            redact(message, &["s3cret-value", ""]),
            "401 for PVEAPIToken=op@pve!t=<redacted>"
        );
        assert_eq!(redact("plain", &["s3cret-value"]), "plain");
        let token = ApiToken::new("op@pve!t", "s3cret-value");
        assert_eq!(token.redact(message), "401 for PVEAPIToken=<redacted>=<redacted>");
    }

    #[test]
    fn endpoints_parse_and_refuse_plaintext() {
        assert_eq!(
            Endpoint::parse("https://[::1]:8006/proxy/").unwrap().url_prefix(),
            "https://[::1]:8006/proxy"
        );
        assert_eq!(
            Endpoint::parse("https://pve1").unwrap().url_prefix(),
            "https://pve1:443"
        );
        let e = Endpoint::parse("https://pve1.example.com:8006/").unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.base_path.as_str()),
            ("pve1.example.com", 8006, "")
        );
        assert_eq!(e.display, "https://pve1.example.com:8006");
        let e = Endpoint::parse("https://127.0.0.1").unwrap();
        assert_eq!(e.port, 443);
        let e = Endpoint::parse("https://[::1]:8006/proxy").unwrap();
        assert_eq!((e.host.as_str(), e.base_path.as_str()), ("::1", "/proxy"));
        for bad in ["http://pve:8006", "pve:8006", "", "https://"] {
            assert!(Endpoint::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn token_debug_redacts_the_secret() {
        let t = ApiToken::new("root@pam!op", "0b8f3c2e-secret");
        let printed = format!("{t:?}");
        assert!(
            printed.contains("root@pam!op") && !printed.contains("0b8f3c2e"),
            "{printed}"
        );
        assert!(t.header().is_sensitive());
        assert!(token_part_is_valid("root@pam!op"));
        assert!(!token_part_is_valid("a\r\nX-Evil: 1"));
        assert!(!token_part_is_valid(""));
    }
}
