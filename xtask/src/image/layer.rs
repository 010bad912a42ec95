//! One image layer: a tar of files and directories written so that the
//! same inputs always give the same bytes (sorted paths, parents first,
//! mtime 0, owner root, no user or group names), and therefore the same
//! digest.

use std::collections::BTreeMap;
use std::io;

/// What one entry of a layer is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Content {
    File(Vec<u8>),
    Dir,
}

/// One entry: content and permission bits, owned by root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub content: Content,
    pub mode: u32,
}

/// A layer's entries by path inside the image, without the leading `/`
/// (`etc/passwd`). A `BTreeMap` keeps them sorted, and in sorted order a
/// directory always comes before what it holds.
pub type Tree = BTreeMap<String, Node>;

/// Adds `path` (absolute, as the image sees it) and every missing parent
/// directory (0755).
pub fn insert(tree: &mut Tree, path: &str, node: Node) {
    let relative = path.trim_start_matches('/');
    let parts: Vec<&str> = relative.split('/').collect();
    for end in 1..parts.len() {
        tree.entry(parts[..end].join("/")).or_insert(Node {
            content: Content::Dir,
            mode: 0o755,
        });
    }
    tree.insert(relative.to_string(), node);
}

/// The uncompressed tar of `tree`: what the config's `diff_ids` hash.
pub fn tar(tree: &Tree) -> io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, node) in tree {
        let mut header = tar::Header::new_ustar();
        header.set_mode(node.mode);
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(0);
        match &node.content {
            Content::File(bytes) => {
                header.set_entry_type(tar::EntryType::Regular);
                header.set_size(bytes.len() as u64);
                builder.append_data(&mut header, path, bytes.as_slice())?;
            }
            Content::Dir => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_size(0);
                builder.append_data(&mut header, format!("{path}/"), io::empty())?;
            }
        }
    }
    builder.into_inner()
}

/// `bytes` gzip-compressed with no file name and mtime 0, so the
/// compressed blob is as reproducible as the tar.
pub fn gzip(bytes: &[u8]) -> io::Result<Vec<u8>> {
    use std::io::Write;
    let mut encoder = flate2::GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes)?;
    encoder.finish()
}

/// The entries of a layer tar, by path without leading `/` or trailing
/// `/`: what an importer would unpack. Used to check an archive.
pub fn read(tar_bytes: &[u8]) -> io::Result<Tree> {
    let mut tree = Tree::new();
    let mut archive = tar::Archive::new(tar_bytes);
    for entry in archive.entries()? {
        let mut entry = entry?;
        let path = entry.path()?.to_string_lossy().trim_end_matches('/').to_string();
        let mode = entry.header().mode()?;
        let content = if entry.header().entry_type().is_dir() {
            Content::Dir
        } else {
            let mut bytes = Vec::new();
            io::Read::read_to_end(&mut entry, &mut bytes)?;
            Content::File(bytes)
        };
        tree.insert(path, Node { content, mode });
    }
    Ok(tree)
}

/// The paths of a tree that hold nothing else: files and empty
/// directories. A Dockerfile names exactly these; parents are implied.
pub fn leaves(tree: &Tree) -> Vec<String> {
    tree.keys()
        .filter(|path| {
            let prefix = format!("{path}/");
            !tree.keys().any(|other| other.starts_with(&prefix))
        })
        .map(|path| format!("/{path}"))
        .collect()
}
