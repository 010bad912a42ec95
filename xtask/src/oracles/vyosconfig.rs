//! The `vyosconfig` oracle: VyOS's own config.boot parser (OCaml,
//! `shared/peers/vyos1x-config`) behind our small program
//! `xtask/oracles/vyosconfig/vyosconfig.ml`, for the differential tests of
//! the project's reader (`vrouter-render`'s `config_boot`).
//!
//! Built with Debian's OCaml toolchain ([`PACKAGES`], installed only when
//! the binary must be built) and `dune`, in a writable copy of the peer
//! (shared/ is read-only), leaving out the two library modules that read
//! interface definitions: they need a newer xml-light than Debian's, and
//! parsing does not use them.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

/// Debian's OCaml compiler, dune, and the library's dependencies.
pub const PACKAGES: &[&str] = &[
    "ocaml-nox",
    "ocaml-dune",
    "ocaml-findlib",
    "menhir",
    "libmenhir-ocaml-dev",
    "libyojson-ocaml-dev",
    "libppx-deriving-yojson-ocaml-dev",
    "libfileutils-ocaml-dev",
    "libpcre-ocaml-dev",
];

/// The peer's folder under `shared/peers/`.
const PEER: &str = "vyos1x-config";

/// Builds the program in `source_dir` into `partial`.
pub fn build(root: &Path, source_dir: &Path, partial: &Path) -> anyhow::Result<()> {
    crate::prepare::ensure_debian_packages(PACKAGES)?;
    let peer = find_peer(root)?;
    let work = crate::testenv_bins::cache_dir()?.join("build").join("vyosconfig");
    crate::testenv_bins::peer_source::copy_tree(&peer, &work)?;
    restrict_library(&work.join("src/dune"))?;
    crate::testenv_bins::peer_source::copy_tree(source_dir, &work.join("oracle"))?;
    let status = Command::new("dune")
        .args(["build", "--profile", "release", "--root", "."])
        .arg("./oracle/vyosconfig.exe")
        .current_dir(&work)
        .status()
        .context("running `dune` (install the Debian packages ocaml-dune and the rest of PACKAGES)")?;
    if !status.success() {
        bail!(
            "`dune build` of the vyosconfig oracle in {} failed ({status})",
            work.display()
        );
    }
    fs::copy(work.join("_build/default/oracle/vyosconfig.exe"), partial)
        .with_context(|| format!("copying the built oracle to {}", partial.display()))?;
    Ok(())
}

/// `shared/peers/vyos1x-config` beside the workspace (from any ancestor, as
/// for the Go peers).
fn find_peer(root: &Path) -> anyhow::Result<PathBuf> {
    let under = format!("shared/peers/{PEER}");
    root.ancestors()
        .skip(1)
        .map(|dir| dir.join(&under))
        .find(|dir| dir.join("dune-project").is_file())
        .ok_or_else(|| {
            anyhow::anyhow!(
                "VyOS's parser source is missing: expected {} (the read-only shared/ folder beside \
                 the repository); the config differential tests need it",
                root.join("..").join(&under).display()
            )
        })
}

/// Rewrites the library's `dune` stanza to leave out `reference_tree` and
/// `generate` and their xml-light dependency.
fn restrict_library(dune: &Path) -> anyhow::Result<()> {
    let text = fs::read_to_string(dune).with_context(|| format!("reading {}", dune.display()))?;
    let restricted = restricted_stanza(&text)?;
    fs::write(dune, restricted).with_context(|| format!("writing {}", dune.display()))
}

fn restricted_stanza(text: &str) -> anyhow::Result<String> {
    if !text.contains("(library\n") || !text.contains(" xml-light)") {
        bail!("vyos1x-config's src/dune is not the stanza this build knows how to restrict:\n{text}");
    }
    Ok(text
        .replacen(
            "(library\n",
            "(library\n (modules :standard \\ reference_tree generate)\n",
            1,
        )
        .replacen(" xml-light)", ")", 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_library_stanza_loses_the_interface_modules_and_xml_light() {
        let stanza = "(library\n (name vyos1x)\n (libraries yojson pcre xml-light)\n)\n";
        assert_eq!(
            restricted_stanza(stanza).unwrap(),
            "(library\n (modules :standard \\ reference_tree generate)\n (name vyos1x)\n (libraries yojson pcre)\n)\n"
        );
        assert!(restricted_stanza("(executable\n)").is_err());
    }
}
