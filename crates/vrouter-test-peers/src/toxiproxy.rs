//! Toxiproxy, the real fault proxy, on loopback: a test routes one client's
//! TCP connections through a named proxy and then breaks them the way a
//! network does (a partition that drops every byte, a refused port), while
//! every other client keeps its direct connection.
//!
//! The server is `toxiproxy-server`, built by `cargo xtask testenv` from
//! `github.com/Shopify/toxiproxy/v2`, and driven through its HTTP API. It is
//! killed when the handle is dropped.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// How to get the server, for the messages of a failed start.
pub const HOW_TO_GET_TOXIPROXY: &str = "toxiproxy-server is built by `cargo xtask testenv` (or `cargo xtask test`) \
     from the Go module github.com/Shopify/toxiproxy/v2 into ~/.cache/vrouter-operator/testenv/bin; or set \
     VROUTER_TOXIPROXY to a toxiproxy-server binary";

const START_LIMIT: Duration = Duration::from_secs(60);

/// A running `toxiproxy-server` on a loopback port.
pub struct Toxiproxy {
    child: Child,
    api: SocketAddr,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

/// One proxy: clients connect to [`Proxy::listen`], and it forwards to the
/// upstream until it is cut.
#[derive(Clone, Debug)]
pub struct Proxy {
    api: SocketAddr,
    name: String,
    pub listen: SocketAddr,
}

impl Toxiproxy {
    /// Starts the server; panics, saying how to get it, when it is missing
    /// or does not answer.
    pub fn start() -> Toxiproxy {
        let binary = vrouter_test_apiserver::toxiproxy_server()
            .unwrap_or_else(|e| panic!("cannot start Toxiproxy: {e}; {HOW_TO_GET_TOXIPROXY}"));
        let dir = tempfile::Builder::new()
            .prefix("toxiproxy-")
            .tempdir()
            .expect("create Toxiproxy's directory");
        let log = dir.path().join("toxiproxy.log");
        let out = std::fs::File::create(&log).expect("create Toxiproxy's log");
        let api = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let child = Command::new(&binary)
            .args(["-host", "127.0.0.1", "-port", &api.port().to_string()])
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("clone the log handle"))
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}; {HOW_TO_GET_TOXIPROXY}", binary.display()));
        let mut proxy = Toxiproxy {
            child,
            api,
            log,
            _dir: dir,
        };
        proxy.wait_ready();
        proxy
    }

    fn wait_ready(&mut self) {
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("toxiproxy-server exited with {status}; its log:\n{}", self.log());
            }
            if request(self.api, "GET", "/version", None).is_ok_and(|(status, _)| status == 200) {
                return;
            }
            assert!(
                started.elapsed() < START_LIMIT,
                "toxiproxy-server does not answer on {}; its log:\n{}",
                self.api,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// What the server logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// A proxy `name` on a free loopback port, forwarding to `upstream`.
    pub fn proxy(&self, name: &str, upstream: SocketAddr) -> Proxy {
        let listen = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let body =
            json!({"name": name, "listen": listen.to_string(), "upstream": upstream.to_string(), "enabled": true});
        expect_ok(self.api, "POST", "/proxies", Some(body), 201);
        Proxy {
            api: self.api,
            name: name.to_owned(),
            listen,
        }
    }
}

impl Drop for Toxiproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proxy {
    /// A partition: every byte in both directions is dropped, on the open
    /// connections and on new ones, which are accepted and then hang. No
    /// connection is closed, so a client learns of it only by its timeouts.
    pub fn partition(&self) {
        for stream in ["upstream", "downstream"] {
            // 0: never close, drop the data until the toxic is removed.
            self.add_toxic(&format!("partition-{stream}"), "timeout", stream, json!({"timeout": 0}));
        }
    }

    /// Ends the partition.
    pub fn heal(&self) {
        for stream in ["upstream", "downstream"] {
            self.remove_toxic(&format!("partition-{stream}"));
        }
    }

    /// Closes every connection and stops listening: the client's requests
    /// fail at once (connection refused) instead of hanging.
    pub fn disable(&self) {
        let body = json!({"enabled": false});
        expect_ok(self.api, "POST", &format!("/proxies/{}", self.name), Some(body), 200);
    }

    /// Listens and forwards again after [`Proxy::disable`].
    pub fn enable(&self) {
        let body = json!({"enabled": true});
        expect_ok(self.api, "POST", &format!("/proxies/{}", self.name), Some(body), 200);
    }

    /// Adds a toxic (Toxiproxy's `type`, e.g. `reset_peer`, `timeout`,
    /// `latency`, `limit_data`) named `name` to the `stream` direction
    /// (`upstream`: client to server, `downstream`: server to client), on
    /// the open connections and on new ones, with `attributes` as
    /// Toxiproxy's README describes them for that type.
    pub fn add_toxic(&self, name: &str, kind: &str, stream: &str, attributes: Value) {
        let toxic = json!({
            "name": name,
            "type": kind,
            "stream": stream,
            "toxicity": 1.0,
            "attributes": attributes,
        });
        expect_ok(
            self.api,
            "POST",
            &format!("/proxies/{}/toxics", self.name),
            Some(toxic),
            200,
        );
    }

    /// Removes the toxic `name`. Removing a `timeout` toxic closes the
    /// connections it held (Toxiproxy's cleanup of that toxic).
    pub fn remove_toxic(&self, name: &str) {
        let path = format!("/proxies/{}/toxics/{name}", self.name);
        expect_ok(self.api, "DELETE", &path, None, 204);
    }

    /// `https://` URL of the proxy's listen address.
    pub fn https_url(&self) -> String {
        format!("https://{}", self.listen)
    }
}

fn expect_ok(api: SocketAddr, method: &str, path: &str, body: Option<Value>, want: u16) {
    match request(api, method, path, body) {
        Ok((status, _)) if status == want => {}
        Ok((status, text)) => panic!("Toxiproxy {method} {path} answered {status}, expected {want}: {text}"),
        Err(e) => panic!("Toxiproxy {method} {path}: {e}"),
    }
}

/// One HTTP/1.1 request on its own connection; returns the status and the
/// raw rest of the answer (headers and body, for messages only).
fn request(api: SocketAddr, method: &str, path: &str, body: Option<Value>) -> std::io::Result<(u16, String)> {
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let mut stream = TcpStream::connect_timeout(&api, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {api}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP answer: {answer:?}")))?;
    Ok((status, answer))
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a loopback port")
        .port()
}
