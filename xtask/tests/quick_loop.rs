//! The quick loop (`cargo xtask test --quick`) runs every test target except
//! those declared with `required-features = ["heavy-tests"]`
//! (docs/development.md, "The quick loop"). These tests prove the rule both
//! ways from the sources, so it stays true as tests are added:
//!
//! - a test target is declared heavy exactly when its own files name a heavy
//!   harness ([`HARNESSES`]) or a shared test module that does;
//! - every heavy harness refuses to start inside the quick loop, which also
//!   catches a heavy peer reached in a way no source scan sees.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use syn::visit::Visit;

/// The types whose construction starts a heavy peer: a real guest (QEMU),
/// libvirtd, the test node, the Go operator.
const HARNESSES: &[&str] = &["QemuGuest", "Libvirt", "TestNode", "GoOperator"];

/// Where each harness starts its peer: (file, type, function). Each must
/// refuse the quick loop before anything else.
const ENTRY_POINTS: &[(&str, &str, &str)] = &[
    ("crates/vrouter-test-vm/src/qemu.rs", "QemuGuest", "boot"),
    ("crates/vrouter-test-vm/src/libvirt.rs", "Libvirt", "start"),
    ("crates/vrouter-test-node/src/node.rs", "TestNode", "start"),
    ("operator/tests/common/go_operator.rs", "GoOperator", "spawn"),
];

const HEAVY_FEATURE: &str = "heavy-tests";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

struct TestTarget {
    package: String,
    name: String,
    root: PathBuf,
    heavy_declared: bool,
}

/// Every integration-test target of the workspace, as cargo sees it.
fn test_targets() -> Vec<TestTarget> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--no-deps", "--format-version", "1", "--offline"])
        .current_dir(workspace())
        .output()
        .expect("running cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut targets = Vec::new();
    for package in meta["packages"].as_array().unwrap() {
        for target in package["targets"].as_array().unwrap() {
            if target["kind"].as_array().unwrap().iter().all(|k| k != "test") {
                continue;
            }
            let required = target["required-features"].as_array().cloned().unwrap_or_default();
            targets.push(TestTarget {
                package: package["name"].as_str().unwrap().to_owned(),
                name: target["name"].as_str().unwrap().to_owned(),
                root: PathBuf::from(target["src_path"].as_str().unwrap()),
                heavy_declared: required.iter().any(|f| f == HEAVY_FEATURE),
            });
        }
    }
    assert!(
        targets.len() > 50,
        "cargo metadata listed only {} test targets",
        targets.len()
    );
    targets
}

/// The names a file's paths and `use` trees mention, segment by segment.
#[derive(Default)]
struct Names(BTreeSet<String>);

impl<'a> Visit<'a> for Names {
    fn visit_path_segment(&mut self, segment: &'a syn::PathSegment) {
        self.0.insert(segment.ident.to_string());
        syn::visit::visit_path_segment(self, segment);
    }
    fn visit_use_path(&mut self, path: &'a syn::UsePath) {
        self.0.insert(path.ident.to_string());
        syn::visit::visit_use_path(self, path);
    }
    fn visit_use_name(&mut self, name: &'a syn::UseName) {
        self.0.insert(name.ident.to_string());
    }
    fn visit_use_rename(&mut self, rename: &'a syn::UseRename) {
        self.0.insert(rename.ident.to_string());
    }
}

fn parse(file: &Path) -> syn::File {
    let text = fs::read_to_string(file).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
    syn::parse_file(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", file.display()))
}

fn names(file: &Path) -> BTreeSet<String> {
    let mut names = Names::default();
    names.visit_file(&parse(file));
    names.0
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module name a file declares (`common/mod.rs` is `common`).
fn module_name(file: &Path) -> String {
    let stem = file.file_stem().unwrap().to_string_lossy();
    if stem == "mod" || stem == "main" {
        return file
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
    }
    stem.into_owned()
}

/// A target's own files: its root and, beside it, the directory named after
/// it (`tests/helm.rs` and `tests/helm/`). The other files under `tests/` are
/// modules the targets share (`tests/common/`, `tests/support/`).
fn own_files(target: &TestTarget) -> Vec<PathBuf> {
    let mut files = vec![target.root.clone()];
    let root_dir = target.root.parent().unwrap();
    if target.root.file_stem().unwrap() != "main" {
        rust_files(&root_dir.join(target.root.file_stem().unwrap()), &mut files);
    }
    files
}

/// Names a target may mention that make it heavy: the harnesses, and every
/// shared test module of its package that (in turn) mentions one.
fn heavy_names(shared: &[PathBuf]) -> BTreeSet<String> {
    let mut heavy: BTreeSet<String> = HARNESSES.iter().map(|h| h.to_string()).collect();
    let mentioned: BTreeMap<String, BTreeSet<String>> = shared.iter().map(|f| (module_name(f), names(f))).collect();
    loop {
        let before = heavy.len();
        for (module, names) in &mentioned {
            if !names.is_disjoint(&heavy) {
                heavy.insert(module.clone());
            }
        }
        if heavy.len() == before {
            return heavy;
        }
    }
}

#[test]
fn a_test_target_is_heavy_exactly_when_it_reaches_a_heavy_harness() {
    let targets = test_targets();
    let mut wrong = Vec::new();
    let mut heavy_count = 0;
    for target in &targets {
        let tests_dir = target.root.parent().unwrap();
        let own: Vec<PathBuf> = own_files(target);
        let mut shared = Vec::new();
        rust_files(tests_dir, &mut shared);
        let siblings: BTreeSet<PathBuf> = targets
            .iter()
            .filter(|t| t.package == target.package)
            .flat_map(own_files)
            .collect();
        shared.retain(|f| !siblings.contains(f));
        let heavy = heavy_names(&shared);
        let reached: BTreeSet<String> = own
            .iter()
            .flat_map(|f| names(f))
            .filter(|n| heavy.contains(n))
            .collect();
        let needs_heavy = !reached.is_empty();
        heavy_count += usize::from(needs_heavy);
        if needs_heavy != target.heavy_declared {
            wrong.push(format!(
                "{}/{}: reaches {reached:?} but required-features {} \"{HEAVY_FEATURE}\"",
                target.package,
                target.name,
                if target.heavy_declared { "has" } else { "lacks" }
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "test targets in the wrong loop:\n{}",
        wrong.join("\n")
    );
    // The scan found the heavy targets there are (guests, node, Go operator).
    assert!(heavy_count >= 10, "only {heavy_count} heavy targets found");
}

/// The function `function` of `impl type_name` in `file`.
fn method(file: &syn::File, type_name: &str, function: &str) -> Option<syn::ImplItemFn> {
    file.items.iter().find_map(|item| {
        let syn::Item::Impl(imp) = item else { return None };
        let syn::Type::Path(self_ty) = &*imp.self_ty else {
            return None;
        };
        if !self_ty.path.is_ident(type_name) {
            return None;
        }
        imp.items.iter().find_map(|i| match i {
            syn::ImplItem::Fn(f) if f.sig.ident == function => Some(f.clone()),
            _ => None,
        })
    })
}

#[test]
fn every_heavy_harness_refuses_the_quick_loop_before_starting() {
    for (file, type_name, function) in ENTRY_POINTS {
        let parsed = parse(&workspace().join(file));
        let f = method(&parsed, type_name, function).unwrap_or_else(|| panic!("{file} has no {type_name}::{function}"));
        let mut first = Names::default();
        if let Some(stmt) = f.block.stmts.first() {
            first.visit_stmt(stmt);
        }
        assert!(
            first.0.contains("quick_loop") && first.0.contains("refuse_heavy"),
            "{type_name}::{function} ({file}) does not begin with quick_loop::refuse_heavy"
        );
    }
    // Every harness the scan looks for has its entry point checked here.
    let checked: BTreeSet<&str> = ENTRY_POINTS.iter().map(|(_, t, _)| *t).collect();
    assert_eq!(checked, HARNESSES.iter().copied().collect());
}
