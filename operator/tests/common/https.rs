//! A bare HTTP/1.1 client over TLS (or plain TCP) for the operator's own
//! servers: one request per connection, the raw answer read to its end, so
//! a test sees exactly what the server sent.

use std::net::SocketAddr;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// A TLS connection to `addr` trusting only `ca_pem`, for the name `127.0.0.1`.
pub async fn connect_tls(addr: SocketAddr, ca_pem: &str) -> std::io::Result<TlsStream<TcpStream>> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.expect("a PEM certificate")).expect("a usable CA");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = TcpStream::connect(addr).await?;
    TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
        .await
}

/// An answer: the status code, the headers' text and the body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub head: String,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Sends one request with `Connection: close` and reads the answer.
pub async fn request<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<Answer> {
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    // A server may answer (413) and close before the body is all sent: the
    // answer is what counts, a failed write only when there is none.
    let mut sent = stream.write_all(head.as_bytes()).await;
    if sent.is_ok() {
        sent = stream.write_all(body).await;
    }
    if sent.is_ok() {
        sent = stream.flush().await;
    }
    let mut raw = Vec::new();
    // A TLS peer that closes without close_notify ends the read with an
    // error after the data; what arrived is the answer.
    let _ = stream.read_to_end(&mut raw).await;
    match parse(&raw) {
        Some(answer) => Ok(answer),
        None => Err(sent.err().unwrap_or_else(|| {
            std::io::Error::other(format!(
                "not an HTTP answer: {:?}",
                String::from_utf8_lossy(&raw[..raw.len().min(200)])
            ))
        })),
    }
}

fn parse(raw: &[u8]) -> Option<Answer> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    let mut body = raw[end + 4..].to_vec();
    if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        body = dechunk(&body)?;
    }
    Some(Answer { status, head, body })
}

fn dechunk(mut data: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = data.windows(2).position(|w| w == b"\r\n")?;
        let size = usize::from_str_radix(std::str::from_utf8(&data[..line_end]).ok()?.trim(), 16).ok()?;
        data = &data[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(data.get(..size)?);
        data = data.get(size + 2..)?;
    }
}

/// A plain-HTTP GET.
pub async fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<Answer> {
    request(TcpStream::connect(addr).await?, "GET", path, &[], b"").await
}

/// An HTTPS request trusting `ca_pem`.
pub async fn https(
    addr: SocketAddr,
    ca_pem: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<Answer> {
    request(connect_tls(addr, ca_pem).await?, method, path, headers, body).await
}

/// A free loopback port (free when returned, not reserved).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
