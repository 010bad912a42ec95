//! The one piece of QGA this crate speaks: the handshake that tells an agent
//! that answers from one that is still booting (or gone), written out in
//! bytes so it shares nothing with the protocol code under test.

use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// Connects to an agent socket, resets the agent's parser (`0xFF`) and asks
/// for `guest-sync-delimited`; true once the echo arrives within `within`.
/// Everything else on the channel (stale replies, the parse error the `0xFF`
/// draws) is skipped.
pub async fn agent_answers(socket: &Path, within: Duration) -> bool {
    let id = 271_828_182u64;
    let exchange = async {
        let mut stream = UnixStream::connect(socket).await.ok()?;
        let request = format!("\u{0}{{\"execute\":\"guest-sync-delimited\",\"arguments\":{{\"id\":{id}}}}}\n");
        let mut bytes = request.into_bytes();
        bytes[0] = 0xFF;
        stream.write_all(&bytes).await.ok()?;
        let wanted = format!("\"return\": {id}}}");
        let mut seen = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let n = stream.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            seen.extend_from_slice(&chunk[..n]);
            if seen.windows(wanted.len()).any(|w| w == wanted.as_bytes()) {
                // Leave nothing unread behind for the next client.
                let _ = stream.shutdown().await;
                return Some(());
            }
        }
    };
    matches!(tokio::time::timeout(within, exchange).await, Ok(Some(())))
}
