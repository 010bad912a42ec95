//! Staging and starting the apply script (spec §7.5) under the router's
//! arbitration ([`crate::arbiter`]): ask the router about the apply id, stage
//! the script in its state directory, start the wrapper that runs it.

use crate::agent::Agent;
use crate::arbiter::{self, ApplyId, ApplyRecord};
use crate::command::Pid;
use crate::constants::APPLY_INTERPRETER;
use crate::error::QgaError;
use crate::exec::{ExecRequest, PollOptions};
use crate::transport::Transport;

/// Where the guest keeps its apply records and what runs the script. The
/// defaults are the router's; tests point the state directory into a
/// temporary directory and swap `vbash` for `bash` with stub config-mode
/// functions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplyPaths {
    pub state_dir: String,
    pub interpreter: String,
}

impl Default for ApplyPaths {
    fn default() -> Self {
        ApplyPaths {
            state_dir: arbiter::APPLY_STATE_DIR.to_owned(),
            interpreter: APPLY_INTERPRETER.to_owned(),
        }
    }
}

/// What [`Agent::start_script`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dispatch {
    /// The router did not know the id: the script was staged and its
    /// wrapper started as this pid.
    Started(Pid),
    /// The router knew the id already; nothing was started.
    Known(ApplyRecord),
}

fn request(argv: Vec<String>) -> ExecRequest {
    let mut argv = argv.into_iter();
    let program = argv.next().expect("an argv has a program");
    ExecRequest::new(program).args(argv)
}

impl<T: Transport> Agent<T> {
    /// What the router recorded about `apply` (creating its state
    /// directory when missing).
    pub async fn apply_record(&self, apply: &ApplyId, paths: &ApplyPaths) -> Result<ApplyRecord, QgaError> {
        let output = self
            .run(
                &request(arbiter::query_argv(&paths.state_dir, apply)),
                PollOptions::default(),
            )
            .await?;
        if !output.success() {
            return Err(QgaError::InvalidArgument(format!(
                "asking the router about apply {apply} failed ({:?}): {}",
                output.status,
                output.stderr_text()
            )));
        }
        arbiter::parse_record(&output.stdout_text(), &output.stderr_text())
    }

    /// Starts `script` as apply `apply` unless the router knows that id
    /// already; poll a started one with [`Agent::exec_status`] (the
    /// controller polls on later reconciles rather than waiting here).
    pub async fn start_script(&self, apply: &ApplyId, script: &[u8], paths: &ApplyPaths) -> Result<Dispatch, QgaError> {
        match self.apply_record(apply, paths).await? {
            ApplyRecord::Unknown => {}
            known => return Ok(Dispatch::Known(known)),
        }
        let staged = arbiter::staged_script_path(&paths.state_dir, apply);
        self.write_file(&staged, script).await?;
        let argv = arbiter::wrapper_argv(&paths.state_dir, apply, &staged, &paths.interpreter);
        self.exec(&request(argv)).await.map(Dispatch::Started)
    }

    /// Stops `apply`'s process group in the guest if it still runs; the
    /// apply's runner then records how it ended and frees the router's lock.
    pub async fn stop_script(&self, apply: &ApplyId, paths: &ApplyPaths) -> Result<(), QgaError> {
        let request = request(arbiter::stop_argv(&paths.state_dir, apply)).capture_output(false);
        self.exec(&request).await.map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_paths_are_the_routers() {
        let paths = ApplyPaths::default();
        assert_eq!(paths.interpreter, "/bin/vbash");
        assert_eq!(paths.state_dir, "/run/vrouter-operator");
    }
}
