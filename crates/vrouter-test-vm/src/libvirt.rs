//! A real libvirtd, as in a KubeVirt virt-launcher pod's `compute`
//! container: it owns each domain's agent channel
//! (`<channel type='unix'><target type='virtio' name='org.qemu.guest_agent.0'/>`),
//! and only `virsh qemu-agent-command` reaches the agent.
//!
//! The daemon runs in its own mount namespace (private `/run/libvirt`,
//! `/var/lib/libvirt`, `/etc/libvirt`..., bound from a temporary directory),
//! so `virsh` inside it uses the URIs KubeVirt uses (`qemu:///system` as
//! root) and test runs on one machine never meet; and in its own PID
//! namespace, whose end takes every domain's QEMU with it. `virsh` is run
//! in the same mount namespace with `nsenter`, as a pod exec runs in the
//! container. libvirt's QEMU driver is set up as the recipe found it needs
//! on this machine kind: root user and group, no security driver, a
//! `libvirt-qemu` user in the (private) passwd.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::VmError;
use crate::image::{Archive, GuestImage, KERNEL_CMDLINE};
use crate::process::{Scratch, Spawn, find_program, scratch_dir, spawn_tied};

pub const HOW_TO_GET_LIBVIRT: &str = "install Debian's libvirt-daemon, libvirt-daemon-driver-qemu and \
     libvirt-clients (`cargo xtask guest-image` or `cargo xtask test` does it)";

/// The private directory behind `/run/libvirt`, where the sockets are.
const RUN_DIR: &str = "run";

/// The directories libvirt keeps its state in, each replaced by a private one.
const PRIVATE_DIRS: [(&str, &str); 5] = [
    (RUN_DIR, "/run/libvirt"),
    ("lib", "/var/lib/libvirt"),
    ("log", "/var/log/libvirt"),
    ("cache", "/var/cache/libvirt"),
    ("etc", "/etc/libvirt"),
];

const QEMU_CONF: &str = "user = \"root\"\ngroup = \"root\"\nsecurity_driver = \"none\"\n\
     stdio_handler = \"file\"\nnamespaces = []\ncgroup_controllers = []\nremember_owner = 0\n";
const LIBVIRTD_CONF: &str = "auth_unix_ro = \"none\"\nauth_unix_rw = \"none\"\nunix_sock_rw_perms = \"0700\"\n";

/// A libvirtd of our own. Stopped (with its domains) when dropped, and with
/// the test process in any case.
#[derive(Debug)]
pub struct Libvirt {
    dir: Scratch,
    child: Mutex<Option<Child>>,
    /// The pid of the namespace's init (the shell that runs the daemon) as
    /// this machine sees it: `nsenter --target` enters its mount namespace.
    daemon_pid: u32,
    nsenter: PathBuf,
    virsh: PathBuf,
}

impl Libvirt {
    pub fn start() -> Result<Self, VmError> {
        crate::quick_loop::refuse_heavy("libvirtd (KubeVirt's real guests)")?;
        let missing = |program| VmError::Missing {
            program,
            how: HOW_TO_GET_LIBVIRT,
        };
        let libvirtd = find_program("libvirtd").ok_or(missing("libvirtd"))?;
        let virsh = find_program("virsh").ok_or(missing("virsh"))?;
        let nsenter = find_program("nsenter").ok_or(missing("nsenter"))?;
        let unshare = find_program("unshare").ok_or(missing("unshare"))?;
        let dir = Scratch(scratch_dir("libvirt").map_err(VmError::io("creating libvirt's directory"))?);
        let root = dir.path();
        for (name, _) in PRIVATE_DIRS {
            std::fs::create_dir_all(root.join(name)).map_err(VmError::io("creating libvirt's directories"))?;
        }
        std::fs::write(root.join("etc/qemu.conf"), QEMU_CONF).map_err(VmError::io("writing qemu.conf"))?;
        std::fs::write(root.join("etc/libvirtd.conf"), LIBVIRTD_CONF).map_err(VmError::io("writing libvirtd.conf"))?;
        write_accounts(root)?;

        let mut script = String::from("set -e\n");
        for (name, target) in PRIVATE_DIRS {
            script.push_str(&format!(
                "mkdir -p {target}\nmount --bind '{}' {target}\n",
                root.join(name).display()
            ));
        }
        for file in ["passwd", "group"] {
            script.push_str(&format!("mount --bind '{}' /etc/{file}\n", root.join(file).display()));
        }
        // The default pid file, /run/libvirtd.pid, is outside the private
        // directories and locked: a second test process's libvirtd would
        // exit at once (status 1, nothing on stderr). The shell stays as
        // the namespace's init and reaps: libvirt daemonizes each QEMU, so
        // a destroyed domain's QEMU is the init's orphan, and libvirtd as
        // init leaves it a zombie that `virsh destroy` waits on for a
        // minute. dash's `wait` reaps any child while it waits for one.
        script.push_str(&format!(
            "'{}' --pid-file '{}' &\nwait $!\n",
            libvirtd.display(),
            root.join("libvirtd.pid").display()
        ));
        let spawn = Spawn::new(unshare, root.join("libvirtd.log"))
            .args([
                "--mount",
                "--pid",
                "--fork",
                "--kill-child",
                "--mount-proc",
                "--propagation",
                "private",
            ])
            .args(["/bin/sh", "-c"])
            .arg(script)
            .env(
                "LIBVIRT_LOG_OUTPUTS",
                format!("3:file:{}", root.join("libvirtd-debug.log").display()),
            );
        let mut child = spawn_tied(spawn).map_err(VmError::io("starting libvirtd"))?;
        let daemon_pid = match namespace_init(child.id()) {
            Some(pid) => pid,
            None => {
                let _ = child.kill();
                return Err(VmError::Timeout {
                    what: "libvirtd's namespace to start".into(),
                    log: std::fs::read_to_string(root.join("libvirtd.log")).unwrap_or_default(),
                });
            }
        };
        let libvirt = Libvirt {
            dir,
            child: Mutex::new(Some(child)),
            daemon_pid,
            nsenter,
            virsh,
        };
        libvirt.wait_until_serving()?;
        Ok(libvirt)
    }

    fn wait_until_serving(&self) -> Result<(), VmError> {
        let deadline = Instant::now() + Duration::from_secs(60);
        // The socket in the private directory first: `virsh` could reach a
        // libvirtd of the machine's own before the script's mounts are made.
        let socket = self.socket_dir().join("libvirt-sock");
        loop {
            if socket.exists() && self.virsh(&["uri"]).is_ok() {
                return Ok(());
            }
            if let Some(status) = self
                .child
                .lock()
                .unwrap()
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                return Err(VmError::Exited {
                    what: "libvirtd".into(),
                    status: status.to_string(),
                    log: self.log(),
                });
            }
            if Instant::now() > deadline {
                return Err(VmError::Timeout {
                    what: "libvirtd to accept virsh".into(),
                    log: self.log(),
                });
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// What libvirtd printed, then the warnings and errors it logged (its
    /// reasons for exiting go there, not to stderr).
    pub fn log(&self) -> String {
        let read = |name: &str| std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default();
        format!(
            "{}\n--- libvirtd's log:\n{}",
            read("libvirtd.log"),
            read("libvirtd-debug.log")
        )
    }

    /// The host directory behind the daemon's `/run/libvirt`, where its
    /// sockets are: a container that mounts it at `/var/run/libvirt` (as a
    /// virt-launcher's `compute` container has libvirt's) reaches this
    /// daemon with `virsh`'s default URI.
    pub fn socket_dir(&self) -> PathBuf {
        self.dir.path().join(RUN_DIR)
    }

    /// The argv that runs `argv` (e.g. `virsh qemu-agent-command ...`) in
    /// the daemon's mount namespace, as an exec into the compute container.
    pub fn in_container(&self, argv: &[String]) -> Vec<String> {
        let mut full = vec![
            self.nsenter.display().to_string(),
            "--target".into(),
            self.daemon_pid.to_string(),
            "--mount".into(),
            "--".into(),
        ];
        full.extend(argv.iter().cloned());
        full
    }

    /// Runs `virsh <args>` (default URI) in the container; its stdout.
    pub fn virsh(&self, args: &[&str]) -> Result<String, VmError> {
        let mut argv = vec![self.virsh.display().to_string()];
        argv.extend(args.iter().map(|a| a.to_string()));
        let output = self.run(&argv)?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        } else {
            Err(VmError::Command {
                command: format!("virsh {}", args.join(" ")),
                detail: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
            })
        }
    }

    fn run(&self, argv: &[String]) -> Result<Output, VmError> {
        let full = self.in_container(argv);
        Command::new(&full[0])
            .args(&full[1..])
            .output()
            .map_err(VmError::io("running nsenter"))
    }

    /// Defines and starts domain `name` from the base image with `overlay`.
    pub fn start_domain(self: &Arc<Self>, name: &str, overlay: Archive) -> Result<Domain, VmError> {
        let image = GuestImage::locate()?;
        let dir = self.dir.path().join("domains").join(name);
        std::fs::create_dir_all(&dir).map_err(VmError::io("creating the domain's directory"))?;
        let initramfs = dir.join("initramfs.cpio");
        image.initramfs_with(overlay, &initramfs)?;
        let xml = dir.join("domain.xml");
        std::fs::write(&xml, domain_xml(name, &image, &initramfs, &dir))
            .map_err(VmError::io("writing the domain XML"))?;
        let xml = xml.display().to_string();
        self.virsh(&["define", &xml])?;
        self.virsh(&["start", name])?;
        Ok(Domain {
            libvirt: self.clone(),
            name: name.to_owned(),
            dir,
            started: Instant::now(),
        })
    }

    /// Stops libvirtd; its PID namespace ends and takes every domain's QEMU.
    pub fn stop(&self) {
        if let Some(mut child) = self.child.lock().unwrap().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Libvirt {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The pid of the first process in the namespaces `unshare --fork` (pid
/// `unshare`) made: its only child.
fn namespace_init(unshare: u32) -> Option<u32> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let children = std::fs::read_to_string(format!("/proc/{unshare}/task/{unshare}/children")).unwrap_or_default();
        if let Some(pid) = children.split_whitespace().next().and_then(|p| p.parse().ok()) {
            return Some(pid);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// This machine's passwd and group with the `libvirt-qemu` account libvirt
/// expects, for the daemon's namespace only.
fn write_accounts(root: &Path) -> Result<(), VmError> {
    let mut passwd = std::fs::read_to_string("/etc/passwd").map_err(VmError::io("reading /etc/passwd"))?;
    let mut group = std::fs::read_to_string("/etc/group").map_err(VmError::io("reading /etc/group"))?;
    if !passwd.lines().any(|l| l.starts_with("libvirt-qemu:")) {
        passwd.push_str("libvirt-qemu:x:64055:64055:Libvirt Qemu:/var/lib/libvirt:/usr/sbin/nologin\n");
    }
    if !group.lines().any(|l| l.starts_with("libvirt-qemu:")) {
        group.push_str("libvirt-qemu:x:64055:\n");
    }
    std::fs::write(root.join("passwd"), passwd).map_err(VmError::io("writing passwd"))?;
    std::fs::write(root.join("group"), group).map_err(VmError::io("writing group"))
}

/// A domain shaped like a KubeVirt VMI's: TCG, direct kernel boot, ACPI (for
/// agent shutdown), no network, the agent channel libvirt connects itself,
/// and a serial console on a unix socket whose output is logged.
fn domain_xml(name: &str, image: &GuestImage, initramfs: &Path, dir: &Path) -> String {
    format!(
        "<domain type='qemu'>\n  <name>{name}</name>\n  <memory unit='MiB'>256</memory>\n  <vcpu>1</vcpu>\n\
         <os>\n    <type arch='x86_64' machine='pc'>hvm</type>\n    <kernel>{kernel}</kernel>\n    \
         <initrd>{initrd}</initrd>\n    <cmdline>{cmdline}</cmdline>\n  </os>\n\
         <features><acpi/><apic/></features>\n  <cpu mode='custom' match='exact'><model>qemu64</model></cpu>\n\
         <on_poweroff>destroy</on_poweroff>\n  <on_reboot>restart</on_reboot>\n  <on_crash>destroy</on_crash>\n\
         <devices>\n    <emulator>/usr/bin/qemu-system-x86_64</emulator>\n\
         <serial type='unix'>\n      <source mode='bind' path='{console}'/>\n      <log file='{log}' append='on'/>\n      \
         <target port='0'/>\n    </serial>\n\
         <channel type='unix'>\n      <target type='virtio' name='org.qemu.guest_agent.0'/>\n    </channel>\n\
         <memballoon model='none'/>\n  </devices>\n</domain>\n",
        kernel = image.kernel.display(),
        initrd = initramfs.display(),
        cmdline = KERNEL_CMDLINE,
        console = dir.join("console.sock").display(),
        log = dir.join("console.log").display(),
    )
}

/// A running domain of a [`Libvirt`].
#[derive(Debug)]
pub struct Domain {
    libvirt: Arc<Libvirt>,
    name: String,
    dir: PathBuf,
    started: Instant,
}

impl Domain {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn libvirt(&self) -> &Arc<Libvirt> {
        &self.libvirt
    }

    /// The argv that runs `virsh qemu-agent-command <domain>` in the
    /// container; the command's JSON is the last argument to add.
    pub fn agent_command_argv(&self) -> Vec<String> {
        self.libvirt.in_container(&[
            self.libvirt.virsh.display().to_string(),
            "qemu-agent-command".into(),
            self.name.clone(),
        ])
    }

    /// Waits until `virsh qemu-agent-command` gets a ping answered (libvirt
    /// reports "not connected" until the agent opens its port); returns the
    /// time since `virsh start`.
    pub async fn wait_for_agent(&self, within: Duration) -> Result<Duration, VmError> {
        let deadline = Instant::now() + within;
        loop {
            let argv = self.agent_command_argv();
            let answered = tokio::process::Command::new(&argv[0])
                .args(&argv[1..])
                .arg(r#"{"execute":"guest-ping"}"#)
                .kill_on_drop(true)
                .output()
                .await
                .is_ok_and(|out| out.status.success());
            if answered {
                return Ok(self.started.elapsed());
            }
            if Instant::now() > deadline {
                return Err(VmError::Timeout {
                    what: format!("the agent of domain {}", self.name),
                    log: self.console_log(),
                });
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    pub fn console_log(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(self.dir.join("console.log")).unwrap_or_default()).into_owned()
    }

    /// Types `line` into the root shell on the domain's serial console.
    pub fn console(&self, line: &str) -> Result<(), VmError> {
        crate::qemu::type_into_console(&self.dir.join("console.sock"), line)
    }

    /// [`Self::console`] as a function that owns what it needs, panicking on
    /// failure (for test code that holds it beyond a borrow).
    pub fn console_handle(&self) -> impl Fn(&str) + Send + Sync + 'static {
        let socket = self.dir.join("console.sock");
        move |line| crate::qemu::type_into_console(&socket, line).unwrap_or_else(|e| panic!("{e}"))
    }
}

impl Drop for Domain {
    fn drop(&mut self) {
        let _ = self.libvirt.virsh(&["destroy", &self.name]);
        let _ = self.libvirt.virsh(&["undefine", &self.name]);
    }
}
