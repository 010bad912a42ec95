//! `cargo xtask gen-crds [--check]`.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use anyhow::{Context, bail};

/// Every generated file, by path relative to the workspace root.
pub fn expected_files() -> BTreeMap<String, String> {
    vrouter_api::crds::all()
        .iter()
        .map(|crd| {
            (
                format!("deploy/crds/{}", vrouter_api::crds::file_name(crd)),
                vrouter_api::crds::to_yaml(crd),
            )
        })
        .collect()
}

pub fn run(root: &Path, check: bool) -> anyhow::Result<()> {
    let expected = expected_files();
    let dir = root.join("deploy/crds");
    // Files that no longer correspond to a CRD are stale too.
    let mut stale = Vec::new();
    if dir.is_dir() {
        for entry in fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
            let name = entry?.file_name().to_string_lossy().into_owned();
            let rel = format!("deploy/crds/{name}");
            if name.ends_with(".yaml") && !expected.contains_key(&rel) {
                stale.push(rel);
            }
        }
    }
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
    fs::create_dir_all(&dir)?;
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

    fn tree_with_generated_files() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        run(dir.path(), false).unwrap();
        dir
    }

    #[test]
    fn check_passes_on_freshly_generated_files() {
        let dir = tree_with_generated_files();
        run(dir.path(), true).unwrap();
    }

    #[test]
    fn check_fails_when_a_committed_file_differs() {
        let dir = tree_with_generated_files();
        let file = dir.path().join("deploy/crds/vrouterconfigs.vrouter.kojuro.date.yaml");
        fs::write(&file, fs::read_to_string(&file).unwrap().replace("Pending", "Waiting")).unwrap();
        let err = run(dir.path(), true).unwrap_err().to_string();
        assert!(err.contains("vrouterconfigs.vrouter.kojuro.date.yaml"), "{err}");
    }

    #[test]
    fn check_fails_on_a_stale_extra_file_and_generation_removes_it() {
        let dir = tree_with_generated_files();
        let stale = dir.path().join("deploy/crds/vroutergadgets.vrouter.kojuro.date.yaml");
        fs::write(&stale, "kind: CustomResourceDefinition\n").unwrap();
        assert!(
            run(dir.path(), true)
                .unwrap_err()
                .to_string()
                .contains("vroutergadgets")
        );
        run(dir.path(), false).unwrap();
        assert!(!stale.exists());
    }
}
