//! Running an apply script under plain bash with stub vyatta functions (feature
//! `test-support`).
//!
//! The stubs ([`VYATTA_STUBS`]) record, byte for byte, every stubbed command with
//! its arguments, what `load /dev/stdin` received, and every command the script
//! itself ran; [`parse_stub_log`] reads that record back. Two runners use them:
//! [`BashHarness`] keeps one bash process and runs many scripts in subshells
//! (fast enough for property tests), and [`run_script_file`] runs one script as a
//! file with the stubs loaded through `BASH_ENV`, the way a guest agent would
//! (`guest-exec` of `/bin/bash` with `BASH_ENV` and `VROUTER_STUB_LOG` in its
//! environment). Both fail loudly when bash cannot be found.

use std::fs;
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

/// The stub functions (`configure`, `load`, `set`, `delete`, `commit`, `save`,
/// `id`, `source`) and the command trace, as a bash snippet. It writes to the file
/// named by `VROUTER_STUB_LOG`; `id -g -n` prints `VROUTER_STUB_GROUP` (default
/// `vyattacfg`).
pub const VYATTA_STUBS: &str = include_str!("testing/vyatta-stubs.bash");

/// An executable stand-in for `sg`, which the script `exec`s when it is not yet in
/// the `vyattacfg` group: it records `SG <argc> <args…>` and exits 0. It is a POSIX
/// `sh` script so that `BASH_ENV` does not load the stubs (and their trace) into it.
pub const SG_STUB: &str =
    "#!/bin/sh\nfor field in SG \"$#\" \"$@\"; do printf '%s\\000' \"$field\"; done >> \"$VROUTER_STUB_LOG\"\n";

/// One record of the stub log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StubEvent {
    /// A stubbed command ran with these arguments.
    Call {
        /// `configure`, `load`, `set`, …
        name: String,
        /// Its arguments, exactly as bash passed them.
        args: Vec<String>,
    },
    /// What `load /dev/stdin` read.
    Loaded(String),
    /// A command of the script itself (not of a stub), about to run.
    Trace {
        /// 0 at the script's top level, 1 inside a `$( )`, …
        depth: u32,
        /// The command as bash prints it.
        command: String,
    },
    /// The `sg` stub ran with these arguments.
    Sg {
        /// Its arguments.
        args: Vec<String>,
    },
}

/// Reads the NUL-framed records [`VYATTA_STUBS`] and [`SG_STUB`] write (the stubs
/// write each newline of a field as the byte 0xFF, which UTF-8 text never holds).
pub fn parse_stub_log(bytes: &[u8]) -> Result<Vec<StubEvent>, String> {
    let bytes: Vec<u8> = bytes.iter().map(|&b| if b == 0xFF { b'\n' } else { b }).collect();
    let text = std::str::from_utf8(&bytes).map_err(|e| format!("stub log is not UTF-8: {e}"))?;
    let Some(body) = text.strip_suffix('\0') else {
        return if text.is_empty() {
            Ok(Vec::new())
        } else {
            Err("stub log does not end with a NUL".into())
        };
    };
    let mut fields = body.split('\0');
    let mut events = Vec::new();
    let mut next = |what: &str| {
        fields
            .next()
            .map(str::to_owned)
            .ok_or_else(|| format!("stub log ends before {what}"))
    };
    loop {
        let tag = match next("a record") {
            Ok(tag) => tag,
            Err(_) => return Ok(events),
        };
        let event = match tag.as_str() {
            "CALL" | "SG" => {
                let name = if tag == "CALL" {
                    next("a command name")?
                } else {
                    String::new()
                };
                let argc: usize = next("an argument count")?
                    .parse()
                    .map_err(|e| format!("bad argument count: {e}"))?;
                let args = (0..argc).map(|_| next("an argument")).collect::<Result<Vec<_>, _>>()?;
                if tag == "CALL" {
                    StubEvent::Call { name, args }
                } else {
                    StubEvent::Sg { args }
                }
            }
            "LOAD" => StubEvent::Loaded(next("the loaded config")?),
            "TRACE" => StubEvent::Trace {
                depth: next("a depth")?.parse().map_err(|e| format!("bad depth: {e}"))?,
                command: next("a command")?,
            },
            other => return Err(format!("unknown stub log record {other:?}")),
        };
        events.push(event);
    }
}

/// What running one script produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptRun {
    /// The stub log, in order.
    pub events: Vec<StubEvent>,
    /// The script's standard output.
    pub stdout: String,
    /// The script's standard error.
    pub stderr: String,
    /// Its exit status.
    pub status: i32,
}

impl ScriptRun {
    /// The stubbed commands, in order, as (name, arguments).
    pub fn calls(&self) -> Vec<(&str, Vec<&str>)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                StubEvent::Call { name, args } => Some((name.as_str(), args.iter().map(String::as_str).collect())),
                _ => None,
            })
            .collect()
    }

    /// What `load /dev/stdin` received, if it ran.
    pub fn loaded(&self) -> Option<&str> {
        self.events.iter().find_map(|e| match e {
            StubEvent::Loaded(config) => Some(config.as_str()),
            _ => None,
        })
    }

    /// The commands the script itself ran, as (depth, first word).
    pub fn traced_command_names(&self) -> Vec<(u32, &str)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                StubEvent::Trace { depth, command } => Some((*depth, command.split_whitespace().next().unwrap_or(""))),
                _ => None,
            })
            .collect()
    }
}

/// Finds bash, or says how to get it.
pub fn bash_path() -> io::Result<PathBuf> {
    let candidates = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).map(|d| d.join("bash")).collect::<Vec<_>>())
        .unwrap_or_default();
    candidates
        .into_iter()
        .chain([PathBuf::from("/bin/bash"), PathBuf::from("/usr/bin/bash")])
        .find(|p| p.is_file())
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                "bash not found on PATH: install it (apt-get install -y bash)",
            )
        })
}

/// A private scratch directory, removed on drop.
struct ScratchDir(PathBuf);

impl ScratchDir {
    fn new() -> io::Result<ScratchDir> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let mut random = [0u8; 8];
        getrandom::fill(&mut random).map_err(|e| io::Error::other(e.to_string()))?;
        let name = format!(
            "vrouter-render-bash-{}-{}-{:016x}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed),
            u64::from_le_bytes(random)
        );
        let dir = std::env::temp_dir().join(name);
        fs::create_dir(&dir)?;
        fs::create_dir(dir.join("bin"))?;
        fs::write(dir.join("stubs.bash"), VYATTA_STUBS)?;
        Ok(ScratchDir(dir))
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// One bash process that runs scripts one after another, each in a fresh subshell
/// with the stubs loaded and `id -g -n` answering `vyattacfg`. `PATH` holds only an
/// empty directory, so any command the stubs do not define fails (and shows in
/// stderr); stdin is `/dev/null`.
pub struct BashHarness {
    dir: ScratchDir,
    child: Child,
    commands: ChildStdin,
    replies: BufReader<ChildStdout>,
}

impl BashHarness {
    /// Starts bash.
    pub fn start() -> io::Result<BashHarness> {
        let dir = ScratchDir::new()?;
        let mut child = Command::new(bash_path()?)
            .args(["--noprofile", "--norc"])
            .env_clear()
            .env("PATH", dir.path("bin"))
            .env("VROUTER_STUB_LOG", dir.path("log"))
            .env("VROUTER_STUB_ARM", "0")
            .env("LC_ALL", "C")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let mut commands = child.stdin.take().expect("stdin is piped");
        let replies = BufReader::new(child.stdout.take().expect("stdout is piped"));
        // The functions are loaded once; each script's subshell inherits them.
        writeln!(commands, "builtin source {}", quote_path(&dir.path("stubs.bash")))?;
        Ok(BashHarness {
            dir,
            child,
            commands,
            replies,
        })
    }

    /// Runs `script` and returns what the stubs saw.
    pub fn run(&mut self, script: &str) -> io::Result<ScriptRun> {
        let case = self.dir.path("case.sh");
        fs::write(&case, script)?;
        fs::write(self.dir.path("log"), b"")?;
        let (out, err) = (self.dir.path("out"), self.dir.path("err"));
        let line = format!(
            "( __vr_arm; builtin source {case} ) </dev/null >{out} 2>{err}; printf '%d\\n' \"$?\"\n",
            case = quote_path(&case),
            out = quote_path(&out),
            err = quote_path(&err),
        );
        self.commands.write_all(line.as_bytes())?;
        self.commands.flush()?;
        let log = self.dir.path("log");
        self.finished_run(&log, &out, &err)
    }

    /// Reads the exit status bash replies for the next script, and what the
    /// script left in its stub log and output files.
    fn finished_run(&mut self, log: &Path, out: &Path, err: &Path) -> io::Result<ScriptRun> {
        let mut reply = String::new();
        if self.replies.read_line(&mut reply)? == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the bash harness exited"));
        }
        let status = reply
            .trim()
            .parse()
            .map_err(|e| io::Error::other(format!("bad status {reply:?}: {e}")))?;
        let mut events = parse_stub_log(&fs::read(log)?).map_err(io::Error::other)?;
        // The harness's own `builtin source` of the case is traced first.
        match events.first() {
            Some(StubEvent::Trace { depth: 0, command }) if command.starts_with("builtin source ") => {
                events.remove(0);
            }
            other => {
                return Err(io::Error::other(format!(
                    "expected the harness's own trace first, found {other:?}"
                )));
            }
        }
        Ok(ScriptRun {
            events,
            stdout: String::from_utf8_lossy(&fs::read(out)?).into_owned(),
            stderr: String::from_utf8_lossy(&fs::read(err)?).into_owned(),
            status,
        })
    }
}

impl BashHarness {
    /// Runs `scripts` one after another, each in its own subshell as
    /// [`BashHarness::run`] does, with one round trip to bash for all of them (for
    /// property tests with many cases).
    pub fn run_many(&mut self, scripts: &[String]) -> io::Result<Vec<ScriptRun>> {
        let mut line = String::from("for __vr_i in");
        for (i, script) in scripts.iter().enumerate() {
            fs::write(self.dir.path(&format!("case{i}.sh")), script)?;
            fs::write(self.dir.path(&format!("log{i}")), b"")?;
            line.push_str(&format!(" {i}"));
        }
        let dir = quote_path(&self.dir.0);
        line.push_str(&format!(
            "; do ( VROUTER_STUB_LOG={dir}/log$__vr_i; __vr_arm; builtin source {dir}/case$__vr_i.sh ) \
             </dev/null >{dir}/out$__vr_i 2>{dir}/err$__vr_i; printf '%d\\n' \"$?\"; done\n"
        ));
        self.commands.write_all(line.as_bytes())?;
        self.commands.flush()?;
        let mut runs = Vec::with_capacity(scripts.len());
        for i in 0..scripts.len() {
            let (log, out, err) = (
                self.dir.path(&format!("log{i}")),
                self.dir.path(&format!("out{i}")),
                self.dir.path(&format!("err{i}")),
            );
            runs.push(self.finished_run(&log, &out, &err)?);
        }
        Ok(runs)
    }
}

impl Drop for BashHarness {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `script` as a file, `bash <file>`, with the stubs loaded through
/// `BASH_ENV`, `id -g -n` answering `group`, and `PATH` holding only the [`SG_STUB`]
/// and the real `readlink` (both used by the re-exec guard).
pub fn run_script_file(script: &str, group: &str) -> io::Result<ScriptRun> {
    let dir = ScratchDir::new()?;
    let sg = dir.path("bin/sg");
    fs::write(&sg, SG_STUB)?;
    make_executable(&sg)?;
    let readlink = ["/usr/bin/readlink", "/bin/readlink"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.is_file())
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "readlink not found: install coreutils"))?;
    std::os::unix::fs::symlink(readlink, dir.path("bin/readlink"))?;
    let case = dir.path("apply.sh");
    fs::write(&case, script)?;
    let log = dir.path("log");
    fs::write(&log, b"")?;
    let output = Command::new(bash_path()?)
        .arg(&case)
        .env_clear()
        .env("PATH", dir.path("bin"))
        .env("BASH_ENV", dir.path("stubs.bash"))
        .env("VROUTER_STUB_LOG", &log)
        .env("VROUTER_STUB_GROUP", group)
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .output()?;
    Ok(ScriptRun {
        events: parse_stub_log(&fs::read(&log)?).map_err(io::Error::other)?,
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        status: output.status.code().unwrap_or(-1),
    })
}

fn make_executable(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(0o755))
}

/// Single-quotes a path for bash.
fn quote_path(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
}

/// The VyOS config.boot parsers the render check uses (vyos1x-config's and
/// vyatta-cfg's `loadFile`), for tests that compare a rendered config's node
/// structure with the template's.
pub mod config_boot {
    pub use crate::config_boot::{Node, parse_cparse, parse_vyos1x, skeleton, values};
    pub use crate::vyos_reading::set_commands_of;
}

pub mod template_cost;
