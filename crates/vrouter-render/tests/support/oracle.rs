//! The mvdan.cc/sh/v3/syntax oracle (`xtask/oracles/shparse`), built by
//! `cargo xtask oracles` (and `cargo xtask test`) into the test cache, found by a
//! key of its sources (the same FNV-1a 64 `xtask/src/oracles.rs` computes).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

pub struct ShParse {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

fn source_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../xtask/oracles/shparse")
}

fn binary() -> PathBuf {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for file in ["go.mod", "go.sum", "main.go"] {
        for byte in std::fs::read(source_dir().join(file)).expect("the shparse oracle's sources") {
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
    cache.join("bin").join(format!("shparse-{hash:016x}"))
}

impl ShParse {
    /// Starts the oracle, or fails saying how to build it.
    pub fn start() -> ShParse {
        let path = binary();
        if !path.is_file() {
            panic!(
                "the mvdan/sh oracle {} is missing: build it with `cargo xtask oracles` \
                 (needs Go 1.26 and the Go module proxy; `cargo xtask test` does it too)",
                path.display()
            );
        }
        let mut child = Command::new(&path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", path.display()));
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        ShParse { child, stdin, stdout }
    }

    /// For each (text, words): Ok when mvdan/sh parses the text and sees every
    /// occurrence of every word as a plain literal argument of a simple command.
    pub fn check(&mut self, texts: &[(String, Vec<String>)]) -> std::io::Result<Vec<Result<(), String>>> {
        for (text, words) in texts {
            let line = serde_json::json!({"text": text, "words": words}).to_string();
            writeln!(self.stdin, "{line}")?;
        }
        self.stdin.flush()?;
        let mut verdicts = Vec::with_capacity(texts.len());
        for _ in texts {
            let mut line = String::new();
            if self.stdout.read_line(&mut line)? == 0 {
                return Err(std::io::Error::other("the shparse oracle exited"));
            }
            let verdict: serde_json::Value = serde_json::from_str(&line).map_err(std::io::Error::other)?;
            verdicts.push(if verdict["ok"] == true {
                Ok(())
            } else {
                Err(verdict["why"].as_str().unwrap_or("").to_owned())
            });
        }
        Ok(verdicts)
    }
}

impl Drop for ShParse {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
