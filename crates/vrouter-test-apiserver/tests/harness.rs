//! The harness itself: it cleans up after a panicking or killed test process,
//! a private instance stops on drop, and a missing binary fails loudly.
//!
//! The cleanup tests run `vrouter-test-apiserver-probe` (this crate's binary) as a
//! stand-in for a test process: it starts control planes and then dies while
//! the test watches from outside.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use vrouter_test_apiserver::TestEnv;

const PROBE: &str = env!("CARGO_BIN_EXE_vrouter-test-apiserver-probe");
/// How long cleanup may take once the probe is gone.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(20);
/// How long the probe may take to start two control planes.
const PROBE_START_TIMEOUT: Duration = Duration::from_secs(300);

/// One control plane the probe reported.
struct Started {
    etcd: u32,
    apiserver: u32,
    dir: PathBuf,
}

/// Pids of live processes whose command line mentions `needle`.
fn processes_mentioning(needle: &Path) -> Vec<u32> {
    let needle = needle.to_string_lossy().into_owned();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        // A zombie has an empty command line: it holds no files and no ports.
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline"))
            && String::from_utf8_lossy(&cmdline).contains(&needle)
        {
            found.push(pid);
        }
    }
    found
}

fn command_line(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .unwrap_or_default()
}

/// Starts the probe, waits until it reports its control planes, checks they
/// are running, then lets `end` finish the child and checks everything is gone.
fn probe_and_end(mode: &str, end: impl FnOnce(&mut std::process::Child)) {
    let mut child = Command::new(PROBE)
        .arg("start")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    // Kept for failure messages; the probe's own panic message lands here too.
    let stderr = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
        text
    });
    let (lines_tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut started = Vec::new();
    let deadline = Instant::now() + PROBE_START_TIMEOUT;
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let line = match lines.recv_timeout(remaining) {
            Ok(line) => line,
            Err(e) => {
                let _ = child.kill();
                let status = child.wait();
                panic!(
                    "the probe did not report ready ({e}); status {status:?}, stderr:\n{}",
                    stderr.join().unwrap_or_default()
                );
            }
        };
        if line == "PROBE-READY" {
            break;
        }
        if let Some(rest) = line.strip_prefix("PROBE ") {
            let mut parts = rest.splitn(3, ' ');
            started.push(Started {
                etcd: parts.next().unwrap().parse().unwrap(),
                apiserver: parts.next().unwrap().parse().unwrap(),
                dir: PathBuf::from(parts.next().unwrap()),
            });
        }
    }
    assert_eq!(
        started.len(),
        2,
        "the probe starts a private and a shared control plane"
    );
    for s in &started {
        assert!(s.dir.is_dir(), "{} should exist while the probe runs", s.dir.display());
        assert!(command_line(s.etcd).contains("etcd"), "etcd {} is not running", s.etcd);
        assert!(
            command_line(s.apiserver).contains("kube-apiserver"),
            "kube-apiserver {} is not running",
            s.apiserver
        );
        let running = processes_mentioning(&s.dir);
        assert!(
            running.contains(&s.etcd) && running.contains(&s.apiserver),
            "{running:?}"
        );
    }

    end(&mut child);
    let status = child.wait().unwrap();
    let stderr = stderr.join().unwrap_or_default();
    assert!(
        !status.success(),
        "the probe was meant to fail, it exited {status}: {stderr}"
    );

    let deadline = Instant::now() + CLEANUP_TIMEOUT;
    for s in &started {
        loop {
            let left = processes_mentioning(&s.dir);
            if left.is_empty() && !s.dir.exists() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "after the probe ended ({mode}), {} still exists: {}, processes using it: {:?}",
                s.dir.display(),
                s.dir.exists(),
                left.iter().map(|p| command_line(*p)).collect::<Vec<_>>()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
fn a_panicking_test_leaves_no_processes_or_temp_dirs() {
    probe_and_end("panic", |child| {
        // Let the probe's test body panic.
        child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    });
}

#[test]
fn a_killed_test_process_leaves_no_processes_or_temp_dirs() {
    probe_and_end("kill", |child| {
        // SIGKILL: no unwinding, no Drop; only the watchdog is left to clean up.
        child.kill().unwrap();
    });
}

#[test]
fn a_missing_binary_fails_loudly_naming_the_fix() {
    let output = Command::new(PROBE)
        .arg("shared")
        .env(
            "VROUTER_KUBE_APISERVER",
            "/nonexistent/vrouter-test-apiserver/kube-apiserver",
        )
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(!output.status.success(), "{text}");
    assert!(text.contains("cargo xtask testenv"), "{text}");
    assert!(
        text.contains("/nonexistent/vrouter-test-apiserver/kube-apiserver"),
        "{text}"
    );
    assert!(text.contains("VROUTER_KUBE_APISERVER"), "{text}");
}

#[tokio::test]
async fn a_private_instance_stops_and_cleans_up_when_dropped() {
    let env = TestEnv::start().await.unwrap();
    let (etcd, apiserver) = env.pids();
    let dir = env.data_dir().to_path_buf();
    let namespace = env.namespace("private").await;
    let read = Api::<Namespace>::all(env.client()).get(namespace.name()).await.unwrap();
    assert_eq!(
        read.metadata.labels.unwrap()["kubernetes.io/metadata.name"],
        namespace.name()
    );
    assert!(env.kubeconfig_path().is_file());
    assert!(env.apiserver_url().starts_with("https://127.0.0.1:"));
    drop(env);
    // Drop waits for the processes and removes the directory before returning.
    assert!(!dir.exists(), "{}", dir.display());
    assert!(processes_mentioning(&dir).is_empty());
    assert!(!command_line(etcd).contains(&*dir.to_string_lossy()));
    assert!(!command_line(apiserver).contains(&*dir.to_string_lossy()));
}
