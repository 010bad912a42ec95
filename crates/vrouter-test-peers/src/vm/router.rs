//! What makes a booted guest a router: the stand-ins of [`crate::guest`] at
//! the router's own paths (so the operator runs with its production guest
//! paths), and a view of them through an agent.

use std::time::Duration;

use vrouter_qga::{Agent, ExecRequest, PollOptions, QgaError, Transport};
use vrouter_render::testing::{StubEvent, parse_stub_log};
use vrouter_test_vm::Archive;

use crate::guest::{RouterFiles, os_release};

/// The startup config a fresh guest boots with (and `load` reads for an
/// empty config).
pub const DEFAULT_CONFIG_BOOT: &str = "system {\n    host-name vyos\n}\ninterfaces {\n    loopback lo {\n    }\n}\n";

/// util-linux's `flock` on this machine, copied into every router guest.
const HOST_FLOCK: &str = "/usr/bin/flock";

const DEFAULT_CONFIG_PATH: &str = "/opt/vyatta/etc/config.boot.default";

/// The overlay that turns the base guest into a router of OS `os_id`
/// (`vyos` or `dozenos`).
pub fn router_overlay(os_id: &str) -> Archive {
    let files = RouterFiles::in_guest();
    let mut overlay = Archive::new();
    for (path, mode, content) in files.programs() {
        overlay.file(&path, mode, content.as_bytes());
    }
    overlay.file(&files.os_release, 0o644, os_release(os_id).as_bytes());
    // VyOS ships util-linux's flock, which the operator's apply wrapper
    // locks the router with; the base guest's busybox has none. It needs
    // only libc, which the base has for bash.
    let flock = std::fs::read(HOST_FLOCK).unwrap_or_else(|e| panic!("{HOST_FLOCK} (Debian's util-linux): {e}"));
    overlay.file("/usr/bin/flock", 0o755, &flock);
    // VyOS's parser for the stub `load`: the host's build, which needs only
    // libc and libm (the base has both, for qemu-ga).
    let parser = crate::vyos_parser::binary();
    let parser = std::fs::read(&parser).unwrap_or_else(|e| panic!("{}: {e}", parser.display()));
    overlay.file(&files.vyos_parser, 0o755, &parser);
    overlay.file(DEFAULT_CONFIG_PATH, 0o644, DEFAULT_CONFIG_BOOT.as_bytes());
    overlay.file(&files.config_boot, 0o644, DEFAULT_CONFIG_BOOT.as_bytes());
    overlay.file(
        "/etc/vrouter-guest/boot.d/10-router",
        0o755,
        boot_hook(&files).as_bytes(),
    );
    overlay
}

/// At boot, like VyOS: the running config is the startup config, and the
/// router unit has run (`SubState=exited`).
fn boot_hook(files: &RouterFiles) -> String {
    format!(
        "#!/bin/sh\nmkdir -p \"$(dirname '{log}')\" \"$(dirname '{substate}')\"\n\
         : >'{log}'\n: >'{delay}'\n: >'{minute}'\necho exited >'{substate}'\ncp '{boot}' '{running}'\n: >'{running}.confirm-timer'\n",
        minute = files.confirm_minute,
        log = files.stub_log,
        substate = files.substate,
        delay = files.commit_delay,
        boot = files.config_boot,
        running = files.running,
    )
}

/// The router inside a guest, seen through an agent transport (the chardev
/// socket, or virsh for a libvirt domain).
pub struct RouterView<T> {
    agent: Agent<T>,
    files: RouterFiles,
}

impl<T: Transport> RouterView<T> {
    pub fn new(transport: T) -> Self {
        RouterView {
            agent: Agent::new(transport),
            files: RouterFiles::in_guest(),
        }
    }

    pub fn agent(&self) -> &Agent<T> {
        &self.agent
    }

    /// Runs `script` with `/bin/sh -c` in the guest; its stdout.
    pub async fn sh(&self, script: &str) -> Result<String, QgaError> {
        let request = ExecRequest::new("/bin/sh").args(["-c", script]);
        let poll = PollOptions {
            interval: Duration::from_millis(50),
            timeout: Duration::from_secs(30),
        };
        let output = self.agent.run(&request, poll).await?;
        if !output.success() {
            return Err(QgaError::InvalidArgument(format!(
                "`{script}` in the guest ended with {:?}: {}",
                output.status,
                output.stderr_text()
            )));
        }
        Ok(output.stdout_text())
    }

    /// Back to the state of a fresh boot: empty stub log, the default
    /// startup and running config, the router unit `exited`, no commit delay.
    pub async fn reset(&self) -> Result<(), QgaError> {
        let f = &self.files;
        self.sh(&format!(
            ": >'{log}'; : >'{delay}'; : >'{minute}'; : >'{running}.confirm-timer'; : >'{cli}'; : >'{sys}'; \
             echo exited >'{substate}'; cp '{default}' '{boot}'; cp '{default}' '{running}'; rm -rf '{state}'; \
             rm -f '{commits}' '{commits}.pending'",
            commits = f.commit_log,
            state = vrouter_qga::constants::APPLY_STATE_DIR,
            minute = f.confirm_minute,
            log = f.stub_log,
            delay = f.commit_delay,
            cli = f.cli_shell_api_log,
            sys = f.systemctl_log,
            substate = f.substate,
            default = DEFAULT_CONFIG_PATH,
            boot = f.config_boot,
            running = f.running,
        ))
        .await
        .map(drop)
    }

    /// The router's journal of apply runs since the last reset or boot:
    /// `<apply id> started` and `<apply id> <exit code>`, a line each.
    pub async fn apply_journal(&self) -> Result<Vec<String>, QgaError> {
        let path = format!("{}/journal", vrouter_qga::constants::APPLY_STATE_DIR);
        let text = self.sh(&format!("cat '{path}' 2>/dev/null || :")).await?;
        Ok(text.lines().map(str::to_owned).collect())
    }

    /// The apply ids in the order they ran, asserting from the journal that
    /// every run ended before the next began; `None` while one still runs.
    pub async fn apply_runs(&self) -> Result<Option<Vec<String>>, QgaError> {
        Ok(runs_in_order(&self.apply_journal().await?))
    }

    /// Every record the stubs wrote since the last reset or boot.
    pub async fn stub_events(&self) -> Result<Vec<StubEvent>, QgaError> {
        let bytes = self.agent.read_file(&self.files.stub_log).await?;
        parse_stub_log(&bytes).map_err(QgaError::InvalidArgument)
    }

    /// The config-mode calls, each as `name arg…`.
    pub async fn calls(&self) -> Result<Vec<String>, QgaError> {
        Ok(self
            .stub_events()
            .await?
            .into_iter()
            .filter_map(|e| match e {
                StubEvent::Call { name, args } => Some(std::iter::once(name).chain(args).collect::<Vec<_>>().join(" ")),
                _ => None,
            })
            .collect())
    }

    /// What each `load /dev/stdin` received, in order, byte for byte.
    pub async fn loaded_configs(&self) -> Result<Vec<String>, QgaError> {
        Ok(self
            .stub_events()
            .await?
            .into_iter()
            .filter_map(|e| match e {
                StubEvent::Loaded(config) => Some(config),
                _ => None,
            })
            .collect())
    }

    /// The router's commit log, newest first, as `show system commit` reads it.
    pub async fn commit_log(&self) -> Result<Vec<crate::guest::CommitLogEntry>, QgaError> {
        let text = self
            .sh(&format!("cat '{}' 2>/dev/null || :", self.files.commit_log))
            .await?;
        crate::guest::parse_commit_log(&text).map_err(QgaError::InvalidArgument)
    }

    pub async fn config_boot(&self) -> Result<Vec<u8>, QgaError> {
        self.agent.read_file(&self.files.config_boot).await
    }

    pub async fn running_config(&self) -> Result<Vec<u8>, QgaError> {
        self.agent.read_file(&self.files.running).await
    }

    /// Makes every `commit` sleep `seconds` first (0: no delay).
    pub async fn set_commit_delay(&self, seconds: u32) -> Result<(), QgaError> {
        let content = if seconds == 0 {
            String::new()
        } else {
            format!("{seconds}\n")
        };
        self.agent
            .write_file(&self.files.commit_delay, content.as_bytes())
            .await
    }

    /// Makes a minute of `commit-confirm`'s timer last `seconds` (0: a real minute).
    pub async fn set_confirm_minute(&self, seconds: u32) -> Result<(), QgaError> {
        let content = if seconds == 0 {
            String::new()
        } else {
            format!("{seconds}\n")
        };
        self.agent
            .write_file(&self.files.confirm_minute, content.as_bytes())
            .await
    }

    /// Whether a `commit-confirm` revert is scheduled and not yet confirmed.
    pub async fn confirm_pending(&self) -> Result<bool, QgaError> {
        let timer = format!("{}.confirm-timer", self.files.running);
        Ok(!self.agent.read_file(&timer).await?.is_empty())
    }

    pub async fn set_substate(&self, substate: &str) -> Result<(), QgaError> {
        self.agent
            .write_file(&self.files.substate, format!("{substate}\n").as_bytes())
            .await
    }

    /// Seconds since the guest kernel booted.
    pub async fn uptime(&self) -> Result<Duration, QgaError> {
        let text = String::from_utf8_lossy(&self.agent.read_file(vrouter_qga::constants::PROC_UPTIME_PATH).await?)
            .into_owned();
        vrouter_providers::parse_proc_uptime(&text)
            .ok_or_else(|| QgaError::InvalidArgument(format!("unreadable /proc/uptime: {text:?}")))
    }

    /// How many `cli-shell-api` runs there were.
    pub async fn running_config_reads(&self) -> Result<usize, QgaError> {
        Ok(self.agent.read_file(&self.files.cli_shell_api_log).await?.len())
    }
}

/// The apply ids of a journal in the order they ran; `None` while the last
/// one runs. Panics when two runs overlap: the journal of a router that
/// locks each apply never shows a start before the previous run's end.
pub fn runs_in_order(journal: &[String]) -> Option<Vec<String>> {
    let mut runs = Vec::new();
    let mut running: Option<&str> = None;
    for line in journal {
        match (line.strip_suffix(" started"), running) {
            (Some(id), None) => running = Some(id),
            (Some(id), Some(other)) => panic!("{id} started while {other} ran: {journal:?}"),
            (None, Some(id)) if line.starts_with(&format!("{id} ")) => {
                runs.push(id.to_owned());
                running = None;
            }
            (None, _) => panic!("{line:?} ends a run that did not start: {journal:?}"),
        }
    }
    running.is_none().then_some(runs)
}
