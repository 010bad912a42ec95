//! The unix-socket transport on the real channel: qemu-ga inside a QEMU
//! guest, on a virtio-serial port whose host end is a QEMU chardev socket,
//! as Proxmox VE attaches it. Unlike `qemu-ga -m unix-listen`, this channel
//! outlives every client: what one client left behind (half a request, the
//! rest of a reply, the late reply of a frozen agent) is there for the next.
//! Each fault is first shown to happen to a plain client, then the
//! transport must never take anything but its own reply as the answer.
//!
//! One guest serves the whole file, lent to one test at a time.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use vrouter_qga::{Agent, ExecRequest, PollOptions, QgaError, TransportError, UnixSocketTransport};
use vrouter_test_vm::qemu::QemuGuest;
use vrouter_test_vm::shared::{Lease, SharedGuest};
use vrouter_test_vm::{Archive, VmError};

/// Boot under TCG on a loaded machine; generous, it only stops a hang.
const BOOT_BOUND: Duration = Duration::from_secs(180);

fn boot(name: &str) -> Result<QemuGuest, VmError> {
    QemuGuest::boot(name, Archive::new())
}

static GUEST: SharedGuest<QemuGuest> = SharedGuest::new(|| boot("qga-channel"));

async fn guest() -> Lease<QemuGuest> {
    let guest = GUEST.lease();
    guest.wait_for_agent(BOOT_BOUND).await.unwrap_or_else(|e| panic!("{e}"));
    guest
}

fn agent(guest: &QemuGuest, timeout: Duration) -> Agent<UnixSocketTransport> {
    Agent::new(UnixSocketTransport::new(guest.agent_socket()).with_timeout(timeout))
}

fn quick() -> PollOptions {
    PollOptions {
        interval: Duration::from_millis(50),
        timeout: Duration::from_secs(60),
    }
}

async fn sh(agent: &Agent<UnixSocketTransport>, script: &str) -> String {
    let output = agent
        .run(&ExecRequest::new("/bin/sh").args(["-c", script]), quick())
        .await
        .unwrap_or_else(|e| panic!("`{script}`: {e}"));
    assert!(output.success(), "`{script}`: {}", output.stderr_text());
    output.stdout_text()
}

/// A raw client: connects and sends `bytes`, nothing else.
fn raw(guest: &QemuGuest, bytes: &[u8]) -> UnixStream {
    let mut stream = UnixStream::connect(guest.agent_socket()).unwrap();
    stream.write_all(bytes).unwrap();
    stream
}

/// What arrives on a fresh connection within `quiet` of silence, unasked.
fn unsolicited(guest: &QemuGuest, quiet: Duration) -> Vec<u8> {
    let mut stream = UnixStream::connect(guest.agent_socket()).unwrap();
    stream.set_read_timeout(Some(quiet)).unwrap();
    let mut got = Vec::new();
    let mut chunk = vec![0u8; 1 << 20];
    while let Ok(n) = stream.read(&mut chunk) {
        if n == 0 {
            break;
        }
        got.extend_from_slice(&chunk[..n]);
    }
    got
}

/// Reads one line from a raw client.
fn line(stream: &mut UnixStream) -> Vec<u8> {
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while stream.read(&mut byte).unwrap() == 1 {
        got.push(byte[0]);
        if byte[0] == b'\n' {
            break;
        }
    }
    got
}

fn transport_error(result: Result<impl std::fmt::Debug, QgaError>) -> TransportError {
    match result {
        Err(QgaError::Transport { source, .. }) => source,
        other => panic!("expected a transport error, got {other:?}"),
    }
}

/// Starts a big `guest-file-read` on a raw client, reads the first bytes of
/// its reply and leaves.
fn leave_mid_reply(guest: &QemuGuest, path: &str, count: usize) {
    let mut client = raw(
        guest,
        format!("{{\"execute\":\"guest-file-open\",\"arguments\":{{\"path\":\"{path}\",\"mode\":\"r\"}}}}\n")
            .as_bytes(),
    );
    let open = String::from_utf8(line(&mut client)).unwrap();
    let handle: serde_json::Value = serde_json::from_str(&open).unwrap();
    let handle = handle["return"].as_i64().unwrap_or_else(|| panic!("{open}"));
    client
        .write_all(
            format!("{{\"execute\":\"guest-file-read\",\"arguments\":{{\"handle\":{handle},\"count\":{count}}}}}\n")
                .as_bytes(),
        )
        .unwrap();
    let mut first = [0u8; 100];
    client.read_exact(&mut first).unwrap();
    assert!(
        first.starts_with(b"{\"return\""),
        "{:?}",
        String::from_utf8_lossy(&first)
    );
}

#[tokio::test]
async fn a_request_sent_before_the_agent_runs_is_answered_once_it_does() {
    let started = Instant::now();
    let guest = boot("qga-early").unwrap_or_else(|e| panic!("{e}"));
    // QEMU listens at once; the guest is still in its firmware.
    UnixStream::connect(guest.agent_socket()).expect("the chardev accepts before the guest runs");
    let agent = agent(&guest, BOOT_BOUND);
    let sent = Instant::now();
    let output = agent
        .run(
            &ExecRequest::new("/bin/sh").args(["-c", "cut -d' ' -f1 /proc/uptime"]),
            quick(),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", guest.console_log()));
    agent.transport().close().await;
    let guest_uptime: f64 = output.stdout_text().trim().parse().unwrap();
    // The request waited for the boot: the guest had been up for seconds.
    assert!(guest_uptime > 1.0, "guest uptime {guest_uptime}");
    println!(
        "first answer {:.1}s after the request, {:.1}s after QEMU started (guest uptime {guest_uptime:.1}s)",
        sent.elapsed().as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}

#[tokio::test]
async fn the_parse_error_the_delimiter_draws_is_not_taken_as_an_answer() {
    let guest = guest().await;
    // A plain client sees it: 0xFF resets the parser and is answered with an
    // error before the delimited sync reply.
    let mut client = raw(
        &guest,
        b"\xff{\"execute\":\"guest-sync-delimited\",\"arguments\":{\"id\":77}}\n",
    );
    let first = line(&mut client);
    assert!(
        String::from_utf8_lossy(&first).contains("JSON parse error"),
        "{:?}",
        String::from_utf8_lossy(&first)
    );
    assert_eq!(line(&mut client), b"\xff{\"return\": 77}\n");
    drop(client);

    // Every transport connection starts with that handshake.
    let agent = agent(&guest, Duration::from_secs(30));
    for _ in 0..3 {
        agent.ping().await.unwrap();
        assert_eq!(sh(&agent, "echo ours").await, "ours\n");
        agent.transport().close().await;
    }
}

#[tokio::test]
async fn the_rest_of_a_reply_left_by_a_killed_client_is_not_taken_as_an_answer() {
    let guest = guest().await;
    let agent = agent(&guest, Duration::from_secs(60));
    let big = "/tmp/rest-of-a-reply";
    sh(&agent, &format!("head -c 3145728 /dev/urandom > {big}")).await;
    agent.transport().close().await;

    // The fault: the next client receives the rest of the old reply.
    leave_mid_reply(&guest, big, 3 << 20);
    let stale = unsolicited(&guest, Duration::from_secs(3));
    assert!(stale.len() > 1 << 20, "only {} stale bytes arrived", stale.len());

    // The transport's first call after the same fault gets its own answer.
    leave_mid_reply(&guest, big, 3 << 20);
    let agent = self::agent(&guest, Duration::from_secs(60));
    assert_eq!(sh(&agent, "echo after-the-kill").await, "after-the-kill\n");
    let os = agent.read_file("/etc/hostname").await.unwrap();
    assert_eq!(os, b"vrouter-guest\n");
    agent.transport().close().await;
}

#[tokio::test]
async fn a_whole_reply_for_a_departed_client_is_not_taken_as_an_answer() {
    let guest = guest().await;
    // The fault: a reply nobody waits for any more reaches the next client.
    drop(raw(&guest, b"{\"execute\":\"guest-info\"}\n"));
    let stale = unsolicited(&guest, Duration::from_secs(2));
    assert!(
        String::from_utf8_lossy(&stale).contains("supported_commands"),
        "{:?}",
        String::from_utf8_lossy(&stale)
    );

    // The same fault, then typed calls whose answers a guest-info reply
    // would not decode as.
    drop(raw(&guest, b"{\"execute\":\"guest-info\"}\n"));
    std::thread::sleep(Duration::from_millis(500));
    let agent = agent(&guest, Duration::from_secs(30));
    assert_eq!(sh(&agent, "echo mine").await, "mine\n");
    agent.transport().close().await;
}

#[tokio::test]
async fn half_a_request_left_by_a_departed_client_does_not_corrupt_the_next() {
    let guest = guest().await;
    let half = br#"{"execute":"guest-exec","arguments":{"path":"/bin/touch","arg":["/tmp/half"#;
    // The fault: a plain client's next request is swallowed by the fragment.
    drop(raw(&guest, half));
    let mut naive = raw(&guest, b"{\"execute\":\"guest-ping\"}\n");
    let first = line(&mut naive);
    assert!(
        String::from_utf8_lossy(&first).contains("JSON parse error"),
        "{:?}",
        String::from_utf8_lossy(&first)
    );
    drop(naive);
    std::thread::sleep(Duration::from_millis(500));
    let _ = unsolicited(&guest, Duration::from_secs(1));

    // With the handshake the next call is answered, and the fragment ran
    // nothing.
    drop(raw(&guest, half));
    let agent = agent(&guest, Duration::from_secs(30));
    assert_eq!(sh(&agent, "echo whole; ls /tmp").await.lines().next(), Some("whole"));
    assert!(!sh(&agent, "ls /tmp").await.contains("half"));
    agent.transport().close().await;
}

#[tokio::test]
async fn a_frozen_agent_times_out_and_its_late_reply_is_not_taken_as_an_answer() {
    let guest = guest().await;
    let agent = agent(&guest, Duration::from_secs(3));
    let pid = sh(&agent, "cat /run/qemu-ga.pid").await.trim().to_owned();
    agent.transport().close().await;

    guest.console(&format!("kill -STOP {pid}")).unwrap();
    // Sent to the frozen agent: it answers only when thawed, to whoever is
    // connected then.
    let error = transport_error(agent.exec(&ExecRequest::new("/bin/sh").args(["-c", "echo late"])).await);
    assert!(matches!(error, TransportError::Timeout(_)), "{error:?}");
    guest.console(&format!("kill -CONT {pid}")).unwrap();

    let agent = self::agent(&guest, Duration::from_secs(30));
    assert_eq!(sh(&agent, "echo on-time").await, "on-time\n");
    agent.transport().close().await;
}

#[tokio::test]
async fn an_agent_killed_mid_call_times_out_and_its_successor_answers() {
    let guest = guest().await;
    let agent = agent(&guest, Duration::from_secs(30));
    let pid = sh(&agent, "cat /run/qemu-ga.pid").await.trim().to_owned();
    agent.transport().close().await;

    // On virtio the host socket does not close when the agent dies: the
    // call can only time out. busybox init starts a new agent.
    guest.console(&format!("kill -STOP {pid}")).unwrap();
    let agent = self::agent(&guest, Duration::from_secs(3));
    let pending = agent.ping();
    let kill = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        guest.console(&format!("kill -KILL {pid}")).unwrap();
    };
    let (result, ()) = tokio::join!(pending, kill);
    let error = transport_error(result);
    assert!(matches!(error, TransportError::Timeout(_)), "{error:?}");

    let agent = self::agent(&guest, Duration::from_secs(60));
    let new_pid = sh(&agent, "cat /run/qemu-ga.pid").await.trim().to_owned();
    assert_ne!(new_pid, pid);
    agent.transport().close().await;
}

#[tokio::test]
async fn four_mebibytes_and_more_round_trip_byte_for_byte() {
    let guest = guest().await;
    let agent = agent(&guest, Duration::from_secs(60));
    let mut contents = vec![0u8; (4 << 20) + 12_345];
    for (i, byte) in contents.iter_mut().enumerate() {
        *byte = (i.wrapping_mul(2_654_435_761) >> 13) as u8;
    }
    let path = "/tmp/large-file";
    agent.write_file(path, &contents).await.unwrap();
    // The guest holds exactly those bytes...
    let in_guest = sh(&agent, &format!("sha256sum {path}")).await;
    assert_eq!(
        in_guest.split_whitespace().next(),
        Some(hex(&Sha256::digest(&contents)).as_str())
    );
    // ...and they come back whole.
    let back = agent.read_file(path).await.unwrap();
    assert_eq!(back.len(), contents.len());
    assert!(back == contents, "the file read back differs");
    sh(&agent, &format!("rm {path}")).await;
    agent.transport().close().await;
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test]
async fn the_guest_clock_keeps_time() {
    let guest = guest().await;
    let agent = agent(&guest, Duration::from_secs(30));
    let read = || async {
        sh(&agent, "cut -d' ' -f1 /proc/uptime")
            .await
            .trim()
            .parse::<f64>()
            .unwrap()
    };
    let before = read().await;
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let guest_elapsed = read().await - before;
    let host_elapsed = started.elapsed().as_secs_f64();
    agent.transport().close().await;
    // Reboot detection compares guest uptime with real intervals.
    assert!(
        (guest_elapsed - host_elapsed).abs() < 2.0,
        "guest clock: {guest_elapsed:.1}s while {host_elapsed:.1}s passed"
    );
}
