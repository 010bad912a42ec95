//! Layer tars: parents implied, metadata fixed, bytes reproducible.

use super::layer::{Content, Node, Tree, gzip, insert, leaves, read, tar};

fn file(bytes: &[u8], mode: u32) -> Node {
    Node {
        content: Content::File(bytes.to_vec()),
        mode,
    }
}

fn sample(order: &[usize]) -> Tree {
    let entries = [
        ("/usr/lib/x/libc.so", file(b"libc", 0o755)),
        ("/etc/passwd", file(b"root:x:0:0\n", 0o644)),
        (
            "/tmp",
            Node {
                content: Content::Dir,
                mode: 0o1777,
            },
        ),
    ];
    let mut tree = Tree::new();
    for &i in order {
        insert(&mut tree, entries[i].0, entries[i].1.clone());
    }
    tree
}

#[test]
fn parents_are_added_once_as_plain_directories() {
    let tree = sample(&[0, 1, 2]);
    assert_eq!(
        tree.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "etc",
            "etc/passwd",
            "tmp",
            "usr",
            "usr/lib",
            "usr/lib/x",
            "usr/lib/x/libc.so"
        ]
    );
    assert_eq!(tree["usr/lib"].mode, 0o755);
    assert_eq!(tree["tmp"].mode, 0o1777);
    assert_eq!(leaves(&tree), ["/etc/passwd", "/tmp", "/usr/lib/x/libc.so"]);
}

#[test]
fn the_tar_reads_back_as_the_tree_with_fixed_metadata() {
    let tree = sample(&[0, 1, 2]);
    let bytes = tar(&tree).unwrap();
    assert_eq!(read(&bytes).unwrap(), tree);
    let mut archive = ::tar::Archive::new(bytes.as_slice());
    for entry in archive.entries().unwrap() {
        let header = entry.unwrap().header().clone();
        assert_eq!(header.mtime().unwrap(), 0);
        assert_eq!((header.uid().unwrap(), header.gid().unwrap()), (0, 0));
        assert_eq!(header.username().unwrap(), Some(""));
    }
}

#[test]
fn the_same_files_give_the_same_bytes_whatever_order_they_came_in() {
    let a = tar(&sample(&[0, 1, 2])).unwrap();
    let b = tar(&sample(&[2, 1, 0])).unwrap();
    assert_eq!(a, b);
    assert_eq!(gzip(&a).unwrap(), gzip(&b).unwrap());
    let mut changed = sample(&[0, 1, 2]);
    insert(&mut changed, "/etc/passwd", file(b"root:x:0:0\n", 0o600));
    assert_ne!(tar(&changed).unwrap(), a, "the mode is part of the layer");
}

#[test]
fn gzip_output_carries_no_time_or_name() {
    let compressed = gzip(b"hello").unwrap();
    // RFC 1952: FLG (byte 3) without FNAME, MTIME (bytes 4..8) zero.
    assert_eq!(compressed[3] & 0x08, 0);
    assert_eq!(&compressed[4..8], &[0, 0, 0, 0]);
}
