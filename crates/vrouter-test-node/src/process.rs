//! The node's long-running processes: each in a process group of its own
//! (a terminal's Ctrl-C goes to the test runner, not to them), its output
//! in a log file of the node's directory, killed in reverse start order.

use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::Error;
use crate::watchdog::Watchdog;

/// Started processes, by name, each under the watchdog when there is one.
pub(crate) struct Processes {
    log_dir: PathBuf,
    running: Vec<(String, Child)>,
    watchdog: Option<Watchdog>,
}

impl Processes {
    pub fn new(log_dir: &Path) -> Processes {
        Processes {
            log_dir: log_dir.to_path_buf(),
            running: Vec::new(),
            watchdog: None,
        }
    }

    /// Puts every process started from now on under `watchdog`, and tells
    /// it `lines` (what else to undo).
    pub fn watch(&mut self, mut watchdog: Watchdog, lines: &[(&str, String)]) -> Result<(), Error> {
        for (word, arg) in lines {
            watchdog.tell(word, arg)?;
        }
        self.watchdog = Some(watchdog);
        Ok(())
    }

    /// Everything is cleaned up: the watchdog exits doing nothing.
    pub fn release_watchdog(&mut self) {
        if let Some(watchdog) = self.watchdog.take() {
            watchdog.release();
        }
    }

    /// Starts `command` as `name`, output to `<name>.log`; returns its pid.
    pub fn start(&mut self, name: &str, mut command: Command) -> Result<u32, Error> {
        let log = self.log_path(name);
        let out = File::create(&log).map_err(Error::io(format!("creating {}", log.display())))?;
        let err = out
            .try_clone()
            .map_err(Error::io(format!("opening {}", log.display())))?;
        let child = command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .spawn()
            .map_err(Error::io(format!("starting {name} ({command:?})")))?;
        let pid = child.id();
        self.running.push((name.to_owned(), child));
        if let Some(watchdog) = &mut self.watchdog {
            watchdog.tell("group", &pid.to_string())?;
        }
        Ok(pid)
    }

    /// Fails with its log tail when `name` has exited.
    pub fn check(&mut self, name: &str) -> Result<(), Error> {
        self.check_matching(|running| running == name)
    }

    /// Whether a process named `name` was started (and not stopped).
    pub fn has(&self, name: &str) -> bool {
        self.running.iter().any(|(n, _)| n == name)
    }

    pub fn log_path(&self, name: &str) -> PathBuf {
        self.log_dir.join(format!("{name}.log"))
    }

    /// The last lines `name` logged.
    pub fn log_tail(&self, name: &str) -> String {
        log_tail(&self.log_path(name))
    }

    /// Fails with the log tail of the first process that has exited.
    pub fn check_running(&mut self) -> Result<(), Error> {
        self.check_matching(|_| true)
    }

    /// The first process `wanted` names that has exited, as an error with
    /// its status and the end of its log.
    fn check_matching(&mut self, wanted: impl Fn(&str) -> bool) -> Result<(), Error> {
        for (name, child) in &mut self.running {
            if wanted(name)
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err(Error::Exited {
                    name: name.clone(),
                    status,
                    log_tail: log_tail(&self.log_dir.join(format!("{name}.log"))),
                });
            }
        }
        Ok(())
    }

    /// SIGKILLs `name` and reaps it, if it runs.
    pub fn stop(&mut self, name: &str) {
        if let Some(index) = self.running.iter().position(|(n, _)| n == name) {
            let (_, mut child) = self.running.remove(index);
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGKILLs every process, the last started first, and reaps them.
    pub fn stop_all(&mut self) {
        while let Some((_, mut child)) = self.running.pop() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// The last lines of a log file, for error messages.
pub(crate) fn log_tail(path: &Path) -> String {
    const TAIL_BYTES: u64 = 4096;
    let Ok(mut file) = File::open(path) else {
        return format!("(no log at {})", path.display());
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(TAIL_BYTES)));
    let mut bytes = Vec::new();
    let _ = file.read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// Writes `text` to `dir/name` and returns the path.
pub(crate) fn write_file(dir: &Path, name: &str, text: &str) -> Result<PathBuf, Error> {
    let path = dir.join(name);
    fs::write(&path, text).map_err(Error::io(format!("writing {}", path.display())))?;
    Ok(path)
}
