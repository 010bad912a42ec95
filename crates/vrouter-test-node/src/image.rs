//! Container images made from local files, as OCI image archives that
//! `ctr images import` takes: there is no registry to pull from. One
//! uncompressed layer each, built with the host's `tar`, so nothing here
//! needs a tar or gzip library.

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;
use sha2::{Digest, Sha256};

use crate::Error;
use crate::config::PAUSE_IMAGE;
use crate::programs::{ImageProgram, Programs, run};

/// The test image: a static busybox, `/bin/sh` by default.
pub const BUSYBOX_IMAGE: &str = "localhost/vrouter-test-node/busybox:1";

/// The scraping image: the host's `curl` with the shared libraries it
/// loads, and busybox for a shell. A client with OpenSSL's TLS, as
/// Prometheus and kubectl are clients with full TLS stacks: busybox's own
/// TLS offers no ECDSA suite, so it cannot talk to a server whose key is
/// ECDSA, as the operator's self-made certificate is.
pub const CURL_IMAGE: &str = "localhost/vrouter-test-node/curl:1";

/// The image of a KubeVirt-shaped launcher pod's `compute` container: the
/// host's `virsh` with the shared libraries it loads, and busybox for the
/// shell the operator's exec runs. A pod mounts a libvirtd's socket
/// directory at `/var/run/libvirt`, where `virsh`'s default URI
/// (`qemu:///system`, as root) looks.
pub const VIRSH_IMAGE: &str = "localhost/vrouter-test-node/virsh:1";

/// The applets the test image links to busybox.
const APPLETS: &[&str] = &[
    "sh", "sleep", "echo", "cat", "ls", "hostname", "nc", "id", "env", "kill",
];

/// The sandbox's process: waits for a signal, reaps zombies when the pod
/// shares its process namespace, exits on SIGTERM or SIGINT.
const PAUSE_C: &str = r#"#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
static void stop(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, 0, WNOHANG) > 0) {} }
int main(void) {
    signal(SIGTERM, stop);
    signal(SIGINT, stop);
    signal(SIGCHLD, reap);
    for (;;) pause();
}
"#;

/// One image to build: files copied in, symlinks, and how it starts.
struct ImageSpec<'a> {
    name: &'a str,
    /// Host file, and its path in the image (parents made as needed).
    files: Vec<(PathBuf, String)>,
    links: Vec<(&'a str, String)>,
    /// `KEY=value` pairs added to the image's environment, after `PATH`.
    env: &'a [&'a str],
    entrypoint: &'a [&'a str],
    cmd: &'a [&'a str],
}

/// The sandbox image: a `pause` built with `gcc -static`, so that it runs
/// in an image with nothing else in it.
pub(crate) fn pause(dir: &Path, programs: &Programs) -> Result<PathBuf, Error> {
    let source = dir.join("pause.c");
    fs::write(&source, PAUSE_C).map_err(Error::io(format!("writing {}", source.display())))?;
    let binary = dir.join("pause");
    run(Command::new(&programs.gcc)
        .args(["-static", "-Os", "-s", "-o"])
        .arg(&binary)
        .arg(&source))?;
    build(
        dir,
        programs,
        &ImageSpec {
            name: PAUSE_IMAGE,
            files: vec![(binary, "pause".to_owned())],
            links: Vec::new(),
            env: &[],
            entrypoint: &["/pause"],
            cmd: &[],
        },
    )
}

/// The test image [`BUSYBOX_IMAGE`] from Debian's static busybox.
pub(crate) fn busybox(dir: &Path, programs: &Programs) -> Result<PathBuf, Error> {
    build(
        dir,
        programs,
        &ImageSpec {
            name: BUSYBOX_IMAGE,
            files: vec![(programs.busybox.clone(), "bin/busybox".to_owned())],
            links: APPLETS.iter().map(|a| ("/bin/busybox", format!("bin/{a}"))).collect(),
            env: &[],
            entrypoint: &[],
            cmd: &["/bin/sh"],
        },
    )
}

/// The image [`CURL_IMAGE`]: `curl` and every library `ldd` says it
/// loads, at their host paths, with busybox's `sh`, `cat` and `sleep`.
pub(crate) fn curl(dir: &Path, programs: &Programs) -> Result<PathBuf, Error> {
    let curl = ImageProgram::locate("curl", "curl", &["/usr/bin/curl"])?;
    with_libraries(dir, programs, CURL_IMAGE, &curl, &[])
}

/// The image [`VIRSH_IMAGE`]: `virsh` and its libraries, busybox's `sh`,
/// `cat` and `sleep`; the C locale, which needs no locale files (virsh
/// warns on every run without it).
pub(crate) fn virsh(dir: &Path, programs: &Programs) -> Result<PathBuf, Error> {
    let virsh = ImageProgram::locate("virsh", "libvirt-clients", &["/usr/bin/virsh"])?;
    with_libraries(dir, programs, VIRSH_IMAGE, &virsh, &["LC_ALL=C"])
}

/// An image of `program` at its host path with every library `ldd` says
/// it loads, busybox's `sh`, `cat` and `sleep`, and `env` added to the
/// image's environment.
fn with_libraries(
    dir: &Path,
    programs: &Programs,
    name: &str,
    program: &ImageProgram,
    env: &[&str],
) -> Result<PathBuf, Error> {
    let libraries = run(Command::new(&program.ldd).arg(&program.path))?;
    let mut files = vec![
        (programs.busybox.clone(), "bin/busybox".to_owned()),
        (
            program.path.clone(),
            program.path.to_string_lossy().trim_start_matches('/').to_owned(),
        ),
    ];
    files.extend(
        shared_libraries(&libraries, program.package)?
            .into_iter()
            .map(|path| (PathBuf::from(path), path.trim_start_matches('/').to_owned())),
    );
    build(
        dir,
        programs,
        &ImageSpec {
            name,
            files,
            links: ["sh", "cat", "sleep"]
                .iter()
                .map(|a| ("/bin/busybox", format!("bin/{a}")))
                .collect(),
            env,
            entrypoint: &[],
            cmd: &["/bin/sh"],
        },
    )
}

/// The absolute paths in `ldd`'s output: each library, and the loader
/// under both names when `ldd` shows it as `<interpreter> => <file>`.
/// A library `ldd` cannot find is an error: the program would not start.
fn shared_libraries<'a>(ldd: &'a str, package: &'static str) -> Result<Vec<&'a str>, Error> {
    let mut paths = Vec::new();
    for line in ldd.lines() {
        if line.contains("not found") {
            return Err(Error::ProgramMissing {
                program: "a library an image's program needs",
                package,
                path: PathBuf::from(line.trim()),
            });
        }
        paths.extend(
            line.split("=>")
                .filter_map(|part| part.split_whitespace().next())
                .filter(|path| path.starts_with('/')),
        );
    }
    Ok(paths)
}

/// Writes the image's OCI archive into `dir` and returns its path.
fn build(dir: &Path, programs: &Programs, spec: &ImageSpec<'_>) -> Result<PathBuf, Error> {
    let stem = spec.name.rsplit('/').next().unwrap_or(spec.name).replace(':', "-");
    let work = dir.join(format!("{stem}.image"));
    let rootfs = work.join("rootfs");
    let layout = work.join("oci");
    let blobs = layout.join("blobs/sha256");
    for d in ["bin", "etc", "tmp", "proc", "sys", "dev"] {
        mkdir(&rootfs.join(d))?;
    }
    mkdir(&blobs)?;
    fill_rootfs(&rootfs, spec)?;
    let layer_tar = work.join("layer.tar");
    run(Command::new(&programs.tar)
        .args([
            "--create",
            "--sort=name",
            "--numeric-owner",
            "--owner=0",
            "--group=0",
            "--mtime=@0",
            "--file",
        ])
        .arg(&layer_tar)
        .arg("-C")
        .arg(&rootfs)
        .arg("."))?;
    let layer = fs::read(&layer_tar).map_err(Error::io(format!("reading {}", layer_tar.display())))?;
    let layer_digest = put_blob(&blobs, &layer)?;
    let config = image_config(spec, &layer_digest).to_string().into_bytes();
    let config_digest = put_blob(&blobs, &config)?;
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config.len()},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer_digest, "size": layer.len()}],
    })
    .to_string()
    .into_bytes();
    let manifest_digest = put_blob(&blobs, &manifest)?;
    let tag = spec.name.rsplit_once(':').map_or("latest", |(_, t)| t);
    let index = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest,
            "size": manifest.len(),
            "platform": {"architecture": "amd64", "os": "linux"},
            // The name `ctr images import` gives the image.
            "annotations": {"io.containerd.image.name": spec.name, "org.opencontainers.image.ref.name": tag},
        }],
    });
    write(&layout.join("index.json"), index.to_string().as_bytes())?;
    write(&layout.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#)?;
    let archive = dir.join(format!("{stem}.tar"));
    run(Command::new(&programs.tar)
        .arg("--create")
        .arg("--file")
        .arg(&archive)
        .arg("-C")
        .arg(&layout)
        .args(["oci-layout", "index.json", "blobs"]))?;
    Ok(archive)
}

fn fill_rootfs(rootfs: &Path, spec: &ImageSpec<'_>) -> Result<(), Error> {
    for (source, target) in &spec.files {
        let target = rootfs.join(target);
        if let Some(parent) = target.parent() {
            mkdir(parent)?;
        }
        fs::copy(source, &target).map_err(Error::io(format!("copying {} into an image", source.display())))?;
        fs::set_permissions(&target, fs::Permissions::from_mode(0o755))
            .map_err(Error::io(format!("making {} executable", target.display())))?;
    }
    for (to, link) in &spec.links {
        symlink(to, rootfs.join(link)).map_err(Error::io(format!("linking {link} in an image")))?;
    }
    Ok(())
}

fn image_config(spec: &ImageSpec<'_>, layer_digest: &str) -> serde_json::Value {
    let mut env = vec!["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"];
    env.extend(spec.env);
    let mut config = json!({
        "Env": env,
        "WorkingDir": "/",
    });
    if !spec.entrypoint.is_empty() {
        config["Entrypoint"] = json!(spec.entrypoint);
    }
    if !spec.cmd.is_empty() {
        config["Cmd"] = json!(spec.cmd);
    }
    json!({
        "architecture": "amd64",
        "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": config,
        // Uncompressed layer: its diff ID is its digest.
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    })
}

/// Stores `bytes` under its digest; returns the digest.
fn put_blob(blobs: &Path, bytes: &[u8]) -> Result<String, Error> {
    let hex = hex::encode(Sha256::digest(bytes));
    write(&blobs.join(&hex), bytes)?;
    Ok(format!("sha256:{hex}"))
}

fn mkdir(path: &Path) -> Result<(), Error> {
    fs::create_dir_all(path).map_err(Error::io(format!("creating {}", path.display())))
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    fs::write(path, bytes).map_err(Error::io(format!("writing {}", path.display())))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_libraries_are_the_absolute_paths_ldd_names() {
        let ldd = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibcurl.so.4 => /lib/x86_64-linux-gnu/libcurl.so.4 (0x00007f8f)\n\t/lib64/ld-linux-x86-64.so.2 => /usr/lib64/ld-linux-x86-64.so.2 (0x00007f8f)\n";
        assert_eq!(
            super::shared_libraries(ldd, "curl").unwrap(),
            [
                "/lib/x86_64-linux-gnu/libcurl.so.4",
                "/lib64/ld-linux-x86-64.so.2",
                "/usr/lib64/ld-linux-x86-64.so.2"
            ]
        );
    }

    #[test]
    fn a_library_ldd_cannot_find_is_an_error() {
        let ldd = "\tlibcurl.so.4 => /lib/x86_64-linux-gnu/libcurl.so.4 (0x00007f8f)\n\tlibgone.so.1 => not found\n";
        let error = super::shared_libraries(ldd, "curl").unwrap_err().to_string();
        assert!(error.contains("libgone.so.1 => not found"), "{error}");
    }
}
