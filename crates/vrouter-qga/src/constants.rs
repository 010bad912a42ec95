//! Fixed guest paths and the size limits of the agent protocol, each with
//! the reason for its value.

/// Where the guest keeps apply records and runs each apply script from
/// (a per-apply path inside it): see [`crate::arbiter::APPLY_STATE_DIR`].
/// The spec's fixed `/tmp/vrouter-apply.sh` is not used: two applies
/// shared that file, and a script with the router's secrets stayed in
/// `/tmp` after its run (docs/providers.md, "Where the script runs").
pub const APPLY_STATE_DIR: &str = crate::arbiter::APPLY_STATE_DIR;

/// The interpreter that runs the apply script (spec §7.4).
///
/// VyOS ships its config-mode shell functions (`configure`, `load`,
/// `commit`, `save`) for `vbash`, its patched bash; the script is passed as
/// an argument rather than executed directly, so it needs no execute bit.
pub const APPLY_INTERPRETER: &str = "/bin/vbash";

/// The startup configuration read for drift detection (the `ReadFile`
/// proposal): `commit && save` writes it, so its hash changes exactly when
/// someone persists a change on the router.
pub const CONFIG_BOOT_PATH: &str = "/config/config.boot";

/// Prints the router's running (committed, possibly unsaved) config, for
/// drift detection. VyOS keeps it as a directory tree under
/// `/opt/vyatta/config/active`, not a file; `cli-shell-api` is the tool
/// VyOS's own `show configuration` uses to serialise it in config.boot
/// syntax.
pub const SHOW_RUNNING_CONFIG: [&str; 3] = ["/bin/cli-shell-api", "showConfig", "--show-active-only"];

/// The guest kernel's uptime (`"12345.67 4567.89"`: seconds since boot, then
/// idle seconds): a reboot inside the guest keeps the VM process, and so
/// the hypervisor's uptime, but starts this one over (spec §7.3).
pub const PROC_UPTIME_PATH: &str = "/proc/uptime";

/// `/etc/os-release` as os-release(5) names it; its `ID=` selects the guest
/// flavor when `guest-get-osinfo` is unavailable.
pub const OS_RELEASE_PATH: &str = "/etc/os-release";

/// `systemctl`, whose `show -p SubState` answers whether the router service
/// has finished booting (spec §2.2 `CheckReady`).
pub const SYSTEMCTL_PATH: &str = "/usr/bin/systemctl";

/// Raw bytes per `guest-file-write` (48 KiB, 65 536 characters of base64).
///
/// The agent itself accepts messages up to [`AGENT_MAX_MESSAGE_BYTES`], but
/// the KubeVirt provider hands each command to `virsh qemu-agent-command`
/// as one command-line argument, and Linux caps a single argument at
/// `MAX_ARG_STRLEN` = 128 KiB. 48 KiB of data becomes 64 KiB of base64,
/// which leaves half of that cap for the JSON envelope and any quoting, so
/// one chunk size works over every transport.
pub const WRITE_CHUNK_BYTES: usize = 48 * 1024;

/// Raw bytes requested per `guest-file-read` (1 MiB).
///
/// Replies travel back unbounded by argv, but libvirt refuses an agent
/// reply larger than 10 MiB (`QEMU_AGENT_MAX_RESPONSE`); 1 MiB of data is
/// about 1.4 MiB of JSON, far below that. A VyOS `config.boot` is tens of
/// KiB, so the usual read is one round trip (each round trip over a pod
/// exec costs a new exec session).
pub const READ_CHUNK_BYTES: usize = 1024 * 1024;

/// The largest file [`crate::Agent::read_file`] returns by default (16 MiB).
///
/// It bounds operator memory when a path names something endless
/// (`/dev/zero`), and equals the cap of Proxmox VE's `agent/file-read`
/// endpoint, so every provider agrees on the largest readable file.
pub const MAX_READ_FILE_BYTES: usize = 16 * 1024 * 1024;

/// The longest [`crate::Agent::read_file`] may take as a whole (60 s).
///
/// Each call has its transport's timeout, but an agent answering every read
/// with one byte, just in time, would keep a 16 MiB read going for weeks.
/// The largest readable file takes 16 reads of 1 MiB, each a second or two
/// even over a pod exec, far inside this.
pub const READ_FILE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(60);
/// The largest message the agent parses (64 MiB).
///
/// QEMU's JSON streamer stops at `MAX_TOKEN_SIZE` = 64 MiB of tokens per
/// message. Measured against qemu-ga 7.2: a 67 108 661-byte
/// `guest-file-write` is accepted, a 67 108 873-byte one is answered with
/// `GenericError "JSON token size limit exceeded"` and the rest of the
/// line is then parsed as garbage. The unix-socket transport refuses to
/// send anything larger, so the agent's parser never gets into that state.
pub const AGENT_MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// The largest `count` one `guest-file-read` accepts (48 MiB,
/// `QGA_READ_COUNT_MAX`). Measured: one byte more is refused with
/// `"value '50331649' is invalid for argument count"`.
pub const AGENT_MAX_READ_COUNT: usize = 48 * 1024 * 1024;

/// The largest reply line the unix-socket transport buffers (80 MiB).
///
/// The biggest legitimate replies are a 48 MiB `guest-file-read` (64 MiB
/// of base64) and a `guest-exec-status` carrying both output streams at the
/// agent's 16 MiB capture cap (about 43 MiB of base64); anything longer is
/// not a reply this crate asked for, and buffering it would only exhaust
/// memory.
pub const MAX_REPLY_BYTES: usize = 80 * 1024 * 1024;
