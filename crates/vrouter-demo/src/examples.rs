//! Reads the example manifests: every `*.yaml` of a directory, in name
//! order (the examples are numbered in the order a person applies them).

use std::path::Path;

use anyhow::Context as _;
use vrouter_api::manifest::parse_documents;

use crate::plan::Source;

pub fn load(dir: &Path) -> anyhow::Result<Vec<Source>> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("reading the examples directory {}", dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    if files.is_empty() {
        anyhow::bail!("no *.yaml files in {}", dir.display());
    }
    let mut sources = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let file = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        for manifest in parse_documents(&text, &path.display().to_string())? {
            sources.push(Source {
                file: file.clone(),
                manifest,
            });
        }
    }
    Ok(sources)
}
