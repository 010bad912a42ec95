//! The shared libraries a binary loads, from `ldd`, checked against those
//! the image carries: a library the image lacks would stop the operator
//! at its first instruction, one it carries for nothing is dead weight.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, bail};

/// The paths `ldd` resolved in `output`: the loader's own line and the
/// target of each `=>`; the kernel's vDSO has no file and is left out.
pub fn parse(output: &str) -> Result<BTreeSet<String>, String> {
    let mut found = BTreeSet::new();
    for line in output.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if line.contains("statically linked") {
            continue;
        }
        let path = match line.split_once("=>") {
            Some((name, target)) => {
                let target = target.trim();
                if target.starts_with("not found") {
                    return Err(format!("{} is not found on this machine", name.trim()));
                }
                target.split_whitespace().next().unwrap_or_default()
            }
            None => line.split_whitespace().next().unwrap_or_default(),
        };
        if path.starts_with('/') {
            found.insert(path.to_string());
        }
    }
    Ok(found)
}

/// Fails unless `binary` loads exactly `carried`, saying what to change.
pub fn check(binary: &Path, carried: &[&str]) -> anyhow::Result<()> {
    let output = Command::new("ldd")
        .arg(binary)
        .output()
        .context("running ldd (Debian's libc-bin)")?;
    let text = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        bail!(
            "ldd {} failed: {}",
            binary.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let needed = parse(&text).map_err(anyhow::Error::msg)?;
    let carried: BTreeSet<String> = carried.iter().map(|s| s.to_string()).collect();
    if needed != carried {
        bail!(
            "{} loads {needed:?} but the image carries {carried:?}: change spec::FILES in \
             xtask/src/image/spec.rs and the COPY lines of the Dockerfile together",
            binary.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn resolved_paths_and_the_loader_are_kept_the_vdso_is_not() {
        let output = "\tlinux-vdso.so.1 (0x00007ffd)\n\
                      \tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f01)\n\
                      \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f02)\n\
                      \t/lib64/ld-linux-x86-64.so.2 (0x00007f03)\n";
        let found: Vec<String> = parse(output).unwrap().into_iter().collect();
        assert_eq!(
            found,
            [
                "/lib/x86_64-linux-gnu/libc.so.6",
                "/lib/x86_64-linux-gnu/libgcc_s.so.1",
                "/lib64/ld-linux-x86-64.so.2"
            ]
        );
        assert!(parse("\tstatically linked\n").unwrap().is_empty());
    }

    #[test]
    fn a_library_missing_on_this_machine_is_an_error() {
        assert!(parse("\tlibssl.so.3 => not found\n").is_err());
    }
}
