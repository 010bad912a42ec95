//! The image archive from its inputs: the binary and the places the other
//! files are read from. No cargo, no `ldd`, no daemon, so tests build it
//! from small stand-in files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::layer::{self, Content, Node, Tree};
use super::oci::{self, Empty, ImageConfig, RootFs, RunConfig};
use super::spec::{self, Entry, Source};

/// Where the build reads each kind of [`Source`].
pub struct Inputs {
    /// The operator binary.
    pub binary: PathBuf,
    /// The repository root, for [`Source::Repo`].
    pub repo: PathBuf,
    /// The root the system files ([`Source::Library`], [`Source::System`])
    /// are read under: `/` for a real image, a directory of stand-ins in
    /// tests.
    pub system_root: PathBuf,
}

/// A built archive and the numbers worth printing.
pub struct Built {
    pub archive: Vec<u8>,
    pub layer_tar_size: usize,
    pub layer_gzip_size: usize,
}

/// Builds the archive of the image `name` holding [`spec::FILES`].
pub fn build(name: &str, inputs: &Inputs) -> anyhow::Result<Built> {
    let tree = tree(spec::FILES, inputs)?;
    let layer_tar = layer::tar(&tree).context("writing the layer tar")?;
    let layer_gz = layer::gzip(&layer_tar).context("compressing the layer")?;
    let config = oci::to_json(&config(oci::digest(&layer_tar)))?;
    let files = oci::layout_files(name, &config, &layer_gz)?;
    Ok(Built {
        archive: oci::archive(&files).context("writing the layout archive")?,
        layer_tar_size: layer_tar.len(),
        layer_gzip_size: layer_gz.len(),
    })
}

/// The layer's entries, each file read from where its source says.
pub fn tree(entries: &[Entry], inputs: &Inputs) -> anyhow::Result<Tree> {
    let mut tree = Tree::new();
    for entry in entries {
        let content = match entry.source {
            Source::Binary => Content::File(read(&inputs.binary)?),
            Source::Library(path) | Source::System(path) => Content::File(read(&under(&inputs.system_root, path))?),
            Source::Repo(path) => Content::File(read(&inputs.repo.join(path))?),
            Source::EmptyDir => Content::Dir,
        };
        layer::insert(
            &mut tree,
            entry.path,
            Node {
                content,
                mode: entry.mode,
            },
        );
    }
    Ok(tree)
}

/// The image config: run as nonroot, the binary as entrypoint, the chart's
/// ports, the labels; `created` fixed at the epoch so the digest depends on
/// content only.
pub fn config(diff_id: String) -> ImageConfig {
    ImageConfig {
        created: "1970-01-01T00:00:00Z".into(),
        architecture: "amd64".into(),
        os: "linux".into(),
        config: RunConfig {
            user: spec::USER.into(),
            exposed_ports: spec::PORTS
                .iter()
                .map(|port| (format!("{port}/tcp"), Empty {}))
                .collect::<BTreeMap<_, _>>(),
            env: Vec::new(),
            entrypoint: vec![spec::ENTRYPOINT.into()],
            working_dir: "/".into(),
            labels: spec::labels(),
        },
        rootfs: RootFs {
            kind: "layers".into(),
            diff_ids: vec![diff_id],
        },
    }
}

/// `path` (absolute) read under `root`; `/` itself reads it as is.
fn under(root: &Path, path: &str) -> PathBuf {
    root.join(path.trim_start_matches('/'))
}

/// The file's bytes, following symlinks (`/lib64/ld-linux-x86-64.so.2` is
/// one on Debian; the image holds the file it points to).
fn read(path: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading {}", path.display()))
}
