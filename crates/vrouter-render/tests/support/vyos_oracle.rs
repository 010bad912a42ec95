//! VyOS's own config.boot parser (`xtask/oracles/vyosconfig` over
//! `shared/peers/vyos1x-config`), built by `cargo xtask oracles` into the test
//! cache and found by a key of its sources (the FNV-1a 64 `xtask/src/oracles.rs`
//! computes). One process answers a batch of cases.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn binary() -> PathBuf {
    let source_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../xtask/oracles/vyosconfig");
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for file in ["dune", "vyosconfig.ml"] {
        for byte in std::fs::read(source_dir.join(file)).expect("the vyosconfig oracle's sources") {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    let cache = std::env::var_os("VROUTER_TESTENV_CACHE")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/vrouter-operator/testenv")
        });
    cache.join("bin").join(format!("vyosconfig-{hash:016x}"))
}

/// VyOS's verdict on one config text: its `set` commands
/// (`Config_tree.render_commands`, comments left out) or its error message.
pub type Verdict = Result<String, String>;

/// Runs VyOS's parser over every text, in one process; fails the test saying
/// how to build the oracle when it is missing.
pub fn vyos_read(texts: &[String]) -> Vec<Verdict> {
    let path = binary();
    assert!(
        path.is_file(),
        "VyOS's parser oracle {} is missing: build it with `cargo xtask oracles` (installs Debian's \
         OCaml packages and builds ../shared/peers/vyos1x-config with dune; `cargo xtask test` does it too)",
        path.display()
    );
    let mut child = Command::new(&path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", path.display()));
    let mut stdin = child.stdin.take().unwrap();
    let input: Vec<u8> = texts
        .iter()
        .flat_map(|t| [format!("{}\n", t.len()).into_bytes(), t.as_bytes().to_vec()].concat())
        .collect();
    // Written from another thread: the answers can fill the pipe before the
    // cases are all written.
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let verdicts: Vec<Verdict> = stdout
        .split(b'\n')
        .map(|line| {
            let line = line.expect("reading the oracle's answer");
            let v: serde_json::Value =
                serde_json::from_str(&String::from_utf8_lossy(&line)).expect("the oracle answers JSON lines");
            if v["ok"] == true {
                Ok(v["commands"].as_str().unwrap().to_owned())
            } else {
                Err(format!(
                    "{} (line {}, column {})",
                    v["error"].as_str().unwrap(),
                    v["line"],
                    v["column"]
                ))
            }
        })
        .collect();
    writer.join().unwrap().expect("writing cases to the oracle");
    let status = child.wait().unwrap();
    assert!(status.success(), "the vyosconfig oracle exited with {status}");
    assert_eq!(
        verdicts.len(),
        texts.len(),
        "the oracle answered fewer cases than it was given"
    );
    verdicts
}
