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
//! One connection per request, no pool: the operator makes a handful of
//! calls per reconcile, and a fresh connection always goes to the endpoint
//! the failover order picks.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::error::{Attempts, EndpointFailure, ProviderError};

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
    /// The request was sent; the answer did not come.
    Sent { reason: String, timed_out: bool },
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Timeouts {
    pub connect: Duration,
    pub request: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(5),
            request: Duration::from_secs(30),
        }
    }
}

/// The largest response body read (file-read returns up to 16 MiB, which
/// JSON escaping can grow).
const MAX_RESPONSE_BYTES: usize = 128 * 1024 * 1024;

/// A response: status, reason phrase (Proxmox puts its error message there),
/// body, and which endpoint gave it.
#[derive(Debug)]
pub(crate) struct Answer {
    pub endpoint: String,
    pub status: StatusCode,
    pub reason: String,
    pub body: Bytes,
}

pub(crate) struct Client {
    endpoints: Vec<Endpoint>,
    token: ApiToken,
    tls: Arc<ClientConfig>,
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
    pub(crate) fn new(endpoints: Vec<Endpoint>, token: ApiToken, tls: Arc<ClientConfig>, timeouts: Timeouts) -> Self {
        Client {
            endpoints,
            token,
            tls,
            timeouts,
        }
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
        for endpoint in &self.endpoints {
            match self.attempt(endpoint, &method, path, json_body.as_deref()).await {
                Ok(answer) => return Ok(answer),
                Err(AttemptError::NotSent(reason)) => failures.push(EndpointFailure {
                    endpoint: endpoint.display.clone(),
                    reason,
                }),
                Err(AttemptError::Sent { reason, timed_out }) => {
                    if !idempotent {
                        return Err(if timed_out {
                            ProviderError::Timeout {
                                operation: format!("{method} {} on {}", strip_query(path), endpoint.display),
                                after: self.timeouts.request,
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
        Err(ProviderError::Unreachable {
            attempts: Attempts(failures),
        })
    }

    async fn attempt(
        &self,
        endpoint: &Endpoint,
        method: &Method,
        path: &str,
        json_body: Option<&[u8]>,
    ) -> Result<Answer, AttemptError> {
        let connect = self.connect(endpoint);
        let mut sender = match tokio::time::timeout(self.timeouts.connect, connect).await {
            Ok(Ok(sender)) => sender,
            Ok(Err(reason)) => return Err(AttemptError::NotSent(reason)),
            Err(_) => {
                return Err(AttemptError::NotSent(format!(
                    "no TCP+TLS connection within {:?}",
                    self.timeouts.connect
                )));
            }
        };

        let host_header = if endpoint.port == 443 {
            endpoint.host.clone()
        } else {
            format!("{}:{}", endpoint.host, endpoint.port)
        };
        let mut builder = Request::builder()
            .method(method.clone())
            .uri(format!("{}{}", endpoint.base_path, path))
            .header(header::HOST, host_header)
            .header(header::AUTHORIZATION, self.token.header())
            .header(header::ACCEPT, "application/json");
        if json_body.is_some() {
            builder = builder.header(header::CONTENT_TYPE, "application/json");
        }
        let request = builder
            .body(Full::new(Bytes::copy_from_slice(json_body.unwrap_or_default())))
            .map_err(|e| AttemptError::NotSent(format!("building the request: {e}")))?;

        let exchange = async {
            let response = sender
                .send_request(request)
                .await
                .map_err(|e| format!("HTTP exchange failed: {e}"))?;
            let status = response.status();
            let reason = response
                .extensions()
                .get::<hyper::ext::ReasonPhrase>()
                .map(|r| String::from_utf8_lossy(r.as_bytes()).into_owned())
                .unwrap_or_default();
            let body = Limited::new(response.into_body(), MAX_RESPONSE_BYTES)
                .collect()
                .await
                .map_err(|e| format!("reading the response body: {e}"))?
                .to_bytes();
            Ok::<_, String>((status, reason, body))
        };
        match tokio::time::timeout(self.timeouts.request, exchange).await {
            Ok(Ok((status, reason, body))) => Ok(Answer {
                endpoint: endpoint.display.clone(),
                status,
                reason,
                body,
            }),
            Ok(Err(reason)) => Err(AttemptError::Sent {
                reason,
                timed_out: false,
            }),
            Err(_) => Err(AttemptError::Sent {
                reason: format!("no answer within {:?}", self.timeouts.request),
                timed_out: true,
            }),
        }
    }

    async fn connect(
        &self,
        endpoint: &Endpoint,
    ) -> Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>, String> {
        let tcp = TcpStream::connect((endpoint.host.as_str(), endpoint.port))
            .await
            .map_err(|e| format!("TCP connect failed: {e}"))?;
        let server_name = ServerName::try_from(endpoint.host.clone())
            .map_err(|e| format!("{:?} is not a valid TLS server name: {e}", endpoint.host))?;
        let tls = TlsConnector::from(self.tls.clone())
            .connect(server_name, tcp)
            .await
            .map_err(|e| format!("TLS handshake failed: {e}"))?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| format!("HTTP handshake failed: {e}"))?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "Proxmox API connection ended with an error");
            }
        });
        Ok(sender)
    }
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
