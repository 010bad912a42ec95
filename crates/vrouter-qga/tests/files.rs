//! Whole-file writes and reads through a real qemu-ga. Every path is inside
//! the test agent's own temporary directory.

use std::fs;

use vrouter_qga::testing::AgentProcess;
use vrouter_qga::{FileLimits, OpenMode, QgaError, constants};

fn start() -> AgentProcess {
    AgentProcess::start().unwrap_or_else(|e| panic!("{e}"))
}

/// Bytes that differ at every offset, so a misplaced chunk shows.
fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i.wrapping_mul(7919) >> 3) as u8 ^ (i as u8))
        .collect()
}

#[tokio::test]
async fn one_mebibyte_round_trips_byte_equal() {
    let process = start();
    let agent = process.agent();
    let path = process.guest_path("one-mib.bin");
    let contents = pattern(1024 * 1024);

    agent.write_file(&path, &contents).await.unwrap();
    assert_eq!(fs::read(&path).unwrap(), contents, "the file on disk");
    let back = agent.read_file(&path).await.unwrap();
    assert!(
        back == contents,
        "read back {} bytes, differs from what was written",
        back.len()
    );
    // 1 MiB in 48 KiB chunks is 22 writes; the read is one full chunk plus
    // the EOF read.
    assert_eq!(contents.len().div_ceil(constants::WRITE_CHUNK_BYTES), 22);
    agent.transport().close().await;
}

#[tokio::test]
async fn chunk_boundaries_round_trip_with_small_chunks() {
    let process = start();
    let limits = FileLimits {
        write_chunk: 1000,
        read_chunk: 1000,
        max_read_file: 1 << 20,
        ..FileLimits::default()
    };
    let agent = process.agent().with_limits(limits).unwrap();
    for len in [0, 1, 999, 1000, 1001, 2000, 4097] {
        let path = process.guest_path(&format!("chunks-{len}.bin"));
        let contents = pattern(len);
        agent.write_file(&path, &contents).await.unwrap();
        assert_eq!(fs::read(&path).unwrap(), contents, "on disk, {len} bytes");
        assert_eq!(
            agent.read_file(&path).await.unwrap(),
            contents,
            "read back, {len} bytes"
        );
    }
    agent.transport().close().await;
}

#[tokio::test]
async fn writing_truncates_an_existing_file() {
    let process = start();
    let agent = process.agent();
    let path = process.guest_path("script.sh");
    agent.write_file(&path, &pattern(5000)).await.unwrap();
    agent.write_file(&path, b"short").await.unwrap();
    assert_eq!(agent.read_file(&path).await.unwrap(), b"short");
    agent.transport().close().await;
}

#[tokio::test]
async fn a_file_over_the_read_bound_is_refused_and_its_handle_closed() {
    let process = start();
    let path = process.guest_path("big.bin");
    fs::write(&path, pattern(3000)).unwrap();
    let limits = FileLimits {
        write_chunk: 1000,
        read_chunk: 1000,
        max_read_file: 2500,
        ..FileLimits::default()
    };
    let agent = process.agent().with_limits(limits).unwrap();
    match agent.read_file(&path).await {
        Err(QgaError::FileTooLarge { path: named, limit }) => {
            assert_eq!(named, path);
            assert_eq!(limit, 2500);
        }
        other => panic!("expected FileTooLarge, got {other:?}"),
    }
    // The refused read closed its handle. The agent numbers handles in
    // sequence, so the one before the next handle is the refused read's.
    let next = agent.file_open(&path, OpenMode::Read).await.unwrap();
    agent.file_close(next).await.unwrap();
    let refused = vrouter_qga::FileHandle(next.0 - 1);
    let error = agent.file_close(refused).await.unwrap_err();
    let expected = format!("handle '{}' has not been found", refused.0);
    assert_eq!(error.agent_error().map(|e| e.desc.as_str()), Some(expected.as_str()));
    // Exactly at the bound is fine.
    fs::write(&path, pattern(2500)).unwrap();
    assert_eq!(agent.read_file(&path).await.unwrap().len(), 2500);
    agent.transport().close().await;
}

#[tokio::test]
async fn missing_paths_are_agent_errors_naming_the_path() {
    let process = start();
    let agent = process.agent();
    let missing = process.guest_path("no/such/dir/file");
    for result in [
        agent.read_file(&missing).await.map(|_| ()),
        agent.write_file(&missing, b"x").await,
    ] {
        match result {
            Err(QgaError::Agent { command, error }) => {
                assert_eq!(command, "guest-file-open");
                assert_eq!(error.class.as_deref(), Some("GenericError"));
                assert!(error.desc.contains(&missing), "{error}");
            }
            other => panic!("expected an agent error, got {other:?}"),
        }
    }
    agent.transport().close().await;
}

#[tokio::test]
async fn the_agent_refuses_reads_over_its_maximum_count() {
    let process = start();
    let agent = process.agent();
    let path = process.guest_path("small.txt");
    fs::write(&path, b"abc").unwrap();
    let handle = agent.file_open(&path, OpenMode::Read).await.unwrap();
    let error = agent
        .file_read(handle, constants::AGENT_MAX_READ_COUNT + 1)
        .await
        .unwrap_err();
    let agent_error = error.agent_error().unwrap_or_else(|| panic!("{error:?}"));
    assert!(agent_error.desc.contains("invalid for argument count"), "{agent_error}");
    // The maximum itself is accepted.
    let chunk = agent.file_read(handle, constants::AGENT_MAX_READ_COUNT).await.unwrap();
    assert_eq!(chunk.data, b"abc");
    assert!(chunk.eof);
    agent.file_close(handle).await.unwrap();
    agent.transport().close().await;
}

#[test]
fn bad_limits_are_refused_before_any_call() {
    let process = start();
    let error = process
        .agent()
        .with_limits(FileLimits {
            read_chunk: 0,
            ..FileLimits::default()
        })
        .unwrap_err();
    assert!(error.to_string().contains("read_chunk is 0"), "{error}");
}
