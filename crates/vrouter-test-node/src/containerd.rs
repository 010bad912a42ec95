//! containerd for the node: its configuration and state under the node's
//! directory, started inside the node's namespace (the CNI plugins it runs
//! make the pod bridge there), images imported with `ctr`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

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
    /// on their command line), which outlive it, and removes their sockets,
    /// which containerd 1.6 puts under `/run/containerd/s` whatever its
    /// configuration says.
    pub fn kill_shims(&self) {
        let socket = self.socket.to_string_lossy().into_owned();
        let Ok(entries) = fs::read_dir("/proc") else {
            return;
        };
        let shims: Vec<(String, Vec<String>)> = entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                let pid = e.file_name().to_string_lossy().into_owned();
                let cmdline = fs::read(e.path().join("cmdline")).ok()?;
                let args: Vec<String> = String::from_utf8_lossy(&cmdline)
                    .split('\0')
                    .map(str::to_owned)
                    .collect();
                (pid.chars().all(|c| c.is_ascii_digit())
                    && args.first().is_some_and(|a| a.contains("containerd-shim"))
                    && args.contains(&socket))
                .then_some((pid, args))
            })
            .collect();
        if !shims.is_empty() {
            let _ = Command::new("kill")
                .arg("-9")
                .args(shims.iter().map(|(pid, _)| pid))
                .output();
        }
        for (_, args) in &shims {
            if let Some(path) = shim_socket(args) {
                let _ = fs::remove_file(path);
            }
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

/// Where containerd 1.6 puts a shim's socket: `/run/containerd/s/` and the
/// SHA-256 of `ADDRESS/NAMESPACE/ID`, from the shim's own arguments.
fn shim_socket(args: &[String]) -> Option<PathBuf> {
    let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1));
    let key = format!("{}/{}/{}", value("-address")?, value("-namespace")?, value("-id")?);
    Some(Path::new("/run/containerd/s").join(hex::encode(Sha256::digest(key.as_bytes()))))
}

#[cfg(test)]
mod tests {
    use super::shim_socket;

    #[test]
    fn a_shims_socket_is_named_by_the_hash_of_address_namespace_and_id() {
        let args: Vec<String> = [
            "/usr/bin/containerd-shim-runc-v2",
            "-namespace",
            "k8s.io",
            "-id",
            "abc",
            "-address",
            "/tmp/x/containerd.sock",
        ]
        .iter()
        .map(|a| (*a).to_owned())
        .collect();
        // `printf /tmp/x/containerd.sock/k8s.io/abc | sha256sum`
        assert_eq!(
            shim_socket(&args).unwrap().to_string_lossy(),
            "/run/containerd/s/1007340b7a8858d4d0bcaa4fe6fc4551d9761394cd40e818d501857f206388f9"
        );
        assert_eq!(shim_socket(&args[..3]), None);
    }
}
