//! `cargo xtask gen-crds [--check]`.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use anyhow::{Context, bail};

/// Every directory that holds a copy of the generated CRDs: the plain
/// manifests, and the Helm chart's `crds/` (which Helm installs before its
/// templates). Both copies are written and checked alike.
pub const CRD_DIRS: [&str; 2] = ["deploy/crds", "deploy/helm/vrouter-operator/crds"];

/// Every generated file, by path relative to the workspace root.
pub fn expected_files() -> BTreeMap<String, String> {
    let crds = vrouter_api::crds::all();
    CRD_DIRS
        .iter()
        .flat_map(|dir| {
            crds.iter().map(move |crd| {
                (
                    format!("{dir}/{}", vrouter_api::crds::file_name(crd)),
                    vrouter_api::crds::to_yaml(crd),
                )
            })
        })
        .collect()
}

/// YAML files in the CRD directories that no longer correspond to a CRD.
fn stale_files(root: &Path, expected: &BTreeMap<String, String>) -> anyhow::Result<Vec<String>> {
    let mut stale = Vec::new();
    for dir in CRD_DIRS {
        let path = root.join(dir);
        if !path.is_dir() {
            continue;
        }
        for entry in fs::read_dir(&path).with_context(|| format!("reading {}", path.display()))? {
            let name = entry?.file_name().to_string_lossy().into_owned();
            let rel = format!("{dir}/{name}");
            if name.ends_with(".yaml") && !expected.contains_key(&rel) {
                stale.push(rel);
            }
        }
    }
    Ok(stale)
}

pub fn run(root: &Path, check: bool) -> anyhow::Result<()> {
    let expected = expected_files();
    let stale = stale_files(root, &expected)?;
    if check {
        let mut differing: Vec<String> = expected
            .iter()
            .filter(|(rel, text)| fs::read_to_string(root.join(rel)).ok().as_deref() != Some(text.as_str()))
            .map(|(rel, _)| rel.clone())
            .collect();
        differing.extend(stale);
        if !differing.is_empty() {
            bail!(
                "generated CRDs are out of date: {}\nrun `cargo xtask gen-crds` and commit the result",
                differing.join(", ")
            );
        }
        println!("gen-crds: {} files up to date", expected.len());
        return Ok(());
    }
    for dir in CRD_DIRS {
        fs::create_dir_all(root.join(dir))?;
    }
    for rel in &stale {
        fs::remove_file(root.join(rel))?;
    }
    for (rel, text) in &expected {
        fs::write(root.join(rel), text).with_context(|| format!("writing {rel}"))?;
    }
    println!("gen-crds: wrote {} files", expected.len());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHART_CRDS: &str = "deploy/helm/vrouter-operator/crds";

    fn tree_with_generated_files() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        run(dir.path(), false).unwrap();
        dir
    }

    #[test]
    fn generation_writes_every_crd_to_both_directories() {
        let dir = tree_with_generated_files();
        let count = vrouter_api::crds::all().len();
        for crd_dir in CRD_DIRS {
            let files = fs::read_dir(dir.path().join(crd_dir)).unwrap().count();
            assert_eq!(files, count, "{crd_dir}");
        }
        let plain = fs::read_to_string(dir.path().join("deploy/crds/vroutertargets.vrouter.kojuro.date.yaml")).unwrap();
        let chart = fs::read_to_string(
            dir.path()
                .join(CHART_CRDS)
                .join("vroutertargets.vrouter.kojuro.date.yaml"),
        )
        .unwrap();
        assert_eq!(plain, chart);
    }

    #[test]
    fn check_passes_on_freshly_generated_files() {
        let dir = tree_with_generated_files();
        run(dir.path(), true).unwrap();
    }

    #[test]
    fn check_fails_when_a_committed_file_differs() {
        for crd_dir in CRD_DIRS {
            let dir = tree_with_generated_files();
            let rel = format!("{crd_dir}/vrouterconfigs.vrouter.kojuro.date.yaml");
            let file = dir.path().join(&rel);
            fs::write(&file, fs::read_to_string(&file).unwrap().replace("Pending", "Waiting")).unwrap();
            let err = run(dir.path(), true).unwrap_err().to_string();
            // The message names the one differing copy, not its twin.
            assert!(
                err.contains(&format!("{rel},")) || err.contains(&format!("{rel}\n")),
                "{err}"
            );
            assert_eq!(err.matches("vrouterconfigs").count(), 1, "{err}");
        }
    }

    #[test]
    fn check_fails_when_the_chart_copy_is_missing() {
        let dir = tree_with_generated_files();
        let rel = format!("{CHART_CRDS}/vrouterbindings.vrouter.kojuro.date.yaml");
        fs::remove_file(dir.path().join(&rel)).unwrap();
        let err = run(dir.path(), true).unwrap_err().to_string();
        assert!(err.contains(&rel), "{err}");
        run(dir.path(), false).unwrap();
        run(dir.path(), true).unwrap();
    }

    #[test]
    fn check_fails_on_a_stale_extra_file_and_generation_removes_it() {
        for crd_dir in CRD_DIRS {
            let dir = tree_with_generated_files();
            let rel = format!("{crd_dir}/vroutergadgets.vrouter.kojuro.date.yaml");
            let stale = dir.path().join(&rel);
            fs::write(&stale, "kind: CustomResourceDefinition\n").unwrap();
            let err = run(dir.path(), true).unwrap_err().to_string();
            assert!(err.contains(&rel), "{err}");
            run(dir.path(), false).unwrap();
            assert!(!stale.exists(), "{rel}");
        }
    }
}
