//! Speed of the protocol core and of round trips through a real qemu-ga.
//! Budgets are in the crate README.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use criterion::{Criterion, criterion_group, criterion_main};
use vrouter_qga::framing::{self, Disposition};
use vrouter_qga::testing::AgentProcess;
use vrouter_qga::{Agent, CallFuture, Command, FileHandle, Transport};

/// Replays one raw reply line, parsing it as the unix transport would.
struct ReplayLine(Vec<u8>);

impl Transport for ReplayLine {
    fn call<'a>(&'a self, _command: &'a Command) -> CallFuture<'a> {
        Box::pin(async move {
            let (id, reply) = framing::parse_line(&self.0)
                .expect("the line parses")
                .expect("the line is not blank");
            match framing::classify(id, reply, 7) {
                Disposition::Ours(reply) => Ok(reply),
                other => panic!("unexpected {other:?}"),
            }
        })
    }
}

fn decode_file_read_reply(c: &mut Criterion) {
    let data = vec![0xA5u8; 1024 * 1024];
    let line = format!(
        r#"{{"return": {{"count": {}, "buf-b64": "{}", "eof": false}}, "id": 7}}"#,
        data.len(),
        BASE64.encode(&data)
    );
    let agent = Agent::new(ReplayLine(line.into_bytes()));
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    c.bench_function("parse + decode a 1 MiB guest-file-read reply", |b| {
        b.iter(|| {
            let chunk = runtime
                .block_on(agent.file_read(FileHandle(1000), 1024 * 1024))
                .unwrap();
            assert_eq!(chunk.data.len(), 1024 * 1024);
        })
    });
}

fn real_agent_round_trips(c: &mut Criterion) {
    let process = AgentProcess::start().expect("qemu-ga is needed for this benchmark");
    let agent = process.agent();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    c.bench_function("ping round trip through a real qemu-ga", |b| {
        b.iter(|| runtime.block_on(agent.ping()).unwrap())
    });
    let path = process.guest_path("bench.bin");
    let contents: Vec<u8> = (0..1024 * 1024).map(|i| (i % 251) as u8).collect();
    let mut group = c.benchmark_group("files");
    group.sample_size(20);
    group.bench_function("write + read back 1 MiB through a real qemu-ga", |b| {
        b.iter(|| {
            runtime.block_on(agent.write_file(&path, &contents)).unwrap();
            let back = runtime.block_on(agent.read_file(&path)).unwrap();
            assert_eq!(back.len(), contents.len());
        })
    });
    group.finish();
    runtime.block_on(agent.transport().close());
}

criterion_group!(benches, decode_file_read_reply, real_agent_round_trips);
criterion_main!(benches);
