//! The quick loop's runner: builds the test binaries as `cargo test` would,
//! then runs several at a time. cargo runs test binaries one after another;
//! most quick targets wait on a kube-apiserver, a qemu-ga or bash far more
//! than they compute, so a few side by side finish sooner on the same cores.
//! Each binary's output is printed whole when it ends (never interleaved),
//! and every failing binary is reported, not only the first.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// Test binaries run side by side.
const JOBS: usize = 4;

/// One test binary cargo built: unit tests of a library or binary, or an
/// integration-test target.
struct TestBinary {
    /// `package/target`, as the summary names it.
    name: String,
    package_dir: PathBuf,
    executable: PathBuf,
}

struct Outcome {
    name: String,
    passed: bool,
    took: Duration,
}

/// Builds the tests of `cargo <args>` (which must be a `cargo test` line),
/// runs their binaries with `env` added, then the doctests, and fails when
/// any failed.
pub fn run(root: &Path, args: &[&str], env: &[(&str, String)]) -> anyhow::Result<()> {
    let binaries = build(root, args)?;
    println!("==> quick tests: {} test binaries, {JOBS} at a time", binaries.len());
    let started = Instant::now();
    let mut outcomes = run_all(binaries, env);
    let doc_args: Vec<&str> = args.iter().copied().chain(["--doc"]).collect();
    let doc_started = Instant::now();
    let docs = crate::cargo_step::run(root, "doctests", &doc_args, env);
    outcomes.push(Outcome {
        name: "doctests".into(),
        passed: docs.is_ok(),
        took: doc_started.elapsed(),
    });
    report(&outcomes, started.elapsed())
}

fn report(outcomes: &[Outcome], took: Duration) -> anyhow::Result<()> {
    let mut slowest: Vec<&Outcome> = outcomes.iter().collect();
    slowest.sort_by_key(|o| std::cmp::Reverse(o.took));
    println!("==> quick tests took {:.0?}; slowest binaries:", took);
    for o in slowest.iter().take(8) {
        println!("    {:>6.1?}  {}", o.took, o.name);
    }
    let failed: Vec<&str> = outcomes.iter().filter(|o| !o.passed).map(|o| o.name.as_str()).collect();
    if !failed.is_empty() {
        bail!("quick tests failed in: {}", failed.join(", "));
    }
    Ok(())
}

/// `cargo <args> --no-run`, reading the test binaries from its JSON messages.
fn build(root: &Path, args: &[&str]) -> anyhow::Result<Vec<TestBinary>> {
    let mut command = Command::new(env!("CARGO"));
    command
        .args(args)
        .args(["--no-run", "--message-format=json-render-diagnostics"])
        .current_dir(root)
        .stdout(Stdio::piped());
    println!("==> quick test build: {}", crate::cargo_step::command_line(&[], args));
    let out = command.output().context("starting cargo for the quick test build")?;
    if !out.status.success() {
        bail!("the quick test build failed ({})", out.status);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let binaries: Vec<TestBinary> = text.lines().filter_map(test_binary).collect();
    if binaries.is_empty() {
        bail!("cargo built no test binary");
    }
    Ok(binaries)
}

/// The test binary a `compiler-artifact` message names, if it names one.
fn test_binary(line: &str) -> Option<TestBinary> {
    let message: serde_json::Value = serde_json::from_str(line).ok()?;
    if message["reason"] != "compiler-artifact" || message["profile"]["test"] != true {
        return None;
    }
    let executable = PathBuf::from(message["executable"].as_str()?);
    let manifest = PathBuf::from(message["manifest_path"].as_str()?);
    let package = message["package_id"].as_str().unwrap_or_default();
    let package = package
        .rsplit('/')
        .next()
        .unwrap_or(package)
        .split(['#', '@'])
        .next()
        .unwrap_or(package);
    Some(TestBinary {
        name: format!("{package}/{}", message["target"]["name"].as_str()?),
        package_dir: manifest.parent()?.to_path_buf(),
        executable,
    })
}

/// Runs every binary, [`JOBS`] at a time, in the order cargo built them.
fn run_all(binaries: Vec<TestBinary>, env: &[(&str, String)]) -> Vec<Outcome> {
    let queue = Mutex::new(VecDeque::from(binaries));
    let outcomes = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..JOBS {
            scope.spawn(|| {
                while let Some(binary) = queue.lock().unwrap().pop_front() {
                    let outcome = run_one(&binary, env);
                    outcomes.lock().unwrap().push(outcome);
                }
            });
        }
    });
    outcomes.into_inner().unwrap()
}

/// Runs one binary as `cargo test` does (from its package's directory),
/// then prints its output in one piece.
fn run_one(binary: &TestBinary, env: &[(&str, String)]) -> Outcome {
    let started = Instant::now();
    let result = Command::new(&binary.executable)
        .current_dir(&binary.package_dir)
        .env("CARGO", env!("CARGO"))
        .env("CARGO_MANIFEST_DIR", &binary.package_dir)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .output();
    let took = started.elapsed();
    let passed = match result {
        Ok(out) => {
            let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.push_str(&String::from_utf8_lossy(&out.stderr));
            println!("==> {} ({took:.1?}, {})\n{text}", binary.name, out.status);
            out.status.success()
        }
        Err(e) => {
            println!(
                "==> {}: could not start {}: {e}",
                binary.name,
                binary.executable.display()
            );
            false
        }
    };
    Outcome {
        name: binary.name.clone(),
        passed,
        took,
    }
}
