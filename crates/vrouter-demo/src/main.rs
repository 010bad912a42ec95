//! `vrouter-demo` (run by `cargo xtask demo`): the operator at work on this
//! machine alone. A local etcd + kube-apiserver, simulated routers (real
//! qemu-ga agents behind simulated Proxmox VE and KubeVirt APIs, the real
//! vrouter-daemon server and agent), the examples of `testdata/examples/` applied,
//! every VRouterConfig followed to Applied, and a drift repaired. Every
//! connection goes to 127.0.0.1 or a unix socket.
//!
//! Exit codes: 0 the demo completed (or `--keep` was stopped with Ctrl-C
//! after it completed); 1 a step failed; 130 stopped before the end by Ctrl-C
//! or SIGTERM. A closed terminal (SIGHUP) cleans up the same way.

mod demo;
mod examples;
mod plan;
mod progress;
mod providers;
mod sim;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::Parser;
use tokio::signal::unix::{SignalKind, signal};

use crate::progress::say;

#[derive(Parser)]
#[command(
    name = "vrouter-demo",
    about = "Run the vrouter operator against simulated routers, on loopback only"
)]
struct Args {
    /// Leave everything running after the demo and print a kubeconfig; Ctrl-C stops and cleans up.
    #[arg(long)]
    keep: bool,
    /// The manifests to apply.
    #[arg(long, default_value_os_t = default_examples())]
    examples: PathBuf,
    /// The longest any one step may take, in seconds.
    #[arg(long, default_value_t = 120)]
    step_timeout: u64,
}

fn default_examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/examples")
}

fn main() -> ExitCode {
    let args = Args::parse();
    let log_dir = match tempfile::Builder::new().prefix("vrouter-demo-").tempdir() {
        Ok(dir) => dir,
        Err(e) => {
            eprintln!("vrouter-demo: cannot create a temporary directory: {e}");
            return ExitCode::FAILURE;
        }
    };
    let log_file = log_dir.path().join("operator.log");
    if let Err(e) = init_log(&log_file) {
        eprintln!("vrouter-demo: cannot open the log {}: {e}", log_file.display());
        return ExitCode::FAILURE;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("vrouter-demo: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let options = demo::Options {
        examples: args.examples.canonicalize().unwrap_or(args.examples),
        keep: args.keep,
        step_timeout: Duration::from_secs(args.step_timeout),
        log_file: log_file.clone(),
    };
    let code = runtime.block_on(async {
        let mut signals = match Signals::install() {
            Ok(s) => s,
            Err(e) => {
                eprintln!("vrouter-demo: cannot install signal handlers: {e}");
                return ExitCode::FAILURE;
            }
        };
        println!("vrouter-operator demo: a local control plane, simulated routers and the operator, on 127.0.0.1 only");
        let finished = AtomicBool::new(false);
        let ended = tokio::select! {
            result = demo::run(&options, &finished) => Err(result),
            name = signals.next() => Ok(name),
        };
        // Everything the demo started was owned by its future, dropped by
        // now: controllers stopped, agents and control plane gone.
        match ended {
            Err(Ok(())) => ExitCode::SUCCESS,
            Err(Err(error)) => {
                eprintln!("vrouter-demo: FAILED: {error:#}");
                eprintln!("--- last lines of {} ---", log_file.display());
                eprintln!("{}", log_tail(&log_file));
                say("cleanup", "stopped the operator, the simulated routers and the control plane");
                ExitCode::FAILURE
            }
            Ok(name) => {
                // The terminal echoed `^C` at the end of the last line.
                println!();
                say(
                    "cleanup",
                    format!("{name}: stopped the operator, the simulated routers and the control plane; temporary files removed"),
                );
                if finished.load(Ordering::SeqCst) {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(130)
                }
            }
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(5));
    drop(log_dir);
    code
}

/// SIGINT (Ctrl-C), SIGTERM and SIGHUP (the terminal went away) all mean:
/// stop and clean up.
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> std::io::Result<Signals> {
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.interrupt.recv() => "interrupted (Ctrl-C)",
            _ = self.terminate.recv() => "terminated (SIGTERM)",
            _ = self.hangup.recv() => "hung up (SIGHUP)",
        }
    }
}

fn init_log(path: &Path) -> std::io::Result<()> {
    let file = std::fs::File::create(path)?;
    let filter = tracing_subscriber::EnvFilter::try_from_env("VROUTER_DEMO_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(std::sync::Mutex::new(file))
        .init();
    Ok(())
}

fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}
