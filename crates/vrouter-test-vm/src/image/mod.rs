//! The guest image: a Debian kernel and an initramfs holding busybox, bash
//! and the QEMU guest agent. It has two layers:
//!
//! - the **base** ([`GuestImage`]): the uncompressed kernel (`vmlinux`,
//!   booted directly through PVH, which skips the decompressor that costs
//!   seconds under TCG) and an initramfs with busybox (as `init` and every
//!   small tool), bash, qemu-ga, their libraries and the virtio modules. It is
//!   built once per machine by [`ensure`] (`cargo xtask guest-image`) into
//!   `~/.cache/vrouter-operator/guest/<key>/`, where the key hashes every
//!   input found on this machine, so a changed input builds a new one;
//! - an **overlay** per guest: a second cpio [`Archive`] the caller fills
//!   with its own files (a router's `/config/config.boot`, `/bin/vbash`,
//!   os-release, a daemon...). The kernel unpacks archives placed back to
//!   back, later files replacing earlier ones; executables the overlay puts
//!   in `/etc/vrouter-guest/boot.d/` run once at boot, before the agent
//!   starts. [`GuestImage::initramfs_with`] writes the two together.
//!
//! At boot, busybox init mounts the usual filesystems, loads the virtio
//! modules, runs the boot hooks, then keeps `qemu-ga` running on
//! `/dev/virtio-ports/org.qemu.guest_agent.0` (restarted whenever it exits
//! or is killed; its pid is in `/run/qemu-ga.pid`; options in
//! `/etc/vrouter-guest/qemu-ga.options` are added at each start) and a root
//! shell on the serial console `ttyS0`. `guest-shutdown` powers off or
//! reboots.

pub mod cpio;

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub use cpio::Archive;
use sha2::{Digest, Sha256};

/// Debian packages whose programs go into the image; `cargo xtask test`
/// installs them. `xz-utils` unpacks the kernel.
pub const BUILD_PACKAGES: [&str; 4] = ["busybox-static", "bash", "qemu-guest-agent", "xz-utils"];

/// How to get the image, for every "not found" message.
pub const HOW_TO_BUILD: &str = "run `cargo xtask guest-image` (`cargo xtask test` does it), which \
     needs root, Debian's apt and the packages busybox-static, bash, qemu-guest-agent and xz-utils";

/// Overrides where images are cached.
pub const CACHE_ENV: &str = "VROUTER_GUEST_CACHE";

/// The kernel command line the image is meant to boot with: serial console,
/// reboot at once on panic, quiet (each console line costs time under TCG),
/// and the ACPI PM timer as the clock: under TCG on a busy host the kernel
/// calibrates the TSC wrongly and the guest's clock (its `/proc/uptime`,
/// which reboot detection reads) then runs several times too fast.
pub const KERNEL_CMDLINE: &str = "console=ttyS0 panic=-1 loglevel=3 quiet clocksource=acpi_pm tsc=unstable";

/// The metapackage that names the current Debian kernel.
const KERNEL_METAPACKAGE: &str = "linux-image-amd64";

/// The modules that give the guest its virtio-serial ports, in load order.
const MODULES: [&str; 6] = [
    "drivers/virtio/virtio_ring",
    "drivers/virtio/virtio",
    "drivers/virtio/virtio_pci_modern_dev",
    "drivers/virtio/virtio_pci_legacy_dev",
    "drivers/virtio/virtio_pci",
    "drivers/char/virtio_console",
];

/// Bumped when the way the image is put together changes.
const RECIPE_REVISION: u32 = 1;

const INITTAB: &str = include_str!("guest/inittab");
const RCS: &str = include_str!("guest/rcS");
const RUN_QEMU_GA: &str = include_str!("guest/run-qemu-ga");
const SHUTDOWN: &str = include_str!("guest/shutdown");

/// Programs copied from this machine, with where they go in the guest.
const PROGRAMS: [(&str, &str, &str); 3] = [
    ("busybox-static", "/bin/busybox", "/usr/bin/busybox"),
    ("bash", "/bin/bash", "/usr/bin/bash"),
    ("qemu-guest-agent", "/usr/sbin/qemu-ga", "/usr/sbin/qemu-ga"),
];

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("neither {CACHE_ENV} nor HOME is set, so there is no cache directory")]
    NoCacheDir,
    #[error("package {package} is not installed: {HOW_TO_BUILD}")]
    PackageMissing { package: String },
    #[error("no guest image for this machine's inputs at {dir}: {HOW_TO_BUILD}")]
    NotBuilt { dir: PathBuf },
    #[error("{context}: {source}")]
    Io { context: String, source: std::io::Error },
    #[error("{0}")]
    Build(String),
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let context = context.into();
    move |source| Error::Io { context, source }
}

/// A built base image.
#[derive(Debug, Clone)]
pub struct GuestImage {
    /// The directory holding it (one per input key).
    pub dir: PathBuf,
    /// The uncompressed kernel, for `-kernel` (PVH boot).
    pub kernel: PathBuf,
    /// The base initramfs (uncompressed newc cpio).
    pub initramfs: PathBuf,
}

impl GuestImage {
    /// The image built for this machine's current inputs, or
    /// [`Error::NotBuilt`] saying how to build it.
    pub fn locate() -> Result<GuestImage, Error> {
        let image = GuestImage::at(cache_root()?.join(input_key()?));
        if image.kernel.is_file() && image.initramfs.is_file() && image.dir.join(STAMP).is_file() {
            Ok(image)
        } else {
            Err(Error::NotBuilt { dir: image.dir })
        }
    }

    fn at(dir: PathBuf) -> GuestImage {
        GuestImage {
            kernel: dir.join("vmlinux"),
            initramfs: dir.join("base.cpio"),
            dir,
        }
    }

    /// Writes the base initramfs followed by `overlay` to `dest`: the
    /// initramfs of one guest.
    pub fn initramfs_with(&self, overlay: Archive, dest: &Path) -> Result<(), Error> {
        let mut out = fs::File::create(dest).map_err(io(format!("creating {}", dest.display())))?;
        let base = fs::read(&self.initramfs).map_err(io(format!("reading {}", self.initramfs.display())))?;
        out.write_all(&base)
            .and_then(|()| out.write_all(&overlay.finish()))
            .map_err(io(format!("writing {}", dest.display())))
    }
}

/// `$VROUTER_GUEST_CACHE`, else `$HOME/.cache/vrouter-operator/guest`.
pub fn cache_root() -> Result<PathBuf, Error> {
    if let Some(dir) = std::env::var_os(CACHE_ENV).filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .ok_or(Error::NoCacheDir)?;
    Ok(PathBuf::from(home).join(".cache/vrouter-operator/guest"))
}

const STAMP: &str = "stamp";

/// Everything on this machine the base image is made of, except the kernel
/// (which [`ensure`] checks against apt): the recipe, the guest's boot
/// files and the versions of the packages its programs come from.
fn inputs() -> Result<String, Error> {
    let mut text = format!("recipe {RECIPE_REVISION}\n");
    for (package, _, _) in PROGRAMS {
        text.push_str(&format!("{package} {}\n", installed_version(package)?));
    }
    for file in [INITTAB, RCS, RUN_QEMU_GA, SHUTDOWN] {
        text.push_str(&format!("{}\n", hex::encode(Sha256::digest(file))));
    }
    Ok(text)
}

fn input_key() -> Result<String, Error> {
    Ok(hex::encode(&Sha256::digest(inputs()?)[..8]))
}

fn installed_version(package: &str) -> Result<String, Error> {
    let out = Command::new("dpkg-query")
        .args(["-W", "-f=${Status} ${Version}", package])
        .output()
        .map_err(io("running dpkg-query"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    match text.strip_prefix("install ok installed ") {
        Some(version) if out.status.success() => Ok(version.trim().to_owned()),
        _ => Err(Error::PackageMissing {
            package: package.to_owned(),
        }),
    }
}

/// Builds the base image unless one for the current inputs (and the kernel
/// Debian currently ships) exists; returns it. `say` receives progress lines.
/// Downloads one Debian package (the kernel, ~70 MB) with `apt-get download`
/// and unpacks it with `dpkg-deb -x`, installing nothing.
pub fn ensure(say: &mut dyn FnMut(&str)) -> Result<GuestImage, Error> {
    let root = cache_root()?;
    fs::create_dir_all(&root).map_err(io(format!("creating {}", root.display())))?;
    let lock = fs::File::create(root.join(".build.lock")).map_err(io("creating the build lock"))?;
    lock.lock().map_err(io("locking the guest image cache"))?;

    let inputs = inputs()?;
    let image = GuestImage::at(root.join(input_key()?));
    let kernel_package = current_kernel_package(say)?;
    let stamp = format!("{inputs}kernel {kernel_package}\n");
    if fs::read_to_string(image.dir.join(STAMP)).is_ok_and(|s| s == stamp)
        && image.kernel.is_file()
        && image.initramfs.is_file()
    {
        say(&format!("guest image: {} is current", image.dir.display()));
        return Ok(image);
    }
    let scratch = root.join(format!(".build-{}", std::process::id()));
    let _ = fs::remove_dir_all(&scratch);
    fs::create_dir_all(&scratch).map_err(io("creating the scratch directory"))?;
    let built = build(&scratch, &kernel_package, &stamp, say);
    let outcome = built.and_then(|()| {
        let _ = fs::remove_dir_all(&image.dir);
        fs::rename(scratch.join("out"), &image.dir).map_err(io("moving the built image into place"))
    });
    let _ = fs::remove_dir_all(&scratch);
    outcome?;
    Ok(image)
}

/// The kernel package `linux-image-amd64` depends on, e.g.
/// `linux-image-6.1.0-57-amd64`; refreshes apt's lists once if it is unknown.
fn current_kernel_package(say: &mut dyn FnMut(&str)) -> Result<String, Error> {
    let lookup = || -> Result<Option<String>, Error> {
        let out = Command::new("apt-cache")
            .args(["depends", KERNEL_METAPACKAGE])
            .output()
            .map_err(io("running apt-cache"))?;
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.trim().strip_prefix("Depends: "))
            .find(|p| p.starts_with("linux-image-"))
            .map(str::to_owned))
    };
    if let Some(package) = lookup()? {
        return Ok(package);
    }
    say("guest image: apt knows no kernel package yet, running apt-get update");
    run(Command::new("apt-get").args(["update", "-q"]), "apt-get update")?;
    lookup()?.ok_or_else(|| {
        Error::Build(format!(
            "apt-cache depends {KERNEL_METAPACKAGE} names no kernel package"
        ))
    })
}

fn build(scratch: &Path, kernel_package: &str, stamp: &str, say: &mut dyn FnMut(&str)) -> Result<(), Error> {
    let out = scratch.join("out");
    fs::create_dir_all(&out).map_err(io("creating the output directory"))?;
    let kernel = kernel_files(scratch, kernel_package, say)?;
    fs::copy(kernel.join("vmlinux"), out.join("vmlinux")).map_err(io("copying vmlinux"))?;

    let started = std::time::Instant::now();
    let base = base_archive(&kernel)?;
    fs::write(out.join("base.cpio"), &base).map_err(io("writing base.cpio"))?;
    fs::write(out.join(STAMP), stamp).map_err(io("writing the stamp"))?;
    say(&format!(
        "guest image: initramfs ({} KiB) built in {:.1}s",
        base.len() / 1024,
        started.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// The uncompressed kernel and the virtio modules of `kernel_package`, in
/// `kernels/<package>/` of the cache: fetched and unpacked once per kernel,
/// whatever else changes.
fn kernel_files(scratch: &Path, kernel_package: &str, say: &mut dyn FnMut(&str)) -> Result<PathBuf, Error> {
    let kernels = scratch
        .parent()
        .expect("the scratch directory is in the cache")
        .join("kernels");
    let dir = kernels.join(kernel_package);
    if dir.join("vmlinux").is_file() {
        return Ok(dir);
    }
    let started = std::time::Instant::now();
    let deb = download(scratch, kernel_package, say)?;
    let unpacked = scratch.join("kernel");
    run(
        Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&unpacked),
        "dpkg-deb -x",
    )?;
    let release = kernel_package.trim_start_matches("linux-image-");
    let vmlinuz = unpacked.join(format!("boot/vmlinuz-{release}"));
    let compressed = fs::read(&vmlinuz).map_err(io(format!("reading {}", vmlinuz.display())))?;
    let staged = scratch.join("kernel-files");
    fs::create_dir_all(&staged).map_err(io("creating the kernel directory"))?;
    fs::write(staged.join("vmlinux"), extract_vmlinux(&compressed)?).map_err(io("writing vmlinux"))?;
    let modules = unpacked.join(format!("lib/modules/{release}/kernel"));
    for module in MODULES {
        let name = module.rsplit('/').next().expect("a module path has a name");
        fs::copy(modules.join(format!("{module}.ko")), staged.join(format!("{name}.ko")))
            .map_err(io(format!("copying module {name}")))?;
    }
    fs::create_dir_all(&kernels).map_err(io("creating the kernels directory"))?;
    let _ = fs::remove_dir_all(&dir);
    fs::rename(&staged, &dir).map_err(io("moving the kernel into place"))?;
    let _ = fs::remove_dir_all(&unpacked);
    say(&format!(
        "guest image: kernel {kernel_package} fetched and unpacked in {:.1}s",
        started.elapsed().as_secs_f64()
    ));
    Ok(dir)
}

/// `apt-get download` into `dir`, refreshing apt's lists once when the
/// mirror no longer has the version they name.
fn download(dir: &Path, package: &str, say: &mut dyn FnMut(&str)) -> Result<PathBuf, Error> {
    let fetch = || {
        Command::new("apt-get")
            .args(["download", "-q", "-o", "APT::Sandbox::User=root", package])
            .current_dir(dir)
            .stdout(Stdio::null())
            .status()
    };
    if !fetch().map_err(io("running apt-get download"))?.success() {
        say("guest image: download failed, refreshing apt's lists and trying again");
        run(Command::new("apt-get").args(["update", "-q"]), "apt-get update")?;
        if !fetch().map_err(io("running apt-get download"))?.success() {
            return Err(Error::Build(format!("apt-get download {package} failed")));
        }
    }
    fs::read_dir(dir)
        .map_err(io("listing the download directory"))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .ok_or_else(|| Error::Build(format!("apt-get download {package} left no .deb")))
}

/// The ELF kernel inside a Debian bzImage, whose payload is XZ-compressed.
/// `xz` complains about the bytes after the stream (the bzImage trailer);
/// what counts is that an ELF image came out.
fn extract_vmlinux(bzimage: &[u8]) -> Result<Vec<u8>, Error> {
    const XZ_MAGIC: &[u8] = b"\xfd7zXZ\x00";
    let start = bzimage
        .windows(XZ_MAGIC.len())
        .position(|w| w == XZ_MAGIC)
        .ok_or_else(|| Error::Build("the kernel image holds no XZ stream".into()))?;
    let mut xz = Command::new("xz")
        .args(["-dc", "--single-stream"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(io("starting xz (package xz-utils)"))?;
    let mut stdin = xz.stdin.take().expect("stdin was piped");
    let payload = bzimage[start..].to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&payload);
    });
    let out = xz.wait_with_output().map_err(io("running xz"))?;
    let _ = writer.join();
    if out.stdout.starts_with(b"\x7fELF") {
        Ok(out.stdout)
    } else {
        Err(Error::Build(
            "xz did not produce an ELF kernel from the bzImage payload".into(),
        ))
    }
}

/// The base initramfs: a merged-/usr layout with busybox, bash, qemu-ga and
/// their libraries, the virtio modules (from `kernel`) and the boot files.
fn base_archive(kernel: &Path) -> Result<Vec<u8>, Error> {
    let mut archive = Archive::new();
    for dir in [
        "usr/bin",
        "usr/sbin",
        "usr/lib",
        "usr/lib64",
        "usr/libexec/vrouter-guest",
    ] {
        archive.dir(dir);
    }
    for (link, target) in [
        ("bin", "usr/bin"),
        ("sbin", "usr/sbin"),
        ("lib", "usr/lib"),
        ("lib64", "usr/lib64"),
    ] {
        archive.symlink(link, target);
    }
    for dir in [
        "proc",
        "sys",
        "dev",
        "run",
        "tmp",
        "var/log",
        "root",
        "etc/vrouter-guest/boot.d",
    ] {
        archive.dir(dir);
    }
    archive.symlink("init", "usr/bin/busybox");
    archive.symlink("usr/bin/sh", "busybox");

    let mut libraries = std::collections::BTreeSet::new();
    for (package, host, guest) in PROGRAMS {
        let content = fs::read(host).map_err(|_| Error::PackageMissing {
            package: package.to_owned(),
        })?;
        archive.file(guest, 0o755, &content);
        libraries.extend(shared_libraries(host)?);
    }
    for library in libraries {
        let content = fs::read(&library).map_err(io(format!("reading {library}")))?;
        archive.file(&merged_usr(&library), 0o755, &content);
    }
    for module in MODULES {
        let name = module.rsplit('/').next().expect("a module path has a name");
        let path = kernel.join(format!("{name}.ko"));
        let content = fs::read(&path).map_err(io(format!("reading {}", path.display())))?;
        archive.file(&format!("usr/lib/modules/vrouter-guest/{name}.ko"), 0o644, &content);
    }
    archive.file("etc/inittab", 0o644, INITTAB.as_bytes());
    archive.file("etc/init.d/rcS", 0o755, RCS.as_bytes());
    archive.file("usr/libexec/vrouter-guest/run-qemu-ga", 0o755, RUN_QEMU_GA.as_bytes());
    archive.file("usr/sbin/shutdown", 0o755, SHUTDOWN.as_bytes());
    archive.file("etc/passwd", 0o644, b"root:x:0:0:root:/root:/bin/sh\n");
    archive.file("etc/group", 0o644, b"root:x:0:\nvyattacfg:x:105:root\n");
    archive.file("etc/hostname", 0o644, b"vrouter-guest\n");
    Ok(archive.finish())
}

/// `/lib/x86_64-linux-gnu/libc.so.6` → `usr/lib/x86_64-linux-gnu/libc.so.6`.
fn merged_usr(path: &str) -> String {
    let path = path.trim_start_matches('/');
    if path.starts_with("usr/") {
        path.to_owned()
    } else {
        format!("usr/{path}")
    }
}

/// The libraries `ldd` lists for `binary` (none for a static one).
fn shared_libraries(binary: &str) -> Result<Vec<String>, Error> {
    let out = Command::new("ldd").arg(binary).output().map_err(io("running ldd"))?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter(|word| word.starts_with('/') && word.contains(".so"))
        .map(str::to_owned)
        .collect())
}

fn run(command: &mut Command, what: &str) -> Result<(), Error> {
    let status = command.status().map_err(io(format!("starting {what}")))?;
    if status.success() {
        Ok(())
    } else {
        Err(Error::Build(format!("{what} failed ({status})")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_paths_land_under_usr() {
        assert_eq!(
            merged_usr("/lib/x86_64-linux-gnu/libc.so.6"),
            "usr/lib/x86_64-linux-gnu/libc.so.6"
        );
        assert_eq!(
            merged_usr("/lib64/ld-linux-x86-64.so.2"),
            "usr/lib64/ld-linux-x86-64.so.2"
        );
        assert_eq!(merged_usr("/usr/lib/x.so"), "usr/lib/x.so");
    }

    #[test]
    fn a_kernel_without_an_xz_payload_is_refused() {
        let message = extract_vmlinux(b"MZ not a kernel").unwrap_err().to_string();
        assert!(message.contains("no XZ stream"), "{message}");
    }
}
