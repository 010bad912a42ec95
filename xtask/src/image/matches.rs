//! Whether an image archive and the Dockerfile's final stage describe the
//! same image: user, entrypoint, ports, labels, environment, and the same
//! files (the files copied from the build context with the same bytes).
//! The Dockerfile cannot be built here, so this comparison is what keeps
//! it honest; `cargo xtask image` runs it on every archive it writes.

use std::collections::BTreeSet;
use std::path::Path;

use super::check::Checked;
use super::dockerfile::FinalStage;
use super::layer::{self, Content};

/// Every way the two differ, each as a sentence; empty when they agree.
pub fn differences(stage: &FinalStage, image: &Checked, repo: &Path) -> Vec<String> {
    let run = &image.config.config;
    let mut found = Vec::new();
    if stage.base != "scratch" {
        found.push(format!(
            "the final stage is FROM {}: a base image adds files the archive does not hold (the archive starts from nothing, like FROM scratch)",
            stage.base
        ));
    }
    let mut differ = |what: &str, dockerfile: String, archive: String| {
        if dockerfile != archive {
            found.push(format!(
                "{what}: the Dockerfile has {dockerfile}, the image has {archive}"
            ));
        }
    };
    differ(
        "USER",
        format!("{:?}", stage.user.as_deref().unwrap_or("")),
        format!("{:?}", run.user),
    );
    differ(
        "ENTRYPOINT",
        format!("{:?}", stage.entrypoint.clone().unwrap_or_default()),
        format!("{:?}", run.entrypoint),
    );
    let exposed: BTreeSet<String> = run.exposed_ports.keys().cloned().collect();
    differ("EXPOSE", format!("{:?}", stage.ports), format!("{exposed:?}"));
    differ("LABEL", format!("{:?}", stage.labels), format!("{:?}", run.labels));
    differ("ENV", format!("{:?}", stage.env), format!("{:?}", run.env));
    found.extend(file_differences(stage, image, repo));
    found
}

/// The paths only one side has, and context files whose bytes differ.
fn file_differences(stage: &FinalStage, image: &Checked, repo: &Path) -> Vec<String> {
    let copied: BTreeSet<String> = stage.copies.iter().flat_map(|c| c.targets()).map(|(_, t)| t).collect();
    let held: BTreeSet<String> = layer::leaves(&image.files).into_iter().collect();
    let mut found = Vec::new();
    for path in copied.difference(&held) {
        found.push(format!("{path} is copied by the Dockerfile but not in the image"));
    }
    for path in held.difference(&copied) {
        found.push(format!(
            "{path} is in the image but no COPY of the Dockerfile writes it"
        ));
    }
    for copy in stage.copies.iter().filter(|c| c.from.is_none()) {
        for (source, target) in copy.targets() {
            let in_image = image.files.get(target.trim_start_matches('/'));
            let in_repo = std::fs::read(repo.join(&source)).ok();
            match (in_image.map(|n| &n.content), in_repo) {
                (Some(Content::File(image_bytes)), Some(repo_bytes)) if *image_bytes == repo_bytes => {}
                (_, None) => found.push(format!("COPY source {source} is not a file of the repository")),
                (Some(_), Some(_)) => found.push(format!("{target} in the image is not {source}")),
                (None, Some(_)) => {} // reported above as missing from the image
            }
        }
    }
    found
}
