//! What the node changes on the host outside its own directory and
//! namespace, recorded before it starts and undone after it stops.
//!
//! The kubelet sets kernel tunables that are not per network namespace
//! (`vm.overcommit_memory`, `kernel.panic`, …); it, containerd and libcni
//! write to paths they hard-code (`/var/lib/kubelet/device-plugins`,
//! `/var/log/containers`, `/var/lib/cni`, `/run/containerd/s`, pod
//! namespaces under `/run/netns`); and the kubelet makes a `kubepods`
//! cgroup in every hierarchy. A path or cgroup is removed only when it did
//! not exist before the node started, so nothing of anyone else's goes.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The host-wide sysctls the kubelet sets at start (`setupKernelTunables`).
const SYSCTLS: &[&str] = &[
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
];

/// Paths outside the node's directory that its programs create.
const HOST_PATHS: &[&str] = &[
    "/var/lib/kubelet",
    "/var/log/containers",
    "/var/log/pods",
    "/var/lib/cni",
    "/run/containerd",
    "/usr/libexec/kubernetes",
    // iptables' lock, taken by kube-proxy and the kubelet.
    "/run/xtables.lock",
];

/// How long the removal of a `kubepods` cgroup waits for its killed
/// processes to exit.
const CGROUP_EXIT_WAIT: Duration = Duration::from_secs(5);

/// Where pod network namespaces are bind-mounted by containerd.
const NETNS_DIR: &str = "/run/netns";

/// The host as found before the node started.
pub(crate) struct HostState {
    sysctls: Vec<(PathBuf, String)>,
    absent_paths: Vec<PathBuf>,
    netns_dir_existed: bool,
    netns_before: BTreeSet<String>,
    /// `kubepods` cgroups that did not exist, one per hierarchy.
    absent_kubepods: Vec<PathBuf>,
}

impl HostState {
    pub fn record() -> HostState {
        let sysctls = SYSCTLS
            .iter()
            .map(|name| Path::new("/proc/sys").join(name))
            .filter_map(|path| fs::read_to_string(&path).ok().map(|v| (path, v.trim().to_owned())))
            .collect();
        HostState {
            sysctls,
            absent_paths: HOST_PATHS.iter().map(PathBuf::from).filter(|p| !p.exists()).collect(),
            netns_dir_existed: Path::new(NETNS_DIR).exists(),
            netns_before: netns_names(),
            absent_kubepods: cgroup_hierarchies()
                .into_iter()
                .map(|h| h.join("kubepods"))
                .filter(|p| !p.exists())
                .collect(),
        }
    }

    /// What the watchdog must undo should the test process die: `(word,
    /// argument)` lines of [`crate::watchdog::Watchdog::tell`].
    pub fn watchdog_lines(&self) -> Vec<(&'static str, String)> {
        let mut lines = Vec::new();
        for (path, value) in &self.sysctls {
            lines.push(("sysctl", format!("{}={value}", path.display())));
        }
        for path in &self.absent_paths {
            lines.push(("path", path.display().to_string()));
        }
        for cgroup in &self.absent_kubepods {
            lines.push(("cgroup", cgroup.display().to_string()));
        }
        lines
    }

    /// SIGKILLs every process left in a `kubepods` cgroup the node made:
    /// the containers, whatever became of containerd and its shims.
    pub fn kill_pod_processes(&self) {
        let mut pids = BTreeSet::new();
        for root in &self.absent_kubepods {
            for dir in cgroup_tree(root) {
                if let Ok(procs) = fs::read_to_string(dir.join("cgroup.procs")) {
                    pids.extend(procs.lines().map(str::to_owned));
                }
            }
        }
        if !pids.is_empty() {
            let _ = Command::new("kill").arg("-9").args(&pids).output();
        }
    }

    /// Puts the sysctls back, unmounts and removes the pod namespaces and
    /// paths that appeared, and removes the cgroups the kubelet made.
    pub fn restore(&self) {
        for (path, value) in &self.sysctls {
            let _ = fs::write(path, value);
        }
        for name in netns_names().difference(&self.netns_before) {
            let path = Path::new(NETNS_DIR).join(name);
            unmount(&path);
            let _ = fs::remove_file(&path);
        }
        if !self.netns_dir_existed {
            // `ip netns add` makes the directory a mount point of its own.
            unmount(Path::new(NETNS_DIR));
            let _ = fs::remove_dir(NETNS_DIR);
        }
        for path in &self.absent_paths {
            unmount_under(path);
            if path.is_dir() {
                let _ = fs::remove_dir_all(path);
            } else {
                let _ = fs::remove_file(path);
            }
        }
        for root in &self.absent_kubepods {
            // A process SIGKILLed a moment ago keeps its cgroup busy until
            // it has exited: tried again for a while.
            let deadline = Instant::now() + CGROUP_EXIT_WAIT;
            loop {
                // Deepest first: a cgroup directory goes only when empty, and
                // never with remove_dir_all (its control files cannot be unlinked).
                for dir in cgroup_tree(root).into_iter().rev() {
                    let _ = fs::remove_dir(dir);
                }
                if !root.exists() || Instant::now() >= deadline {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

fn netns_names() -> BTreeSet<String> {
    fs::read_dir(NETNS_DIR)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The cgroup v1 hierarchies (and the v2 `unified` one of a hybrid host).
fn cgroup_hierarchies() -> Vec<PathBuf> {
    fs::read_dir("/sys/fs/cgroup")
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.is_dir() && !p.is_symlink())
                .collect()
        })
        .unwrap_or_default()
}

/// `root` and every cgroup below it, parents before children.
fn cgroup_tree(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if !root.is_dir() {
        return out;
    }
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        if let Ok(entries) = fs::read_dir(&dir) {
            pending.extend(entries.filter_map(Result::ok).map(|e| e.path()).filter(|p| p.is_dir()));
        }
        out.push(dir);
    }
    out.sort_by_key(|p| p.components().count());
    out
}

/// Lazily unmounts `path` if something is mounted there.
fn unmount(path: &Path) {
    let _ = Command::new("umount").arg("-l").arg(path).output();
}

/// Lazily unmounts everything mounted at or below `dir`, deepest first, so
/// that removing `dir` afterwards deletes no file of a mounted filesystem.
pub(crate) fn unmount_under(dir: &Path) {
    let Ok(mountinfo) = fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    let mut points: Vec<PathBuf> = mountinfo
        .lines()
        .filter_map(|line| line.split_whitespace().nth(4))
        .map(|p| PathBuf::from(p.replace("\\040", " ")))
        .filter(|p| p.starts_with(dir))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for point in points {
        unmount(&point);
    }
}
