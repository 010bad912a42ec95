//! How the test process reaches the API server inside the node's network
//! namespace without any address outside it: a `socat` inside the
//! namespace serves a Unix socket (a file, visible from both sides) and
//! dials the API server on the namespace's loopback; a second `socat` in
//! the test's namespace listens on a free 127.0.0.1 port and dials that
//! socket. Both are processes, not tasks of the test's runtime, so a
//! control plane shared across `#[tokio::test]`s keeps its path.

use std::net::{Ipv4Addr, TcpListener};
use std::path::Path;
use std::process::Command;

use crate::Error;
use crate::netns::{NODE_IP, NetNs};
use crate::process::Processes;
use crate::programs::Programs;

/// The API server's port inside the namespace (nothing else binds there).
pub const APISERVER_PORT: u16 = 6443;

/// Starts both halves; returns the loopback port the test dials.
pub(crate) fn start(dir: &Path, netns: &NetNs, programs: &Programs, processes: &mut Processes) -> Result<u16, Error> {
    let socket = dir.join("apiserver.sock");
    let mut inside = netns.command(&programs.socat);
    inside.arg(format!("UNIX-LISTEN:{},fork", socket.display()));
    inside.arg(format!("TCP:127.0.0.1:{APISERVER_PORT}"));
    processes.start("forward-inside", inside)?;
    // Free when chosen, not reserved: socat fails loudly if it lost the port.
    let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map_err(Error::io("finding a free loopback port"))?
        .port();
    let mut outside = Command::new(&programs.socat);
    outside.arg(format!("TCP-LISTEN:{port},bind=127.0.0.1,fork,reuseaddr"));
    outside.arg(format!("UNIX-CONNECT:{}", socket.display()));
    processes.start("forward-outside", outside)?;
    Ok(port)
}

/// The reverse path, for pods: a `socat` inside the namespace listens on
/// [`NODE_IP`]`:<port>` and dials a Unix socket, which a `socat` in the
/// test's namespace serves by dialling `127.0.0.1:<port>` there. The same
/// port number on both sides; returns `NODE_IP:port`.
pub(crate) fn expose(
    dir: &Path,
    netns: &NetNs,
    programs: &Programs,
    processes: &mut Processes,
    port: u16,
) -> Result<String, Error> {
    let socket = dir.join(format!("exposed-{port}.sock"));
    let mut outside = Command::new(&programs.socat);
    outside.arg(format!("UNIX-LISTEN:{},fork", socket.display()));
    outside.arg(format!("TCP:127.0.0.1:{port}"));
    processes.start(&format!("expose-{port}-outside"), outside)?;
    let mut inside = netns.command(&programs.socat);
    inside.arg(format!("TCP-LISTEN:{port},bind={NODE_IP},fork,reuseaddr"));
    inside.arg(format!("UNIX-CONNECT:{}", socket.display()));
    processes.start(&format!("expose-{port}-inside"), inside)?;
    Ok(format!("{NODE_IP}:{port}"))
}
