//! A guest started the way Proxmox VE starts a VM's agent channel: QEMU
//! (TCG: this machine kind has no usable KVM) with
//! `-chardev socket,server=on,wait=off` carried by a `virtserialport` named
//! `org.qemu.guest_agent.0`. The host end of the channel is a unix socket the
//! test (or the in-test Proxmox API) connects to, one client at a time.

use std::io::Write as _;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::VmError;
use crate::image::{Archive, GuestImage, KERNEL_CMDLINE};
use crate::process::{Scratch, Spawn, find_program, scratch_dir, spawn_tied};

/// How to get QEMU, for "not found" messages.
pub const HOW_TO_GET_QEMU: &str =
    "install Debian's qemu-system-x86 (`cargo xtask guest-image` or `cargo xtask test` does it)";

/// The QEMU command line shared by every guest: one TCG vCPU, 256 MiB, no
/// network, no display, direct kernel boot.
pub(crate) fn machine_args(image: &GuestImage, initramfs: &Path) -> Vec<String> {
    [
        "-machine",
        "pc,accel=tcg",
        "-cpu",
        "qemu64",
        "-smp",
        "1",
        "-m",
        "256",
        "-nodefaults",
        "-no-user-config",
        "-display",
        "none",
        "-nic",
        "none",
    ]
    .map(str::to_owned)
    .into_iter()
    .chain([
        "-kernel".into(),
        image.kernel.display().to_string(),
        "-initrd".into(),
        initramfs.display().to_string(),
        "-append".into(),
        KERNEL_CMDLINE.into(),
    ])
    .collect()
}

/// One QEMU guest with a Proxmox-style agent chardev and a serial console
/// socket. Killed when dropped, and with the test process in any case.
#[derive(Debug)]
pub struct QemuGuest {
    name: String,
    dir: Scratch,
    image: GuestImage,
    child: Mutex<Option<Child>>,
    started: Mutex<(SystemTime, Instant)>,
    channel: Arc<tokio::sync::Mutex<()>>,
}

impl QemuGuest {
    /// Boots the base image with `overlay` laid over it. Returns once QEMU
    /// runs; the agent answers some seconds later ([`Self::wait_for_agent`]).
    pub fn boot(name: &str, overlay: Archive) -> Result<Self, VmError> {
        crate::quick_loop::refuse_heavy("a real guest (QEMU)")?;
        let image = GuestImage::locate()?;
        let dir = Scratch(scratch_dir(name).map_err(VmError::io("creating the guest's directory"))?);
        image.initramfs_with(overlay, &dir.path().join("initramfs.cpio"))?;
        let guest = QemuGuest {
            name: name.to_owned(),
            dir,
            image,
            child: Mutex::new(None),
            started: Mutex::new((SystemTime::now(), Instant::now())),
            channel: Arc::new(tokio::sync::Mutex::new(())),
        };
        guest.start()?;
        Ok(guest)
    }

    fn start(&self) -> Result<(), VmError> {
        let qemu = find_program("qemu-system-x86_64").ok_or(VmError::Missing {
            program: "qemu-system-x86_64",
            how: HOW_TO_GET_QEMU,
        })?;
        let dir = self.dir.path();
        for socket in ["qga.sock", "console.sock"] {
            let _ = std::fs::remove_file(dir.join(socket));
        }
        let spawn = Spawn::new(qemu, dir.join("qemu.log"))
            .arg("-name")
            .arg(format!("vrouter-{}", self.name))
            .args(machine_args(&self.image, &dir.join("initramfs.cpio")))
            .arg("-chardev")
            .arg(format!(
                "socket,id=qga0,path={},server=on,wait=off",
                dir.join("qga.sock").display()
            ))
            .args(["-device", "virtio-serial", "-device"])
            .arg("virtserialport,chardev=qga0,name=org.qemu.guest_agent.0")
            .arg("-chardev")
            .arg(format!(
                "socket,id=console0,path={},server=on,wait=off,logfile={},logappend=on",
                dir.join("console.sock").display(),
                dir.join("console.log").display()
            ))
            .args(["-serial", "chardev:console0"]);
        let child = spawn_tied(spawn).map_err(VmError::io("starting qemu-system-x86_64"))?;
        *self.started.lock().unwrap() = (SystemTime::now(), Instant::now());
        *self.child.lock().unwrap() = Some(child);
        // QEMU creates its sockets before it starts the guest.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !(dir.join("qga.sock").exists() && dir.join("console.sock").exists()) {
            if let Some(status) = self
                .child
                .lock()
                .unwrap()
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                return Err(VmError::Exited {
                    what: format!("QEMU for guest {}", self.name),
                    status: status.to_string(),
                    log: self.qemu_log(),
                });
            }
            if Instant::now() > deadline {
                return Err(VmError::Timeout {
                    what: format!("QEMU for guest {} to create its sockets", self.name),
                    log: self.qemu_log(),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The host end of the agent channel (what Proxmox VE calls
    /// `/var/run/qemu-server/<vmid>.qga`).
    pub fn agent_socket(&self) -> PathBuf {
        self.dir.path().join("qga.sock")
    }

    /// Held by whoever talks on the agent channel, so the test's own looks
    /// into the guest and the in-test Proxmox API take turns, as the single
    /// client QEMU serves at a time.
    pub fn channel_lock(&self) -> Arc<tokio::sync::Mutex<()>> {
        self.channel.clone()
    }

    /// When the QEMU process started: what Proxmox VE reports uptime from.
    /// A reboot inside the guest keeps the process and this time.
    pub fn started_at(&self) -> SystemTime {
        self.started.lock().unwrap().0
    }

    /// How long the QEMU process has been running.
    pub fn process_uptime(&self) -> Duration {
        self.started.lock().unwrap().1.elapsed()
    }

    pub fn is_running(&self) -> bool {
        self.child
            .lock()
            .unwrap()
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Waits until the guest agent answers (boot takes 4–10 s under TCG);
    /// returns how long QEMU had been running by then.
    pub async fn wait_for_agent(&self, within: Duration) -> Result<Duration, VmError> {
        let _turn = self.channel.lock().await;
        if crate::probe::agent_answers(&self.agent_socket(), within).await {
            Ok(self.process_uptime())
        } else {
            Err(VmError::Timeout {
                what: format!("the agent of guest {} to answer", self.name),
                log: self.console_log(),
            })
        }
    }

    /// Types `line` into the root shell on the serial console: a way into
    /// the guest that does not depend on the agent (to kill or freeze it).
    pub fn console(&self, line: &str) -> Result<(), VmError> {
        type_into_console(&self.dir.path().join("console.sock"), line)
    }

    /// Everything the guest printed on its serial console.
    pub fn console_log(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(self.dir.path().join("console.log")).unwrap_or_default()).into_owned()
    }

    fn qemu_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("qemu.log")).unwrap_or_default()
    }

    /// SIGKILLs QEMU: the VM is gone, as after a host crash.
    pub fn kill(&self) {
        if let Some(mut child) = self.child.lock().unwrap().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops QEMU and starts a new one from the same files, as Proxmox VE's
    /// stop + start (or `qm reboot`) does: a new process, a new uptime.
    pub fn restart(&self) -> Result<(), VmError> {
        self.kill();
        self.start()
    }
}

/// Writes `line` to a serial console socket (a root shell reads it).
pub(crate) fn type_into_console(socket: &Path, line: &str) -> Result<(), VmError> {
    let mut stream = UnixStream::connect(socket).map_err(VmError::io("connecting to the console"))?;
    stream
        .write_all(format!("{line}\n").as_bytes())
        .map_err(VmError::io("writing to the console"))?;
    // Give QEMU the bytes before the connection goes.
    std::thread::sleep(Duration::from_millis(100));
    Ok(())
}

impl Drop for QemuGuest {
    fn drop(&mut self) {
        self.kill();
    }
}
