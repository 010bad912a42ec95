//! The OCI image-layout archive: a tar holding `oci-layout`, `index.json`
//! and `blobs/sha256/<digest>` (image-spec v1.1 "image layout"), plus
//! Docker's `manifest.json` (the index of Docker's save/load format)
//! pointing at the same blobs. containerd (`ctr images import`) reads
//! `index.json`; `manifest.json` is for a loader that knows only Docker's
//! format.

use std::collections::BTreeMap;
use std::io;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub const INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const CONFIG: &str = "application/vnd.oci.image.config.v1+json";
pub const LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

/// `sha256:<hex>` of `bytes`.
pub fn digest(bytes: &[u8]) -> String {
    let hash = Sha256::digest(bytes);
    let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// A content descriptor (image-spec `descriptor.md`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    pub media_type: String,
    pub digest: String,
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<Platform>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl Descriptor {
    pub fn of(media_type: &str, bytes: &[u8]) -> Self {
        Self {
            media_type: media_type.to_string(),
            digest: digest(bytes),
            size: bytes.len() as u64,
            platform: None,
            annotations: BTreeMap::new(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Platform {
    pub architecture: String,
    pub os: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Index {
    pub schema_version: u32,
    pub media_type: String,
    pub manifests: Vec<Descriptor>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub schema_version: u32,
    pub media_type: String,
    pub config: Descriptor,
    pub layers: Vec<Descriptor>,
}

/// The image config (image-spec `config.md`), the fields this image sets.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageConfig {
    pub created: String,
    pub architecture: String,
    pub os: String,
    pub config: RunConfig,
    pub rootfs: RootFs,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct RunConfig {
    pub user: String,
    #[serde(default)]
    pub exposed_ports: BTreeMap<String, Empty>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    pub entrypoint: Vec<String>,
    pub working_dir: String,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// `{}`: the value of each `ExposedPorts` key.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Empty {}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootFs {
    #[serde(rename = "type")]
    pub kind: String,
    pub diff_ids: Vec<String>,
}

/// One entry of Docker's `manifest.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct DockerManifest {
    pub config: String,
    pub repo_tags: Vec<String>,
    pub layers: Vec<String>,
}

/// The path of a blob inside the layout.
pub fn blob_path(digest: &str) -> String {
    format!("blobs/sha256/{}", digest.trim_start_matches("sha256:"))
}

/// The tag part of an image name (`latest` when it has none), which OCI
/// layouts record as `org.opencontainers.image.ref.name`.
pub fn tag_of(name: &str) -> &str {
    let last = name.rsplit('/').next().unwrap_or(name);
    last.rsplit_once(':').map_or("latest", |(_, tag)| tag)
}

/// The files of the layout archive, by path: every blob, `index.json`
/// naming the image `name`, `manifest.json` and `oci-layout`.
pub fn layout_files(name: &str, config: &[u8], layer_gz: &[u8]) -> io::Result<BTreeMap<String, Vec<u8>>> {
    let config_desc = Descriptor::of(CONFIG, config);
    let layer_desc = Descriptor::of(LAYER_GZIP, layer_gz);
    let manifest = to_json(&Manifest {
        schema_version: 2,
        media_type: MANIFEST.into(),
        config: config_desc.clone(),
        layers: vec![layer_desc.clone()],
    })?;
    let mut manifest_desc = Descriptor::of(MANIFEST, &manifest);
    manifest_desc.platform = Some(Platform {
        architecture: "amd64".into(),
        os: "linux".into(),
    });
    manifest_desc.annotations = BTreeMap::from([
        ("io.containerd.image.name".to_string(), name.to_string()),
        (
            "org.opencontainers.image.ref.name".to_string(),
            tag_of(name).to_string(),
        ),
    ]);
    let index = Index {
        schema_version: 2,
        media_type: INDEX.into(),
        manifests: vec![manifest_desc.clone()],
    };
    let docker = vec![DockerManifest {
        config: blob_path(&config_desc.digest),
        repo_tags: vec![name.to_string()],
        layers: vec![blob_path(&layer_desc.digest)],
    }];
    Ok(BTreeMap::from([
        (blob_path(&config_desc.digest), config.to_vec()),
        (blob_path(&layer_desc.digest), layer_gz.to_vec()),
        (blob_path(&manifest_desc.digest), manifest),
        ("index.json".to_string(), to_json(&index)?),
        ("manifest.json".to_string(), to_json(&docker)?),
        ("oci-layout".to_string(), br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec()),
    ]))
}

/// Compact JSON: the bytes whose digest names a blob.
pub fn to_json<T: Serialize>(value: &T) -> io::Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(io::Error::other)
}

/// The archive itself: `files` under their directories, in sorted order,
/// with the same fixed metadata as a layer.
pub fn archive(files: &BTreeMap<String, Vec<u8>>) -> io::Result<Vec<u8>> {
    let mut tree = super::layer::Tree::new();
    for (path, bytes) in files {
        super::layer::insert(
            &mut tree,
            path,
            super::layer::Node {
                content: super::layer::Content::File(bytes.clone()),
                mode: 0o644,
            },
        );
    }
    super::layer::tar(&tree)
}
