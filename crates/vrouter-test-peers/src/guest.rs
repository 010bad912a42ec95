//! The guest side of a test: files and commands a router would have, in a
//! temporary directory the test's qemu-ga can reach.
//!
//! - `os-release` with the flavor's `ID=`;
//! - `systemctl`: a stub that records each call and prints the SubState
//!   the test sets (the test machine has no vyos-router.service);
//! - `vbash`: bash with vrouter-render's stand-ins for VyOS's config-mode
//!   functions loaded through `BASH_ENV`; they log every call and what
//!   `load /dev/stdin` read, byte for byte.
//!
//! Additions to those stubs, so the guest behaves like a router end to end:
//! - a `set` whose arguments contain `INVALID` fails the way VyOS does — it
//!   prints `Set failed` and returns 1, and the script goes on to `commit`,
//!   which exits 0;
//! - the guest keeps a running config: `load` replaces it with what it read
//!   (a file this machine lacks, like config.boot.default, reads as empty)
//!   when VyOS's own parser reads it ([`crate::vyos_parser`]); when VyOS
//!   refuses it, `load` fails as VyOS's does and the running config stays;
//!   `set` and `delete` append their line, and `save` copies it to
//!   `config.boot` in the sandbox, as VyOS's `save` writes
//!   `/config/config.boot`;
//! - `cli-shell-api showConfig --show-active-only` prints that running config;
//! - an uptime file the guest's own clock is read from (an hour into a
//!   boot until the test says otherwise): every test guest shares this
//!   machine's `/proc/uptime`.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use vrouter_providers::GuestPaths;
use vrouter_render::testing::{StubEvent, parse_stub_log};

/// Appended to vrouter-render's stubs; logs each call with their `__vr_write`
/// and keeps the running config in `$VROUTER_RUNNING`. `commit` first sleeps
/// for the seconds written in `$VROUTER_COMMIT_DELAY_FILE`, when that file
/// has any: a slow commit keeps an apply running for fault tests.
///
/// `commit-confirm` and `confirm` model VyOS's, with `commit-confirm action
/// reload` (VyOS 1.5) as the revert:
/// - `commit-confirm [minutes]` takes a first argument with a digit as the
///   minutes, 10 without one, refuses a session without changes ("No
///   configuration changes to commit", status 1) and then schedules the
///   revert before it commits (vyatta-cfg `functions/interpreter/vyatta-cfg-run`,
///   `vyatta_config_commit-confirm`, lines 134-162);
/// - a revert already scheduled refuses another ("Another confirm is
///   pending", status 1), and it asks "Proceed ?" on stdin, where end of input
///   makes VyOS ask forever (vyos-1x `python/vyos/config_mgmt.py`,
///   `commit_confirm`, lines 183-239 on `current`; `python/vyos/utils/io.py`,
///   `ask_yes_no`, lines 57-76): the stub fails instead of hanging;
/// - the revert is a timer of `minutes` minutes (`systemd-run
///   --on-active={minutes}m --unit=commit-confirm`, config_mgmt.py line 219)
///   that runs `revert_soft`: it loads revision 0, the config committed
///   before the unconfirmed commit (which is not archived until confirmed),
///   and commits it (lines 284-307). VyOS 1.3 and 1.4 revert by rebooting into
///   the saved config.boot instead (vyatta-config-mgmt
///   `scripts/vyatta-config-mgmt.pl` lines 383-420 with `at`; config_mgmt.py
///   on `sagitta` lines 166-200 and `revert`, 230-240), which is why `save`
///   must wait for the confirmation. A test's minute lasts the seconds in
///   `$VROUTER_CONFIRM_MINUTE_FILE` (60 when empty), so the timer is short;
/// - `confirm` stops the timer ("Reload timer stopped"), or says "No confirm
///   pending" with status 0 (config_mgmt.py `confirm`, lines 241-271);
/// - `configure` remembers the running config as the session's start, the
///   revision `commit-confirm` would revert to;
/// - `commit` keeps VyOS's commit log (`/config/archive/commits`, what `show
///   system commit` prints): it takes no argument or exactly `comment
///   <text>`, refusing anything else (vyatta-cfg `vyatta-cfg-run`,
///   `vyatta_config_commit`, which exports the text as `COMMIT_COMMENT`,
///   `commit` when none), and a commit that changed the config puts
///   `|<unix time>|<user>|<via>|<comment>|` first in the log, newest first,
///   with a `|` in the comment written `%%` (vyos-1x
///   `python/vyos/config_mgmt.py`, `_new_log_entry` and `_add_log_entry`; the
///   post-commit hook `commit_revision` writes it only after a real commit).
///   Under `commit-confirm` (which passes what follows its minutes on to
///   `commit`, as `vyatta_config_commit-confirm` does) the entry waits in a
///   pending file (VyOS's `/tmp/commit-rev-entry`, `IN_COMMIT_CONFIRM`)
///   until `confirm` adds it; a revert drops it. The stand-in keeps every
///   entry (VyOS trims to `commit-revisions`).
///
/// `load` hands what it read to VyOS's parser (`$VROUTER_VYOS_PARSER load`)
/// first. VyOS's `load` (vyos-1x `src/helpers/vyos-load-config.py`) reads a
/// config without a version footer through `ConfigMigrate`, whose
/// `ConfigTree` (`python/vyos/configtree.py`) raises `Failed to parse config:
/// <libvyosconfig's message>`, and the helper exits 1 with the session
/// untouched; the stub prints that line to stderr and returns 1.
const ROUTER_STATE: &str = r#"
set() {
    __vr_write CALL set "$#" "$@"
    case "$*" in *INVALID*) echo "Set failed"; return 1 ;; esac
    printf 'set %s\n' "$*" >>"$VROUTER_RUNNING"
}
delete() {
    __vr_write CALL delete "$#" "$@"
    printf 'delete %s\n' "$*" >>"$VROUTER_RUNNING"
}
commit() {
    if [ -n "${VROUTER_COMMIT_DELAY_FILE-}" ] && [ -s "$VROUTER_COMMIT_DELAY_FILE" ]; then
        sleep "$(cat "$VROUTER_COMMIT_DELAY_FILE")"
    fi
    __vr_write CALL commit "$#" "$@"
    local comment=commit
    if [ "$#" -gt 0 ]; then
        if [ "$#" -ne 2 ] || [ "$1" != comment ]; then
            echo "Error: commit accepts either no arguments, or optional 'comment' with comment text as second argument."
            return 1
        fi
        comment=$2
    fi
    if cmp -s "$VROUTER_RUNNING" "$VROUTER_RUNNING.session-start"; then return 0; fi
    local user
    user=$(command id -un 2>/dev/null) || user=unknown
    local entry="|$(date +%s)|$user|cli|${comment//|/%%}|"
    mkdir -p "$(dirname "$VROUTER_COMMIT_LOG")"
    if [ -n "${IN_COMMIT_CONFIRM-}" ]; then
        printf '%s\n' "$entry" >"$VROUTER_COMMIT_LOG.pending"
        return 0
    fi
    { printf '%s\n' "$entry"; cat "$VROUTER_COMMIT_LOG" 2>/dev/null; } >"$VROUTER_COMMIT_LOG.new"
    mv "$VROUTER_COMMIT_LOG.new" "$VROUTER_COMMIT_LOG"
}
load() {
    __vr_write CALL load "$#" "$@"
    local __vr_next="$VROUTER_RUNNING.loading" __vr_error __vr_status
    if [ "$#" -eq 1 ] && [ "$1" = /dev/stdin ]; then
        local __vr_data=''
        IFS= read -r -d '' __vr_data
        __vr_write LOAD "$__vr_data"
        printf '%s' "$__vr_data" >"$__vr_next"
    else
        cat "$1" >"$__vr_next" 2>/dev/null || : >"$__vr_next"
    fi
    __vr_error=$("$VROUTER_VYOS_PARSER" load "$__vr_next" 2>&1 >/dev/null)
    __vr_status=$?
    if [ "$__vr_status" -eq 1 ]; then
        rm -f "$__vr_next"
        printf 'Failed to parse config: %s\n' "$__vr_error" >&2
        return 1
    elif [ "$__vr_status" -ne 0 ]; then
        rm -f "$__vr_next"
        printf 'the test guest cannot run VyOS parser %s (status %s): %s\n' \
            "$VROUTER_VYOS_PARSER" "$__vr_status" "$__vr_error" >&2
        return "$__vr_status"
    fi
    mv -f "$__vr_next" "$VROUTER_RUNNING"
}
save() {
    __vr_write CALL save "$#" "$@"
    cp "$VROUTER_RUNNING" "$VROUTER_CONFIG_BOOT"
}
configure() {
    __vr_write CALL configure "$#" "$@"
    cp "$VROUTER_RUNNING" "$VROUTER_RUNNING.session-start" 2>/dev/null || :
}
commit-confirm() {
    __vr_write CALL commit-confirm "$#" "$@"
    local minutes=10 answer=''
    case "${1-}" in *[0-9]*) minutes=$1; shift ;; esac
    if cmp -s "$VROUTER_RUNNING" "$VROUTER_RUNNING.session-start"; then
        echo "No configuration changes to commit"; return 1
    fi
    if [ -s "$VROUTER_RUNNING.confirm-timer" ]; then
        echo "Another confirm is pending"; return 1
    fi
    if ! IFS= read -r answer; then
        echo "commit-confirm: end of input at 'Proceed ?' (VyOS's ask_yes_no would ask forever)"; return 1
    fi
    case "$answer" in ''|y|ye|yes) ;; *) echo "commit-confirm canceled"; return 1 ;; esac
    cp "$VROUTER_RUNNING.session-start" "$VROUTER_RUNNING.revision-0"
    local minute
    minute=$(cat "$VROUTER_CONFIRM_MINUTE_FILE" 2>/dev/null)
    /bin/sh -c "sleep $((minutes * ${minute:-60})); \
        if [ -s '$VROUTER_RUNNING.confirm-timer' ]; then \
            cp '$VROUTER_RUNNING.revision-0' '$VROUTER_RUNNING'; : >'$VROUTER_RUNNING.confirm-timer'; \
            printf '%s\\0' CALL revert_soft 0 >>'$VROUTER_STUB_LOG'; rm -f '$VROUTER_COMMIT_LOG.pending'; \
        fi" </dev/null >/dev/null 2>&1 &
    echo "$!" >"$VROUTER_RUNNING.confirm-timer"
    IN_COMMIT_CONFIRM=t commit "$@"
    echo "Initialized commit-confirm; $minutes minutes to confirm before reload"
}
confirm() {
    __vr_write CALL confirm "$#" "$@"
    if [ ! -s "$VROUTER_RUNNING.confirm-timer" ]; then echo "No confirm pending"; return 0; fi
    kill "$(cat "$VROUTER_RUNNING.confirm-timer")" 2>/dev/null
    : >"$VROUTER_RUNNING.confirm-timer"
    if [ -s "$VROUTER_COMMIT_LOG.pending" ]; then
        { cat "$VROUTER_COMMIT_LOG.pending"; cat "$VROUTER_COMMIT_LOG" 2>/dev/null; } >"$VROUTER_COMMIT_LOG.new"
        mv "$VROUTER_COMMIT_LOG.new" "$VROUTER_COMMIT_LOG"
        rm -f "$VROUTER_COMMIT_LOG.pending"
    fi
    echo "Reload timer stopped"
}
"#;

/// Where a router's stand-in files live: in a test's temporary directory
/// ([`GuestSandbox`]) or at the router's own paths inside a real guest
/// ([`RouterFiles::in_guest`]). Every stand-in is written from these, so the
/// two kinds of guest behave the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouterFiles {
    /// The interpreter the apply script runs under (`/bin/vbash`).
    pub vbash: String,
    /// The stub vyatta functions, loaded into every vbash through `BASH_ENV`.
    pub stubs: String,
    /// The record of every stubbed call (see `vrouter_render::testing`).
    pub stub_log: String,
    /// The running config the stubs keep.
    pub running: String,
    /// Where `save` writes: the startup config.
    pub config_boot: String,
    /// `cli-shell-api`, which prints the running config.
    pub cli_shell_api: String,
    /// One `.` per `cli-shell-api` run.
    pub cli_shell_api_log: String,
    /// The `systemctl` stand-in and its call log.
    pub systemctl: String,
    pub systemctl_log: String,
    /// The SubState the `systemctl` stand-in prints.
    pub substate: String,
    pub os_release: String,
    /// Seconds `commit` sleeps, when the file is not empty.
    pub commit_delay: String,
    /// Seconds a minute of `commit-confirm` lasts, when the file is not empty.
    pub confirm_minute: String,
    /// VyOS's parser, which `load` runs (see [`crate::vyos_parser`]).
    pub vyos_parser: String,
    /// VyOS's commit log, as `commit` writes it ([`parse_commit_log`]).
    pub commit_log: String,
}

impl RouterFiles {
    /// Everything inside `dir`, for a guest played by the test machine.
    pub fn in_dir(dir: &Path) -> Self {
        let at = |name: &str| dir.join(name).to_str().expect("UTF-8 temp paths").to_string();
        RouterFiles {
            vbash: at("vbash"),
            stubs: at("vyatta-stubs.bash"),
            stub_log: at("stub.log"),
            running: at(RUNNING),
            config_boot: at(CONFIG_BOOT),
            cli_shell_api: at("cli-shell-api"),
            cli_shell_api_log: at("cli-shell-api.log"),
            systemctl: at("systemctl"),
            systemctl_log: at("systemctl.log"),
            substate: at("substate"),
            os_release: at("os-release"),
            commit_delay: at("commit-delay"),
            confirm_minute: at("confirm-minute"),
            vyos_parser: crate::vyos_parser::binary()
                .to_str()
                .expect("a UTF-8 cache path")
                .to_string(),
            commit_log: at("archive/commits"),
        }
    }

    /// A real router's paths (the operator's defaults), with the stand-ins'
    /// own state under `/var/lib/vrouter-test` and `/run/vrouter-test`.
    pub fn in_guest() -> Self {
        RouterFiles {
            vbash: vrouter_qga::constants::APPLY_INTERPRETER.into(),
            stubs: "/opt/vyatta/etc/functions/script-template".into(),
            stub_log: "/var/lib/vrouter-test/stub.log".into(),
            running: "/var/lib/vrouter-test/running.config".into(),
            config_boot: vrouter_qga::constants::CONFIG_BOOT_PATH.into(),
            cli_shell_api: vrouter_api_show_config()[0].clone(),
            cli_shell_api_log: "/var/lib/vrouter-test/cli-shell-api.log".into(),
            systemctl: vrouter_qga::constants::SYSTEMCTL_PATH.into(),
            systemctl_log: "/var/lib/vrouter-test/systemctl.log".into(),
            substate: "/run/vrouter-test/substate".into(),
            os_release: vrouter_qga::constants::OS_RELEASE_PATH.into(),
            commit_delay: "/run/vrouter-test/commit-delay".into(),
            confirm_minute: "/run/vrouter-test/confirm-minute".into(),
            vyos_parser: "/usr/lib/vrouter-test/vyosconfig".into(),
            commit_log: COMMIT_LOG_PATH.into(),
        }
    }

    /// The executable stand-ins and the stubs, as (path, mode, content).
    pub fn programs(&self) -> Vec<(String, u32, String)> {
        let stubs = format!("{}\n{ROUTER_STATE}", vrouter_render::testing::VYATTA_STUBS);
        let cli_shell_api = format!(
            "#!/bin/bash\nif [ \"$*\" = sessionChanged ]; then\n\
             ! cmp -s '{running}' '{running}.session-start'; exit; fi\n\
             if [ \"$*\" != 'showConfig --show-active-only' ]; then\n\
             echo \"unexpected cli-shell-api call: $*\" >&2; exit 2; fi\n\
             printf '.' >> '{log}'\n\
             cat '{running}'\n",
            log = self.cli_shell_api_log,
            running = self.running
        );
        let systemctl = format!(
            "#!/bin/bash\nprintf '%s\\n' \"$*\" >> '{log}'\n\
             if [ $# -ne 5 ] || [ \"$1 $2 $3 $4\" != 'show -p SubState --value' ]; then\n\
             echo \"unexpected systemctl call: $*\" >&2; exit 2; fi\n\
             cat '{substate}'\n",
            log = self.systemctl_log,
            substate = self.substate
        );
        let vbash = format!(
            "#!/bin/bash\nexport VROUTER_STUB_LOG='{log}'\nexport VROUTER_RUNNING='{running}'\n\
             export VROUTER_CONFIG_BOOT='{boot}'\nexport VROUTER_COMMIT_DELAY_FILE='{delay}'\n\
             export VROUTER_CONFIRM_MINUTE_FILE='{minute}'\nexport VROUTER_VYOS_PARSER='{parser}'\n\
             export VROUTER_COMMIT_LOG='{commits}'\n\
             export BASH_ENV='{stubs}'\nexec /bin/bash \"$@\"\n",
            commits = self.commit_log,
            log = self.stub_log,
            running = self.running,
            boot = self.config_boot,
            delay = self.commit_delay,
            minute = self.confirm_minute,
            parser = self.vyos_parser,
            stubs = self.stubs
        );
        vec![
            (self.stubs.clone(), 0o644, stubs),
            (self.cli_shell_api.clone(), 0o755, cli_shell_api),
            (self.systemctl.clone(), 0o755, systemctl),
            (self.vbash.clone(), 0o755, vbash),
        ]
    }
}

/// Where VyOS keeps its commit log (vyos-1x `python/vyos/config_mgmt.py`:
/// `archive_dir` under `directories['config']`, file `commits`).
pub const COMMIT_LOG_PATH: &str = "/config/archive/commits";

/// One entry of VyOS's commit log, as `show system commit` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitLogEntry {
    /// Seconds since the epoch.
    pub timestamp: u64,
    pub user: String,
    /// How the commit came (`cli` from a configure session).
    pub via: String,
    /// The `commit comment` text; `commit` when there was none.
    pub comment: String,
}

/// Reads a commit log, newest entry first, each `|time|user|via|comment|`
/// with `%%` read back as `|` (config_mgmt.py `_get_log_entry`).
pub fn parse_commit_log(text: &str) -> Result<Vec<CommitLogEntry>, String> {
    text.lines()
        .filter(|line| !line.is_empty())
        .map(|line| {
            let inner = line
                .strip_prefix('|')
                .and_then(|l| l.strip_suffix('|'))
                .ok_or_else(|| format!("commit log line {line:?} is not |…|"))?;
            let fields: Vec<&str> = inner.split('|').collect();
            let [timestamp, user, via, comment] = fields.as_slice() else {
                return Err(format!("commit log line {line:?} has {} fields, not 4", fields.len()));
            };
            Ok(CommitLogEntry {
                timestamp: timestamp
                    .parse()
                    .map_err(|e| format!("commit log time {timestamp:?}: {e}"))?,
                user: (*user).to_owned(),
                via: (*via).to_owned(),
                comment: comment.replace("%%", "|"),
            })
        })
        .collect()
}

/// Whether a config-mode call (as `calls()` lists them, `name arg…`) is a
/// plain `commit`, with or without the comment the operator gives it.
pub fn is_commit_call(call: &str) -> bool {
    call == "commit" || call.starts_with("commit comment ")
}

/// A call as `calls()` lists it, without the commit comment the operator
/// adds to `commit` and `commit-confirm` (`commit comment <text>` reads
/// `commit`): for tests that compare the calls and check the comment apart.
pub fn without_commit_comment(call: &str) -> String {
    match call.split_once(" comment vrouter-operator ") {
        Some((head, _)) if head == "commit" || head.starts_with("commit-confirm") => head.to_owned(),
        _ => call.to_owned(),
    }
}

/// The command that prints a real router's running config.
fn vrouter_api_show_config() -> Vec<String> {
    vrouter_qga::constants::SHOW_RUNNING_CONFIG.map(str::to_owned).to_vec()
}

/// An os-release for a router of OS `id`.
pub fn os_release(id: &str) -> String {
    match id {
        "vyos" => "NAME=\"VyOS\"\nVERSION=\"1.4.0\"\nID=vyos\nVERSION_ID=\"1.4.0\"\nPRETTY_NAME=\"VyOS 1.4.0 (sagitta)\"\n".into(),
        "dozenos" => "NAME=\"DozenOS\"\nVERSION=\"1.0\"\nID=dozenos\nID_LIKE=vyos\nVERSION_ID=\"1.0\"\nPRETTY_NAME=\"DozenOS 1.0\"\n".into(),
        other => format!("NAME=\"Test\"\nID={other}\nVERSION_ID=1\n"),
    }
}

/// The guest's running config (what `cli-shell-api` shows) and its saved
/// startup config, as files in the sandbox.
const RUNNING: &str = "running.config";
const CONFIG_BOOT: &str = "config.boot";
const UPTIME: &str = "uptime";

fn write_executable(path: &Path, content: &str) {
    fs::write(path, content).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    fs::set_permissions(path, fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
}

/// The guest-side seams of one test guest.
#[derive(Debug, Clone)]
pub struct GuestSandbox {
    dir: PathBuf,
}

impl GuestSandbox {
    /// Lays out a guest of OS `os_id` (`vyos`, `dozenos`, …) in `dir` (use
    /// the agent's directory), with the router unit in SubState `exited`.
    pub fn new(dir: &Path, os_id: &str) -> Self {
        let dir = dir.join("guest");
        fs::create_dir_all(&dir).expect("create the sandbox directory");
        let sandbox = GuestSandbox { dir };
        sandbox.set_os_id(os_id);
        sandbox.set_substate("exited");
        for (path, mode, content) in RouterFiles::in_dir(&sandbox.dir).programs() {
            if mode & 0o111 != 0 {
                write_executable(Path::new(&path), &content);
            } else {
                fs::write(&path, content).unwrap_or_else(|e| panic!("writing {path}: {e}"));
            }
        }
        fs::write(sandbox.dir.join("stub.log"), b"").expect("create the stub log");
        fs::write(sandbox.dir.join(RUNNING), b"").expect("create the running config");
        fs::write(sandbox.dir.join(UPTIME), b"3600.00 7200.00\n").expect("create the uptime file");
        sandbox
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).to_str().expect("UTF-8 temp paths").to_string()
    }

    /// The provider's guest paths, all pointing into this sandbox.
    pub fn paths(&self) -> GuestPaths {
        GuestPaths {
            state_dir: self.path("state"),
            interpreter: self.path("vbash"),
            systemctl: self.path("systemctl"),
            os_release: self.path("os-release"),
            shell: "/bin/sh".into(),
            config_boot: self.config_boot_path(),
            running_config: self.show_config_command(),
            uptime: self.uptime_path(),
        }
    }

    /// The guest's uptime file (`/proc/uptime` format); write it to make
    /// the guest look rebooted.
    pub fn uptime_path(&self) -> String {
        self.path(UPTIME)
    }

    pub fn set_os_id(&self, id: &str) {
        fs::write(
            self.dir.join("os-release"),
            format!("NAME=\"Test\"\nID={id}\nVERSION_ID=1\n"),
        )
        .expect("write os-release");
    }

    pub fn set_substate(&self, substate: &str) {
        fs::write(self.dir.join("substate"), format!("{substate}\n")).expect("write the substate");
    }

    /// Each systemctl call's arguments, in order.
    pub fn systemctl_calls(&self) -> Vec<String> {
        read_lines(&self.dir.join("systemctl.log"))
    }

    fn stub_events(&self) -> Vec<StubEvent> {
        let bytes = fs::read(self.dir.join("stub.log")).unwrap_or_default();
        parse_stub_log(&bytes).unwrap_or_else(|e| panic!("the stub log does not parse: {e}"))
    }

    /// The config-mode calls the apply script made, in order, each as
    /// `name arg…`.
    pub fn calls(&self) -> Vec<String> {
        self.stub_events()
            .into_iter()
            .filter_map(|e| match e {
                StubEvent::Call { name, args } => Some(std::iter::once(name).chain(args).collect::<Vec<_>>().join(" ")),
                _ => None,
            })
            .collect()
    }

    /// What `load /dev/stdin` received, byte for byte.
    pub fn loaded_config(&self) -> Option<Vec<u8>> {
        self.stub_events().into_iter().find_map(|e| match e {
            StubEvent::Loaded(config) => Some(config.into_bytes()),
            _ => None,
        })
    }

    /// The state directory the guest keeps its apply records in.
    pub fn state_dir(&self) -> PathBuf {
        self.dir.join("state")
    }

    /// The guest's journal of apply runs: `<apply id> started`, then
    /// `<apply id> <exit code>`, one line each.
    pub fn apply_journal(&self) -> Vec<String> {
        read_lines(&self.state_dir().join("journal"))
    }

    /// Where `save` writes the running config: the guest's config.boot.
    pub fn config_boot_path(&self) -> String {
        self.path(CONFIG_BOOT)
    }

    /// The command line that prints the running config in this guest.
    pub fn show_config_command(&self) -> Vec<String> {
        vec![
            self.path("cli-shell-api"),
            "showConfig".into(),
            "--show-active-only".into(),
        ]
    }

    /// How many times the running config was shown (`cli-shell-api` ran).
    pub fn running_config_reads(&self) -> usize {
        fs::read(self.dir.join("cli-shell-api.log"))
            .map(|b| b.len())
            .unwrap_or(0)
    }

    /// The guest's running config, as the stubs keep it.
    pub fn running_config(&self) -> Vec<u8> {
        fs::read(self.dir.join(RUNNING)).unwrap_or_default()
    }

    /// The guest's commit log, newest first ([`parse_commit_log`]); empty
    /// before the first commit.
    pub fn commit_log(&self) -> Vec<CommitLogEntry> {
        let text = fs::read_to_string(self.dir.join("archive/commits")).unwrap_or_default();
        parse_commit_log(&text).unwrap_or_else(|e| panic!("the commit log does not parse: {e}"))
    }

    /// Puts a file into the guest (e.g. a `config.boot`); returns its path.
    pub fn put_file(&self, name: &str, content: &[u8]) -> String {
        fs::write(self.dir.join(name), content).expect("write the guest file");
        self.path(name)
    }
}

fn read_lines(path: &Path) -> Vec<String> {
    fs::read_to_string(path)
        .map(|s| s.lines().map(str::to_string).collect())
        .unwrap_or_default()
}
