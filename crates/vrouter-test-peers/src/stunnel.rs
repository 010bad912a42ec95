//! Debian's `stunnel4` on loopback in server mode: it terminates TLS with
//! a certificate made here (rcgen, for `127.0.0.1` and `localhost`) and
//! forwards the plaintext to a backend, such as the real vrouter-daemon's
//! ControlService. This is how a daemon is put behind TLS in production
//! (it serves plaintext gRPC itself), so tests of `https://` daemon
//! addresses run against a real TLS terminator, not one of ours.
//!
//! The process is killed (SIGKILL) when the handle is dropped.

use std::fs;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use tempfile::TempDir;

use crate::tls::ServerIdentity;

/// How to get stunnel, for the message of a failed start.
pub const HOW_TO_GET_STUNNEL: &str = "stunnel comes from Debian: `apt-get install -y stunnel4` \
     (`cargo xtask test` installs it when it is missing)";

/// How long stunnel may take to listen on a loaded machine.
const START_LIMIT: Duration = Duration::from_secs(30);

/// A running stunnel in front of one backend.
pub struct Stunnel {
    child: Child,
    dir: TempDir,
    accept: SocketAddr,
}

impl std::fmt::Debug for Stunnel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stunnel")
            .field("accept", &self.accept)
            .finish_non_exhaustive()
    }
}

/// `der` as a PEM block with the given label.
fn pem(label: &str, der: &[u8]) -> String {
    let body = BASE64.encode(der);
    let lines: Vec<&str> = body
        .as_bytes()
        .chunks(64)
        .map(|c| std::str::from_utf8(c).expect("base64 is ASCII"))
        .collect();
    format!("-----BEGIN {label}-----\n{}\n-----END {label}-----\n", lines.join("\n"))
}

/// The stunnel program: Debian installs it as `stunnel4` (and `stunnel`).
fn program() -> PathBuf {
    [
        "/usr/bin/stunnel4",
        "/usr/bin/stunnel",
        "/usr/sbin/stunnel4",
        "/usr/sbin/stunnel",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.is_file())
    .unwrap_or_else(|| panic!("stunnel not found; {HOW_TO_GET_STUNNEL}"))
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a loopback port")
        .port()
}

impl Stunnel {
    /// stunnel presenting `identity` on a fresh loopback port, forwarding
    /// each connection to `backend` (`host:port`).
    pub fn start(backend: &str, identity: &ServerIdentity) -> Stunnel {
        let mut dir = tempfile::tempdir().expect("a temporary directory for stunnel");
        fs::write(dir.path().join("cert.pem"), pem("CERTIFICATE", &identity.cert_der)).expect("write cert.pem");
        fs::write(dir.path().join("key.pem"), pem("PRIVATE KEY", &identity.key_der)).expect("write key.pem");
        for attempt in 0.. {
            let accept = SocketAddr::from(([127, 0, 0, 1], free_port()));
            let config = Self::config(dir.path(), accept, backend);
            fs::write(dir.path().join("stunnel.conf"), config).expect("write stunnel.conf");
            let log = fs::File::create(dir.path().join("stunnel.log")).expect("create stunnel.log");
            let child = Command::new(program())
                .arg(dir.path().join("stunnel.conf"))
                .stdin(Stdio::null())
                .stdout(log.try_clone().expect("clone the log handle"))
                .stderr(log)
                .spawn()
                .unwrap_or_else(|e| panic!("starting stunnel: {e}; {HOW_TO_GET_STUNNEL}"));
            let mut stunnel = Stunnel { child, dir, accept };
            if stunnel.wait_listening() {
                return stunnel;
            }
            assert!(
                attempt < 3,
                "stunnel did not listen on {accept}; its log:\n{}",
                stunnel.log()
            );
            // The port was taken meanwhile: try another.
            dir = stunnel.into_dir();
        }
        unreachable!("the loop returns or panics")
    }

    fn config(dir: &Path, accept: SocketAddr, backend: &str) -> String {
        format!(
            "foreground = yes\npid =\ndebug = info\n\n[daemon]\naccept = {accept}\nconnect = {backend}\n\
             cert = {}\nkey = {}\n",
            dir.join("cert.pem").display(),
            dir.join("key.pem").display()
        )
    }

    /// Whether stunnel accepts connections; false once it exited.
    fn wait_listening(&mut self) -> bool {
        let started = Instant::now();
        while started.elapsed() < START_LIMIT {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return false;
            }
            if TcpStream::connect_timeout(&self.accept, Duration::from_millis(200)).is_ok() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        false
    }

    /// Stops this process and hands its directory to the next attempt.
    fn into_dir(mut self) -> TempDir {
        self.kill();
        let dir = tempfile::tempdir().expect("a temporary directory for stunnel");
        std::mem::replace(&mut self.dir, dir)
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// `https://127.0.0.1:PORT`, as a VRouterTarget's `daemon.address` holds it.
    pub fn https_address(&self) -> String {
        format!("https://{}", self.accept)
    }

    /// `127.0.0.1:PORT`.
    pub fn accept_address(&self) -> SocketAddr {
        self.accept
    }

    /// stunnel's output so far: each connection accepted, each handshake
    /// failed, each backend connected.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("stunnel.log")).unwrap_or_default()
    }
}

impl Drop for Stunnel {
    fn drop(&mut self) {
        self.kill();
    }
}
