//! A guest agent that answers at once, for the scale benchmark's "apply
//! time ≈ 0" workload (issue 25): with 1,000 routers on two cores, real
//! `qemu-ga` processes starting real shells would be the bottleneck, and
//! the figure measured is the operator's own cost.
//!
//! It answers the `guest-*` commands [`crate::proxmox::FakeProxmox`] sends a
//! real agent, with the guest side played in memory: files in a map, and
//! the few programs the operator runs recognised by their argv — the apply
//! arbiter's query, wrapper and stop ([`vrouter_qga::arbiter`]: it keeps
//! the arbiter's rules, one claim per apply id and a record of its exit),
//! `systemctl show -p SubState`, `cli-shell-api showConfig` (the saved
//! config: nothing here drifts), the two of them in the one shell command
//! of a drift read ([`vrouter_providers::check_then_read_argv`]) and `cat`. Any other program exits 127 with
//! a message naming it, so an operator change that runs something new
//! fails the benchmark loudly instead of passing on a made-up answer.
//!
//! Every behaviour here is also proven against real agents and real QEMU
//! guests by the rest of the suite; this stand-in exists only so the
//! benchmark can measure the operator alone.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Instant;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};
use vrouter_qga::arbiter::{self, ApplyId};

use vrouter_qga::constants::{CONFIG_BOOT_PATH, PROC_UPTIME_PATH as PROC_UPTIME};

/// What a finished program left for `guest-exec-status`.
#[derive(Clone, Debug)]
struct Exited {
    code: i64,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

impl Exited {
    fn ok(stdout: impl Into<Vec<u8>>) -> Self {
        Exited {
            code: 0,
            stdout: stdout.into(),
            stderr: Vec::new(),
        }
    }

    fn failed(code: i64, stderr: impl Into<Vec<u8>>) -> Self {
        Exited {
            code,
            stdout: Vec::new(),
            stderr: stderr.into(),
        }
    }
}

/// An open file handle.
struct OpenFile {
    path: String,
    /// Bytes written so far (a write handle) or left to read (a read handle).
    content: Vec<u8>,
    writing: bool,
}

/// One guest's state.
#[derive(Default)]
struct Guest {
    files: HashMap<String, Vec<u8>>,
    open: HashMap<i64, OpenFile>,
    exited: HashMap<i64, Exited>,
    /// Apply ids claimed by a wrapper, with the exit code it recorded.
    claims: HashMap<String, i64>,
}

/// A guest whose agent answers at once; see the module documentation.
pub struct InstantGuest {
    os_id: String,
    booted: Instant,
    next_id: AtomicI64,
    guest: Mutex<Guest>,
}

/// The argv shapes of the arbiter's programs, taken from the arbiter
/// itself so the two cannot drift apart.
struct ArbiterScripts {
    query: String,
    wrapper: String,
    stop: String,
    /// A drift read's check and read in one shell, the check being
    /// `systemctl show -p SubState --value UNIT` ([`CHECK_ARGS`] words).
    check_then_read: String,
}

const CHECK_ARGS: usize = 6;

impl ArbiterScripts {
    fn new() -> Self {
        let id = ApplyId::parse("probe").expect("a safe id");
        ArbiterScripts {
            query: arbiter::query_argv("/s", &id)[2].clone(),
            wrapper: arbiter::wrapper_argv("/s", &id, "/s/x.staged", "/bin/sh")[2].clone(),
            stop: arbiter::stop_argv("/s", &id)[2].clone(),
            check_then_read: vrouter_providers::check_then_read_argv("/bin/sh", &vec![String::new(); CHECK_ARGS], &[])
                [2]
            .clone(),
        }
    }
}

impl InstantGuest {
    /// A guest whose os-release id is `os_id` (`vyos`, `dozenos`), holding
    /// `files`.
    pub fn new(os_id: &str, files: impl IntoIterator<Item = (String, Vec<u8>)>) -> Self {
        InstantGuest {
            os_id: os_id.to_owned(),
            booted: Instant::now(),
            next_id: AtomicI64::new(1000),
            guest: Mutex::new(Guest {
                files: files.into_iter().collect(),
                ..Guest::default()
            }),
        }
    }

    /// The content of `path`, as the operator left it.
    pub fn file(&self, path: &str) -> Option<Vec<u8>> {
        self.guest.lock().unwrap().files.get(path).cloned()
    }

    /// The exit codes recorded per apply id, as the arbiter's journal has them.
    pub fn claims(&self) -> HashMap<String, i64> {
        self.guest.lock().unwrap().claims.clone()
    }

    /// The agent's answer to `execute` with `arguments`: its `return`, or
    /// the error description a real agent would give.
    pub fn command(&self, execute: &str, arguments: &Value) -> Result<Value, String> {
        match execute {
            "guest-ping" => Ok(json!({})),
            "guest-get-osinfo" => Ok(json!({"id": self.os_id, "name": self.os_id})),
            "guest-file-open" => self.open(arguments),
            "guest-file-write" => self.write(arguments),
            "guest-file-read" => self.read(arguments),
            "guest-file-close" => self.close(arguments),
            "guest-exec" => self.exec(arguments),
            "guest-exec-status" => self.exec_status(arguments),
            other => Err(format!("The command {other} has not been found")),
        }
    }

    fn new_id(&self) -> i64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    fn open(&self, arguments: &Value) -> Result<Value, String> {
        let path = str_arg(arguments, "path")?;
        let mode = arguments.get("mode").and_then(Value::as_str).unwrap_or("r");
        let writing = mode.starts_with('w') || mode.starts_with('a');
        let mut guest = self.guest.lock().unwrap();
        let content =
            if writing {
                Vec::new()
            } else if path == PROC_UPTIME {
                format!("{:.2} 0.00\n", self.booted.elapsed().as_secs_f64()).into_bytes()
            } else {
                guest.files.get(path).cloned().ok_or_else(|| {
                    format!("failed to open file '{path}' (mode: '{mode}'): No such file or directory")
                })?
            };
        let handle = self.new_id();
        guest.open.insert(
            handle,
            OpenFile {
                path: path.to_owned(),
                content,
                writing,
            },
        );
        Ok(json!(handle))
    }

    fn write(&self, arguments: &Value) -> Result<Value, String> {
        let handle = handle_arg(arguments)?;
        let bytes = BASE64
            .decode(str_arg(arguments, "buf-b64")?)
            .map_err(|e| format!("Invalid parameter 'buf-b64': {e}"))?;
        let mut guest = self.guest.lock().unwrap();
        let file = guest.open.get_mut(&handle).ok_or_else(|| unknown_handle(handle))?;
        file.content.extend_from_slice(&bytes);
        Ok(json!({"count": bytes.len(), "eof": false}))
    }

    fn read(&self, arguments: &Value) -> Result<Value, String> {
        let handle = handle_arg(arguments)?;
        let count = arguments.get("count").and_then(Value::as_u64).unwrap_or(4096) as usize;
        let mut guest = self.guest.lock().unwrap();
        let file = guest.open.get_mut(&handle).ok_or_else(|| unknown_handle(handle))?;
        let take = count.min(file.content.len());
        let chunk: Vec<u8> = file.content.drain(..take).collect();
        Ok(json!({"count": chunk.len(), "buf-b64": BASE64.encode(&chunk), "eof": file.content.is_empty()}))
    }

    fn close(&self, arguments: &Value) -> Result<Value, String> {
        let handle = handle_arg(arguments)?;
        let mut guest = self.guest.lock().unwrap();
        let file = guest.open.remove(&handle).ok_or_else(|| unknown_handle(handle))?;
        if file.writing {
            guest.files.insert(file.path, file.content);
        }
        Ok(json!({}))
    }

    fn exec(&self, arguments: &Value) -> Result<Value, String> {
        let path = str_arg(arguments, "path")?;
        let mut argv = vec![path.to_owned()];
        if let Some(Value::Array(args)) = arguments.get("arg") {
            argv.extend(args.iter().filter_map(Value::as_str).map(str::to_owned));
        }
        let pid = self.new_id();
        let exited = self.run(&argv);
        self.guest.lock().unwrap().exited.insert(pid, exited);
        Ok(json!({"pid": pid}))
    }

    /// The program `argv`, run to its end at once.
    fn run(&self, argv: &[String]) -> Exited {
        let scripts = ArbiterScripts::new();
        if let [sh, dash_c, script, _name, rest @ ..] = argv
            && sh == "/bin/sh"
            && dash_c == "-c"
            && *script == scripts.check_then_read
            && rest.len() > CHECK_ARGS
        {
            let (check, read) = rest.split_at(CHECK_ARGS);
            return self.check_then_read(check, read);
        }
        let mut guest = self.guest.lock().unwrap();
        match argv {
            [sh, dash_c, script, _name, _state, id, rest @ ..] if sh == "/bin/sh" && dash_c == "-c" => {
                if *script == scripts.query {
                    Exited::ok(match guest.claims.get(id) {
                        Some(code) => format!("finished {code}\n"),
                        None => "unknown\n".to_owned(),
                    })
                } else if *script == scripts.wrapper {
                    let staged = rest.first().cloned().unwrap_or_default();
                    wrapper(&mut guest, id, &staged)
                } else if *script == scripts.stop {
                    Exited::ok("")
                } else {
                    unknown_program(argv)
                }
            }
            [_, show_config, ..] if show_config == "showConfig" => {
                Exited::ok(guest.files.get(CONFIG_BOOT_PATH).cloned().unwrap_or_default())
            }
            [_, show, ..] if show == "show" && argv.iter().any(|a| a == "SubState") => Exited::ok("exited\n"),
            [cat, file] if cat.ends_with("/cat") => match guest.files.get(file) {
                Some(content) => Exited::ok(content.clone()),
                None => Exited::failed(1, format!("cat: {file}: No such file or directory\n")),
            },
            _ => unknown_program(argv),
        }
    }

    /// What the shell of [`vrouter_providers::check_then_read_argv`] does:
    /// the check, stopping with its status when it fails, the marker line,
    /// then the read.
    fn check_then_read(&self, check: &[String], read: &[String]) -> Exited {
        let mut checked = self.run(check);
        if checked.code != 0 {
            return checked;
        }
        let read = self.run(read);
        checked
            .stdout
            .extend_from_slice(format!("\n{}\n", vrouter_providers::RUNNING_CONFIG_FOLLOWS).as_bytes());
        checked.stdout.extend_from_slice(&read.stdout);
        checked.stderr.extend_from_slice(&read.stderr);
        Exited {
            code: read.code,
            ..checked
        }
    }

    fn exec_status(&self, arguments: &Value) -> Result<Value, String> {
        let pid = arguments
            .get("pid")
            .and_then(Value::as_i64)
            .ok_or("Invalid parameter 'pid'")?;
        // A real agent forgets a pid once it has reported its exit.
        let exited = self
            .guest
            .lock()
            .unwrap()
            .exited
            .remove(&pid)
            .ok_or_else(|| format!("Invalid parameter 'pid': PID {pid} does not exist"))?;
        Ok(json!({
            "exited": true,
            "exitcode": exited.code,
            "out-data": BASE64.encode(&exited.stdout),
            "err-data": BASE64.encode(&exited.stderr),
        }))
    }
}

/// The arbiter wrapper's rules: one claim per id (a second dispatch runs
/// nothing and says so), the staged script taken away, the exit recorded.
fn wrapper(guest: &mut Guest, id: &str, staged: &str) -> Exited {
    if guest.claims.contains_key(id) {
        return Exited::failed(arbiter::DUPLICATE_EXIT_CODE, format!("{}\n", arbiter::DUPLICATE_MARKER));
    }
    if guest.files.remove(staged).is_none() {
        return Exited::failed(1, format!("vrouter-apply: {staged}: no staged script\n"));
    }
    guest.claims.insert(id.to_owned(), 0);
    Exited::ok("")
}

fn unknown_program(argv: &[String]) -> Exited {
    Exited::failed(
        127,
        format!(
            "instant guest: no simulated program for {:?}; teach crates/vrouter-test-peers/src/instant_guest.rs\n",
            argv.first().map(String::as_str).unwrap_or("")
        ),
    )
}

fn str_arg<'a>(arguments: &'a Value, name: &str) -> Result<&'a str, String> {
    arguments
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("Parameter '{name}' is missing"))
}

fn handle_arg(arguments: &Value) -> Result<i64, String> {
    arguments
        .get("handle")
        .and_then(Value::as_i64)
        .ok_or_else(|| "Parameter 'handle' is missing".to_owned())
}

fn unknown_handle(handle: i64) -> String {
    format!("handle '{handle}' has not been found")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(guest: &InstantGuest, argv: &[String]) -> Exited {
        let pid = guest
            .command("guest-exec", &json!({"path": argv[0], "arg": argv[1..]}))
            .unwrap()["pid"]
            .as_i64()
            .unwrap();
        let status = guest.command("guest-exec-status", &json!({"pid": pid})).unwrap();
        assert_eq!(status["exited"], json!(true));
        let decode = |k: &str| BASE64.decode(status[k].as_str().unwrap()).unwrap();
        Exited {
            code: status["exitcode"].as_i64().unwrap(),
            stdout: decode("out-data"),
            stderr: decode("err-data"),
        }
    }

    fn write(guest: &InstantGuest, path: &str, content: &[u8]) {
        let handle = guest
            .command("guest-file-open", &json!({"path": path, "mode": "wb"}))
            .unwrap();
        guest
            .command(
                "guest-file-write",
                &json!({"handle": handle, "buf-b64": BASE64.encode(content)}),
            )
            .unwrap();
        guest.command("guest-file-close", &json!({"handle": handle})).unwrap();
    }

    #[test]
    fn an_apply_is_claimed_once_and_recorded() {
        let guest = InstantGuest::new("vyos", []);
        let id = ApplyId::parse("g1-abc").unwrap();
        let state = "/run/vrouter-operator";
        let query = |g: &InstantGuest| String::from_utf8(run(g, &arbiter::query_argv(state, &id)).stdout).unwrap();
        assert_eq!(query(&guest), "unknown\n");

        let staged = arbiter::staged_script_path(state, &id);
        let wrapper = arbiter::wrapper_argv(state, &id, &staged, "/bin/vbash");
        assert_eq!(run(&guest, &wrapper).code, 1, "nothing staged yet");
        write(&guest, &staged, b"set system host-name r1\n");
        assert_eq!(run(&guest, &wrapper).code, 0);
        assert!(guest.file(&staged).is_none(), "the wrapper takes its staged script");
        assert_eq!(query(&guest), "finished 0\n");

        write(&guest, &staged, b"again\n");
        let second = run(&guest, &wrapper);
        assert!(
            arbiter::is_duplicate(second.code, &String::from_utf8_lossy(&second.stderr)),
            "a second dispatch of one id runs nothing: {second:?}"
        );
    }

    #[test]
    fn files_read_back_and_unknown_programs_fail_loudly() {
        let guest = InstantGuest::new("vyos", [("/config/config.boot".to_owned(), b"system {\n}\n".to_vec())]);
        let cat = run(&guest, &["/bin/cat".into(), "/config/config.boot".into()]);
        assert_eq!((cat.code, cat.stdout.as_slice()), (0, b"system {\n}\n".as_slice()));
        let substate = run(
            &guest,
            &[
                "/bin/systemctl",
                "show",
                "-p",
                "SubState",
                "--value",
                "vyos-router.service",
            ]
            .map(String::from),
        );
        assert_eq!(substate.stdout, b"exited\n");
        let other = run(&guest, &["/usr/bin/reboot".into()]);
        assert_eq!(other.code, 127);
        assert!(String::from_utf8_lossy(&other.stderr).contains("/usr/bin/reboot"));

        let missing = guest.command("guest-file-open", &json!({"path": "/nope", "mode": "r"}));
        assert!(missing.unwrap_err().contains("No such file"));
        let handle = guest.command("guest-file-open", &json!({"path": PROC_UPTIME})).unwrap();
        let read = guest
            .command("guest-file-read", &json!({"handle": handle, "count": 100}))
            .unwrap();
        let text = String::from_utf8(BASE64.decode(read["buf-b64"].as_str().unwrap()).unwrap()).unwrap();
        assert!(text.split(' ').next().unwrap().parse::<f64>().is_ok(), "{text:?}");
        assert_eq!(read["eof"], json!(true));
    }

    /// A drift read's one shell command, as the providers build it: the
    /// check's output, the marker line, the running config; a check that
    /// fails ends it before the marker.
    #[test]
    fn the_check_then_read_command_runs_both_in_turn() {
        let guest = InstantGuest::new("vyos", [("/config/config.boot".to_owned(), b"system {\n}\n".to_vec())]);
        let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let check = words(&[
            "/bin/systemctl",
            "show",
            "-p",
            "SubState",
            "--value",
            "vyos-router.service",
        ]);
        let read = words(&["/bin/cli-shell-api", "showConfig", "--show-active-only"]);
        let both = run(
            &guest,
            &vrouter_providers::check_then_read_argv("/bin/sh", &check, &read),
        );
        let marker = vrouter_providers::RUNNING_CONFIG_FOLLOWS;
        assert_eq!(both.code, 0);
        assert_eq!(
            String::from_utf8(both.stdout).unwrap(),
            format!("exited\n\n{marker}\nsystem {{\n}}\n")
        );

        let unknown = words(&["/bin/false", "a", "b", "c", "d", "e"]);
        let failed = run(
            &guest,
            &vrouter_providers::check_then_read_argv("/bin/sh", &unknown, &read),
        );
        assert_eq!(failed.code, 127);
        assert!(failed.stdout.is_empty(), "no marker after a failed check");
    }

    #[test]
    fn an_exit_is_reported_once() {
        let guest = InstantGuest::new("vyos", []);
        let pid = guest
            .command("guest-exec", &json!({"path": "/bin/cat", "arg": ["/x"]}))
            .unwrap()["pid"]
            .clone();
        guest.command("guest-exec-status", &json!({"pid": pid})).unwrap();
        let again = guest.command("guest-exec-status", &json!({"pid": pid}));
        assert!(again.unwrap_err().contains("does not exist"));
    }
}
