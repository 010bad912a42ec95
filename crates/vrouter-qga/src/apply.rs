//! Staging and starting the apply script (spec §7.5): write it to a fixed
//! path through the agent, then `guest-exec` the interpreter on it.

use crate::agent::Agent;
use crate::command::Pid;
use crate::constants::{APPLY_INTERPRETER, APPLY_SCRIPT_PATH};
use crate::error::QgaError;
use crate::exec::ExecRequest;
use crate::transport::Transport;

/// Where the script goes and what runs it. The defaults are the fixed
/// guest paths; tests point both into a temporary directory and swap
/// `vbash` for `bash` with stub config-mode functions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplyPaths {
    pub script: String,
    pub interpreter: String,
}

impl Default for ApplyPaths {
    fn default() -> Self {
        ApplyPaths {
            script: APPLY_SCRIPT_PATH.to_owned(),
            interpreter: APPLY_INTERPRETER.to_owned(),
        }
    }
}

impl ApplyPaths {
    /// `<interpreter> <script>`, capturing output: the result is judged on
    /// the exit code and on failure markers in the output (spec §7.4).
    pub fn exec_request(&self) -> ExecRequest {
        ExecRequest::new(self.interpreter.as_str()).arg(self.script.as_str())
    }
}

impl<T: Transport> Agent<T> {
    /// Writes `script` to `paths.script` and starts it; returns the pid to
    /// poll with [`Agent::exec_status`] (the controller polls on later
    /// reconciles rather than waiting here).
    pub async fn start_script(&self, script: &[u8], paths: &ApplyPaths) -> Result<Pid, QgaError> {
        self.write_file(&paths.script, script).await?;
        self.exec(&paths.exec_request()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_paths_are_the_spec_paths() {
        let request = ApplyPaths::default().exec_request();
        assert_eq!(request.path, "/bin/vbash");
        assert_eq!(request.args, ["/tmp/vrouter-apply.sh"]);
        assert!(request.capture_output);
        assert_eq!(request.env, None);
    }
}
