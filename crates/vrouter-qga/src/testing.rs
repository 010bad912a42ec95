//! A real `qemu-ga` for tests (feature `testing`): each [`AgentProcess`]
//! runs its own agent in unix-listen mode inside a fresh temporary
//! directory and kills it when dropped, also when the test panics.
//!
//! The agent runs with the test's privileges (root in CI): whatever a test
//! asks it to write or execute must stay inside [`AgentProcess::dir`].

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::agent::Agent;
use crate::unix_socket::UnixSocketTransport;

/// Overrides where the `qemu-ga` binary is looked for.
pub const QEMU_GA_ENV: &str = "VROUTER_QEMU_GA";

/// How to get the agent, for every "not found" message.
pub const HOW_TO_GET_QEMU_GA: &str = "install Debian's qemu-guest-agent package \
     (`apt-get install -y qemu-guest-agent`; `cargo xtask test` does this when it may), \
     or set VROUTER_QEMU_GA to the qemu-ga binary";

/// Directories searched after `PATH`: qemu-ga lives in sbin, which a test
/// runner's `PATH` often lacks.
const EXTRA_DIRS: [&str; 4] = ["/usr/sbin", "/usr/bin", "/sbin", "/usr/local/sbin"];

/// A generous bound on the agent creating its socket; it normally takes
/// milliseconds.
const STARTUP_BOUND: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    #[error("qemu-ga not found (looked at ${QEMU_GA_ENV}, PATH and {EXTRA_DIRS:?}): {HOW_TO_GET_QEMU_GA}")]
    NotFound,
    #[error("{context}: {source}")]
    Io { context: String, source: std::io::Error },
    #[error("qemu-ga exited during startup ({status}); its log:\n{log}")]
    ExitedEarly { status: String, log: String },
    #[error("qemu-ga did not open {socket} within {STARTUP_BOUND:?}; its log:\n{log}")]
    NotReady { socket: PathBuf, log: String },
}

/// Startup options for [`AgentProcess::start_with`].
#[derive(Debug, Clone, Default)]
pub struct AgentOptions {
    /// Commands to disable (`qemu-ga -b`), e.g. `guest-get-osinfo`.
    pub blocked_rpcs: Vec<String>,
}

/// A running `qemu-ga -m unix-listen` owned by one test.
#[derive(Debug)]
pub struct AgentProcess {
    dir: tempfile::TempDir,
    binary: PathBuf,
    options: AgentOptions,
    child: Option<Child>,
}

/// Finds the qemu-ga binary, or explains how to get it.
pub fn find_qemu_ga() -> Result<PathBuf, HarnessError> {
    if let Some(explicit) = env::var_os(QEMU_GA_ENV) {
        let explicit = PathBuf::from(explicit);
        return if explicit.is_file() {
            Ok(explicit)
        } else {
            Err(HarnessError::NotFound)
        };
    }
    let path_dirs = env::var_os("PATH")
        .map(|paths| env::split_paths(&paths).collect::<Vec<_>>())
        .unwrap_or_default();
    path_dirs
        .into_iter()
        .chain(EXTRA_DIRS.iter().map(PathBuf::from))
        .map(|dir| dir.join("qemu-ga"))
        .find(|candidate| candidate.is_file())
        .ok_or(HarnessError::NotFound)
}

impl AgentProcess {
    pub fn start() -> Result<Self, HarnessError> {
        Self::start_with(AgentOptions::default())
    }

    pub fn start_with(options: AgentOptions) -> Result<Self, HarnessError> {
        let binary = find_qemu_ga()?;
        let dir = tempfile::Builder::new()
            .prefix("vrouter-qga-")
            .tempdir()
            .map_err(io("creating the agent's temporary directory"))?;
        fs::create_dir(dir.path().join("state")).map_err(io("creating the agent's state directory"))?;
        let mut process = AgentProcess {
            dir,
            binary,
            options,
            child: None,
        };
        process.spawn()?;
        Ok(process)
    }

    /// The temporary directory the agent's socket, state and log live in;
    /// tests put their guest-side files here too.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn socket_path(&self) -> PathBuf {
        self.dir.path().join("qga.sock")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("qemu-ga.log")
    }

    /// A path inside [`AgentProcess::dir`] as the `&str` agent commands take.
    pub fn guest_path(&self, name: &str) -> String {
        self.dir
            .path()
            .join(name)
            .to_str()
            .expect("temporary directories have UTF-8 paths")
            .to_owned()
    }

    /// The agent's process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn transport(&self) -> UnixSocketTransport {
        UnixSocketTransport::new(self.socket_path())
    }

    pub fn agent(&self) -> Agent<UnixSocketTransport> {
        Agent::new(self.transport())
    }

    /// SIGKILLs the agent and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the agent and starts a new one on the same socket and state
    /// directory, as a guest reboot or agent restart would.
    pub fn restart(&mut self) -> Result<(), HarnessError> {
        self.kill();
        self.spawn()
    }

    /// Sends `signal` (a name such as `STOP` or `CONT`) to the agent.
    pub fn signal(&self, signal: &str) -> Result<(), HarnessError> {
        let pid = self.pid().ok_or_else(|| HarnessError::Io {
            context: "signalling qemu-ga".into(),
            source: std::io::Error::other("the agent is not running"),
        })?;
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .map_err(io("running kill"))?;
        if status.success() {
            Ok(())
        } else {
            Err(HarnessError::Io {
                context: format!("kill -{signal} {pid}"),
                source: std::io::Error::other(status.to_string()),
            })
        }
    }

    /// What the agent logged so far.
    pub fn log(&self) -> String {
        fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    fn spawn(&mut self) -> Result<(), HarnessError> {
        let socket = self.socket_path();
        let _ = fs::remove_file(&socket);
        let log = fs::File::create(self.log_path()).map_err(io("creating the agent log"))?;
        let mut command = Command::new(&self.binary);
        command
            .arg("-m")
            .arg("unix-listen")
            .arg("-p")
            .arg(&socket)
            .arg("-t")
            .arg(self.dir.path().join("state"))
            .arg("-f")
            .arg(self.dir.path().join("qemu-ga.pid"));
        if !self.options.blocked_rpcs.is_empty() {
            command.arg("-b").arg(self.options.blocked_rpcs.join(","));
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(io("starting qemu-ga"))?;
        self.child = Some(child);
        self.wait_until_listening()
    }

    fn wait_until_listening(&mut self) -> Result<(), HarnessError> {
        let socket = self.socket_path();
        let started = Instant::now();
        loop {
            let child = self.child.as_mut().expect("the agent was just spawned");
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Err(HarnessError::ExitedEarly {
                    status: status.to_string(),
                    log: self.log(),
                });
            }
            // A connection that sends nothing and is closed at once is a
            // normal client disconnect to the agent.
            if std::os::unix::net::UnixStream::connect(&socket).is_ok() {
                return Ok(());
            }
            if started.elapsed() > STARTUP_BOUND {
                return Err(HarnessError::NotReady {
                    socket,
                    log: self.log(),
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

fn io(context: &str) -> impl FnOnce(std::io::Error) -> HarnessError + '_ {
    move |source| HarnessError::Io {
        context: context.to_owned(),
        source,
    }
}

/// One reply captured from a real agent, as the bytes it wrote.
#[derive(Debug, Clone)]
pub struct CapturedReply {
    /// The fixture name, e.g. `exec-status-exited`.
    pub name: &'static str,
    pub bytes: Vec<u8>,
}

/// Drives a fresh agent through every reply shape this crate reads and
/// returns the raw reply lines (newline included). Writes only inside
/// `process.dir()`. `cargo run --example capture-fixtures` stores them in
/// `tests/fixtures/`; a test compares the installed agent against them.
pub fn capture_replies(process: &AgentProcess) -> Result<Vec<CapturedReply>, HarnessError> {
    let mut session = RawSession::connect(&process.socket_path())?;
    let mut out = Captures(Vec::new());

    // The handshake: our 0xFF draws a parse error, then the delimited echo.
    session.send(b"\xff{\"execute\":\"guest-sync-delimited\",\"arguments\":{\"id\":4242}}\n")?;
    let mut handshake = session.line()?;
    handshake.extend(session.line()?);
    out.keep("handshake", handshake);

    out.keep("ping", session.call(r#"{"execute":"guest-ping","id":1}"#)?);
    out.keep(
        "sync",
        session.call(r#"{"execute":"guest-sync","arguments":{"id":77},"id":2}"#)?,
    );
    capture_file_replies(&mut session, process, &mut out)?;
    capture_exec_replies(&mut session, process, &mut out)?;
    Ok(out.0)
}

/// The replies captured so far.
struct Captures(Vec<CapturedReply>);

impl Captures {
    fn keep(&mut self, name: &'static str, bytes: Vec<u8>) {
        self.0.push(CapturedReply { name, bytes });
    }
}

/// File open, write, read (partial, at the end, too large) and close, and
/// the errors for a missing path and an unknown handle.
fn capture_file_replies(
    session: &mut RawSession,
    process: &AgentProcess,
    out: &mut Captures,
) -> Result<(), HarnessError> {
    let file = json_string(&process.guest_path("fixture.txt"));
    let open = session.call(&format!(
        r#"{{"execute":"guest-file-open","arguments":{{"path":{file},"mode":"w"}},"id":3}}"#
    ))?;
    let handle = return_value(&open)?;
    out.keep("file-open", open);
    out.keep(
        "file-write",
        session.call(&format!(
            r#"{{"execute":"guest-file-write","arguments":{{"handle":{handle},"buf-b64":"aGVsbG8="}},"id":4}}"#
        ))?,
    );
    out.keep(
        "file-close",
        session.call(&format!(
            r#"{{"execute":"guest-file-close","arguments":{{"handle":{handle}}},"id":5}}"#
        ))?,
    );
    let open = session.call(&format!(
        r#"{{"execute":"guest-file-open","arguments":{{"path":{file},"mode":"r"}},"id":6}}"#
    ))?;
    let handle = return_value(&open)?;
    for (name, id) in [
        ("file-read-partial", 7),
        ("file-read-eof", 8),
        ("file-read-empty-eof", 9),
    ] {
        out.keep(
            name,
            session.call(&format!(
                r#"{{"execute":"guest-file-read","arguments":{{"handle":{handle},"count":3}},"id":{id}}}"#
            ))?,
        );
    }
    out.keep(
        "file-read-count-too-large",
        session.call(&format!(
            r#"{{"execute":"guest-file-read","arguments":{{"handle":{handle},"count":50331649}},"id":10}}"#
        ))?,
    );
    session.call(&format!(
        r#"{{"execute":"guest-file-close","arguments":{{"handle":{handle}}},"id":11}}"#
    ))?;
    let missing = json_string(&process.guest_path("missing/file"));
    out.keep(
        "file-open-missing",
        session.call(&format!(
            r#"{{"execute":"guest-file-open","arguments":{{"path":{missing},"mode":"r"}},"id":12}}"#
        ))?,
    );
    out.keep(
        "file-handle-unknown",
        session.call(r#"{"execute":"guest-file-close","arguments":{"handle":999999},"id":13}"#)?,
    );

    Ok(())
}

/// Exec and its status (running, exited, killed, without output, unknown
/// pid), a missing binary, the OS info, an unknown command and a parse error.
fn capture_exec_replies(
    session: &mut RawSession,
    process: &AgentProcess,
    out: &mut Captures,
) -> Result<(), HarnessError> {
    let sleeper = session.call(
        r#"{"execute":"guest-exec","arguments":{"path":"/bin/sleep","arg":["1"],"capture-output":true},"id":20}"#,
    )?;
    let pid = pid_of(&sleeper)?;
    out.keep("exec", sleeper);
    out.keep(
        "exec-status-running",
        session.call(&format!(
            r#"{{"execute":"guest-exec-status","arguments":{{"pid":{pid}}},"id":21}}"#
        ))?,
    );
    session.wait_exited(pid)?;

    let script = r#"printf 'out\n'; printf 'err\n' >&2; exit 3"#;
    let started = session.call(&format!(
        r#"{{"execute":"guest-exec","arguments":{{"path":"/bin/sh","arg":["-c",{}],"capture-output":true}},"id":22}}"#,
        json_string(script)
    ))?;
    let pid = pid_of(&started)?;
    out.keep("exec-status-exited", session.wait_exited(pid)?);
    out.keep(
        "exec-status-unknown-pid",
        session.call(&format!(
            r#"{{"execute":"guest-exec-status","arguments":{{"pid":{pid}}},"id":23}}"#
        ))?,
    );

    let started = session.call(
        r#"{"execute":"guest-exec","arguments":{"path":"/bin/sh","arg":["-c","kill -9 $$"],"capture-output":true},"id":24}"#,
    )?;
    out.keep("exec-status-signal", session.wait_exited(pid_of(&started)?)?);

    let started = session.call(r#"{"execute":"guest-exec","arguments":{"path":"/bin/true"},"id":25}"#)?;
    out.keep("exec-status-no-capture", session.wait_exited(pid_of(&started)?)?);

    let missing_binary = json_string(&process.guest_path("no-such-binary"));
    out.keep(
        "exec-missing-binary",
        session.call(&format!(
            r#"{{"execute":"guest-exec","arguments":{{"path":{missing_binary}}},"id":26}}"#
        ))?,
    );
    out.keep("osinfo", session.call(r#"{"execute":"guest-get-osinfo","id":27}"#)?);
    out.keep(
        "command-not-found",
        session.call(r#"{"execute":"guest-no-such-command","id":28}"#)?,
    );
    out.keep("parse-error", session.call("{\"execute\": nonsense}")?);
    Ok(())
}

/// A plain blocking client for [`capture_replies`]: it must see the bytes
/// exactly as the agent wrote them, so it shares no code with the transport.
struct RawSession {
    reader: std::io::BufReader<std::os::unix::net::UnixStream>,
}

impl RawSession {
    fn connect(socket: &Path) -> Result<Self, HarnessError> {
        let stream = std::os::unix::net::UnixStream::connect(socket).map_err(io("connecting to qemu-ga"))?;
        stream
            .set_read_timeout(Some(STARTUP_BOUND))
            .map_err(io("setting a read timeout"))?;
        Ok(RawSession {
            reader: std::io::BufReader::new(stream),
        })
    }

    fn send(&mut self, bytes: &[u8]) -> Result<(), HarnessError> {
        use std::io::Write as _;
        self.reader.get_mut().write_all(bytes).map_err(io("writing to qemu-ga"))
    }

    fn line(&mut self) -> Result<Vec<u8>, HarnessError> {
        use std::io::BufRead as _;
        let mut line = Vec::new();
        self.reader
            .read_until(b'\n', &mut line)
            .map_err(io("reading from qemu-ga"))?;
        Ok(line)
    }

    fn call(&mut self, request: &str) -> Result<Vec<u8>, HarnessError> {
        self.send(format!("{request}\n").as_bytes())?;
        self.line()
    }

    /// Polls until the process has exited; returns that reply.
    fn wait_exited(&mut self, pid: i64) -> Result<Vec<u8>, HarnessError> {
        let started = Instant::now();
        loop {
            let reply = self.call(&format!(
                r#"{{"execute":"guest-exec-status","arguments":{{"pid":{pid}}},"id":{pid}}}"#
            ))?;
            let value: serde_json::Value = serde_json::from_slice(&reply).map_err(invalid)?;
            if value["return"]["exited"] == serde_json::Value::Bool(true) {
                return Ok(reply);
            }
            if started.elapsed() > STARTUP_BOUND {
                return Err(invalid(format!("pid {pid} did not exit within {STARTUP_BOUND:?}")));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn json_string(text: &str) -> String {
    serde_json::Value::from(text).to_string()
}

fn return_value(reply: &[u8]) -> Result<serde_json::Value, HarnessError> {
    let value: serde_json::Value = serde_json::from_slice(reply).map_err(invalid)?;
    value
        .get("return")
        .cloned()
        .ok_or_else(|| invalid(format!("no return in {}", String::from_utf8_lossy(reply))))
}

fn pid_of(reply: &[u8]) -> Result<i64, HarnessError> {
    return_value(reply)?["pid"]
        .as_i64()
        .ok_or_else(|| invalid(format!("no pid in {}", String::from_utf8_lossy(reply))))
}

fn invalid(error: impl std::fmt::Display) -> HarnessError {
    HarnessError::Io {
        context: "capturing agent replies".into(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, error.to_string()),
    }
}
