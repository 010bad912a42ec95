//! The "newc" cpio format the Linux kernel unpacks as an initramfs
//! (`Documentation/driver-api/early-userspace/buffer-format.rst`).
//!
//! The kernel unpacks archives placed back to back one after the other, later
//! entries replacing earlier ones, which is what lets a guest's own files be
//! laid over the shared base image without rebuilding it. It creates no
//! missing parent directories, so [`Archive`] adds them itself; and it
//! replaces an entry of another type (a directory `bin` would replace the
//! image's `bin -> usr/bin` symlink and take `/bin/sh` with it), so paths
//! under `/bin`, `/sbin`, `/lib` and `/lib64` are written under `/usr`, as
//! the image lays them out.

use std::collections::BTreeSet;

/// An uncompressed newc archive being built in memory.
#[derive(Debug, Default)]
pub struct Archive {
    bytes: Vec<u8>,
    directories: BTreeSet<String>,
    next_inode: u32,
}

const MAGIC: &str = "070701";
const TRAILER: &str = "TRAILER!!!";
const S_IFDIR: u32 = 0o040_000;
const S_IFREG: u32 = 0o100_000;
const S_IFLNK: u32 = 0o120_000;

impl Archive {
    pub fn new() -> Self {
        Archive::default()
    }

    /// A directory (and its missing parents), mode `0755`.
    pub fn dir(&mut self, path: &str) -> &mut Self {
        let mut path = relative(path);
        if ["bin", "sbin", "lib", "lib64"].contains(&path.as_str()) {
            path = format!("usr/{path}");
        }
        let path = path.as_str();
        if path.is_empty() {
            return self;
        }
        let mut prefix = String::new();
        for part in path.split('/') {
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(part);
            if self.directories.insert(prefix.clone()) {
                let name = prefix.clone();
                self.entry(&name, S_IFDIR | 0o755, b"");
            }
        }
        self
    }

    /// A regular file with permission bits `mode` (e.g. `0o755`).
    pub fn file(&mut self, path: &str, mode: u32, content: &[u8]) -> &mut Self {
        let path = relative(path);
        self.parent_of(&path);
        self.entry(&path, S_IFREG | (mode & 0o7777), content);
        self
    }

    /// A symbolic link at `path` pointing to `target`.
    pub fn symlink(&mut self, path: &str, target: &str) -> &mut Self {
        let path = relative(path);
        self.parent_of(&path);
        self.entry(&path, S_IFLNK | 0o777, target.as_bytes());
        self
    }

    /// Ends the archive with its trailer and returns the bytes.
    pub fn finish(mut self) -> Vec<u8> {
        self.entry(TRAILER, 0, b"");
        self.bytes
    }

    fn parent_of(&mut self, path: &str) {
        if let Some((parent, _)) = path.rsplit_once('/') {
            self.dir(parent);
        }
    }

    fn entry(&mut self, name: &str, mode: u32, data: &[u8]) {
        self.next_inode += 1;
        let name_size = name.len() + 1;
        let fields = [
            self.next_inode,
            mode,
            0, // uid
            0, // gid
            if mode & S_IFDIR != 0 { 2 } else { 1 },
            0, // mtime: fixed, so the same inputs give the same bytes
            u32::try_from(data.len()).expect("initramfs entries are far below 4 GiB"),
            0,
            0,
            0,
            0,
            u32::try_from(name_size).expect("short names"),
            0, // check
        ];
        self.bytes.extend_from_slice(MAGIC.as_bytes());
        for field in fields {
            self.bytes.extend_from_slice(format!("{field:08X}").as_bytes());
        }
        self.bytes.extend_from_slice(name.as_bytes());
        self.bytes.push(0);
        self.pad();
        self.bytes.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.bytes.len().is_multiple_of(4) {
            self.bytes.push(0);
        }
    }
}

/// `path` without its leading and trailing slashes, with the merged-`/usr`
/// directories resolved (`/bin/vbash` is `usr/bin/vbash`).
fn relative(path: &str) -> String {
    let path = path.trim_start_matches('/').trim_end_matches('/');
    for top in ["bin/", "sbin/", "lib/", "lib64/"] {
        if path.starts_with(top) {
            return format!("usr/{path}");
        }
    }
    path.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads back (name, mode, data) entries, checking the framing.
    fn entries(bytes: &[u8]) -> Vec<(String, u32, Vec<u8>)> {
        let mut out = Vec::new();
        let mut at = 0;
        loop {
            assert_eq!(&bytes[at..at + 6], MAGIC.as_bytes());
            let field = |i: usize| {
                let start = at + 6 + i * 8;
                u32::from_str_radix(std::str::from_utf8(&bytes[start..start + 8]).unwrap(), 16).unwrap() as usize
            };
            let (mode, size, name_size) = (field(1), field(6), field(11));
            let name_start = at + 110;
            let name = std::str::from_utf8(&bytes[name_start..name_start + name_size - 1])
                .unwrap()
                .to_owned();
            assert_eq!(bytes[name_start + name_size - 1], 0);
            let data_start = (name_start + name_size).next_multiple_of(4);
            let data = bytes[data_start..data_start + size].to_vec();
            at = (data_start + size).next_multiple_of(4);
            if name == TRAILER {
                assert_eq!(at, bytes.len());
                return out;
            }
            out.push((name, mode as u32, data));
        }
    }

    #[test]
    fn parents_come_first_once_and_data_is_exact() {
        let mut archive = Archive::new();
        archive.file("/usr/bin/tool", 0o755, b"abc");
        archive.file("/usr/bin/other", 0o644, b"");
        archive.symlink("/bin", "usr/bin");
        let bytes = archive.finish();
        assert_eq!(bytes.len() % 4, 0);
        let got = entries(&bytes);
        let names: Vec<&str> = got.iter().map(|(n, _, _)| n.as_str()).collect();
        assert_eq!(names, ["usr", "usr/bin", "usr/bin/tool", "usr/bin/other", "bin"]);
        assert_eq!(got[2].1, S_IFREG | 0o755);
        assert_eq!(got[2].2, b"abc");
        assert_eq!(got[3].1, S_IFREG | 0o644);
        assert_eq!(got[4], ("bin".into(), S_IFLNK | 0o777, b"usr/bin".to_vec()));
        assert_eq!(got[0].1, S_IFDIR | 0o755);
    }

    #[test]
    fn merged_usr_directories_are_never_replaced() {
        let mut archive = Archive::new();
        archive.file("/bin/vbash", 0o755, b"#!/bin/bash\n");
        archive.symlink("bin", "usr/bin");
        let names: Vec<String> = entries(&archive.finish()).into_iter().map(|(n, _, _)| n).collect();
        assert_eq!(names, ["usr", "usr/bin", "usr/bin/vbash", "bin"]);
    }

    #[test]
    fn odd_sizes_stay_aligned() {
        for len in 0..9 {
            let mut archive = Archive::new();
            archive.file(&"n".repeat(len + 1), 0o600, &vec![7u8; len]);
            let got = entries(&archive.finish());
            assert_eq!(got[0].2.len(), len);
        }
    }
}
