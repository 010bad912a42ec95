//! `cargo xtask testenv`: builds the test control plane (`kube-apiserver` and
//! `etcd`) and `helm` (which renders the chart in its tests) from Go modules,
//! the real vrouter-daemon and the Go vrouter-operator from their vendored
//! sources ([`daemon`], [`go_operator`]), and our own Go test oracles
//! ([`oracles`]), once per machine.
//!
//! Nothing is vendored. For each binary a scratch Go module is generated under
//! the cache directory (`$VROUTER_TESTENV_CACHE`, default
//! `$HOME/.cache/vrouter-operator/testenv`):
//!
//! - `kube-apiserver`: `require k8s.io/kubernetes v1.37.2`. That module's own
//!   `go.mod` points every staging module (`k8s.io/api`, `k8s.io/apiserver`, …)
//!   at `./staging/src/k8s.io/X`, and a dependency's `replace` lines are ignored,
//!   so the scratch module replaces each of them with the published
//!   `k8s.io/X v0.37.2`. The list is read from the downloaded `go.mod`, never
//!   typed by hand, so it follows the release.
//! - `etcd`: `require go.etcd.io/etcd/server/v3 v3.6.16`, with its `../api`-style
//!   sibling replaces turned into the published modules of the same version.
//! - `helm`: `require helm.sh/helm/v3 v3.22.0`, which has no `replace` lines.
//! - `toxiproxy-server`: `require github.com/Shopify/toxiproxy/v2 v2.12.0`, the
//!   fault proxy the leader-fencing tests put between a replica and the API
//!   server; no `replace` lines either.
//! - `promtool`: `require github.com/prometheus/prometheus v0.316.0` (the Go
//!   module of Prometheus 3.16.0), which unit-tests the chart's alerting
//!   rules with `promtool test rules`.
//!
//! The node binaries (`kubelet`, `kube-controller-manager`, `kube-scheduler`,
//! `kube-proxy`) and `kubectl` come from the same scratch module as
//! `kube-apiserver`, each group in a `go build` of its own after that one:
//! Go's build cache compiles a package shared by several binaries once, so
//! the split costs a link per group, and what needs only the control plane
//! (the demo, the quick loop) builds none of the node's binaries.
//!
//! Each binary is built with `CGO_ENABLED=0` under `nice -n 10` and stamped with
//! the recipe that built it; when the binary and a matching stamp exist this
//! module returns at once without running Go. A lock file keeps two
//! concurrent runs from building twice.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail};
use sha2::{Digest, Sha256};

pub mod daemon;
pub mod go_operator;
pub mod oracles;
pub mod peer_source;

/// The Kubernetes release matching k8s-openapi's `v1_37` feature.
const KUBERNETES_VERSION: &str = "v1.37.2";
/// The staging modules (`k8s.io/api`, …) published for that release.
const STAGING_VERSION: &str = "v0.37.2";
/// The newest etcd 3.6 release; kube-apiserver 1.37 is tested against 3.6.
const ETCD_VERSION: &str = "v3.6.16";
/// The Helm release the chart is rendered and linted with in tests.
const HELM_VERSION: &str = "v3.22.0";
/// The Toxiproxy release the fault-injection tests run.
const TOXIPROXY_VERSION: &str = "v2.12.0";
/// The Prometheus release whose `promtool` tests the chart's alerting rules;
/// the Go module numbers Prometheus `3.16.0` as `v0.316.0`.
const PROMETHEUS_MODULE_VERSION: &str = "v0.316.0";
const PROMETHEUS_VERSION: &str = "3.16.0";
/// Bumped whenever the recipe below changes in a way that needs a rebuild.
const RECIPE_REVISION: u32 = 1;

/// Where the prepared binaries are.
pub struct Binaries {
    pub kube_apiserver: PathBuf,
    /// The node's binaries, built with `kube-apiserver` ([`KUBE_APISERVER`]'s companions).
    pub kubelet: PathBuf,
    pub kube_controller_manager: PathBuf,
    pub kube_scheduler: PathBuf,
    pub kube_proxy: PathBuf,
    pub kubectl: PathBuf,
    pub etcd: PathBuf,
    pub helm: PathBuf,
    pub toxiproxy: PathBuf,
    pub promtool: PathBuf,
    pub vrouter_server: PathBuf,
    pub vrouter_agent: PathBuf,
    /// The Go vrouter-operator ([`go_operator`]).
    pub go_operator: PathBuf,
    /// Our own Go oracles ([`oracles`]), by name.
    pub oracles: Vec<(&'static str, PathBuf)>,
}

/// One binary to build from a Go module.
struct GoBinary {
    /// File name under `bin/` in the cache directory.
    name: &'static str,
    /// The module whose package is built.
    module: &'static str,
    version: &'static str,
    /// The `main` package to build.
    package: &'static str,
    /// Further `main` packages of the same module built by the same
    /// `go build`, which compiles the packages they share once. Each lands
    /// in `bin/` under its package's last path element.
    companions: &'static [&'static str],
    /// Turns one `replace` right-hand side of the module's own `go.mod` into
    /// the published module version to use instead, or `None` to drop it.
    replacement: fn(left: &str, right: &str) -> Option<String>,
    /// What the replaced modules are pinned to; part of the stamp.
    pinned: &'static str,
    ldflags: fn() -> String,
    /// How the binary is asked for its version.
    version_args: &'static [&'static str],
    /// What the version command must print.
    version_banner: fn() -> String,
}

const KUBE_APISERVER: GoBinary = GoBinary {
    name: "kube-apiserver",
    module: "k8s.io/kubernetes",
    version: KUBERNETES_VERSION,
    package: "k8s.io/kubernetes/cmd/kube-apiserver",
    companions: &[],
    replacement: staging_replacement,
    pinned: STAGING_VERSION,
    ldflags: kube_ldflags,
    version_args: &["--version"],
    version_banner: || format!("Kubernetes {KUBERNETES_VERSION}"),
};

/// What the test node runs (crates/vrouter-test-node), in one `go build`:
/// the four share most of their packages, and whatever they share with
/// `kube-apiserver` comes from the Go build cache that build filled.
const KUBE_NODE: GoBinary = GoBinary {
    name: "kubelet",
    module: "k8s.io/kubernetes",
    version: KUBERNETES_VERSION,
    package: "k8s.io/kubernetes/cmd/kubelet",
    companions: &[
        "k8s.io/kubernetes/cmd/kube-controller-manager",
        "k8s.io/kubernetes/cmd/kube-scheduler",
        "k8s.io/kubernetes/cmd/kube-proxy",
    ],
    replacement: staging_replacement,
    pinned: STAGING_VERSION,
    ldflags: kube_ldflags,
    version_args: &["--version"],
    version_banner: || format!("Kubernetes {KUBERNETES_VERSION}"),
};

/// `kubectl` of the API server's release, for the node test's `kubectl
/// wait`. Its own `go build`, not a companion of [`KUBE_APISERVER`]: a
/// companion would change that build's stamp and rebuild the node's
/// binaries, while alone it links against the packages the Go build cache
/// already holds from that build and compiles only its own.
const KUBECTL: GoBinary = GoBinary {
    name: "kubectl",
    module: "k8s.io/kubernetes",
    version: KUBERNETES_VERSION,
    package: "k8s.io/kubernetes/cmd/kubectl",
    companions: &[],
    replacement: staging_replacement,
    pinned: STAGING_VERSION,
    ldflags: kube_ldflags,
    version_args: &["version", "--client"],
    version_banner: || format!("Client Version: {KUBERNETES_VERSION}"),
};

const ETCD: GoBinary = GoBinary {
    name: "etcd",
    module: "go.etcd.io/etcd/server/v3",
    version: ETCD_VERSION,
    package: "go.etcd.io/etcd/server/v3",
    companions: &[],
    replacement: etcd_sibling_replacement,
    pinned: ETCD_VERSION,
    ldflags: etcd_ldflags,
    version_args: &["--version"],
    version_banner: || format!("etcd Version: {}", ETCD_VERSION.trim_start_matches('v')),
};

const HELM: GoBinary = GoBinary {
    name: "helm",
    module: "helm.sh/helm/v3",
    version: HELM_VERSION,
    package: "helm.sh/helm/v3/cmd/helm",
    companions: &[],
    replacement: |_, _| None,
    pinned: HELM_VERSION,
    ldflags: helm_ldflags,
    version_args: &["version", "--template", "{{ .Version }}"],
    version_banner: || HELM_VERSION.to_owned(),
};

const TOXIPROXY: GoBinary = GoBinary {
    name: "toxiproxy-server",
    module: "github.com/Shopify/toxiproxy/v2",
    version: TOXIPROXY_VERSION,
    package: "github.com/Shopify/toxiproxy/v2/cmd/server",
    companions: &[],
    replacement: |_, _| None,
    pinned: TOXIPROXY_VERSION,
    ldflags: toxiproxy_ldflags,
    version_args: &["-version"],
    version_banner: || format!("toxiproxy-server version {}", TOXIPROXY_VERSION.trim_start_matches('v')),
};

const PROMTOOL: GoBinary = GoBinary {
    name: "promtool",
    module: "github.com/prometheus/prometheus",
    version: PROMETHEUS_MODULE_VERSION,
    package: "github.com/prometheus/prometheus/cmd/promtool",
    companions: &[],
    replacement: |_, _| None,
    pinned: PROMETHEUS_MODULE_VERSION,
    ldflags: promtool_ldflags,
    version_args: &["--version"],
    version_banner: || format!("promtool, version {PROMETHEUS_VERSION}"),
};

/// `k8s.io/X => ./staging/src/k8s.io/X` becomes `k8s.io/X v0.37.2`.
fn staging_replacement(left: &str, right: &str) -> Option<String> {
    let staged = right.strip_prefix("./staging/src/")?;
    (staged == left).then(|| format!("{left} {STAGING_VERSION}"))
}

/// `go.etcd.io/etcd/api/v3 => ../api` becomes `go.etcd.io/etcd/api/v3 v3.6.16`;
/// the `./FORBIDDEN_DEPENDENCY` guards are dropped.
fn etcd_sibling_replacement(left: &str, right: &str) -> Option<String> {
    (right.starts_with("../") && left.starts_with("go.etcd.io/etcd/")).then(|| format!("{left} {ETCD_VERSION}"))
}

/// The version the binary reports, as the upstream release build sets it.
fn kube_ldflags() -> String {
    let minor = KUBERNETES_VERSION.split('.').nth(1).unwrap_or_default();
    let mut flags = vec!["-s".to_owned(), "-w".to_owned()];
    for package in ["k8s.io/component-base/version", "k8s.io/client-go/pkg/version"] {
        flags.push(format!("-X {package}.gitVersion={KUBERNETES_VERSION}"));
        flags.push(format!("-X {package}.gitMajor=1"));
        flags.push(format!("-X {package}.gitMinor={minor}"));
        flags.push(format!("-X {package}.gitTreeState=clean"));
    }
    flags.join(" ")
}

fn etcd_ldflags() -> String {
    "-s -w".to_owned()
}

/// The version helm reports, and the Kubernetes version it assumes when not
/// told (its default without these is 1.20, which the chart refuses).
fn helm_ldflags() -> String {
    let minor = KUBERNETES_VERSION.split('.').nth(1).unwrap_or_default();
    let mut flags = vec![
        "-s".to_owned(),
        "-w".to_owned(),
        format!("-X helm.sh/helm/v3/internal/version.version={HELM_VERSION}"),
    ];
    for package in ["helm.sh/helm/v3/pkg/lint/rules", "helm.sh/helm/v3/pkg/chartutil"] {
        flags.push(format!("-X {package}.k8sVersionMajor=1"));
        flags.push(format!("-X {package}.k8sVersionMinor={minor}"));
    }
    flags.join(" ")
}

/// The version the server reports, as its release build sets it.
fn toxiproxy_ldflags() -> String {
    format!(
        "-s -w -X github.com/Shopify/toxiproxy/v2.Version={}",
        TOXIPROXY_VERSION.trim_start_matches('v')
    )
}

/// The version promtool reports, as Prometheus's release build sets it.
fn promtool_ldflags() -> String {
    format!("-s -w -X github.com/prometheus/common/version.Version={PROMETHEUS_VERSION}")
}

impl GoBinary {
    /// The text of the stamp file: everything that, when changed, needs a rebuild.
    fn stamp(&self) -> String {
        format!(
            "recipe {RECIPE_REVISION}\n{} {}\nreplaced modules pinned to {}\npackage {}\ncompanions {}\nldflags {}\n",
            self.module,
            self.version,
            self.pinned,
            self.package,
            self.companions.join(" "),
            (self.ldflags)()
        )
    }

    /// The file names under `bin/` this build produces, the main one first.
    fn outputs(&self) -> Vec<&'static str> {
        let mut names = vec![self.name];
        names.extend(self.companions.iter().map(|p| p.rsplit('/').next().unwrap_or(p)));
        names
    }

    /// Every package the one `go build` builds.
    fn packages(&self) -> Vec<&'static str> {
        let mut packages = vec![self.package];
        packages.extend(self.companions);
        packages
    }
}

/// The cache directory: `$VROUTER_TESTENV_CACHE`, else `$HOME/.cache/vrouter-operator/testenv`.
/// `vrouter-test-apiserver` looks in the same place.
pub fn cache_dir() -> anyhow::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("VROUTER_TESTENV_CACHE").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    let home = std::env::var_os("HOME").context("neither VROUTER_TESTENV_CACHE nor HOME is set")?;
    Ok(PathBuf::from(home).join(".cache/vrouter-operator/testenv"))
}

/// Entry point of `cargo xtask testenv`, also called first by `cargo xtask test`.
pub fn run(root: &Path) -> anyhow::Result<()> {
    let bins = ensure(root)?;
    println!("testenv: kube-apiserver {}", bins.kube_apiserver.display());
    println!("testenv: kubelet        {}", bins.kubelet.display());
    println!(
        "testenv: kube-controller-manager {}",
        bins.kube_controller_manager.display()
    );
    println!("testenv: kube-scheduler {}", bins.kube_scheduler.display());
    println!("testenv: kube-proxy     {}", bins.kube_proxy.display());
    println!("testenv: kubectl        {}", bins.kubectl.display());
    println!("testenv: etcd           {}", bins.etcd.display());
    println!("testenv: helm           {}", bins.helm.display());
    println!("testenv: toxiproxy      {}", bins.toxiproxy.display());
    println!("testenv: promtool       {}", bins.promtool.display());
    println!("testenv: vrouter-server {}", bins.vrouter_server.display());
    println!("testenv: vrouter-agent  {}", bins.vrouter_agent.display());
    println!("testenv: vrouter-operator-go {}", bins.go_operator.display());
    for (name, path) in &bins.oracles {
        println!("testenv: {name:<14} {}", path.display());
    }
    Ok(())
}

/// Builds whatever is missing or stale and returns the binaries' paths.
pub fn ensure(root: &Path) -> anyhow::Result<Binaries> {
    let (cache, _lock) = locked_cache()?;
    let bin_dir = cache.join("bin");
    let kube_apiserver = ensure_one(&cache, &KUBE_APISERVER)?;
    ensure_one(&cache, &KUBE_NODE)?;
    let kube_bin = |name: &str| bin_dir.join(name);
    let kubectl = ensure_one(&cache, &KUBECTL)?;
    let etcd = ensure_one(&cache, &ETCD)?;
    let helm = ensure_one(&cache, &HELM)?;
    let toxiproxy = ensure_one(&cache, &TOXIPROXY)?;
    let promtool = ensure_one(&cache, &PROMTOOL)?;
    let [vrouter_server, vrouter_agent] = daemon::ensure(root, &cache)?;
    let go_operator = go_operator::ensure(root, &cache)?;
    let oracles = oracles::ensure(root, &cache)?;
    Ok(Binaries {
        kube_apiserver,
        kubelet: kube_bin("kubelet"),
        kube_controller_manager: kube_bin("kube-controller-manager"),
        kube_scheduler: kube_bin("kube-scheduler"),
        kube_proxy: kube_bin("kube-proxy"),
        kubectl,
        etcd,
        helm,
        toxiproxy,
        promtool,
        vrouter_server,
        vrouter_agent,
        go_operator,
        oracles,
    })
}

/// What the demo runs: the control plane and the real vrouter-daemon.
pub fn ensure_demo(root: &Path) -> anyhow::Result<()> {
    let (cache, _lock) = locked_cache()?;
    for binary in [&KUBE_APISERVER, &ETCD] {
        let path = ensure_one(&cache, binary)?;
        println!("testenv: {:<14} {}", binary.name, path.display());
    }
    daemon::ensure(root, &cache)?;
    Ok(())
}

/// What the quick loop (`cargo xtask test --quick`) runs against: all but
/// the test node's binaries and the Go operator, which only heavy tests
/// start.
pub fn ensure_quick(root: &Path) -> anyhow::Result<()> {
    let (cache, _lock) = locked_cache()?;
    for binary in [&KUBE_APISERVER, &KUBECTL, &ETCD, &HELM, &TOXIPROXY, &PROMTOOL] {
        ensure_one(&cache, binary)?;
    }
    daemon::ensure(root, &cache)?;
    oracles::ensure(root, &cache)?;
    Ok(())
}

/// The cache directory, with `bin/` created and the build lock held (until
/// the returned file is dropped), so two concurrent runs never build twice.
fn locked_cache() -> anyhow::Result<(PathBuf, File)> {
    let cache = cache_dir()?;
    let bin_dir = cache.join("bin");
    fs::create_dir_all(&bin_dir).with_context(|| format!("creating {}", bin_dir.display()))?;
    let lock_path = cache.join(".build.lock");
    let lock = File::create(&lock_path).with_context(|| format!("creating {}", lock_path.display()))?;
    lock.lock()
        .with_context(|| format!("locking {}", lock_path.display()))?;
    Ok((cache, lock))
}

fn ensure_one(cache: &Path, binary: &GoBinary) -> anyhow::Result<PathBuf> {
    let bin_dir = cache.join("bin");
    let target = bin_dir.join(binary.name);
    let stamp_path = bin_dir.join(format!("{}.stamp", binary.name));
    let stamp = binary.stamp();
    let all_built = binary.outputs().iter().all(|name| bin_dir.join(name).is_file());
    if all_built && fs::read_to_string(&stamp_path).ok().as_deref() == Some(stamp.as_str()) {
        return Ok(target);
    }
    println!(
        "testenv: building {} from {}@{} (a cold build takes minutes)",
        binary.outputs().join(", "),
        binary.module,
        binary.version
    );
    let started = Instant::now();
    let module_dir = cache.join("src").join(format!("{}-{}", binary.name, binary.version));
    fs::create_dir_all(&module_dir).with_context(|| format!("creating {}", module_dir.display()))?;

    let upstream_go_mod = download_go_mod(&module_dir, binary)?;
    let go_mod = scratch_go_mod(binary, &upstream_go_mod)?;
    fs::write(module_dir.join("go.mod"), go_mod).context("writing the scratch go.mod")?;
    // A go.sum from an older recipe may name versions no longer needed; tidy rewrites it.
    go(&module_dir, &["mod", "tidy"])?;

    let partial = go_build(cache, binary)?;
    for name in binary.outputs() {
        check_version(&partial.join(name), binary.version_args, &(binary.version_banner)())?;
    }
    for name in binary.outputs() {
        let built = bin_dir.join(name);
        fs::rename(partial.join(name), &built).with_context(|| format!("moving {} into place", built.display()))?;
    }
    let _ = fs::remove_dir(&partial);
    fs::write(&stamp_path, stamp).with_context(|| format!("writing {}", stamp_path.display()))?;
    println!(
        "testenv: built {} in {:.0?} -> {}",
        binary.outputs().join(", "),
        started.elapsed(),
        bin_dir.display()
    );
    Ok(target)
}

/// One `go build` of every package of `binary` into a fresh partial
/// directory, which it returns; nothing is in `bin/` until all are checked.
fn go_build(cache: &Path, binary: &GoBinary) -> anyhow::Result<PathBuf> {
    let module_dir = cache.join("src").join(format!("{}-{}", binary.name, binary.version));
    let partial = cache.join("bin").join(format!(".{}.partial", binary.name));
    let _ = fs::remove_dir_all(&partial);
    fs::create_dir_all(&partial).with_context(|| format!("creating {}", partial.display()))?;
    // One package: `-o` names the file. Several: `-o DIR/` puts each under
    // its package's last element.
    let output = if binary.companions.is_empty() {
        partial.join(binary.name).to_string_lossy().into_owned()
    } else {
        format!("{}/", partial.display())
    };
    let ldflags = (binary.ldflags)();
    let mut args = vec!["build", "-trimpath", "-ldflags", &ldflags, "-o", &output];
    args.extend(binary.packages());
    go(&module_dir, &args)?;
    Ok(partial)
}

/// Downloads the module with the Go toolchain and returns the text of its own `go.mod`.
fn download_go_mod(module_dir: &Path, binary: &GoBinary) -> anyhow::Result<String> {
    #[derive(serde::Deserialize)]
    struct Download {
        #[serde(rename = "GoMod")]
        go_mod: Option<String>,
        #[serde(rename = "Error")]
        error: Option<String>,
    }
    // Run outside the scratch module so its (possibly stale) go.mod plays no part.
    let scratch_parent = module_dir.parent().unwrap_or(module_dir);
    let output = go_output(
        scratch_parent,
        &[
            "mod",
            "download",
            "-json",
            &format!("{}@{}", binary.module, binary.version),
        ],
    )?;
    let download: Download = serde_json::from_str(&output).context("reading `go mod download -json` output")?;
    if let Some(error) = download.error {
        bail!("go mod download {}@{}: {error}", binary.module, binary.version);
    }
    let path = download
        .go_mod
        .context("`go mod download -json` reported no GoMod file")?;
    fs::read_to_string(&path).with_context(|| format!("reading {path}"))
}

/// The `replace` directives of a `go.mod`, as (left module path, right-hand side).
fn replace_directives(go_mod: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut in_block = false;
    for raw in go_mod.lines() {
        let line = raw.split("//").next().unwrap_or_default().trim();
        let body = if in_block {
            if line == ")" {
                in_block = false;
                continue;
            }
            line
        } else if line == "replace (" {
            in_block = true;
            continue;
        } else if let Some(rest) = line.strip_prefix("replace ") {
            rest
        } else {
            continue;
        };
        if let Some((left, right)) = body.split_once("=>") {
            let left = left.split_whitespace().next().unwrap_or_default();
            out.push((left.to_owned(), right.trim().to_owned()));
        }
    }
    out
}

/// The `go` directive's version, e.g. `1.26.0`.
fn go_directive(go_mod: &str) -> Option<&str> {
    go_mod.lines().find_map(|l| l.trim().strip_prefix("go ")).map(str::trim)
}

/// Generates the scratch module's `go.mod` from the upstream one.
fn scratch_go_mod(binary: &GoBinary, upstream: &str) -> anyhow::Result<String> {
    let go_version = go_directive(upstream).context("upstream go.mod has no `go` directive")?;
    let replaces: Vec<String> = replace_directives(upstream)
        .iter()
        .filter_map(|(left, right)| (binary.replacement)(left, right).map(|r| format!("\t{left} => {r}\n")))
        .collect();
    if binary.name == KUBE_APISERVER.name {
        // Sanity check against a change of layout upstream: these must be there.
        for needed in [
            "k8s.io/api ",
            "k8s.io/apimachinery ",
            "k8s.io/apiserver ",
            "k8s.io/client-go ",
        ] {
            if !replaces.iter().any(|r| r.trim_start().starts_with(needed)) {
                bail!(
                    "the go.mod of {}@{} has no ./staging replace for {}; the recipe needs updating",
                    binary.module,
                    binary.version,
                    needed.trim()
                );
            }
        }
    }
    Ok(format!(
        "// Generated by `cargo xtask testenv`. Do not edit; it is rewritten on every build.\n\
         module vrouter-testenv/{name}\n\n\
         go {go_version}\n\n\
         require {module} {version}\n\n\
         replace (\n{replaces})\n\n\
         {tools}",
        name = binary.name,
        module = binary.module,
        version = binary.version,
        replaces = replaces.concat(),
        tools = binary
            .packages()
            .iter()
            .map(|p| format!("tool {p}\n"))
            .collect::<String>(),
    ))
}

/// The files of the source tree (without `.git`), by path relative to `dir`, sorted.
pub(crate) fn source_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(relative) = pending.pop() {
        let here = dir.join(&relative);
        for entry in fs::read_dir(&here).with_context(|| format!("listing {}", here.display()))? {
            let entry = entry.with_context(|| format!("listing {}", here.display()))?;
            let name = entry.file_name();
            if name == ".git" {
                continue;
            }
            let kind = entry.file_type()?;
            let path = relative.join(&name);
            if kind.is_dir() {
                pending.push(path);
            } else if kind.is_file() {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// SHA-256 over every file's relative path, length and bytes, in path order.
pub(crate) fn source_hash(dir: &Path) -> anyhow::Result<String> {
    let mut hasher = Sha256::new();
    for relative in source_files(dir)? {
        let bytes = fs::read(dir.join(&relative)).with_context(|| format!("reading {}", relative.display()))?;
        hasher.update(relative.to_string_lossy().as_bytes());
        hasher.update([0]);
        hasher.update((bytes.len() as u64).to_le_bytes());
        hasher.update(&bytes);
    }
    Ok(hex(&hasher.finalize()))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A `go` command with the environment every step uses: no cgo, the local
/// toolchain only (no toolchain download), module mode without a workspace,
/// and a low priority so a parallel Rust build keeps its share of the CPUs.
pub(crate) fn go_command(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = if which("nice") {
        let mut cmd = Command::new("nice");
        cmd.args(["-n", "10", "go"]);
        cmd
    } else {
        Command::new("go")
    };
    cmd.args(args)
        .current_dir(dir)
        .env("CGO_ENABLED", "0")
        .env("GOTOOLCHAIN", "local")
        .env("GOWORK", "off")
        .env("GOFLAGS", "-mod=mod -buildvcs=false");
    cmd
}

pub(crate) fn go(dir: &Path, args: &[&str]) -> anyhow::Result<()> {
    let status = go_command(dir, args).status().map_err(go_missing)?;
    if !status.success() {
        bail!("`go {}` in {} failed ({status})", args.join(" "), dir.display());
    }
    Ok(())
}

pub(crate) fn go_output(dir: &Path, args: &[&str]) -> anyhow::Result<String> {
    let output = go_command(dir, args)
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(go_missing)?;
    if !output.status.success() {
        bail!(
            "`go {}` in {} failed ({}): {}",
            args.join(" "),
            dir.display(),
            output.status,
            String::from_utf8_lossy(&output.stdout)
        );
    }
    String::from_utf8(output.stdout).context("go printed non-UTF-8 output")
}

fn go_missing(err: std::io::Error) -> anyhow::Error {
    anyhow::anyhow!(
        "cannot run the Go toolchain ({err}); building the test kube-apiserver, the node binaries, etcd, helm, toxiproxy-server, vrouter-daemon and the Go vrouter-operator needs `go` (1.26 or newer) on PATH"
    )
}

fn which(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

/// Runs `<binary> --version` and checks that it names the expected release.
fn check_version(binary: &Path, args: &[&str], banner: &str) -> anyhow::Result<()> {
    let output = Command::new(binary)
        .args(args)
        .output()
        .with_context(|| format!("running {} {}", binary.display(), args.join(" ")))?;
    // Some tools (promtool, through kingpin) print their version on stderr.
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if !output.status.success() || !text.contains(banner) {
        bail!(
            "{} {} printed {text:?}, expected {banner:?}",
            binary.display(),
            args.join(" ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBERNETES_GO_MOD: &str = "module k8s.io/kubernetes\n\ngo 1.26.0\n\nrequire (\n\tk8s.io/api v0.0.0\n)\n\nreplace (\n\tk8s.io/api => ./staging/src/k8s.io/api\n\tk8s.io/apimachinery => ./staging/src/k8s.io/apimachinery // comment\n\tk8s.io/apiserver => ./staging/src/k8s.io/apiserver\n\tk8s.io/client-go => ./staging/src/k8s.io/client-go\n\tgithub.com/x/y => github.com/x/y v1.2.3\n)\n\nreplace k8s.io/kms => ./staging/src/k8s.io/kms\n";

    #[test]
    fn staging_replaces_become_published_versions() {
        let go_mod = scratch_go_mod(&KUBE_APISERVER, KUBERNETES_GO_MOD).unwrap();
        for module in [
            "k8s.io/api",
            "k8s.io/apimachinery",
            "k8s.io/apiserver",
            "k8s.io/client-go",
            "k8s.io/kms",
        ] {
            assert!(
                go_mod.contains(&format!("\t{module} => {module} v0.37.2\n")),
                "{module} missing in:\n{go_mod}"
            );
        }
        assert!(!go_mod.contains("github.com/x/y"), "{go_mod}");
        assert!(go_mod.contains("\ngo 1.26.0\n"), "{go_mod}");
        assert!(go_mod.contains("require k8s.io/kubernetes v1.37.2\n"), "{go_mod}");
        assert!(
            go_mod.contains("tool k8s.io/kubernetes/cmd/kube-apiserver\n"),
            "{go_mod}"
        );
        let node = scratch_go_mod(&KUBE_NODE, KUBERNETES_GO_MOD).unwrap();
        for command in ["kubelet", "kube-controller-manager", "kube-scheduler", "kube-proxy"] {
            assert!(
                node.contains(&format!("tool k8s.io/kubernetes/cmd/{command}\n")),
                "{node}"
            );
        }
    }

    #[test]
    fn a_kubernetes_go_mod_without_staging_replaces_is_refused() {
        let err = scratch_go_mod(&KUBE_APISERVER, "module k8s.io/kubernetes\n\ngo 1.26.0\n").unwrap_err();
        assert!(err.to_string().contains("k8s.io/api"), "{err}");
    }

    #[test]
    fn etcd_siblings_are_pinned_and_forbidden_guards_dropped() {
        let upstream = "module go.etcd.io/etcd/server/v3\n\ngo 1.26.0\n\nreplace (\n\tgo.etcd.io/etcd/api/v3 => ../api\n\tgo.etcd.io/etcd/client/v3 => ../client/v3\n)\n\nreplace go.etcd.io/etcd => ./FORBIDDEN_DEPENDENCY\n";
        let go_mod = scratch_go_mod(&ETCD, upstream).unwrap();
        assert!(
            go_mod.contains("\tgo.etcd.io/etcd/api/v3 => go.etcd.io/etcd/api/v3 v3.6.16\n"),
            "{go_mod}"
        );
        assert!(
            go_mod.contains("\tgo.etcd.io/etcd/client/v3 => go.etcd.io/etcd/client/v3 v3.6.16\n"),
            "{go_mod}"
        );
        assert!(!go_mod.contains("FORBIDDEN"), "{go_mod}");
    }

    #[test]
    fn stamps_change_with_the_version() {
        assert!(KUBE_APISERVER.stamp().contains("k8s.io/kubernetes v1.37.2"));
        assert!(KUBE_APISERVER.stamp().contains("gitVersion=v1.37.2"));
        assert!(ETCD.stamp().contains("go.etcd.io/etcd/server/v3 v3.6.16"));
        assert!(TOXIPROXY.stamp().contains("github.com/Shopify/toxiproxy/v2 v2.12.0"));
        assert!(TOXIPROXY.stamp().contains("toxiproxy/v2.Version=2.12.0"));
        assert!(KUBE_NODE.stamp().contains("k8s.io/kubernetes/cmd/kube-proxy"));
        assert!(!KUBE_APISERVER.stamp().contains("k8s.io/kubernetes/cmd/kubelet"));
    }

    #[test]
    fn the_node_binaries_come_out_of_one_build_and_the_api_server_out_of_its_own() {
        assert_eq!(KUBE_APISERVER.outputs(), ["kube-apiserver"]);
        assert_eq!(
            KUBE_NODE.outputs(),
            ["kubelet", "kube-controller-manager", "kube-scheduler", "kube-proxy"]
        );
        assert_eq!(ETCD.outputs(), ["etcd"]);
        assert_eq!(KUBECTL.outputs(), ["kubectl"]);
        assert!(KUBECTL.stamp().contains("k8s.io/kubernetes v1.37.2"));
    }
}
