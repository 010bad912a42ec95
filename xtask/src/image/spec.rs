//! What the operator's image holds, declared once for `cargo xtask image`:
//! its files and where each comes from, its user, entrypoint, ports and
//! labels. The Dockerfile's final stage says the same in its own words;
//! `matches` compares the two, so neither can change alone.

use std::collections::BTreeMap;

/// The operator runs as distroless's "nonroot" (see `deploy/image/passwd`),
/// the uid the chart's `podSecurityContext` names.
pub const USER: &str = "65532:65532";

/// Where the binary lands and what the container runs.
pub const ENTRYPOINT: &str = "/vrouter-operator";

/// The chart's health (`/healthz`, `/readyz`), metrics and webhook ports,
/// the defaults of `--health-probe-addr`, `--metrics-addr` and
/// `--webhook-addr` (a test reads them from `values.yaml`).
pub const PORTS: [u16; 3] = [8081, 8443, 9443];

/// Where one file or directory of the image comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The operator binary given to the build.
    Binary,
    /// A shared library the binary loads, read from this machine at this
    /// path (the path `ldd` prints). Debian 12 here and in the Dockerfile's
    /// build stage, so both copy the same glibc.
    Library(&'static str),
    /// Another file of this machine's system (the CA bundle).
    System(&'static str),
    /// A file of this repository, by path from its root; the Dockerfile
    /// copies the same file from its build context.
    Repo(&'static str),
    /// An empty directory.
    EmptyDir,
}

/// One entry of the image's file list: its absolute path in the image, its
/// source and its permission bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub path: &'static str,
    pub source: Source,
    pub mode: u32,
}

/// Every file of the image. Parent directories are implied (0755, root).
/// A glibc binary needs its loader, libc, libm (the release build of the
/// operator links it) and libgcc_s (Rust's unwinder), as `ldd` lists them;
/// the Proxmox client trusts the system CA bundle (`rustls-native-certs`,
/// which finds `/etc/ssl/certs/ca-certificates.crt`); `passwd`/`group`
/// name uid 65532; `nsswitch.conf` makes `/etc/hosts` answer before DNS, as
/// on distroless; `/tmp` is the usual world-writable scratch directory.
pub const FILES: &[Entry] = &[
    Entry {
        path: ENTRYPOINT,
        source: Source::Binary,
        mode: 0o755,
    },
    Entry {
        path: "/lib64/ld-linux-x86-64.so.2",
        source: Source::Library("/lib64/ld-linux-x86-64.so.2"),
        mode: 0o755,
    },
    Entry {
        path: "/lib/x86_64-linux-gnu/libc.so.6",
        source: Source::Library("/lib/x86_64-linux-gnu/libc.so.6"),
        mode: 0o755,
    },
    Entry {
        path: "/lib/x86_64-linux-gnu/libm.so.6",
        source: Source::Library("/lib/x86_64-linux-gnu/libm.so.6"),
        mode: 0o644,
    },
    Entry {
        path: "/lib/x86_64-linux-gnu/libgcc_s.so.1",
        source: Source::Library("/lib/x86_64-linux-gnu/libgcc_s.so.1"),
        mode: 0o644,
    },
    Entry {
        path: "/etc/ssl/certs/ca-certificates.crt",
        source: Source::System("/etc/ssl/certs/ca-certificates.crt"),
        mode: 0o644,
    },
    Entry {
        path: "/etc/passwd",
        source: Source::Repo("deploy/image/passwd"),
        mode: 0o644,
    },
    Entry {
        path: "/etc/group",
        source: Source::Repo("deploy/image/group"),
        mode: 0o644,
    },
    Entry {
        path: "/etc/nsswitch.conf",
        source: Source::Repo("deploy/image/nsswitch.conf"),
        mode: 0o644,
    },
    Entry {
        path: "/tmp",
        source: Source::EmptyDir,
        mode: 0o1777,
    },
];

/// The shared libraries the image carries, as `ldd` names them.
pub fn libraries() -> Vec<&'static str> {
    FILES
        .iter()
        .filter_map(|e| match e.source {
            Source::Library(path) => Some(path),
            _ => None,
        })
        .collect()
}

/// The image's name when none is given: the chart's default repository and
/// appVersion (the workspace version), so `helm install` with the default
/// values finds the imported image without pulling.
pub fn default_name() -> String {
    format!(
        "ghcr.io/vrouter-operator/vrouter-operator:{}",
        env!("CARGO_PKG_VERSION")
    )
}

/// The OCI annotations of the image config (`LABEL` in the Dockerfile).
/// Nothing that changes from build to build (no creation time, no commit),
/// so the same binary gives the same digest.
pub fn labels() -> BTreeMap<String, String> {
    [
        ("org.opencontainers.image.title", "vrouter-operator"),
        (
            "org.opencontainers.image.description",
            "Keeps VyOS and DozenOS routers configured as declared",
        ),
        ("org.opencontainers.image.source", env!("CARGO_PKG_REPOSITORY")),
        ("org.opencontainers.image.licenses", env!("CARGO_PKG_LICENSE")),
        ("org.opencontainers.image.version", env!("CARGO_PKG_VERSION")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}
