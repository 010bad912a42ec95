//! What the offline commands (`render`, `convert`) share: which files of a
//! path they read, and how they report one thing wrong in them.

use std::fmt;
use std::path::{Path, PathBuf};

/// The `*.yaml`/`*.yml` files of `path` (or `path` itself).
pub fn yaml_files(path: &Path) -> std::io::Result<Vec<PathBuf>> {
    if !path.is_dir() {
        return Ok(vec![path.to_owned()]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    Ok(files)
}

/// One thing wrong, located by file, object and field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub source: String,
    pub object: String,
    pub field: Option<String>,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.source, self.object)?;
        if let Some(field) = &self.field {
            write!(f, ": {field}")?;
        }
        write!(f, ": {}", self.message)
    }
}
