//! Machine preparation for `cargo xtask test`: the Debian packages whose
//! programs the suite tests against (real peers, not mocks). Idempotent:
//! nothing runs when every package is already installed.

use std::process::Command;

use anyhow::{Context, bail};

/// The packages of the real peers that the suite, the demo and the benchmarks
/// run against: `qemu-ga` (the guest agent behind the QGA providers) and
/// `redis-server` (the store the real vrouter-daemon server needs), and what
/// the test node (crates/vrouter-test-node) runs besides the Kubernetes
/// binaries: containerd and runc, the CNI plugins (bridge, host-local,
/// loopback, portmap), iptables for kube-proxy, socat to reach the API
/// server inside the node's network namespace, a static busybox for the
/// test image, curl for the image that scrapes metrics, gcc with
/// libc6-dev for the static pause binary, procps's `kill` to SIGKILL a
/// container from the host, and stunnel4 to put the real vrouter-daemon
/// behind TLS (`https://` daemon addresses).
pub const TEST_PACKAGES: &[&str] = &[
    "qemu-guest-agent",
    "redis-server",
    "containerd",
    "runc",
    "containernetworking-plugins",
    "iptables",
    "socat",
    "busybox-static",
    "curl",
    "gcc",
    "libc6-dev",
    "procps",
    "stunnel4",
];

/// What the quick loop (`cargo xtask test --quick`) runs against among
/// [`TEST_PACKAGES`]: the agent, the daemon's Redis, `kill` and stunnel (the
/// daemon's TLS tests); the rest serve the test node only.
pub const QUICK_TEST_PACKAGES: &[&str] = &["qemu-guest-agent", "redis-server", "procps", "stunnel4"];

/// What `cargo xtask demo` runs: the agent, the daemon's Redis and `kill`.
pub const DEMO_PACKAGES: &[&str] = &["qemu-guest-agent", "redis-server", "procps"];

/// Installs the missing ones among `packages` with apt-get, running
/// `apt-get update` once first. When this machine cannot install (no
/// apt-get, not root), it says so and returns: the tests that need a
/// missing program then fail with instructions of their own.
pub fn ensure_debian_packages(packages: &[&str]) -> anyhow::Result<()> {
    let missing: Vec<&str> = packages.iter().copied().filter(|p| !installed(p)).collect();
    if missing.is_empty() {
        println!("==> packages: {} present", packages.join(", "));
        return Ok(());
    }
    if let Some(reason) = cannot_install() {
        println!(
            "==> packages: {} missing and not installable here ({reason}); install them with \
             `apt-get install -y {}`",
            missing.join(", "),
            missing.join(" ")
        );
        return Ok(());
    }
    println!("==> packages: installing {}", missing.join(", "));
    apt_get(&["update", "-q"])?;
    let mut install = vec!["install", "-y", "-q", "--no-install-recommends"];
    install.extend(&missing);
    apt_get(&install)?;
    let still_missing: Vec<&str> = missing.into_iter().filter(|p| !installed(p)).collect();
    if !still_missing.is_empty() {
        bail!(
            "apt-get reported success but {} are still not installed",
            still_missing.join(", ")
        );
    }
    Ok(())
}

/// Whether dpkg records `package` as installed.
fn installed(package: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", package])
        .output()
        .is_ok_and(|out| out.status.success() && String::from_utf8_lossy(&out.stdout).contains("install ok installed"))
}

/// Why packages cannot be installed here, if they cannot.
fn cannot_install() -> Option<&'static str> {
    if Command::new("apt-get").arg("--version").output().is_err() {
        return Some("no apt-get");
    }
    let uid = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Some("not root");
    }
    None
}

fn apt_get(args: &[&str]) -> anyhow::Result<()> {
    let status = Command::new("apt-get")
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .with_context(|| format!("starting apt-get {}", args.join(" ")))?;
    if !status.success() {
        bail!("apt-get {} failed ({status})", args.join(" "));
    }
    Ok(())
}
