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
use std::time::{Duration, Instant};

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
    let (outside_name, inside_name) = (format!("expose-{port}-outside"), format!("expose-{port}-inside"));
    if processes.has(&inside_name) {
        return Err(Error::AlreadyExposed(port));
    }
    let socket = dir.join(format!("exposed-{port}.sock"));
    // Left by an earlier attempt whose socat was killed: it would make
    // this one's listen fail.
    let _ = std::fs::remove_file(&socket);
    let mut outside = Command::new(&programs.socat);
    outside.arg(format!("UNIX-LISTEN:{},fork", socket.display()));
    outside.arg(format!("TCP:127.0.0.1:{port}"));
    processes.start(&outside_name, outside)?;
    let mut inside = netns.command(&programs.socat);
    inside.arg(format!("TCP-LISTEN:{port},bind={NODE_IP},fork,reuseaddr"));
    inside.arg(format!("UNIX-CONNECT:{}", socket.display()));
    let pid = processes.start(&inside_name, inside)?;
    let listening = wait_listening(processes, &inside_name, pid, port).and_then(|()| processes.check(&outside_name));
    if let Err(error) = listening {
        processes.stop(&inside_name);
        processes.stop(&outside_name);
        return Err(error);
    }
    Ok(format!("{NODE_IP}:{port}"))
}

/// Waits until process `name` (`pid`) listens on [`NODE_IP`]`:<port>`: a
/// port taken in the namespace makes socat exit, which is the error
/// returned, with its log naming the port; a caller must not learn of it
/// only from a peer that never answers.
fn wait_listening(processes: &mut Processes, name: &str, pid: u32, port: u16) -> Result<(), Error> {
    const LISTEN_TIMEOUT: Duration = Duration::from_secs(10);
    let address: Ipv4Addr = NODE_IP.parse().expect("NODE_IP is an IPv4 address");
    let started = Instant::now();
    loop {
        processes.check(name)?;
        // The table of the process's own network namespace.
        let table = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).unwrap_or_default();
        if listens(&table, address, port) {
            return Ok(());
        }
        if started.elapsed() > LISTEN_TIMEOUT {
            return Err(Error::Timeout {
                what: format!("a listener on {NODE_IP}:{port} in the node's namespace"),
                seconds: LISTEN_TIMEOUT.as_secs(),
                details: processes.log_tail(name),
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether `/proc/<pid>/net/tcp` (`table`) has a socket listening on
/// `address:port`. The kernel prints the address as the host-order
/// integer of its network-order bytes, the port as a host-order integer.
fn listens(table: &str, address: Ipv4Addr, port: u16) -> bool {
    let local = format!("{:08X}:{port:04X}", u32::from_ne_bytes(address.octets()));
    table.lines().skip(1).any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        fields.get(1) == Some(&local.as_str()) && fields.get(3) == Some(&"0A")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str =
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100630A:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000 100 0 0 10 0
   1: 0100007F:2328 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0000 20 4 30 10 -1
";

    #[test]
    fn a_listener_is_found_by_its_address_and_port_in_the_kernels_table() {
        let node_ip = Ipv4Addr::new(10, 99, 0, 1);
        assert!(listens(TABLE, node_ip, 8080));
        assert!(!listens(TABLE, node_ip, 8081), "another port");
        assert!(!listens(TABLE, Ipv4Addr::LOCALHOST, 8080), "another address");
        assert!(
            !listens(TABLE, Ipv4Addr::LOCALHOST, 9000),
            "an established connection is no listener"
        );
    }
}
