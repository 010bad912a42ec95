//! Captures real qemu-ga replies into `tests/fixtures/`:
//! `cargo run -p vrouter-qga --example capture-fixtures --features testing`.

use std::fs;
use std::path::Path;

use vrouter_qga::testing::{AgentProcess, capture_replies};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let process = AgentProcess::start()?;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    fs::create_dir_all(&dir)?;
    for reply in capture_replies(&process)? {
        let path = dir.join(format!("{}.jsonl", reply.name));
        fs::write(&path, &reply.bytes)?;
        println!("{}", path.display());
    }
    Ok(())
}
