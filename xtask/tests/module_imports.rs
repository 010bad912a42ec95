//! The operator's modules import downward only (operator/src/lib.rs):
//! - no cycle between modules (a parent naming its own children, as a
//!   `mod.rs` does to declare and re-export them, is not an arrow back), nor
//!   between controllers taken whole;
//! - nothing under `runtime/` imports a controller;
//! - outside `controllers/<kind>/`, that controller is reached only through
//!   what its `mod.rs` exposes, never its inner modules.
//!
//! Modules are found as the compiler does, from `lib.rs` through `mod`
//! declarations, leaving out `#[cfg(test)]` modules (test code may reach
//! anywhere). Every `use` and every path in code starting with `crate::`,
//! `super::`, `self::` or a child module's name is an arrow to the deepest
//! module the path names.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use syn::visit::Visit;

type ModPath = Vec<String>;

fn operator_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../operator/src")
}

fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs
        .iter()
        .any(|a| a.path().is_ident("cfg") && a.meta.require_list().is_ok_and(|l| l.tokens.to_string() == "test"))
}

fn path_attr(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find(|a| a.path().is_ident("path")).map(|a| {
        let syn::Meta::NameValue(nv) = &a.meta else {
            panic!("#[path] without a value")
        };
        let syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Str(s), ..
        }) = &nv.value
        else {
            panic!("#[path] is not a string")
        };
        s.value()
    })
}

/// Every non-test module of the crate rooted at `lib`, by module path.
fn modules(lib: &Path) -> BTreeMap<ModPath, Vec<syn::Item>> {
    let items = parse(lib).items;
    let mut out = BTreeMap::new();
    collect(Vec::new(), items, lib.parent().unwrap().to_path_buf(), &mut out);
    out
}

fn parse(file: &Path) -> syn::File {
    let text = fs::read_to_string(file).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
    syn::parse_file(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", file.display()))
}

fn collect(at: ModPath, items: Vec<syn::Item>, child_dir: PathBuf, out: &mut BTreeMap<ModPath, Vec<syn::Item>>) {
    for item in &items {
        let syn::Item::Mod(m) = item else { continue };
        if is_cfg_test(&m.attrs) {
            continue;
        }
        let mut path = at.clone();
        path.push(m.ident.to_string());
        match &m.content {
            Some((_, inner)) => {
                let dir = child_dir.join(m.ident.to_string());
                collect(path, inner.clone(), dir, out);
            }
            None => {
                let (child_file, dir) = module_file(&child_dir, &m.ident.to_string(), path_attr(&m.attrs));
                let items = parse(&child_file).items;
                collect(path, items, dir, out);
            }
        }
    }
    out.insert(at, items);
}

/// The file of `mod name;` declared in a module whose children live in `dir`,
/// and the folder that file's own children live in.
fn module_file(dir: &Path, name: &str, path: Option<String>) -> (PathBuf, PathBuf) {
    if let Some(path) = path {
        let file = dir.parent().unwrap().join(path);
        let children = file.with_extension("");
        return (file, children);
    }
    let flat = dir.join(format!("{name}.rs"));
    if flat.exists() {
        return (flat, dir.join(name));
    }
    (dir.join(name).join("mod.rs"), dir.join(name))
}

/// The paths one module names, before resolution.
#[derive(Default)]
struct Named {
    paths: Vec<Vec<String>>,
}

impl Named {
    fn use_tree(&mut self, prefix: &[String], tree: &syn::UseTree) {
        let with = |name: String| {
            let mut p = prefix.to_vec();
            p.push(name);
            p
        };
        match tree {
            syn::UseTree::Path(p) => self.use_tree(&with(p.ident.to_string()), &p.tree),
            syn::UseTree::Name(n) => self.paths.push(with(n.ident.to_string())),
            syn::UseTree::Rename(r) => self.paths.push(with(r.ident.to_string())),
            syn::UseTree::Glob(_) => self.paths.push(prefix.to_vec()),
            syn::UseTree::Group(g) => g.items.iter().for_each(|t| self.use_tree(prefix, t)),
        }
    }
}

impl<'a> Visit<'a> for Named {
    fn visit_item_mod(&mut self, _: &'a syn::ItemMod) {
        // A nested module is a module of its own.
    }

    fn visit_item_use(&mut self, u: &'a syn::ItemUse) {
        if !is_cfg_test(&u.attrs) {
            self.use_tree(&[], &u.tree);
        }
    }

    fn visit_item_fn(&mut self, f: &'a syn::ItemFn) {
        if !is_cfg_test(&f.attrs) {
            syn::visit::visit_item_fn(self, f);
        }
    }

    fn visit_path(&mut self, p: &'a syn::Path) {
        self.paths
            .push(p.segments.iter().map(|s| s.ident.to_string()).collect());
        syn::visit::visit_path(self, p);
    }
}

/// The module `path` (named inside module `from`) leads to: the deepest known
/// module it passes through, or `None` for another crate or a local item.
fn resolve(from: &ModPath, path: &[String], known: &BTreeSet<ModPath>) -> Option<ModPath> {
    let (mut at, rest) = match path.first().map(String::as_str) {
        Some("crate") => (Vec::new(), &path[1..]),
        Some("self") => (from.clone(), &path[1..]),
        Some("super") => {
            let ups = path.iter().take_while(|s| *s == "super").count();
            (from[..from.len().checked_sub(ups)?].to_vec(), &path[ups..])
        }
        Some(first) if known.contains(&[from.as_slice(), &[first.to_owned()]].concat()) => (from.clone(), path),
        _ => return None,
    };
    for segment in rest {
        at.push(segment.clone());
        if !known.contains(&at) {
            at.pop();
            break;
        }
    }
    Some(at)
}

/// Every arrow between distinct modules: from -> {to}.
fn arrows(mods: &BTreeMap<ModPath, Vec<syn::Item>>) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let known: BTreeSet<ModPath> = mods.keys().cloned().collect();
    mods.iter()
        .map(|(from, items)| {
            let mut named = Named::default();
            items.iter().for_each(|i| named.visit_item(i));
            let to = named
                .paths
                .iter()
                .filter_map(|p| resolve(from, p, &known))
                .filter(|to| to != from)
                .collect();
            (from.clone(), to)
        })
        .collect()
}

fn show(m: &ModPath) -> String {
    if m.is_empty() { "crate".into() } else { m.join("::") }
}

/// Modules on a cycle, each cycle as one group (strongly connected
/// components of more than one module), leaving out parent -> child arrows.
fn cycles(arrows: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<Vec<ModPath>> {
    let lateral = |from: &ModPath, to: &ModPath| !to.starts_with(from);
    let reach = |start: &ModPath| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![start.clone()];
        while let Some(m) = todo.pop() {
            for to in arrows.get(&m).into_iter().flatten().filter(|to| lateral(&m, to)) {
                if seen.insert(to.clone()) {
                    todo.push(to.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&ModPath, BTreeSet<ModPath>> = arrows.keys().map(|m| (m, reach(m))).collect();
    let mut groups: Vec<Vec<ModPath>> = Vec::new();
    for (m, from_m) in &reached {
        if !from_m.contains(*m) || groups.iter().any(|g| g.contains(m)) {
            continue;
        }
        groups.push(from_m.iter().filter(|o| reached[o].contains(*m)).cloned().collect());
    }
    groups
}

/// The same arrows with each controller's modules taken as one: two
/// controllers must not lean on each other either.
fn by_controller(arrows: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let fold = |m: &ModPath| {
        if controller_of(m).is_some() {
            m[..2].to_vec()
        } else {
            m.clone()
        }
    };
    let mut out: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
    for (from, tos) in arrows {
        let from = fold(from);
        let tos: BTreeSet<ModPath> = tos.iter().map(fold).filter(|to| *to != from).collect();
        out.entry(from).or_default().extend(tos);
    }
    out
}

/// The controller a module belongs to (`controllers::<kind>::…`).
fn controller_of(m: &ModPath) -> Option<&str> {
    (m.len() >= 2 && m[0] == "controllers").then(|| m[1].as_str())
}

/// Arrows that point up or into a controller's inside, with why.
fn upward(arrows: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<String> {
    let mut bad = Vec::new();
    for (from, tos) in arrows {
        for to in tos {
            if from.first().map(String::as_str) == Some("runtime")
                && to.first().map(String::as_str) == Some("controllers")
            {
                bad.push(format!(
                    "{} -> {}: the runtime imports no controller",
                    show(from),
                    show(to)
                ));
            } else if to.len() > 2 && controller_of(to).is_some() && controller_of(from) != controller_of(to) {
                bad.push(format!(
                    "{} -> {}: reach a controller through its mod.rs, not its insides",
                    show(from),
                    show(to)
                ));
            }
        }
    }
    bad
}

#[test]
fn operator_modules_import_downward_without_cycles() {
    let mods = modules(&operator_src().join("lib.rs"));
    for expected in ["runtime", "server", "cli", "controllers"] {
        assert!(
            mods.contains_key(&vec![expected.to_owned()]),
            "no module {expected} found"
        );
    }
    let arrows = arrows(&mods);
    // The check sees the arrows it is about: a controller reaches the runtime.
    let config = vec![
        "controllers".to_owned(),
        "vrouter_config".to_owned(),
        "reconcile".to_owned(),
    ];
    assert!(arrows[&config].contains(&vec!["runtime".to_owned(), "reconciler".to_owned()]));
    let mut found = cycles(&arrows);
    found.extend(cycles(&by_controller(&arrows)));
    let cycles: Vec<String> = found
        .iter()
        .map(|g| g.iter().map(show).collect::<Vec<_>>().join(" <-> "))
        .collect();
    let upward = upward(&arrows);
    assert!(
        cycles.is_empty() && upward.is_empty(),
        "cycles between modules:\n  {}\nupward arrows:\n  {}",
        cycles.join("\n  "),
        upward.join("\n  ")
    );
}

/// The checks themselves, on made-up arrows: each rule catches its case.
#[test]
fn a_cycle_and_each_kind_of_upward_arrow_is_caught() {
    let m = |s: &str| s.split("::").map(str::to_owned).collect::<ModPath>();
    let graph = |edges: &[(&str, &str)]| {
        let mut g: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
        for (a, b) in edges {
            g.entry(m(a)).or_default().insert(m(b));
            g.entry(m(b)).or_default();
        }
        g
    };
    let ring = graph(&[("cli::a", "cli::b"), ("cli::b", "cli::c"), ("cli::c", "cli::a")]);
    assert_eq!(cycles(&ring), vec![vec![m("cli::a"), m("cli::b"), m("cli::c")]]);
    let facade = graph(&[
        ("controllers::x", "controllers::x::run"),
        ("controllers::x::run", "controllers::x"),
    ]);
    assert!(cycles(&facade).is_empty(), "a parent naming its child is no cycle");
    let leaning = graph(&[
        ("controllers::x::a", "controllers::y"),
        ("controllers::y::b", "controllers::x"),
    ]);
    assert!(cycles(&leaning).is_empty(), "no cycle between modules");
    assert_eq!(
        cycles(&by_controller(&leaning)),
        vec![vec![m("controllers::x"), m("controllers::y")]]
    );
    let bad = graph(&[
        ("runtime::context", "controllers::x"),
        ("cli::diff", "controllers::x::resolve"),
        ("controllers::y::reconcile", "controllers::x::decide"),
        ("controllers::x::reconcile", "controllers::x::decide"),
        ("server::a", "controllers::x"),
    ]);
    let found = upward(&bad);
    assert_eq!(found.len(), 3, "{found:#?}");
    assert!(
        found[0].starts_with("cli::diff -> controllers::x::resolve"),
        "{found:#?}"
    );
    assert!(
        found[1].starts_with("controllers::y::reconcile -> controllers::x::decide"),
        "{found:#?}"
    );
    assert!(found[2].starts_with("runtime::context -> controllers::x"), "{found:#?}");
}
