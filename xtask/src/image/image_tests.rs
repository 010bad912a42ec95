//! The archive `cargo xtask image` writes, built from stand-in files (no
//! release build): a valid OCI layout, reproducible, and the same image as
//! the Dockerfile's final stage; a change to either side alone is caught.

use std::collections::BTreeMap;

use super::build::{Inputs, build};
use super::check::{Checked, LayoutError, check};
use super::dockerfile::final_stage;
use super::layer::{self, Content, Node};
use super::matches::differences;
use super::oci::{self, Empty};
use super::spec::{self, Source};

struct Fixture {
    _dir: tempfile::TempDir,
    inputs: Inputs,
}

/// Inputs whose binary holds `binary` and whose system files are small
/// stand-ins; the repository files are the real ones.
fn fixture(binary: &[u8]) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let system_root = dir.path().join("system");
    for entry in spec::FILES {
        if let Source::Library(path) | Source::System(path) = entry.source {
            let file = system_root.join(path.trim_start_matches('/'));
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(&file, format!("stand-in for {path}")).unwrap();
        }
    }
    let binary_path = dir.path().join("vrouter-operator");
    std::fs::write(&binary_path, binary).unwrap();
    Fixture {
        _dir: dir,
        inputs: Inputs {
            binary: binary_path,
            repo: crate::workspace_root(),
            system_root,
        },
    }
}

fn built(binary: &[u8]) -> Vec<u8> {
    build(&spec::default_name(), &fixture(binary).inputs).unwrap().archive
}

fn dockerfile() -> String {
    std::fs::read_to_string(crate::workspace_root().join("Dockerfile")).unwrap()
}

/// The regular files of an archive, by path.
fn members(archive: &[u8]) -> BTreeMap<String, Vec<u8>> {
    layer::read(archive)
        .unwrap()
        .into_iter()
        .filter_map(|(path, node)| match node.content {
            Content::File(bytes) => Some((path, bytes)),
            Content::Dir => None,
        })
        .collect()
}

fn json(bytes: &[u8]) -> serde_json::Value {
    serde_json::from_slice(bytes).unwrap()
}

#[test]
fn the_archive_is_a_valid_image_layout_holding_every_file() {
    let archive = built(b"binary");
    let checked = check(&archive).unwrap();
    assert_eq!(checked.name, spec::default_name());
    let files = &checked.files;
    assert_eq!(files["vrouter-operator"].content, Content::File(b"binary".to_vec()));
    assert_eq!(files["vrouter-operator"].mode, 0o755);
    assert_eq!(files["tmp"].mode, 0o1777);
    assert_eq!(
        files["etc/passwd"].content,
        Content::File(std::fs::read(crate::workspace_root().join("deploy/image/passwd")).unwrap())
    );
    let paths: Vec<String> = spec::FILES.iter().map(|e| e.path.to_string()).collect();
    assert_eq!(layer::leaves(files), {
        let mut sorted = paths;
        sorted.sort();
        sorted
    });
}

/// Field names as the image spec spells them: the checker reads with the
/// same types as the writer, so a misspelt field would pass it unnoticed.
#[test]
fn the_json_documents_use_the_spec_names() {
    let files = members(&built(b"binary"));
    let index = json(&files["index.json"]);
    assert_eq!(index["schemaVersion"], 2);
    assert_eq!(index["mediaType"], oci::INDEX);
    let manifest_desc = &index["manifests"][0];
    assert_eq!(manifest_desc["platform"]["architecture"], "amd64");
    assert_eq!(
        manifest_desc["annotations"]["org.opencontainers.image.ref.name"],
        env!("CARGO_PKG_VERSION")
    );
    let digest = manifest_desc["digest"].as_str().unwrap();
    let manifest = json(&files[&oci::blob_path(digest)]);
    let config_digest = manifest["config"]["digest"].as_str().unwrap();
    let config = json(&files[&oci::blob_path(config_digest)]);
    let run = &config["config"];
    assert_eq!(run["User"], "65532:65532");
    assert_eq!(run["Entrypoint"], serde_json::json!(["/vrouter-operator"]));
    assert_eq!(run["ExposedPorts"]["9443/tcp"], serde_json::json!({}));
    assert_eq!(run["Labels"]["org.opencontainers.image.licenses"], "Apache-2.0");
    assert_eq!(config["rootfs"]["type"], "layers");
    assert!(config["rootfs"]["diff_ids"][0].as_str().unwrap().starts_with("sha256:"));
    assert_eq!(json(&files["oci-layout"])["imageLayoutVersion"], "1.0.0");
    assert_eq!(
        json(&files["manifest.json"])[0]["Config"],
        oci::blob_path(config_digest)
    );
}

#[test]
fn the_same_binary_gives_the_same_archive_and_digest() {
    let first = built(b"binary");
    let second = built(b"binary");
    assert_eq!(first, second);
    let other = check(&built(b"another binary")).unwrap();
    assert_ne!(check(&first).unwrap().manifest_digest, other.manifest_digest);
}

#[test]
fn the_dockerfile_describes_the_image_xtask_builds() {
    let checked = check(&built(b"binary")).unwrap();
    let stage = final_stage(&dockerfile()).unwrap();
    assert_eq!(
        differences(&stage, &checked, &crate::workspace_root()),
        Vec::<String>::new()
    );
}

#[test]
fn a_dockerfile_changed_alone_differs_from_the_image() {
    let checked = check(&built(b"binary")).unwrap();
    let original = dockerfile();
    let libgcc = "/lib/x86_64-linux-gnu/libgcc_s.so.1";
    for (from, to) in [
        ("\nFROM scratch\n", "\nFROM gcr.io/distroless/cc-debian12:nonroot\n"),
        ("USER 65532:65532", "USER 0:0"),
        ("EXPOSE 8081 8443 9443", "EXPOSE 8081 8443"),
        (
            "ENTRYPOINT [\"/vrouter-operator\"]",
            "ENTRYPOINT [\"/vrouter-operator\", \"run\"]",
        ),
        (
            "org.opencontainers.image.licenses=",
            "org.opencontainers.image.license=",
        ),
        (libgcc, ""),
        ("USER 65532:65532", "USER 65532:65532\nENV RUST_LOG=info"),
        (
            "USER 65532:65532",
            "USER 65532:65532\nCOPY deploy/image/group /etc/group-",
        ),
        ("deploy/image/nsswitch.conf", "deploy/image/passwd"),
    ] {
        assert!(
            original.contains(from),
            "the Dockerfile no longer has {from:?}: update this test"
        );
        let stage = final_stage(&original.replacen(from, to, 1)).unwrap();
        let found = differences(&stage, &checked, &crate::workspace_root());
        assert!(!found.is_empty(), "replacing {from:?} by {to:?} went unnoticed");
    }
}

#[test]
fn an_image_changed_alone_differs_from_the_dockerfile() {
    let stage = final_stage(&dockerfile()).unwrap();
    type Change = fn(&mut Checked);
    let changes: [(&str, Change); 7] = [
        ("user", |c| c.config.config.user = "0".into()),
        ("port", |c| {
            c.config.config.exposed_ports.insert("9090/tcp".into(), Empty {});
        }),
        ("label", |c| {
            c.config.config.labels.remove("org.opencontainers.image.version");
        }),
        ("env", |c| c.config.config.env.push("RUST_LOG=info".into())),
        ("missing file", |c| {
            c.files.remove("etc/nsswitch.conf");
        }),
        ("extra file", |c| {
            let node = Node {
                content: Content::File(b"x".to_vec()),
                mode: 0o644,
            };
            c.files.insert("etc/hosts".into(), node);
        }),
        ("passwd content", |c| {
            c.files.get_mut("etc/passwd").unwrap().content = Content::File(b"root:x:0:0::/:/bin/sh\n".to_vec());
        }),
    ];
    for (what, change) in changes {
        let mut checked = check(&built(b"binary")).unwrap();
        change(&mut checked);
        let found = differences(&stage, &checked, &crate::workspace_root());
        assert!(!found.is_empty(), "a changed {what} went unnoticed");
    }
}

#[test]
fn a_broken_layout_is_refused() {
    let files = members(&built(b"binary"));
    let index = json(&files["index.json"]);
    let manifest_path = oci::blob_path(index["manifests"][0]["digest"].as_str().unwrap());
    let manifest = json(&files[&manifest_path]);
    let layer_path = oci::blob_path(manifest["layers"][0]["digest"].as_str().unwrap());
    /// Breaks the archive's files, given the manifest's and the layer's paths.
    type Breakage = fn(&mut BTreeMap<String, Vec<u8>>, &str, &str);
    let breakages: [(&str, Breakage); 5] = [
        ("a flipped layer byte", |f, _, layer| {
            let blob = f.get_mut(layer).unwrap();
            let last = blob.len() - 1;
            blob[last] ^= 1;
        }),
        ("a missing layer", |f, _, layer| {
            f.remove(layer);
        }),
        ("no oci-layout", |f, _, _| {
            f.remove("oci-layout");
        }),
        ("a Docker media type in the index", |f, _, _| {
            let text = String::from_utf8(f["index.json"].clone()).unwrap();
            let docker = "application/vnd.docker.distribution.manifest.v2+json";
            f.insert("index.json".into(), text.replace(oci::MANIFEST, docker).into_bytes());
        }),
        ("a manifest.json naming another layer", |f, manifest, _| {
            let text = String::from_utf8(f["manifest.json"].clone()).unwrap();
            let other = manifest.trim_start_matches("blobs/sha256/");
            let start = text.find("\"Layers\":[\"blobs/sha256/").unwrap() + 24;
            let edited = format!("{}{other}{}", &text[..start], &text[start + 64..]);
            f.insert("manifest.json".into(), edited.into_bytes());
        }),
    ];
    for (what, breakage) in breakages {
        let mut broken = files.clone();
        breakage(&mut broken, &manifest_path, &layer_path);
        let result = check(&oci::archive(&broken).unwrap());
        assert!(result.is_err(), "{what} went unnoticed");
    }
    let mut flipped = files.clone();
    flipped.get_mut(&layer_path).unwrap()[0] ^= 1;
    assert!(matches!(
        check(&oci::archive(&flipped).unwrap()),
        Err(LayoutError::Mismatch { what: "the digest", .. })
    ));
}

#[test]
fn the_image_exposes_the_ports_the_chart_uses() {
    let values =
        std::fs::read_to_string(crate::workspace_root().join("deploy/helm/vrouter-operator/values.yaml")).unwrap();
    let values: serde_yaml::Value = serde_yaml::from_str(&values).unwrap();
    let mut chart: Vec<u16> = ["health", "metrics", "webhook"]
        .iter()
        .map(|key| values[key]["port"].as_u64().unwrap() as u16)
        .collect();
    chart.sort();
    assert_eq!(chart, spec::PORTS);
}
