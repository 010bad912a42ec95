//! Reads an image-layout archive back the way an importer does and checks
//! that it holds together: `oci-layout` names version 1.0.0, `index.json`
//! points at one manifest, the manifest at a config and layers, every blob
//! is present with the digest and size its descriptor claims, media types
//! are the OCI ones, each layer's uncompressed digest is the config's
//! `diff_id`, and Docker's `manifest.json` points at the same blobs.

use std::collections::BTreeMap;
use std::io::{self, Read};

use serde::de::DeserializeOwned;

use super::layer::{self, Tree};
use super::oci::{self, Descriptor, DockerManifest, ImageConfig, Index, Manifest};

/// Why an archive is not a valid image layout.
#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    #[error("reading the archive: {0}")]
    Io(#[from] io::Error),
    #[error("{0} is missing from the archive")]
    Missing(String),
    #[error("{path} is not the JSON expected: {source}")]
    Json { path: String, source: serde_json::Error },
    #[error("{what}: media type {actual}, expected {expected}")]
    MediaType {
        what: String,
        expected: String,
        actual: String,
    },
    #[error("{path}: {what} is {actual}, its descriptor says {expected}")]
    Mismatch {
        path: String,
        what: &'static str,
        expected: String,
        actual: String,
    },
    #[error("{0}")]
    Shape(String),
}

/// What a valid archive holds.
#[derive(Debug)]
pub struct Checked {
    /// `io.containerd.image.name` of the one manifest in `index.json`.
    pub name: String,
    pub manifest_digest: String,
    pub config: ImageConfig,
    /// The layers' entries, later layers over earlier ones.
    pub files: Tree,
}

/// Checks `archive` and returns what it holds.
pub fn check(archive: &[u8]) -> Result<Checked, LayoutError> {
    let files = members(archive)?;
    let layout: serde_json::Value = json(&files, "oci-layout")?;
    if layout["imageLayoutVersion"] != "1.0.0" {
        return Err(LayoutError::Shape(format!(
            "oci-layout is {layout}, expected version 1.0.0"
        )));
    }
    let index: Index = json(&files, "index.json")?;
    media_type("index.json", oci::INDEX, &index.media_type)?;
    let [manifest_desc] = index.manifests.as_slice() else {
        return Err(LayoutError::Shape(format!(
            "index.json lists {} manifests, expected one",
            index.manifests.len()
        )));
    };
    media_type("the index's manifest", oci::MANIFEST, &manifest_desc.media_type)?;
    let manifest: Manifest =
        serde_json::from_slice(blob(&files, manifest_desc)?).map_err(|source| LayoutError::Json {
            path: oci::blob_path(&manifest_desc.digest),
            source,
        })?;
    media_type("the manifest", oci::MANIFEST, &manifest.media_type)?;
    let (config, tree) = config_and_layers(&files, &manifest)?;
    docker_manifest(&files, &manifest)?;
    let name = manifest_desc
        .annotations
        .get("io.containerd.image.name")
        .ok_or_else(|| LayoutError::Shape("the index's manifest has no io.containerd.image.name".into()))?;
    Ok(Checked {
        name: name.clone(),
        manifest_digest: manifest_desc.digest.clone(),
        config,
        files: tree,
    })
}

/// The config, and the layers unpacked in order, each checked against its
/// `diff_id`.
fn config_and_layers(
    files: &BTreeMap<String, Vec<u8>>,
    manifest: &Manifest,
) -> Result<(ImageConfig, Tree), LayoutError> {
    media_type("the config", oci::CONFIG, &manifest.config.media_type)?;
    let config: ImageConfig =
        serde_json::from_slice(blob(files, &manifest.config)?).map_err(|source| LayoutError::Json {
            path: oci::blob_path(&manifest.config.digest),
            source,
        })?;
    if config.rootfs.diff_ids.len() != manifest.layers.len() {
        return Err(LayoutError::Shape(format!(
            "the config has {} diff_ids for {} layers",
            config.rootfs.diff_ids.len(),
            manifest.layers.len()
        )));
    }
    let mut tree = Tree::new();
    for (layer_desc, diff_id) in manifest.layers.iter().zip(&config.rootfs.diff_ids) {
        media_type("a layer", oci::LAYER_GZIP, &layer_desc.media_type)?;
        let mut tar = Vec::new();
        flate2::read::GzDecoder::new(blob(files, layer_desc)?).read_to_end(&mut tar)?;
        if &oci::digest(&tar) != diff_id {
            return Err(LayoutError::Mismatch {
                path: oci::blob_path(&layer_desc.digest),
                what: "the uncompressed digest",
                expected: diff_id.clone(),
                actual: oci::digest(&tar),
            });
        }
        tree.extend(layer::read(&tar)?);
    }
    Ok((config, tree))
}

/// Docker's index must name the same config and layers.
fn docker_manifest(files: &BTreeMap<String, Vec<u8>>, manifest: &Manifest) -> Result<(), LayoutError> {
    let docker: Vec<DockerManifest> = json(files, "manifest.json")?;
    let expected_layers: Vec<String> = manifest.layers.iter().map(|l| oci::blob_path(&l.digest)).collect();
    let [entry] = docker.as_slice() else {
        return Err(LayoutError::Shape("manifest.json should list one image".into()));
    };
    if entry.config != oci::blob_path(&manifest.config.digest) || entry.layers != expected_layers {
        return Err(LayoutError::Shape(format!(
            "manifest.json names {entry:?}, not the OCI manifest's blobs"
        )));
    }
    Ok(())
}

/// Every regular file of the archive by path.
fn members(archive: &[u8]) -> Result<BTreeMap<String, Vec<u8>>, LayoutError> {
    let mut files = BTreeMap::new();
    for entry in tar::Archive::new(archive).entries()? {
        let mut entry = entry?;
        if entry.header().entry_type().is_file() {
            let path = entry.path()?.to_string_lossy().into_owned();
            let mut bytes = Vec::new();
            entry.read_to_end(&mut bytes)?;
            files.insert(path, bytes);
        }
    }
    Ok(files)
}

/// The blob a descriptor points at, after checking its digest and size.
fn blob<'a>(files: &'a BTreeMap<String, Vec<u8>>, desc: &Descriptor) -> Result<&'a [u8], LayoutError> {
    let path = oci::blob_path(&desc.digest);
    let bytes = files.get(&path).ok_or_else(|| LayoutError::Missing(path.clone()))?;
    let actual = oci::digest(bytes);
    if actual != desc.digest {
        return Err(LayoutError::Mismatch {
            path,
            what: "the digest",
            expected: desc.digest.clone(),
            actual,
        });
    }
    if bytes.len() as u64 != desc.size {
        return Err(LayoutError::Mismatch {
            path,
            what: "the size",
            expected: desc.size.to_string(),
            actual: bytes.len().to_string(),
        });
    }
    Ok(bytes)
}

fn json<T: DeserializeOwned>(files: &BTreeMap<String, Vec<u8>>, path: &str) -> Result<T, LayoutError> {
    let bytes = files.get(path).ok_or_else(|| LayoutError::Missing(path.into()))?;
    serde_json::from_slice(bytes).map_err(|source| LayoutError::Json {
        path: path.into(),
        source,
    })
}

fn media_type(what: &str, expected: &str, actual: &str) -> Result<(), LayoutError> {
    if actual == expected {
        return Ok(());
    }
    Err(LayoutError::MediaType {
        what: what.into(),
        expected: expected.into(),
        actual: actual.into(),
    })
}
