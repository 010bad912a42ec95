//! Starting long-lived helper processes (QEMU, libvirtd) so that they die
//! with the test process, however it ends.
//!
//! Each is started under `setpriv --pdeathsig KILL`, which makes the kernel
//! SIGKILL it when the *thread* that started it exits. Test threads come and
//! go (a guest shared by a test binary outlives the test that booted it), so
//! every such process is started from one thread that lives as long as the
//! process: when the test binary exits, panics out or is killed, that thread
//! ends and the kernel kills every guest. Drop guards stop them earlier in
//! the normal case.

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

/// A process to start.
#[derive(Debug, Clone)]
pub struct Spawn {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    pub env: Vec<(OsString, OsString)>,
    /// Where its stdout and stderr go.
    pub log: PathBuf,
}

impl Spawn {
    pub fn new(program: impl Into<PathBuf>, log: impl Into<PathBuf>) -> Self {
        Spawn {
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            log: log.into(),
        }
    }

    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    pub fn args<I: IntoIterator<Item = S>, S: Into<OsString>>(mut self, args: I) -> Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }
}

type Request = (Spawn, mpsc::Sender<io::Result<Child>>);

fn spawner() -> &'static Mutex<mpsc::Sender<Request>> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Request>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("vm-spawner".into())
            .spawn(move || {
                for (spawn, reply) in rx {
                    let _ = reply.send(start(spawn));
                }
                // The senders live in a static, so this loop only ends with
                // the process: parking keeps the thread (and with it the
                // children's death signal) until then.
                loop {
                    std::thread::park();
                }
            })
            .expect("start the VM spawner thread");
        Mutex::new(tx)
    })
}

fn start(spawn: Spawn) -> io::Result<Child> {
    let log = File::create(&spawn.log)?;
    let mut command = Command::new("setpriv");
    command
        .arg("--pdeathsig")
        .arg("KILL")
        .arg("--")
        .arg(&spawn.program)
        .args(&spawn.args)
        .envs(spawn.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    command.spawn()
}

/// Starts `spawn` tied to the life of this process (see the module docs).
pub fn spawn_tied(spawn: Spawn) -> io::Result<Child> {
    let (tx, rx) = mpsc::channel();
    spawner()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .send((spawn, tx))
        .map_err(|_| io::Error::other("the VM spawner thread is gone"))?;
    rx.recv()
        .map_err(|_| io::Error::other("the VM spawner thread is gone"))?
}

/// Finds `name` on `PATH` or in the sbin directories a test runner's `PATH`
/// often lacks.
pub fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/bin", "/sbin", "/bin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// A fresh directory for one guest or daemon, `<tmp>/vrouter-test-vm/<pid>-<name>-<n>`.
///
/// Guests shared by a test binary live in statics, which are never dropped,
/// so their directories cannot be removed by a guard; instead each new one
/// first removes the directories of test processes that no longer run.
pub fn scratch_dir(name: &str) -> io::Result<PathBuf> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let root = std::env::temp_dir().join("vrouter-test-vm");
    std::fs::create_dir_all(&root)?;
    for entry in std::fs::read_dir(&root)?.filter_map(Result::ok) {
        let owner = entry
            .file_name()
            .to_string_lossy()
            .split('-')
            .next()
            .and_then(|pid| pid.parse::<u32>().ok());
        if let Some(pid) = owner
            && !std::path::Path::new(&format!("/proc/{pid}")).exists()
        {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    let dir = root.join(format!(
        "{}-{name}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// A [`scratch_dir`], removed when dropped (when its owner is not a static).
#[derive(Debug)]
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
