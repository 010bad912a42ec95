//! containerd for the node: its configuration and state under the node's
//! directory, started inside the node's namespace (the CNI plugins it runs
//! make the pod bridge there), images imported with `ctr`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::Error;
use crate::config;
use crate::netns::NetNs;
use crate::process::{Processes, write_file};
use crate::programs::{Programs, run};

/// How long containerd may take to answer on its socket.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// The containerd namespace the CRI plugin (and so the kubelet) uses.
const CRI_NAMESPACE: &str = "k8s.io";

pub(crate) struct Containerd {
    config: PathBuf,
    socket: PathBuf,
    ctr: PathBuf,
}

impl Containerd {
    /// Writes containerd's and the CNI network's configuration under `dir`.
    pub fn configure(dir: &Path, programs: &Programs) -> Result<Containerd, Error> {
        let cni = dir.join("cni");
        fs::create_dir_all(&cni).map_err(Error::io(format!("creating {}", cni.display())))?;
        write_file(
            &cni,
            "10-vrouter-test-node.conflist",
            &config::cni_conflist(&dir.join("ipam")),
        )?;
        let text = config::containerd(dir, &programs.runc, &programs.cni_dir);
        Ok(Containerd {
            config: write_file(dir, "containerd.toml", &text)?,
            socket: dir.join("containerd.sock"),
            ctr: programs.ctr.clone(),
        })
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Starts containerd in `netns` and waits until it answers.
    pub async fn start(&self, netns: &NetNs, programs: &Programs, processes: &mut Processes) -> Result<(), Error> {
        let mut command = netns.command(&programs.containerd);
        command.arg("--config").arg(&self.config);
        processes.start("containerd", command)?;
        let started = Instant::now();
        while self
            .ctr()
            .arg("version")
            .output()
            .map(|o| !o.status.success())
            .unwrap_or(true)
        {
            processes.check_running()?;
            if started.elapsed() > READY_TIMEOUT {
                return Err(Error::Timeout {
                    what: "containerd answering on its socket".to_owned(),
                    seconds: READY_TIMEOUT.as_secs(),
                    details: processes.log_tail("containerd"),
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(())
    }

    /// Imports an OCI image archive where the kubelet finds it.
    pub fn import(&self, archive: &Path) -> Result<(), Error> {
        run(self.ctr().args(["images", "import"]).arg(archive)).map(drop)
    }

    /// The host process id of a container's main process, from its
    /// `containerd://ID` (or bare ID) as the pod status gives it.
    pub fn task_pid(&self, container_id: &str) -> Result<u32, Error> {
        let id = container_id.trim_start_matches("containerd://");
        let listing = run(self.ctr().args(["tasks", "ls"]))?;
        listing
            .lines()
            .filter_map(|line| {
                let mut columns = line.split_whitespace();
                Some((columns.next()?, columns.next()?))
            })
            .find(|(task, _)| *task == id)
            .and_then(|(_, pid)| pid.parse().ok())
            .ok_or_else(|| Error::NoSuchTask(id.to_owned()))
    }

    /// SIGKILLs the shims of this containerd (found by the socket address
    /// on their command line), which outlive it.
    pub fn kill_shims(&self) {
        let socket = self.socket.to_string_lossy().into_owned();
        let Ok(entries) = fs::read_dir("/proc") else {
            return;
        };
        let pids: Vec<String> = entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                let pid = e.file_name().to_string_lossy().into_owned();
                let cmdline = fs::read(e.path().join("cmdline")).ok()?;
                let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
                (pid.chars().all(|c| c.is_ascii_digit())
                    && cmdline.contains("containerd-shim")
                    && cmdline.contains(&socket))
                .then_some(pid)
            })
            .collect();
        if !pids.is_empty() {
            let _ = Command::new("kill").arg("-9").args(&pids).output();
        }
    }

    fn ctr(&self) -> Command {
        let mut command = Command::new(&self.ctr);
        command
            .arg("--address")
            .arg(&self.socket)
            .args(["--namespace", CRI_NAMESPACE]);
        command
    }
}
