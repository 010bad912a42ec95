//! The router as the arbiter of its own applies.
//!
//! Every apply has an [`ApplyId`] chosen by the caller before the guest is
//! touched. The guest side is a small POSIX shell wrapper that the agent
//! starts instead of the interpreter itself ([`wrapper_argv`]). It
//!
//! 1. takes its staged script (an atomic rename; a second copy of the same
//!    request finds it gone) and claims the id once (an atomic
//!    `ln -s <its pid> <state>/<id>.pid`): a second dispatch of the same id,
//!    whose answer was lost the first time, exits at once with
//!    [`DUPLICATE_EXIT_CODE`] and runs nothing;
//! 2. moves the script into `<state>/<id>/`, takes an exclusive `flock` on
//!    `<state>/lock`, and forks a runner that inherits the lock's
//!    descriptor and keeps it until the script's result is recorded; the
//!    wrapper then closes its own copy and waits for the runner;
//! 3. the runner waits for any earlier apply's script that still runs
//!    without its runner (below), journals `<id> started`, runs the
//!    interpreter and, at its end, journals `<id> <exit code>` in
//!    `<state>/journal`, keeps the exit code and the tail of each output
//!    stream in `<state>/<id>/`, and removes the script;
//! 4. the interpreter runs in its own process group with its output in
//!    those files, not on the agent's pipes: a restarted agent cannot cut
//!    the apply short with SIGPIPE, and [`stop_argv`] can stop it whole.
//!
//! # Invariant: one script at a time, whichever process dies
//!
//! While an apply's interpreter process lives, no other apply's
//! interpreter starts on the router, whoever dispatched either. The runner
//! holds the lock from before the interpreter starts until after it
//! ended, so killing the wrapper (the process the agent knows) changes
//! nothing: the script runs on, its result is recorded, and [`query_argv`]
//! reports the apply running, then finished. Should the runner be killed
//! too, the lock is free, but the interpreter's pid is in `<id>/pgid`
//! (written by the process that becomes the interpreter, before it runs):
//! every runner, holding the lock, waits before its own script for each
//! record without an exit whose recorded interpreter still runs, and the
//! query reports such an apply running until it ends, then vanished.
//!
//! A process counts as an apply's interpreter only while its pid is the
//! recorded one and its `/proc/<pid>/cmdline` names that record's own
//! script path. Ids are claimed once, so a reused pid never matches: not
//! after the interpreter ended, not after a reboot (and `/run` is a tmpfs,
//! so a reboot leaves no records anyway). What the script leaves behind
//! (VyOS `commit-confirm`'s timer, any `cmd &`) neither inherits the
//! lock's descriptor nor is the recorded pid, so it never holds up a later
//! apply, even a forked subshell that shows the same command line.
//!
//! [`query_argv`] asks the router what it knows about an id
//! ([`ApplyRecord`]); it also creates the state directory (mode 0700), so it
//! runs before the script is staged there.

use std::fmt;

use crate::error::QgaError;

/// Where the guest keeps apply records and runs scripts from.
///
/// `/run` is a tmpfs on VyOS and DozenOS (systemd mounts it), so a script,
/// which carries the router's secrets, never reaches a disk and nothing of
/// it survives a reboot. The records are needed only within one boot: they
/// answer "did this apply run" after the agent or the operator restarted,
/// and a reboot is itself a reason to apply again (spec §7.3).
pub const APPLY_STATE_DIR: &str = "/run/vrouter-operator";

/// The wrapper's exit code when its apply id was claimed before: this
/// dispatch ran nothing, and the first one's record has the result.
pub const DUPLICATE_EXIT_CODE: i64 = 75;

/// What the wrapper prints (on stderr) when it ran nothing because the id
/// was claimed before.
pub const DUPLICATE_MARKER: &str = "vrouter-apply: already dispatched";

/// Records of finished applies kept in the state directory; older ones are
/// pruned by the next apply.
pub const KEPT_RECORDS: usize = 64;

/// Bytes of each output stream kept in a record.
pub const KEPT_OUTPUT_BYTES: usize = 1024 * 1024;

/// `$0` of the guest-side shells, shown by `ps` on the router.
const WRAPPER_NAME: &str = "vrouter-apply";

/// The apply wrapper: `$1` state dir, `$2` apply id, `$3` staged script,
/// `$4` interpreter. It claims the id and takes the lock, then forks the
/// runner (`run`, a subshell with the same argv) that holds the lock's
/// descriptor until the script has ended and its result is recorded, and
/// waits for it. The interpreter gets neither the lock's descriptor (a
/// process it leaves behind, like `commit-confirm`'s timer, would hold the
/// lock) nor the agent's pipes; the runner writes the interpreter's pid to
/// `pgid` from inside the process that becomes the interpreter, before it
/// runs, so no interpreter ever runs unrecorded. The runner lets go of
/// the agent's pipes with `exec` (a shell keeps copies of the descriptors a
/// redirection on a function call replaces, and the agent reports the
/// wrapper gone only once its pipes are closed). A wrapper whose runner
/// ended without a result kills itself: the agent then reports a signal,
/// which sends the caller to the record (see [`ApplyRecord::Running`]).
const WRAPPER: &str = r#"set -u
PATH=/usr/sbin:/usr/bin:/sbin:/bin; export PATH
umask 077
state=$1 id=$2 staged=$3 interpreter=$4 record=$1/$2
if ! command -v flock >/dev/null 2>&1; then
    rm -f "$staged"; echo "vrouter-apply: flock is not installed in the guest" >&2; exit 69
fi
own=$state/$id.$$.script
if ! mv "$staged" "$own" 2>/dev/null; then
    echo "vrouter-apply: already dispatched: $id (another copy of this dispatch took its script)" >&2; exit 75
fi
if ! ln -s "$$" "$record.pid" 2>/dev/null; then
    rm -f "$own"; echo "vrouter-apply: already dispatched: $id" >&2; exit 75
fi
ALIVE
finish() {
    rm -f "$record/script"
    for stream in stdout stderr; do
        if [ "$(wc -c <"$record/$stream")" -gt KEPT_OUTPUT_BYTES ]; then
            tail -c KEPT_OUTPUT_BYTES "$record/$stream" >"$record/$stream.tail" && mv -f "$record/$stream.tail" "$record/$stream"
        fi
    done
    printf '%s\n' "$1" >"$record/exit.new" && mv -f "$record/exit.new" "$record/exit"
    printf '%s %s\n' "$id" "$1" >>"$state/journal"
}
await_orphans() {
    for left in "$state"/*/pgid; do
        other=${left%/pgid}
        if [ "$other" = "$record" ] || [ ! -f "$other/script" ] || [ -f "$other/exit" ]; then continue; fi
        group=$(cat "$left" 2>/dev/null) || continue
        while alive "$group" "$other/script"; do sleep 1; done
        rm -f "$other/script"
    done
}
prune() {
    ls -1dt "$state"/*/exit 2>/dev/null | tail -n +KEPT_RECORDS_PLUS_ONE | while IFS= read -r done; do
        old=${done%/exit}; rm -rf "$old" "$old.pid"
    done
    find "$state" -maxdepth 1 \( -name '*.staged' -o -name '*.script' \) -mmin +60 -exec rm -f {} \; 2>/dev/null
}
run() {
    sh -c 'echo "$PPID"' >"$record/runner"
    await_orphans
    printf '%s started\n' "$id" >>"$state/journal"
    sh -c 'printf "%s\n" "$$" >"$1/pgid" && exec setsid "$2" "$3"' vrouter-apply-interpreter \
        "$record" "$interpreter" "$record/script" </dev/null >"$record/stdout" 2>"$record/stderr" 9>&- &
    wait "$!"
    finish "$?"
    prune
}
mkdir "$record" && : >"$record/stdout" && : >"$record/stderr" && mv "$own" "$record/script" || exit 70
exec 9>>"$state/lock"
flock 9
(exec </dev/null >/dev/null 2>&1; run) &
runner=$!
exec 9>&-
wait "$runner"
[ -f "$record/exit" ] || kill -s KILL "$$"
code=$(cat "$record/exit")
cat "$record/stdout"
cat "$record/stderr" >&2
exit "$code"
"#;

/// Whether process `$1` lives and one of its arguments is exactly `$2`:
/// the apply id for the wrapper and its runner, the record's script path
/// for the interpreter. A pid reused by any other process fails the test.
const ALIVE: &str = r#"alive() {
    [ -n "$1" ] && [ -r "/proc/$1/cmdline" ] && tr '\0' '\n' <"/proc/$1/cmdline" 2>/dev/null | grep -qxF -- "$2"
}"#;

/// What the router knows about an id: `$1` state dir, `$2` apply id. Also
/// creates the state directory. The apply runs while its wrapper, its
/// runner or its interpreter lives; they end in the opposite order (the
/// interpreter, then the runner once the exit is recorded, then the
/// wrapper), so checking them in this order and the exit record again
/// last never calls a finished apply vanished. The runner's pid is written
/// by the runner itself, first thing: a wrapper killed in the instant
/// between forking it and that write lets this say vanished while the
/// runner goes on (holding the lock, so nothing overlaps it, and recording
/// its result for a later query).
const QUERY: &str = r#"set -u
PATH=/usr/sbin:/usr/bin:/sbin:/bin; export PATH
umask 077
state=$1 id=$2 record=$1/$2
mkdir -p "$state" && chmod 700 "$state" || exit 1
ALIVE
finished() {
    printf 'finished %s\n' "$(cat "$record/exit")"
    cat "$record/stdout" 2>/dev/null
    cat "$record/stderr" >&2 2>/dev/null
    exit 0
}
[ -f "$record/exit" ] && finished
pid=$(readlink "$record.pid" 2>/dev/null) || { echo unknown; exit 0; }
running() { printf 'running %s\n' "$pid"; exit 0; }
alive "$pid" "$id" && running
alive "$(cat "$record/runner" 2>/dev/null)" "$id" && running
alive "$(cat "$record/pgid" 2>/dev/null)" "$record/script" && running
[ -f "$record/exit" ] && finished
echo vanished
"#;

/// Stops an apply's process group (its interpreter's): `$1` state dir, `$2`
/// apply id. TERM, then KILL ten seconds later if it is still there; the
/// runner, which is not in that group, records how it ended and releases
/// the lock (with no runner left, the lock is already free and the apply
/// ends vanished).
const STOP: &str = r#"set -u
PATH=/usr/sbin:/usr/bin:/sbin:/bin; export PATH
record=$1/$2
[ -f "$record/exit" ] && exit 0
group=$(cat "$record/pgid" 2>/dev/null) || exit 0
[ -n "$group" ] || exit 0
kill -s TERM -- "-$group" 2>/dev/null
( sleep 10; [ -f "$record/exit" ] || kill -s KILL -- "-$group" ) </dev/null >/dev/null 2>&1 &
exit 0
"#;

/// One dispatch's identity: the generation it applies and a random nonce,
/// e.g. `g7-3f9a0c1d2e4b5a69`. Only `[A-Za-z0-9._-]`, so it is safe as a
/// file name and a shell argument.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ApplyId(String);

impl ApplyId {
    /// A new id for `generation`, with 64 random bits from the OS.
    pub fn fresh(generation: i64) -> Self {
        let mut nonce = [0u8; 8];
        getrandom::fill(&mut nonce).expect("the OS random source is available");
        let hex: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
        ApplyId(format!("g{generation}-{hex}"))
    }

    /// An id read back (from a status): refused unless it is a file name
    /// of at most 64 safe characters.
    pub fn parse(text: &str) -> Result<Self, QgaError> {
        let safe = !text.is_empty()
            && text.len() <= 64
            && !text.starts_with('.')
            && text.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if !safe {
            return Err(QgaError::InvalidArgument(format!(
                "apply id {text:?} must be 1 to 64 of [A-Za-z0-9._-], not starting with '.'"
            )));
        }
        Ok(ApplyId(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ApplyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What the router recorded about an apply id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApplyRecord {
    /// Never dispatched here (or before the last reboot): dispatch it.
    Unknown,
    /// It waits for the lock or its script runs. `pid` is its wrapper's,
    /// the process the agent started; a wrapper killed while its script
    /// runs on is gone from the agent (polling it reports the signal, or an
    /// unknown pid), and this record is then what tells how the apply
    /// stands.
    Running { pid: i64 },
    /// It ended: the exit code and the kept tail of each stream.
    Finished {
        exit_code: i64,
        stdout: String,
        stderr: String,
    },
    /// Claimed, but nothing of it runs any more and no result was
    /// recorded: its wrapper was killed before the script started, or its
    /// runner was killed too and the script has since ended. The script
    /// may have run in part, or whole.
    Vanished,
}

/// The staged script's path for one dispatch attempt: unique per attempt,
/// so a second attempt never rewrites a file the first one's wrapper is
/// about to run.
pub fn staged_script_path(state_dir: &str, apply: &ApplyId) -> String {
    let mut nonce = [0u8; 6];
    getrandom::fill(&mut nonce).expect("the OS random source is available");
    let hex: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
    format!("{state_dir}/{apply}.{hex}.staged")
}

fn shell_argv(script: String, args: &[&str]) -> Vec<String> {
    let mut argv = vec!["/bin/sh".to_owned(), "-c".to_owned(), script, WRAPPER_NAME.to_owned()];
    argv.extend(args.iter().map(|a| (*a).to_owned()));
    argv
}

/// The argv that runs `staged` under the wrapper as apply `apply`.
pub fn wrapper_argv(state_dir: &str, apply: &ApplyId, staged: &str, interpreter: &str) -> Vec<String> {
    let script = WRAPPER
        .replace("ALIVE", ALIVE)
        .replace("KEPT_OUTPUT_BYTES", &KEPT_OUTPUT_BYTES.to_string())
        .replace("KEPT_RECORDS_PLUS_ONE", &(KEPT_RECORDS + 1).to_string());
    shell_argv(script, &[state_dir, apply.as_str(), staged, interpreter])
}

/// The argv that prints what the router knows about `apply` (parse its
/// output with [`parse_record`]).
pub fn query_argv(state_dir: &str, apply: &ApplyId) -> Vec<String> {
    shell_argv(QUERY.replace("ALIVE", ALIVE), &[state_dir, apply.as_str()])
}

/// The argv that stops `apply`'s process group, if it still runs.
pub fn stop_argv(state_dir: &str, apply: &ApplyId) -> Vec<String> {
    shell_argv(STOP.to_owned(), &[state_dir, apply.as_str()])
}

/// Reads the query's output (its exit code was 0).
pub fn parse_record(stdout: &str, stderr: &str) -> Result<ApplyRecord, QgaError> {
    let (first, rest) = stdout.split_once('\n').unwrap_or((stdout, ""));
    let bad = || QgaError::InvalidArgument(format!("unexpected apply record {first:?}"));
    let mut words = first.split(' ');
    let record = match (words.next(), words.next(), words.next()) {
        (Some("unknown"), None, None) => ApplyRecord::Unknown,
        (Some("vanished"), None, None) => ApplyRecord::Vanished,
        (Some("running"), Some(pid), None) => ApplyRecord::Running {
            pid: pid.parse().map_err(|_| bad())?,
        },
        (Some("finished"), Some(code), None) => ApplyRecord::Finished {
            exit_code: code.parse().map_err(|_| bad())?,
            stdout: rest.to_owned(),
            stderr: stderr.to_owned(),
        },
        _ => return Err(bad()),
    };
    Ok(record)
}

/// Whether a wrapper's result says it ran nothing because its id had been
/// dispatched before.
pub fn is_duplicate(exit_code: i64, stderr: &str) -> bool {
    exit_code == DUPLICATE_EXIT_CODE && stderr.contains(DUPLICATE_MARKER)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_ids_name_the_generation_and_differ() {
        let (a, b) = (ApplyId::fresh(7), ApplyId::fresh(7));
        assert!(a.as_str().starts_with("g7-") && a.as_str().len() == 3 + 16, "{a}");
        assert_ne!(a, b);
        assert_eq!(ApplyId::parse(a.as_str()).unwrap(), a);
    }

    #[test]
    fn only_safe_ids_parse() {
        for bad in ["", ".hidden", "a/b", "a b", "$(x)", &"x".repeat(65)] {
            assert!(ApplyId::parse(bad).is_err(), "{bad:?}");
        }
        ApplyId::parse("g1-00ff.confirm_x").unwrap();
    }

    #[test]
    fn records_parse() {
        let cases = [
            ("unknown\n", "", Some(ApplyRecord::Unknown)),
            ("vanished\n", "", Some(ApplyRecord::Vanished)),
            ("running 42\n", "", Some(ApplyRecord::Running { pid: 42 })),
            (
                "finished 3\nout\nmore\n",
                "err\n",
                Some(ApplyRecord::Finished {
                    exit_code: 3,
                    stdout: "out\nmore\n".into(),
                    stderr: "err\n".into(),
                }),
            ),
            (
                "finished 0\n",
                "",
                Some(ApplyRecord::Finished {
                    exit_code: 0,
                    stdout: String::new(),
                    stderr: String::new(),
                }),
            ),
            ("running x\n", "", None),
            ("", "", None),
            ("what\n", "", None),
        ];
        for (stdout, stderr, want) in cases {
            assert_eq!(parse_record(stdout, stderr).ok(), want, "{stdout:?}");
        }
    }

    #[test]
    fn the_wrapper_is_one_argument_with_its_limits_filled_in() {
        let id = ApplyId::parse("g1-ab").unwrap();
        let argv = wrapper_argv("/run/x", &id, "/run/x/g1-ab.1.staged", "/bin/vbash");
        assert_eq!(argv[..2], ["/bin/sh", "-c"]);
        assert_eq!(
            argv[3..],
            [
                "vrouter-apply",
                "/run/x",
                "g1-ab",
                "/run/x/g1-ab.1.staged",
                "/bin/vbash"
            ]
        );
        assert!(!argv[2].contains("KEPT_") && !argv[2].contains("ALIVE"), "{}", argv[2]);
        assert!(argv[2].contains("alive() {"), "{}", argv[2]);
        let query = query_argv("/run/x", &id);
        assert!(
            !query[2].contains("ALIVE") && query[2].contains("alive() {"),
            "{}",
            query[2]
        );
        assert!(argv[2].contains(&format!("tail -n +{}", KEPT_RECORDS + 1)));
        assert!(argv[2].contains(&DUPLICATE_EXIT_CODE.to_string()) && argv[2].contains(DUPLICATE_MARKER));
    }
}
