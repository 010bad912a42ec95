//! What the KubeVirt and Proxmox providers share: both reach the router
//! through the QEMU guest agent, so readiness, apply and file reads are the
//! same sequence of agent operations over two different carriers.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;
use vrouter_api::ProviderType;
use vrouter_qga::{GuestFlavor, SUBSTATE_EXITED};

use crate::error::ProviderError;
use crate::provider::{ApplyRecord, ExecHandle, ExecOutcome, ExecStatus, Provider};
use vrouter_qga::{ApplyId, arbiter};

/// Paths and commands inside the guest: the one place the operator names
/// them. The defaults are the router's (`vrouter_qga::constants` says why
/// each is what it is); tests point them into a temp dir (script path, a
/// stub `systemctl`, an os-release file, a config.boot) and run the script
/// with `bash` instead of `/bin/vbash`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuestPaths {
    /// The root-only directory the guest keeps apply records in and runs
    /// each apply's script from (`vrouter_qga::arbiter` says how).
    pub state_dir: String,
    /// What runs the apply script.
    pub interpreter: String,
    /// Asked for the router unit's SubState.
    pub systemctl: String,
    /// Read for the guest OS id when the agent's `guest-get-osinfo` is
    /// unavailable.
    pub os_release: String,
    /// Runs `cat` and `rm` when a file must be assembled from parts.
    pub shell: String,
    /// The router's startup configuration, read back by drift detection.
    pub config_boot: String,
    /// Prints the router's running configuration (`argv[0]` is the program).
    pub running_config: Vec<String>,
    /// The guest's uptime, read to see a reboot that keeps the VM process.
    pub uptime: String,
}

impl Default for GuestPaths {
    fn default() -> Self {
        GuestPaths {
            state_dir: vrouter_qga::constants::APPLY_STATE_DIR.to_string(),
            interpreter: vrouter_qga::constants::APPLY_INTERPRETER.to_string(),
            systemctl: vrouter_qga::constants::SYSTEMCTL_PATH.to_string(),
            os_release: vrouter_qga::constants::OS_RELEASE_PATH.to_string(),
            shell: "/bin/sh".to_string(),
            config_boot: vrouter_qga::constants::CONFIG_BOOT_PATH.to_string(),
            running_config: vrouter_qga::constants::SHOW_RUNNING_CONFIG.map(str::to_string).to_vec(),
            uptime: vrouter_qga::constants::PROC_UPTIME_PATH.to_string(),
        }
    }
}

/// How long helper commands in the guest (systemctl, file assembly) may run,
/// and how often they are polled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GuestTiming {
    pub poll_interval: Duration,
    pub command_timeout: Duration,
}

/// How often a short helper command is polled. Every apply waits on two
/// readiness checks, each a `systemctl` that exits within tens of
/// milliseconds: a 50 ms poll sees it done a request or two later, where the
/// agent library's general 250 ms interval would make those waits most of an
/// apply's latency.
const HELPER_POLL_INTERVAL: Duration = Duration::from_millis(50);

impl Default for GuestTiming {
    fn default() -> Self {
        GuestTiming {
            poll_interval: HELPER_POLL_INTERVAL,
            command_timeout: vrouter_qga::PollOptions::default().timeout,
        }
    }
}

/// The guest-agent operations a provider carries to the guest.
#[async_trait]
pub(crate) trait GuestAgent: Send + Sync {
    /// The guest's os-release `ID`, from `guest-get-osinfo`, else from the
    /// file at `os_release`. Returns the id and where it came from.
    async fn os_id(&self, os_release: &str) -> Result<(String, String), ProviderError>;
    /// Starts `argv` with captured output; returns the guest pid.
    async fn exec(&self, argv: &[String]) -> Result<i64, ProviderError>;
    /// Polls a pid from `exec`. A pid the agent does not know is
    /// [`ProviderError::ExecResultLost`].
    async fn exec_status(&self, pid: i64) -> Result<ExecStatus, ProviderError>;
    /// Writes the whole of `content` to `path`, replacing the file.
    async fn write_file(&self, path: &str, content: &[u8]) -> Result<(), ProviderError>;
    async fn read_file(&self, path: &str) -> Result<Vec<u8>, ProviderError>;
}

/// A provider that reaches the router only through the QEMU guest agent
/// (KubeVirt, Proxmox VE): it says what differs (its type, how it sees the VM
/// running, its guest paths and timing), and the rest of [`Provider`] is the
/// same sequence of agent operations over its carrier.
#[async_trait]
pub(crate) trait AgentProvider: GuestAgent + fmt::Debug {
    const KIND: ProviderType;
    fn paths(&self) -> &GuestPaths;
    fn timing(&self) -> GuestTiming;
    /// Whether the VM runs, as the platform reports it.
    async fn vm_running(&self) -> Result<bool, ProviderError>;
    /// Whether the VM runs, for a periodic poll ([`Provider::is_vm_running_polled`]).
    async fn vm_running_polled(&self) -> Result<bool, ProviderError> {
        self.vm_running().await
    }
    /// When the VM's current run began, if the platform records it
    /// ([`Provider::vm_started_at`]).
    async fn vm_run_started(&self) -> Result<Option<k8s_openapi::jiff::Timestamp>, ProviderError> {
        Ok(None)
    }
}

#[async_trait]
impl<P: AgentProvider> Provider for P {
    fn kind(&self) -> ProviderType {
        P::KIND
    }

    async fn is_vm_running(&self) -> Result<bool, ProviderError> {
        self.vm_running().await
    }

    async fn is_vm_running_polled(&self) -> Result<bool, ProviderError> {
        self.vm_running_polled().await
    }

    async fn check_ready(&self) -> Result<(), ProviderError> {
        check_ready(self, self.paths(), self.timing(), None).await.map(drop)
    }

    async fn check_ready_knowing(&self, known: Option<GuestFlavor>) -> Result<Option<GuestFlavor>, ProviderError> {
        check_ready(self, self.paths(), self.timing(), known).await.map(Some)
    }

    async fn check_ready_reading_running(
        &self,
        known: Option<GuestFlavor>,
    ) -> Result<(Option<GuestFlavor>, Result<Vec<u8>, ProviderError>), ProviderError> {
        check_ready_reading_running(self, self.paths(), self.timing(), known)
            .await
            .map(|(flavor, running)| (Some(flavor), running))
    }

    async fn exec_script(
        &self,
        apply: &ApplyId,
        config: &str,
        commands: &str,
        save: bool,
    ) -> Result<ExecHandle, ProviderError> {
        let script = crate::outcome::render_script(config, commands, save)?;
        start_apply(self, self.paths(), self.timing(), apply, &script).await
    }

    async fn apply_record(&self, apply: &ApplyId) -> Result<ApplyRecord, ProviderError> {
        apply_record(self, self.paths(), self.timing(), apply).await
    }

    async fn stop_apply(&self, apply: &ApplyId) -> Result<(), ProviderError> {
        self.exec(&arbiter::stop_argv(&self.paths().state_dir, apply))
            .await
            .map(drop)
    }

    fn confirm_supported(&self) -> Result<(), ProviderError> {
        Ok(())
    }

    async fn exec_confirmed_script(
        &self,
        apply: &ApplyId,
        config: &str,
        commands: &str,
        minutes: u32,
    ) -> Result<ExecHandle, ProviderError> {
        let script = crate::outcome::render_confirmed_script(config, commands, minutes)?;
        start_apply(self, self.paths(), self.timing(), apply, &script).await
    }

    async fn exec_commented_script(
        &self,
        apply: &ApplyId,
        config: &str,
        commands: &str,
        commit: vrouter_render::Commit,
        comment: &vrouter_render::CommitComment,
    ) -> Result<ExecHandle, ProviderError> {
        let script = crate::outcome::render_commented_script(config, commands, commit, comment)?;
        start_apply(self, self.paths(), self.timing(), apply, &script).await
    }

    async fn run_check(&self, argv: &[String], timeout: Duration) -> Result<ExecOutcome, ProviderError> {
        let timing = GuestTiming {
            command_timeout: timeout,
            ..self.timing()
        };
        run_to_exit(self, argv, timing).await
    }

    async fn confirm_apply(&self, save: bool) -> Result<(), ProviderError> {
        confirm_apply(self, self.paths(), self.timing(), save).await
    }

    async fn get_exec_status(&self, handle: ExecHandle) -> Result<ExecStatus, ProviderError> {
        match self.exec_status(handle.get()).await? {
            // A wrapper that found its apply id claimed ran nothing: the
            // first dispatch's record holds the result.
            ExecStatus::Exited(outcome) if arbiter::is_duplicate(outcome.exit_code, &outcome.stderr) => {
                Err(ProviderError::ExecResultLost {
                    handle: handle.get(),
                    reason: "the router had started this apply before; ask it for the apply's record".into(),
                })
            }
            // A killed wrapper says nothing of its script, which runs on
            // under the router's lock: the router's record says how it
            // stands (running, finished, or vanished).
            ExecStatus::Exited(ExecOutcome {
                signal: Some(signal), ..
            }) => Err(ProviderError::ExecResultLost {
                handle: handle.get(),
                reason: format!(
                    "the apply's wrapper was killed by signal {signal}; ask the router for the apply's record"
                ),
            }),
            status => Ok(status),
        }
    }

    async fn read_file(&self, path: &str) -> Result<Vec<u8>, ProviderError> {
        GuestAgent::read_file(self, path).await
    }

    async fn read_command_output(&self, argv: &[String]) -> Result<Vec<u8>, ProviderError> {
        read_command_output(self, argv, self.timing()).await
    }

    async fn read_startup_config(&self) -> Result<Vec<u8>, ProviderError> {
        read_startup_config(self, self.paths()).await
    }

    async fn read_running_config(&self) -> Result<Vec<u8>, ProviderError> {
        read_running_config(self, self.paths(), self.timing()).await
    }

    async fn guest_uptime(&self) -> Result<Duration, ProviderError> {
        guest_uptime(self, self.paths()).await
    }

    async fn vm_started_at(&self) -> Result<Option<k8s_openapi::jiff::Timestamp>, ProviderError> {
        self.vm_run_started().await
    }
}

/// Runs `argv` and waits for it to exit, within `timing.command_timeout`.
pub(crate) async fn run_to_exit(
    agent: &dyn GuestAgent,
    argv: &[String],
    timing: GuestTiming,
) -> Result<ExecOutcome, ProviderError> {
    let pid = agent.exec(argv).await?;
    wait_to_exit(agent, pid, &format!("`{}`", argv.join(" ")), timing).await
}

/// Waits for `pid` (running `what`) to exit, within `timing.command_timeout`.
async fn wait_to_exit(
    agent: &dyn GuestAgent,
    pid: i64,
    what: &str,
    timing: GuestTiming,
) -> Result<ExecOutcome, ProviderError> {
    let deadline = Instant::now() + timing.command_timeout;
    loop {
        if let ExecStatus::Exited(outcome) = agent.exec_status(pid).await? {
            return Ok(outcome);
        }
        if Instant::now() >= deadline {
            return Err(ProviderError::Timeout {
                operation: format!("waiting for {what} in the guest"),
                after: timing.command_timeout,
            });
        }
        tokio::time::sleep(timing.poll_interval).await;
    }
}

/// Runs a read-only command to completion and returns its stdout; a non-zero
/// exit (or a signal) is [`ProviderError::GuestCommand`].
pub(crate) async fn read_command_output(
    agent: &dyn GuestAgent,
    argv: &[String],
    timing: GuestTiming,
) -> Result<Vec<u8>, ProviderError> {
    let outcome = run_to_exit(agent, argv, timing).await?;
    output_of(argv, outcome)
}

/// The stdout of `argv`'s run, if it is whole and the run exited 0.
fn output_of(argv: &[String], outcome: ExecOutcome) -> Result<Vec<u8>, ProviderError> {
    if outcome.stdout_truncated {
        // A partial config would hash as a drift that is not there.
        return Err(ProviderError::protocol(
            "guest agent",
            format!(
                "it truncated the output of `{}`; refusing a partial read",
                argv.join(" ")
            ),
        ));
    }
    if outcome.exit_code != 0 || outcome.error.is_some() {
        return Err(ProviderError::GuestCommand {
            command: argv.join(" "),
            exit_code: outcome.exit_code,
            stderr: outcome.error.unwrap_or_else(|| outcome.stderr.trim().to_string()),
        });
    }
    Ok(outcome.stdout.into_bytes())
}

/// The SubState in the output of `systemctl show -p SubState [--value] UNIT`,
/// which prints either `SubState=exited` or just `exited`.
pub fn parse_substate(stdout: &str) -> String {
    let line = stdout.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
    line.strip_prefix("SubState=").unwrap_or(line).to_string()
}

/// The uptime in `/proc/uptime` (`"12345.67 4567.89"`: seconds since boot,
/// then idle seconds). `None` for anything else, including numbers no
/// [`Duration`] holds (negative, NaN, infinite, beyond `u64::MAX` seconds):
/// the guest chooses these bytes, so no value of them may panic.
pub fn parse_proc_uptime(text: &str) -> Option<Duration> {
    let seconds: f64 = text.split_whitespace().next()?.parse().ok()?;
    Duration::try_from_secs_f64(seconds).ok()
}

/// The router's startup configuration.
pub(crate) async fn read_startup_config(agent: &dyn GuestAgent, paths: &GuestPaths) -> Result<Vec<u8>, ProviderError> {
    agent.read_file(&paths.config_boot).await
}

/// The router's running configuration, printed by `paths.running_config`.
pub(crate) async fn read_running_config(
    agent: &dyn GuestAgent,
    paths: &GuestPaths,
    timing: GuestTiming,
) -> Result<Vec<u8>, ProviderError> {
    read_command_output(agent, &paths.running_config, timing).await
}

/// The guest's own uptime, from its uptime file.
pub(crate) async fn guest_uptime(agent: &dyn GuestAgent, paths: &GuestPaths) -> Result<Duration, ProviderError> {
    let bytes = agent.read_file(&paths.uptime).await?;
    std::str::from_utf8(&bytes)
        .ok()
        .and_then(parse_proc_uptime)
        .ok_or_else(|| {
            ProviderError::protocol(
                "guest agent",
                format!(
                    "{} reads {}, not a number of seconds since boot",
                    paths.uptime,
                    vrouter_api::text::quote(&bytes)
                ),
            )
        })
}

/// The router flavor of an os-release id.
pub(crate) fn flavor_of(id: &str, source_name: &str) -> Result<GuestFlavor, ProviderError> {
    GuestFlavor::from_os_id(id).map_err(|_| ProviderError::UnknownGuestOs {
        id: id.to_string(),
        source_name: source_name.to_string(),
    })
}

/// Readiness: the agent answers, the OS is one we know, and its router unit
/// has run to completion (`SubState=exited`: it is a oneshot unit, so
/// "finished", not "active", is what ready means).
///
/// No ping: an agent that answers the first call (the OS id, or the
/// `systemctl` exec when the OS is `known`) answers a ping, so a ping before
/// it would only cost one more round trip (a pod exec on KubeVirt) per
/// check. A `known` OS is not asked; a wrong one (the guest booted another
/// OS unseen) names a unit the guest lacks, which fails the check, and the
/// caller asks again.
pub(crate) async fn check_ready(
    agent: &dyn GuestAgent,
    paths: &GuestPaths,
    timing: GuestTiming,
    known: Option<GuestFlavor>,
) -> Result<GuestFlavor, ProviderError> {
    let flavor = known_or_asked(agent, paths, known).await?;
    let argv = substate_argv(paths, flavor);
    let outcome = run_to_exit(agent, &argv, timing).await?;
    if outcome.exit_code != 0 {
        return Err(ProviderError::GuestCommand {
            command: argv.join(" "),
            exit_code: outcome.exit_code,
            stderr: outcome.stderr.trim().to_string(),
        });
    }
    judge_substate(flavor, &outcome.stdout)
}

/// [`check_ready`], then the running config, in one guest command (a
/// shell that runs the `systemctl` of the check, prints
/// [`RUNNING_CONFIG_FOLLOWS`] on a line of its own, and then becomes the
/// command that prints the running config): a drift read is a round trip
/// and a poll fewer than the two commands would be. A `systemctl` that
/// fails ends the shell with its status before the marker, so a failed
/// check reads as it does alone. The running config is read even when the
/// unit has not finished; it is only thrown away then.
pub(crate) async fn check_ready_reading_running(
    agent: &dyn GuestAgent,
    paths: &GuestPaths,
    timing: GuestTiming,
    known: Option<GuestFlavor>,
) -> Result<(GuestFlavor, Result<Vec<u8>, ProviderError>), ProviderError> {
    let flavor = known_or_asked(agent, paths, known).await?;
    let check = substate_argv(paths, flavor);
    let argv = check_then_read_argv(&paths.shell, &check, &paths.running_config);
    let outcome = run_to_exit(agent, &argv, timing).await?;
    let Some((substate, running)) = split_at_marker(&outcome.stdout) else {
        return Err(if outcome.exit_code != 0 || outcome.error.is_some() {
            ProviderError::GuestCommand {
                command: check.join(" "),
                exit_code: outcome.exit_code,
                stderr: outcome.error.unwrap_or_else(|| outcome.stderr.trim().to_string()),
            }
        } else {
            ProviderError::protocol(
                "guest agent",
                format!("`{}` exited 0 without printing its marker line", argv.join(" ")),
            )
        });
    };
    let flavor = judge_substate(flavor, substate)?;
    // The running config is the end of the output: what comes before it is
    // removed in place, so a large config is never held twice.
    let skip = outcome.stdout.len() - running.len();
    let mut running = outcome;
    running.stdout.drain(..skip);
    Ok((flavor, output_of(&paths.running_config, running)))
}

/// The line [`check_ready_reading_running`]'s command prints between the
/// unit's state and the running config.
pub const RUNNING_CONFIG_FOLLOWS: &str = "--- vrouter-operator: the running config follows ---";

/// `shell -c` running `first` (stopping with its status if it fails), a
/// [`RUNNING_CONFIG_FOLLOWS`] line, then `second` in the shell's place.
/// Both argvs go in as positional parameters, never into the script text,
/// so nothing in them is parsed by the shell.
pub fn check_then_read_argv(shell: &str, first: &[String], second: &[String]) -> Vec<String> {
    let first_params = (1..=first.len()).map(|i| format!("\"${{{i}}}\"")).collect::<Vec<_>>();
    let script = format!(
        "{} || exit; printf '\\n%s\\n' '{RUNNING_CONFIG_FOLLOWS}'; shift {}; exec \"$@\"",
        first_params.join(" "),
        first.len()
    );
    [shell, "-c", &script, "vrouter-ready-and-running"]
        .into_iter()
        .map(str::to_string)
        .chain(first.iter().cloned())
        .chain(second.iter().cloned())
        .collect()
}

/// `stdout` before and after the first [`RUNNING_CONFIG_FOLLOWS`] line.
fn split_at_marker(stdout: &str) -> Option<(&str, &str)> {
    let mut start = 0;
    for line in stdout.split_inclusive('\n') {
        if line.strip_suffix('\n') == Some(RUNNING_CONFIG_FOLLOWS) {
            return Some((&stdout[..start], &stdout[start + line.len()..]));
        }
        start += line.len();
    }
    None
}

/// `known`, or the OS the guest says it runs.
async fn known_or_asked(
    agent: &dyn GuestAgent,
    paths: &GuestPaths,
    known: Option<GuestFlavor>,
) -> Result<GuestFlavor, ProviderError> {
    match known {
        Some(flavor) => Ok(flavor),
        None => {
            let (id, source_name) = agent.os_id(&paths.os_release).await?;
            flavor_of(&id, &source_name)
        }
    }
}

/// Asks for the SubState of `flavor`'s router unit.
fn substate_argv(paths: &GuestPaths, flavor: GuestFlavor) -> Vec<String> {
    [
        paths.systemctl.as_str(),
        "show",
        "-p",
        "SubState",
        "--value",
        flavor.router_service(),
    ]
    .map(str::to_string)
    .to_vec()
}

/// Ready when the unit's printed SubState is `exited`.
fn judge_substate(flavor: GuestFlavor, stdout: &str) -> Result<GuestFlavor, ProviderError> {
    let substate = parse_substate(stdout);
    if substate == SUBSTATE_EXITED {
        Ok(flavor)
    } else {
        Err(ProviderError::NotReady {
            unit: flavor.router_service().to_string(),
            substate,
        })
    }
}

/// What the router recorded about `apply` (its state directory is created
/// on the way, so a script can be staged there next).
pub(crate) async fn apply_record(
    agent: &dyn GuestAgent,
    paths: &GuestPaths,
    timing: GuestTiming,
    apply: &ApplyId,
) -> Result<ApplyRecord, ProviderError> {
    let stdout = read_command_output_with_stderr(agent, &arbiter::query_argv(&paths.state_dir, apply), timing).await?;
    let record = arbiter::parse_record(&stdout.0, &stdout.1)
        .map_err(|e| ProviderError::protocol("guest agent", format!("the apply record of {apply}: {e}")))?;
    Ok(match record {
        arbiter::ApplyRecord::Unknown => ApplyRecord::Unknown,
        arbiter::ApplyRecord::Vanished => ApplyRecord::Vanished,
        arbiter::ApplyRecord::Running { pid } => ApplyRecord::Running(ExecHandle(pid)),
        arbiter::ApplyRecord::Finished {
            exit_code,
            stdout,
            stderr,
        } => ApplyRecord::Finished(ExecOutcome {
            exit_code,
            stdout,
            stderr,
            ..ExecOutcome::default()
        }),
    })
}

/// Starts `script` as apply `apply`: stages it in the router's state
/// directory under a name of this attempt's own, and starts the wrapper
/// that claims the id, takes the router's lock and runs it.
///
/// The router is not asked about the id first. Callers ask before they
/// continue an id that may have reached the router (a dispatch whose
/// answer was lost, a crash), and a fresh id is unknown to it; either way
/// the wrapper's claim runs an id at most once, and a second dispatch's
/// poll reports its result lost, which sends the caller to the router's
/// record. Asking would cost a guest command and its poll on every apply.
/// Only when staging fails (a router whose state directory does not exist
/// yet: after a boot, `/run` is empty) is the router asked, which creates
/// the directory, and then an id it knows is not started again.
pub(crate) async fn start_apply(
    agent: &dyn GuestAgent,
    paths: &GuestPaths,
    timing: GuestTiming,
    apply: &ApplyId,
    script: &str,
) -> Result<ExecHandle, ProviderError> {
    let staged = arbiter::staged_script_path(&paths.state_dir, apply);
    if let Err(first) = agent.write_file(&staged, script.as_bytes()).await {
        tracing::debug!(error = %first, %apply, "staging failed; asking the router, which creates its state directory");
        match apply_record(agent, paths, timing, apply).await? {
            ApplyRecord::Unknown => {}
            ApplyRecord::Running(handle) => return Ok(handle),
            ApplyRecord::Finished(_) | ApplyRecord::Vanished => {
                return Err(ProviderError::AlreadyDispatched {
                    apply: apply.to_string(),
                });
            }
        }
        agent.write_file(&staged, script.as_bytes()).await?;
    }
    let pid = agent
        .exec(&arbiter::wrapper_argv(
            &paths.state_dir,
            apply,
            &staged,
            &paths.interpreter,
        ))
        .await?;
    Ok(ExecHandle(pid))
}

/// Runs a command to completion; its stdout and stderr once it exits 0.
async fn read_command_output_with_stderr(
    agent: &dyn GuestAgent,
    argv: &[String],
    timing: GuestTiming,
) -> Result<(String, String), ProviderError> {
    let outcome = run_to_exit(agent, argv, timing).await?;
    if outcome.exit_code != 0 || outcome.error.is_some() {
        return Err(ProviderError::GuestCommand {
            command: argv.first().cloned().unwrap_or_default(),
            exit_code: outcome.exit_code,
            stderr: outcome.error.unwrap_or_else(|| outcome.stderr.trim().to_string()),
        });
    }
    Ok((outcome.stdout, outcome.stderr))
}

/// Runs the confirmation script (`confirm`, then `save`) to its end, as an
/// apply of its own: it opens a configure session, so it takes the
/// router's lock like any apply. Confirming twice is harmless (`confirm`
/// says "No confirm pending"), so a fresh id per call is enough.
pub(crate) async fn confirm_apply(
    agent: &dyn GuestAgent,
    paths: &GuestPaths,
    timing: GuestTiming,
    save: bool,
) -> Result<(), ProviderError> {
    let script = vrouter_render::render_confirm_script(save);
    let apply =
        ApplyId::parse(&format!("confirm-{}", ApplyId::fresh(0))).expect("a fresh id with a safe prefix is safe");
    let pid = start_apply(agent, paths, timing, &apply, &script).await?;
    let outcome = wait_to_exit(agent, pid.get(), "the confirm script", timing).await?;
    match outcome.failure() {
        None => Ok(()),
        Some(why) => Err(ProviderError::GuestCommand {
            command: "confirm".into(),
            exit_code: outcome.exit_code,
            stderr: format!("{why}; output: {}", excerpt(&outcome.stdout, &outcome.stderr)),
        }),
    }
}

/// The last lines a guest command printed, for a message: enough to say what
/// went wrong, short enough for a condition.
pub fn excerpt(stdout: &str, stderr: &str) -> String {
    const MAX: usize = 400;
    let text = format!(
        "{}{}",
        stdout.trim_end(),
        if stderr.trim().is_empty() {
            String::new()
        } else {
            format!("\n{}", stderr.trim_end())
        }
    );
    let text = text.trim();
    if text.len() <= MAX {
        return text.to_string();
    }
    let mut start = text.len() - MAX;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &text[start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn substate_parses_both_output_forms() {
        let cases = [
            ("SubState=exited\n", "exited"),
            ("exited\n", "exited"),
            ("\n  running \n", "running"),
            ("", ""),
        ];
        for (out, want) in cases {
            assert_eq!(parse_substate(out), want, "{out:?}");
        }
    }

    #[test]
    fn the_marker_line_splits_the_output_once() {
        let m = RUNNING_CONFIG_FOLLOWS;
        let cases = [
            (format!("exited\n\n{m}\nset a\n"), Some(("exited\n\n", "set a\n"))),
            (format!("{m}\n"), Some(("", ""))),
            (
                format!("x\n{m}\n{m}\nb"),
                Some(("x\n", "--- vrouter-operator: the running config follows ---\nb")),
            ),
            (format!("exited {m}\n"), None),
            (format!("exited\n{m}"), None),
            ("exited\n".to_string(), None),
        ];
        for (stdout, want) in cases {
            assert_eq!(split_at_marker(&stdout), want, "{stdout:?}");
        }
    }

    /// The command, run by a real shell: the second runs only after the
    /// first succeeded, and no argument is parsed by the shell.
    #[test]
    fn one_command_runs_the_check_then_becomes_the_reader() {
        let run = |first: &[&str], second: &[&str]| {
            let owned = |v: &[&str]| v.iter().map(|a| a.to_string()).collect::<Vec<_>>();
            let argv = check_then_read_argv("/bin/sh", &owned(first), &owned(second));
            let out = std::process::Command::new(&argv[0]).args(&argv[1..]).output().unwrap();
            (out.status.code(), String::from_utf8(out.stdout).unwrap())
        };
        let hostile = "a b; $(exit 9) `false` \"'";
        let (code, stdout) = run(&["echo", "exited"], &["printf", "%s|%s", hostile, "z"]);
        assert_eq!(code, Some(0));
        let (substate, running) = split_at_marker(&stdout).unwrap();
        assert_eq!(parse_substate(substate), "exited");
        assert_eq!(running, format!("{hostile}|z"));

        let dir = tempfile::tempdir().unwrap();
        let touched = dir.path().join("second-ran");
        let (code, stdout) = run(
            &["sh", "-c", "echo failed; exit 3"],
            &["touch", touched.to_str().unwrap()],
        );
        assert_eq!((code, stdout.as_str()), (Some(3), "failed\n"));
        assert!(!touched.exists(), "the reader ran after a failed check");

        let (code, stdout) = run(&["echo", "exited"], &["sh", "-c", "echo partial; exit 4"]);
        assert_eq!(code, Some(4));
        assert_eq!(split_at_marker(&stdout).unwrap().1, "partial\n");
    }

    #[test]
    fn proc_uptime_parses() {
        assert_eq!(
            parse_proc_uptime("350735.47 234388.90\n"),
            Some(Duration::from_secs_f64(350735.47))
        );
        assert_eq!(parse_proc_uptime("12 3"), Some(Duration::from_secs(12)));
        assert_eq!(parse_proc_uptime("12.50 40.00\n"), Some(Duration::from_millis(12_500)));
        assert_eq!(parse_proc_uptime("0 0"), Some(Duration::ZERO));
        // Each of these is a number `f64` parses but no `Duration` holds.
        for bad in [
            "",
            "abc 1",
            "-1 2",
            "NaN 1",
            "inf 0",
            "-inf 0",
            "1e20 0",
            "18446744073709551616 0",
            "1e308",
        ] {
            assert_eq!(parse_proc_uptime(bad), None, "{bad:?}");
        }
    }

    proptest::proptest! {
        /// Whatever text a guest answers, the parse returns and agrees with
        /// the first word's value.
        #[test]
        fn any_uptime_text_parses_without_panicking(text in "\\PC{0,40}|[-+0-9.eE naNinf]{0,40}") {
            let parsed = parse_proc_uptime(&text);
            let first: Option<f64> = text.split_whitespace().next().and_then(|w| w.parse().ok());
            match (parsed, first) {
                (Some(d), Some(v)) => proptest::prop_assert!((d.as_secs_f64() - v).abs() <= v.abs() * 1e-9 + 1e-9),
                (Some(d), None) => proptest::prop_assert!(false, "{d:?} from {text:?}"),
                (None, Some(v)) => proptest::prop_assert!(!(v.is_finite() && (0.0..1.8e19).contains(&v)), "{v} refused"),
                (None, None) => {}
            }
        }
    }

    #[test]
    fn os_ids_map_to_router_units_or_a_named_error() {
        assert_eq!(flavor_of("vyos", "x").unwrap().router_service(), "vyos-router.service");
        assert_eq!(
            flavor_of("dozenos", "x").unwrap().router_service(),
            "dozenos-router.service"
        );
        let err = flavor_of("debian", "guest-get-osinfo").unwrap_err();
        assert!(matches!(err, ProviderError::UnknownGuestOs { .. }));
        let msg = err.to_string();
        assert!(msg.contains("\"debian\"") && msg.contains("guest-get-osinfo"), "{msg}");
    }
}
