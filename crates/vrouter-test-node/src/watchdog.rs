//! The node's cleanup when the test process goes away without dropping
//! it (SIGKILL, `abort`, a runner's timeout). As in vrouter-test-apiserver,
//! a small `sh` holds the read end of a pipe whose write end only the test
//! process has; at end-of-file without a `release` line first, it does
//! what [`crate::TestNode`]'s drop does, from what it was told: the process
//! groups to kill, the `kubepods` cgroups whose processes to kill and
//! which to remove, containerd's shims (by socket path), the mounts under
//! the node's directory, the namespace, the sysctls to put back and the
//! host paths to remove. Pod namespaces under `/run/netns` are left.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};

use crate::Error;

/// Arguments: `$1` the node's directory, `$2` the namespace's name, `$3`
/// containerd's socket, `$4` the `ip` program.
const SCRIPT: &str = r#"
dir=$1 netns=$2 socket=$3 ip=$4
groups= cgroups= sysctls= paths=
while read -r word arg; do
    case $word in
        group) groups="$groups $arg" ;;
        cgroup) cgroups="$cgroups $arg" ;;
        sysctl) sysctls="$sysctls $arg" ;;
        path) paths="$paths $arg" ;;
        release) exit 0 ;;
    esac
done
for g in $groups; do kill -9 -"$g" 2>/dev/null; done
for c in $cgroups; do [ -d "$c" ] && find "$c" -name cgroup.procs -exec cat {} + 2>/dev/null | xargs -r kill -9 2>/dev/null; done
for f in $(grep -las -- "$socket" /proc/[0-9]*/cmdline); do p=${f#/proc/}; kill -9 "${p%/cmdline}" 2>/dev/null; done
sleep 1
awk -v d="$dir" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r | while read -r m; do umount -l "$m"; done
"$ip" netns del "$netns" 2>/dev/null
for s in $sysctls; do echo "${s#*=}" > "${s%%=*}"; done
for p in $paths; do
    awk -v d="$p" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r | while read -r m; do umount -l "$m"; done
    rm -rf -- "$p"
done
for c in $cgroups; do [ -d "$c" ] && find "$c" -depth -type d -exec rmdir {} + 2>/dev/null; done
rm -rf -- "$dir"
"#;

/// The `sh` running [`SCRIPT`]; only this process holds the pipe's write
/// end (std opens pipes close-on-exec).
pub(crate) struct Watchdog {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Watchdog {
    pub fn spawn(dir: &Path, netns: &str, containerd_socket: &Path, ip: &Path) -> Result<Watchdog, Error> {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(SCRIPT)
            .arg("vrouter-test-node-watchdog")
            .arg(dir)
            .arg(netns)
            .arg(containerd_socket)
            .arg(ip)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own group, so Ctrl-C on the test run leaves it alive to clean up.
            .process_group(0)
            .spawn()
            .map_err(Error::io("starting the test node's watchdog (sh)"))?;
        let stdin = child.stdin.take();
        Ok(Watchdog { child, stdin })
    }

    /// Tells the watchdog one thing to undo (`group PGID`, `cgroup DIR`,
    /// `sysctl PATH=VALUE`, `path PATH`). Values hold no whitespace.
    pub fn tell(&mut self, word: &str, arg: &str) -> Result<(), Error> {
        let stdin = self.stdin.as_mut().expect("stdin is held until release");
        writeln!(stdin, "{word} {arg}")
            .and_then(|()| stdin.flush())
            .map_err(Error::io("telling the test node's watchdog"))
    }

    /// The node cleaned up itself: the watchdog exits without doing anything.
    pub fn release(mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = writeln!(stdin, "release");
        }
        let _ = self.child.wait();
    }
}
