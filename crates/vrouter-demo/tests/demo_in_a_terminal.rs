//! The demo as a new user runs it: in a terminal. `script` (util-linux)
//! gives the demo a pseudo-terminal, so its output goes through a tty and
//! Ctrl-C is a real `^C` byte turned into SIGINT by the terminal.
//!
//! Each run is followed to its last line, its exit code checked, and then
//! the machine is searched for anything it left behind: a process carrying
//! the run's marker in its environment (every process the demo starts
//! inherits it) or a temporary directory it named.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Mutex;
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

const DEMO: &str = env!("CARGO_BIN_EXE_vrouter-demo");
const MARKER_VAR: &str = "VROUTER_DEMO_TEST_RUN";
/// Guards against a hung demo only; the demo's own steps time out sooner.
const HANG_GUARD: Duration = Duration::from_secs(300);

/// One demo at a time: each starts its own kube-apiserver.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn script_binary() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("script"))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!("`script` (util-linux) is needed to give the demo a terminal; install it with `apt-get install -y bsdutils`")
        })
}

/// A demo running under `script`, its terminal output line by line.
struct Terminal {
    child: Child,
    keyboard: ChildStdin,
    lines: Receiver<String>,
    transcript: Vec<String>,
    marker: String,
}

impl Terminal {
    fn start(args: &[&str]) -> Terminal {
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let marker = format!("{}-{}", std::process::id(), since_epoch.as_nanos());
        // `script -c` hands the line to $SHELL, or to /bin/sh when SHELL is
        // unset (as in CI): quote every word, and `exec` so that the demo
        // itself owns the terminal. dash would otherwise stay in between,
        // catch the Ctrl-C too and exit 130 whatever the demo returned.
        let words = std::iter::once(DEMO)
            .chain(args.iter().copied())
            .map(|word| format!("'{}'", word.replace('\'', r"'\''")))
            .collect::<Vec<_>>()
            .join(" ");
        let command_line = format!("exec {words}");
        // -q: no banner; -e: exit with the demo's code; -c: run it in the tty;
        // /dev/null: no typescript file.
        let mut child = Command::new(script_binary())
            .args(["-q", "-e", "-c", &command_line, "/dev/null"])
            .env(MARKER_VAR, &marker)
            .env("TERM", "dumb")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting the demo under script");
        let keyboard = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let line = line.trim_end_matches('\r').to_owned();
                println!("demo> {line}");
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Terminal {
            child,
            keyboard,
            lines,
            transcript: Vec::new(),
            marker,
        }
    }

    /// Reads lines until one satisfies `done`; fails with the transcript if
    /// the output ends first.
    fn read_until(&mut self, what: &str, done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + HANG_GUARD;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.transcript.push(line.clone());
                    if done(&line) {
                        return line;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    let _ = self.child.kill();
                    panic!(
                        "the demo hung before {what}; output so far:\n{}",
                        self.transcript.join("\n")
                    );
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("the demo ended before {what}; output:\n{}", self.transcript.join("\n"))
                }
            }
        }
    }

    fn read_to_end(&mut self) {
        while let Ok(line) = self.lines.recv_timeout(HANG_GUARD) {
            self.transcript.push(line);
        }
    }

    fn wait(&mut self) -> i32 {
        self.read_to_end();
        let status = self.child.wait().expect("waiting for script");
        status.code().unwrap_or(-1)
    }

    /// The terminal window is closed: its emulator (`script` here) dies
    /// without a word, the kernel hangs the terminal up and sends SIGHUP to
    /// the demo. Returns once the demo process itself is gone.
    fn close_window(&mut self) {
        self.child.kill().expect("killing script");
        self.child.wait().expect("reaping script");
        self.read_to_end();
        let deadline = Instant::now() + HANG_GUARD;
        while processes_with(&self.marker).iter().any(|p| p.contains(DEMO)) {
            assert!(
                Instant::now() < deadline,
                "the demo was still running {HANG_GUARD:?} after its terminal closed"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn output(&self) -> String {
        self.transcript.join("\n")
    }
}

/// Processes whose environment carries `marker`.
fn processes_with(marker: &str) -> Vec<String> {
    let needle = format!("{MARKER_VAR}={marker}");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if environ.split(|b| *b == 0).any(|var| var == needle.as_bytes()) {
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            found.push(format!(
                "{pid}: {}",
                String::from_utf8_lossy(&cmdline).replace('\0', " ")
            ));
        }
    }
    found
}

/// The pid of the demo process itself (not `script`, not its helpers).
fn demo_pid(marker: &str) -> String {
    let found = processes_with(marker);
    let demo = found
        .iter()
        .find(|p| p.split_once(": ").is_some_and(|(_, cmd)| cmd.starts_with(DEMO)));
    let (pid, _) = demo
        .and_then(|p| p.split_once(": "))
        .unwrap_or_else(|| panic!("no demo process among {found:#?}"));
    pid.to_owned()
}

/// Fails when a process of the run is still there once it has exited (a
/// moment is allowed for exiting helpers to be reaped).
fn assert_nothing_left_running(marker: &str) {
    let mut left = processes_with(marker);
    for _ in 0..50 {
        if left.is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
        left = processes_with(marker);
    }
    panic!("the demo left processes running: {left:#?}");
}

/// Temporary paths the demo printed (`/tmp/...` words in its output), less
/// the checkout itself, which may be a clone under /tmp (as CI's is).
fn printed_temp_paths(output: &str) -> Vec<PathBuf> {
    let tmp = std::env::temp_dir();
    let tmp = tmp.to_string_lossy();
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the checkout exists");
    output
        .split(|c: char| c.is_whitespace() || c == ',' || c == ')' || c == '(' || c == ';')
        .filter(|word| word.starts_with(&*tmp) && word.len() > tmp.len() + 1)
        .map(PathBuf::from)
        .filter(|path| !path.starts_with(&checkout))
        .collect()
}

fn assert_removed(paths: &[PathBuf]) {
    assert!(!paths.is_empty(), "the demo printed no temporary paths to check");
    let left: Vec<&PathBuf> = paths.iter().filter(|p| p.exists()).collect();
    assert!(left.is_empty(), "the demo left temporary files behind: {left:?}");
}

/// The progress reached the end: every config counted to N/N, the drift
/// repaired, the summary printed, and nothing but plain text on the way.
fn assert_complete_progress(output: &str) {
    assert!(!output.contains('\u{1b}'), "escape sequences in the output:\n{output}");
    let total: usize = output
        .lines()
        .find_map(|l| l.strip_prefix("[wait] "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no `[wait] N VRouterConfigs` line:\n{output}"));
    assert!(total >= 4, "the examples have at least four routers, got {total}");
    for k in 1..=total {
        let prefix = format!("[{k}/{total}] applied ");
        assert!(
            output.lines().any(|l| l.starts_with(&prefix)),
            "no `{prefix}` line:\n{output}"
        );
    }
    // Every router the demo simulates is reached on loopback only.
    let routers: Vec<&str> = output.lines().filter(|l| l.starts_with("[router] ")).collect();
    assert!(!routers.is_empty(), "no `[router]` lines:\n{output}");
    assert!(routers.iter().all(|l| l.contains("127.0.0.1")), "{routers:#?}");
    assert!(
        output.lines().any(|l| l.starts_with("[drift] detected after ")),
        "{output}"
    );
    assert!(
        output.lines().any(|l| l.starts_with("[drift] repaired after ")),
        "{output}"
    );
    // Both of the router's configs were read back from its own guest.
    assert!(
        output
            .lines()
            .any(|l| l.starts_with("[drift] the router's configs") && l.contains(", running sha256:")),
        "{output}"
    );
    let summary = format!("[done] demo complete: {total}/{total} VRouterConfigs Applied, drift repaired, in ");
    assert!(
        output.lines().any(|l| l.starts_with(&summary)),
        "no summary line:\n{output}"
    );
}

#[test]
fn the_demo_runs_to_the_end_in_a_terminal() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut demo = Terminal::start(&[]);
    demo.read_until("the summary line", |l| l.starts_with("[done] "));
    let code = demo.wait();
    let output = demo.output();
    assert_eq!(code, 0, "exit code {code}; output:\n{output}");
    assert_complete_progress(&output);
    assert_nothing_left_running(&demo.marker);
    assert_removed(&printed_temp_paths(&output));
}

#[test]
fn keep_leaves_a_usable_kubeconfig_and_ctrl_c_cleans_everything_up() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut demo = Terminal::start(&["--keep"]);
    let export = demo.read_until("the kubeconfig", |l| l.trim_start().starts_with("export KUBECONFIG="));
    let kubeconfig = PathBuf::from(export.trim_start().trim_start_matches("export KUBECONFIG="));
    demo.read_until("the Ctrl-C hint", |l| l.contains("press Ctrl-C"));
    // The demo is still up: its processes and its kubeconfig are there.
    assert!(!processes_with(&demo.marker).is_empty());
    let text = std::fs::read_to_string(&kubeconfig).expect("the printed kubeconfig exists");
    assert!(text.contains("server: https://127.0.0.1:"), "{text}");

    demo.keyboard.write_all(b"\x03").unwrap();
    demo.keyboard.flush().unwrap();
    demo.read_until("the cleanup line", |l| l.starts_with("[cleanup] interrupted (Ctrl-C)"));
    let code = demo.wait();
    let output = demo.output();
    assert_eq!(
        code, 0,
        "exit code {code}: Ctrl-C after a completed demo is a normal end; output:\n{output}"
    );
    assert_complete_progress(&output);
    assert_nothing_left_running(&demo.marker);
    let mut paths = printed_temp_paths(&output);
    paths.push(kubeconfig);
    assert_removed(&paths);
}

#[test]
fn ctrl_c_in_the_middle_stops_with_130_and_cleans_everything_up() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut demo = Terminal::start(&[]);
    // The control plane, the agents and the operator are all up by now.
    demo.read_until("the wait for Applied", |l| l.starts_with("[wait] "));
    demo.keyboard.write_all(b"\x03").unwrap();
    demo.keyboard.flush().unwrap();
    demo.read_until("the cleanup line", |l| l.starts_with("[cleanup] interrupted (Ctrl-C)"));
    let code = demo.wait();
    let output = demo.output();
    assert_eq!(
        code, 130,
        "exit code {code}: interrupted before the end; output:\n{output}"
    );
    assert!(!output.contains("[done]"), "{output}");
    assert_nothing_left_running(&demo.marker);
    assert_removed(&printed_temp_paths(&output));
}

#[test]
fn sigterm_stops_with_130_and_cleans_everything_up() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut demo = Terminal::start(&[]);
    demo.read_until("the wait for Applied", |l| l.starts_with("[wait] "));
    let pid = demo_pid(&demo.marker);
    let sent = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("running kill");
    assert!(sent.success(), "kill -TERM {pid}");
    demo.read_until("the cleanup line", |l| l.starts_with("[cleanup] terminated (SIGTERM)"));
    let code = demo.wait();
    let output = demo.output();
    assert_eq!(code, 130, "exit code {code}: stopped before the end; output:\n{output}");
    assert_nothing_left_running(&demo.marker);
    assert_removed(&printed_temp_paths(&output));
}

#[test]
fn closing_the_terminal_stops_and_cleans_everything_up() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut demo = Terminal::start(&[]);
    demo.read_until("the wait for Applied", |l| l.starts_with("[wait] "));
    assert!(!processes_with(&demo.marker).is_empty());
    demo.close_window();
    let output = demo.output();
    assert_nothing_left_running(&demo.marker);
    assert_removed(&printed_temp_paths(&output));
}

#[test]
fn temp_paths_are_found_in_progress_lines() {
    let tmp = std::env::temp_dir();
    let line = format!(
        "[router] x: y; real qemu-ga pid 1 in {0}/a/b, stand-ins in {0}/c (log: {0}/d/operator.log)",
        tmp.display()
    );
    let found = printed_temp_paths(&line);
    let expected: Vec<PathBuf> = ["a/b", "c", "d/operator.log"].iter().map(|p| tmp.join(p)).collect();
    assert_eq!(found, expected);
    assert!(Path::new(DEMO).is_file(), "{DEMO}");
}
