//! Whole-file operations in bounded chunks: write a file (the apply
//! script), read a file to its end (`/config/config.boot`).

use crate::agent::Agent;
use crate::command::OpenMode;
use std::time::Duration;

use crate::constants::{
    AGENT_MAX_MESSAGE_BYTES, AGENT_MAX_READ_COUNT, MAX_READ_FILE_BYTES, READ_CHUNK_BYTES, READ_FILE_DEADLINE,
    WRITE_CHUNK_BYTES,
};
use crate::error::QgaError;
use crate::transport::Transport;

/// Room left in one agent message for the JSON around a base64 chunk.
const ENVELOPE_ALLOWANCE: usize = 1024;

/// Chunk sizes and the read bound used by [`Agent::write_file`] and
/// [`Agent::read_file`]. The defaults are the constants in
/// [`crate::constants`]; tests use small chunks to cross many boundaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileLimits {
    /// Raw bytes per `guest-file-write`.
    pub write_chunk: usize,
    /// Raw bytes asked for per `guest-file-read`.
    pub read_chunk: usize,
    /// A file longer than this is refused by [`Agent::read_file`].
    pub max_read_file: usize,
    /// The longest [`Agent::read_file`] may take, all its calls together.
    pub read_deadline: Duration,
}

impl Default for FileLimits {
    fn default() -> Self {
        FileLimits {
            write_chunk: WRITE_CHUNK_BYTES,
            read_chunk: READ_CHUNK_BYTES,
            max_read_file: MAX_READ_FILE_BYTES,
            read_deadline: READ_FILE_DEADLINE,
        }
    }
}

impl FileLimits {
    /// The largest write chunk whose base64 still fits one agent message.
    pub const MAX_WRITE_CHUNK: usize = (AGENT_MAX_MESSAGE_BYTES - ENVELOPE_ALLOWANCE) / 4 * 3;

    pub fn validate(&self) -> Result<(), QgaError> {
        if self.write_chunk == 0 || self.write_chunk > Self::MAX_WRITE_CHUNK {
            return Err(QgaError::InvalidArgument(format!(
                "write_chunk is {}, must be 1..={} (base64 of a chunk must fit one {}-byte agent message)",
                self.write_chunk,
                Self::MAX_WRITE_CHUNK,
                AGENT_MAX_MESSAGE_BYTES
            )));
        }
        if self.read_chunk == 0 || self.read_chunk > AGENT_MAX_READ_COUNT {
            return Err(QgaError::InvalidArgument(format!(
                "read_chunk is {}, must be 1..={AGENT_MAX_READ_COUNT} (the agent's guest-file-read maximum)",
                self.read_chunk
            )));
        }
        if self.read_deadline.is_zero() {
            return Err(QgaError::InvalidArgument("read_deadline must be more than zero".into()));
        }
        Ok(())
    }
}

/// How many bytes to ask for next: a full chunk, but never more than one
/// byte past the bound, which is enough to notice the file is too long.
pub fn next_read_size(read_so_far: usize, chunk: usize, max_total: usize) -> usize {
    chunk.min(max_total.saturating_sub(read_so_far).saturating_add(1))
}

impl<T: Transport> Agent<T> {
    /// Creates or truncates `path` in the guest and writes `contents` in
    /// chunks of [`FileLimits::write_chunk`]. The handle is closed even when
    /// a write fails; the first error is returned.
    pub async fn write_file(&self, path: &str, contents: &[u8]) -> Result<(), QgaError> {
        let handle = self.file_open(path, OpenMode::Write).await?;
        let written = async {
            for chunk in contents.chunks(self.limits.write_chunk) {
                let count = self.file_write(handle, chunk).await?;
                if count != chunk.len() as u64 {
                    return Err(QgaError::ShortWrite {
                        path: path.to_owned(),
                        expected: chunk.len(),
                        written: count,
                    });
                }
            }
            Ok(())
        }
        .await;
        let closed = self.file_close(handle).await;
        written.and(closed)
    }

    /// Reads `path` to its end in chunks of [`FileLimits::read_chunk`],
    /// refusing files longer than [`FileLimits::max_read_file`] and reads
    /// that take longer than [`FileLimits::read_deadline`] in all.
    pub async fn read_file(&self, path: &str) -> Result<Vec<u8>, QgaError> {
        let handle = self.file_open(path, OpenMode::Read).await?;
        // Shared with the loop, so a read cut by the deadline can say how
        // far it got.
        let contents = std::sync::Mutex::new(Vec::new());
        let read = tokio::time::timeout(self.limits.read_deadline, self.read_chunks(handle, path, &contents)).await;
        let closed = self.file_close(handle).await;
        let contents = contents.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
        match read {
            Ok(result) => result?,
            Err(_) => {
                return Err(QgaError::ReadTooSlow {
                    path: path.to_owned(),
                    deadline: self.limits.read_deadline,
                    read: contents.len(),
                });
            }
        }
        closed?;
        Ok(contents)
    }

    /// The reads of [`Agent::read_file`], appending to `contents`.
    async fn read_chunks(
        &self,
        handle: crate::FileHandle,
        path: &str,
        contents: &std::sync::Mutex<Vec<u8>>,
    ) -> Result<(), QgaError> {
        loop {
            let so_far = contents.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len();
            let want = next_read_size(so_far, self.limits.read_chunk, self.limits.max_read_file);
            let chunk = self.file_read(handle, want).await?;
            let mut contents = contents.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            contents.extend_from_slice(&chunk.data);
            if contents.len() > self.limits.max_read_file {
                return Err(QgaError::FileTooLarge {
                    path: path.to_owned(),
                    limit: self.limits.max_read_file,
                });
            }
            // An empty read also ends the loop: a file that never
            // reports EOF (a drained FIFO) must not spin forever.
            if chunk.eof || chunk.data.is_empty() {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn default_limits_are_valid() {
        FileLimits::default().validate().unwrap();
    }

    #[test]
    fn bad_limits_say_which_and_why() {
        let cases = [
            (
                FileLimits {
                    write_chunk: 0,
                    ..FileLimits::default()
                },
                "write_chunk is 0",
            ),
            (
                FileLimits {
                    write_chunk: FileLimits::MAX_WRITE_CHUNK + 1,
                    ..FileLimits::default()
                },
                "agent message",
            ),
            (
                FileLimits {
                    read_chunk: 0,
                    ..FileLimits::default()
                },
                "read_chunk is 0",
            ),
            (
                FileLimits {
                    read_chunk: AGENT_MAX_READ_COUNT + 1,
                    ..FileLimits::default()
                },
                "guest-file-read maximum",
            ),
            (
                FileLimits {
                    read_deadline: Duration::ZERO,
                    ..FileLimits::default()
                },
                "read_deadline must be more than zero",
            ),
        ];
        for (limits, expected) in cases {
            let message = limits.validate().unwrap_err().to_string();
            assert!(message.contains(expected), "{message}");
        }
    }

    #[test]
    fn the_largest_write_chunk_fits_one_message() {
        let base64_len = FileLimits::MAX_WRITE_CHUNK.div_ceil(3) * 4;
        assert!(base64_len + ENVELOPE_ALLOWANCE <= AGENT_MAX_MESSAGE_BYTES);
    }

    proptest! {
        /// Reading with `next_read_size` never asks the agent for more than a
        /// chunk, and stops exactly when the bound is crossed.
        #[test]
        fn read_sizes_respect_chunk_and_bound(file_len in 0usize..5000, chunk in 1usize..700, max in 0usize..5000) {
            let mut read = 0usize;
            let mut asked_total = 0usize;
            let outcome = loop {
                let want = next_read_size(read, chunk, max);
                prop_assert!(want >= 1 && want <= chunk);
                asked_total += want;
                let got = want.min(file_len - read);
                read += got;
                if read > max { break Err(read); }
                if read == file_len { break Ok(read); }
            };
            match outcome {
                Ok(n) => prop_assert!(n == file_len && file_len <= max),
                Err(n) => prop_assert!(file_len > max && n == max + 1),
            }
            prop_assert!(asked_total <= file_len.min(max) + chunk + 1);
        }
    }
}
