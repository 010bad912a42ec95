//! The host programs a node runs besides the Kubernetes binaries, from
//! Debian packages that `cargo xtask test` installs. Absolute paths: the
//! node never depends on what `PATH` a test runner passes on.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::Error;

/// Where each program is, once checked.
#[derive(Debug, Clone)]
pub(crate) struct Programs {
    pub containerd: PathBuf,
    pub ctr: PathBuf,
    pub runc: PathBuf,
    /// The CNI plugins' directory (bridge, host-local, loopback, portmap).
    pub cni_dir: PathBuf,
    pub socat: PathBuf,
    pub nsenter: PathBuf,
    pub ip: PathBuf,
    pub busybox: PathBuf,
    /// Signals a container's process from the host, as a crash would.
    pub kill: PathBuf,
    pub gcc: PathBuf,
    pub tar: PathBuf,
}

/// A host program an image is built around (curl for
/// [`crate::CURL_IMAGE`], virsh for [`crate::VIRSH_IMAGE`]), with `ldd`
/// to list the libraries it loads; looked for only by the tests that
/// import that image.
pub(crate) struct ImageProgram {
    pub path: PathBuf,
    pub package: &'static str,
    pub ldd: PathBuf,
}

impl ImageProgram {
    pub fn locate(program: &'static str, package: &'static str, candidates: &[&str]) -> Result<ImageProgram, Error> {
        Ok(ImageProgram {
            path: find(program, package, candidates)?,
            package,
            ldd: find("ldd", "libc-bin", &["/usr/bin/ldd", "/bin/ldd"])?,
        })
    }
}

impl Programs {
    pub fn locate() -> Result<Programs, Error> {
        let cni_bridge = find("bridge", "containernetworking-plugins", &["/usr/lib/cni/bridge"])?;
        find("iptables", "iptables", &["/usr/sbin/iptables", "/sbin/iptables"])?;
        Ok(Programs {
            containerd: find("containerd", "containerd", &["/usr/bin/containerd"])?,
            ctr: find("ctr", "containerd", &["/usr/bin/ctr"])?,
            runc: find("runc", "runc", &["/usr/sbin/runc", "/usr/bin/runc"])?,
            cni_dir: cni_bridge.parent().unwrap_or(Path::new("/usr/lib/cni")).to_path_buf(),
            socat: find("socat", "socat", &["/usr/bin/socat"])?,
            nsenter: find("nsenter", "util-linux", &["/usr/bin/nsenter"])?,
            ip: find(
                "ip",
                "iproute2",
                &["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"],
            )?,
            // The static build: it runs in an image that has nothing else.
            busybox: find("busybox", "busybox-static", &["/bin/busybox", "/usr/bin/busybox"])?,
            kill: find("kill", "procps", &["/bin/kill", "/usr/bin/kill"])?,
            gcc: find("gcc", "gcc", &["/usr/bin/gcc"])?,
            tar: find("tar", "tar", &["/usr/bin/tar", "/bin/tar"])?,
        })
    }
}

fn find(program: &'static str, package: &'static str, candidates: &[&str]) -> Result<PathBuf, Error> {
    candidates
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .ok_or_else(|| Error::ProgramMissing {
            program,
            package,
            path: PathBuf::from(candidates[0]),
        })
}

/// Fails unless this process runs as root.
pub(crate) fn require_root() -> Result<(), Error> {
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(str::to_owned))
        })
        .unwrap_or_else(|| "unknown".to_owned());
    if uid == "0" { Ok(()) } else { Err(Error::NotRoot(uid)) }
}

/// Runs `command` to completion; fails with its output when it fails.
pub(crate) fn run(command: &mut Command) -> Result<String, Error> {
    let description = format!("{command:?}");
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(Error::io(format!("running {description}")))?;
    if !output.status.success() {
        return Err(Error::Command {
            command: description,
            status: output.status,
            output: format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}
