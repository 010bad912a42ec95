//! The whole path up to the guest: an apply script rendered by
//! vrouter-render is written through a real qemu-ga and started by it the
//! way a provider does it ([`Agent::start_script`], under the router's
//! apply wrapper), with `bash` and stub
//! vyatta functions standing in for `/bin/vbash` (the interpreter and script
//! paths are the seam). What `load` received is then read back through the
//! agent and compared byte for byte. Everything lives in the test agent's
//! temporary directory.

use std::time::Duration;

use vrouter_qga::testing::AgentProcess;
use vrouter_qga::{Agent, ApplyId, ApplyPaths, ApplyRecord, Dispatch, PollOptions, UnixSocketTransport};
use vrouter_render::render_apply_script;
use vrouter_render::testing::{StubEvent, VYATTA_STUBS, parse_stub_log};

const POLL: PollOptions = PollOptions {
    interval: Duration::from_millis(20),
    timeout: Duration::from_secs(60),
};

/// A guest prepared for apply scripts: the stubs and a `vbash` stand-in
/// (a shell wrapper that loads them into bash through `BASH_ENV`), both
/// written through the agent.
struct Guest {
    process: AgentProcess,
    agent: Agent<UnixSocketTransport>,
    paths: ApplyPaths,
    log: String,
}

impl Guest {
    async fn prepare() -> Guest {
        let process = AgentProcess::start().unwrap_or_else(|e| panic!("{e}"));
        let agent = process.agent();
        let stubs = process.guest_path("vyatta-stubs.bash");
        let log = process.guest_path("stub.log");
        let vbash = process.guest_path("vbash");
        agent.write_file(&stubs, VYATTA_STUBS.as_bytes()).await.unwrap();
        let wrapper =
            format!("#!/bin/sh\nexport BASH_ENV='{stubs}'\nexport VROUTER_STUB_LOG='{log}'\nexec /bin/bash \"$@\"\n");
        agent.write_file(&vbash, wrapper.as_bytes()).await.unwrap();
        let chmod = vrouter_qga::ExecRequest::new("/bin/chmod").args(["0755", &vbash]);
        assert!(agent.run(&chmod, POLL).await.unwrap().success());
        let paths = ApplyPaths {
            state_dir: process.guest_path("state"),
            interpreter: vbash,
        };
        Guest {
            process,
            agent,
            paths,
            log,
        }
    }

    /// Renders, writes and runs one apply script; returns the stub log.
    async fn apply(&self, config: &str, commands: &str, save: bool) -> Vec<StubEvent> {
        self.agent.write_file(&self.log, b"").await.unwrap();
        let script = render_apply_script(config, commands, save).unwrap();
        let apply = ApplyId::fresh(1);
        let Dispatch::Started(pid) = self
            .agent
            .start_script(&apply, script.as_bytes(), &self.paths)
            .await
            .unwrap()
        else {
            panic!("a fresh apply id was known to the router");
        };
        let output = self.agent.wait(pid, POLL).await.unwrap();
        assert!(
            output.success(),
            "apply script failed ({:?}): {}",
            output.status,
            output.stderr_text()
        );
        // The router kept the result and removed the script, which holds secrets.
        let record = self.agent.apply_record(&apply, &self.paths).await.unwrap();
        assert!(
            matches!(&record, ApplyRecord::Finished { exit_code: 0, stdout, .. } if *stdout == output.stdout_text()),
            "{record:?}"
        );
        let script_path = format!("{}/{apply}/script", self.paths.state_dir);
        assert!(
            self.agent.read_file(&script_path).await.is_err(),
            "{script_path} is left behind"
        );
        // Asked to start the same apply again, the router refuses.
        assert_eq!(
            self.agent
                .start_script(&apply, script.as_bytes(), &self.paths)
                .await
                .unwrap(),
            Dispatch::Known(record)
        );
        parse_stub_log(&self.agent.read_file(&self.log).await.unwrap()).unwrap()
    }
}

fn calls(events: &[StubEvent]) -> Vec<(String, Vec<String>)> {
    events
        .iter()
        .filter_map(|event| match event {
            StubEvent::Call { name, args } => Some((name.clone(), args.clone())),
            _ => None,
        })
        .collect()
}

fn loaded(events: &[StubEvent]) -> Vec<&str> {
    events
        .iter()
        .filter_map(|event| match event {
            StubEvent::Loaded(config) => Some(config.as_str()),
            _ => None,
        })
        .collect()
}

/// The first word of every command the script itself ran at top level.
fn traced(events: &[StubEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|event| match event {
            StubEvent::Trace { depth: 0, command } => command.split_whitespace().next().map(str::to_owned),
            _ => None,
        })
        .collect()
}

fn call(name: &str, args: &[&str]) -> (String, Vec<String>) {
    (name.to_owned(), args.iter().map(|a| (*a).to_owned()).collect())
}

fn expected_calls(load_args: &[&str], sets: &[&[&str]], save: bool) -> Vec<(String, Vec<String>)> {
    let mut expected = vec![
        call("source", &["/opt/vyatta/etc/functions/script-template"]),
        call("configure", &[]),
        call("load", load_args),
    ];
    expected.extend(sets.iter().map(|args| call("set", args)));
    expected.push(call("commit", &[]));
    if save {
        expected.push(call("save", &[]));
    }
    expected
}

#[tokio::test]
async fn a_rendered_script_loads_exactly_the_config_through_the_agent() {
    let guest = Guest::prepare().await;
    let config =
        "interfaces {\n    ethernet eth0 {\n        address 192.0.2.1/24\n    }\n}\nsystem {\n    host-name r1\n}\n";
    let commands = "set system host-name r1\nset protocols bgp system-as 65001\n";
    let events = guest.apply(config, commands, true).await;
    assert_eq!(loaded(&events), [config]);
    assert_eq!(
        calls(&events),
        expected_calls(
            &["/dev/stdin"],
            &[
                &["system", "host-name", "r1"],
                &["protocols", "bgp", "system-as", "65001"]
            ],
            true
        )
    );
    guest.agent.transport().close().await;
}

#[tokio::test]
async fn hostile_config_lines_reach_load_as_text_and_run_nothing() {
    let guest = Guest::prepare().await;
    let pwned = guest.process.guest_path("pwned");
    let config = format!(
        "VROUTER_CONFIG_EOF_\nVROUTER_CONFIG_EOF_00112233445566778899aabbccddeeff\n\
         description \"$(touch {pwned})\"\n`touch {pwned}`\n'single' \"double\" \\backslash\n\
         crlf line\r\nunicode ✓ ü 日本\n$HOME ${{PATH}}\nno trailing newline"
    );
    let events = guest.apply(&config, "", false).await;
    // A heredoc ends its last line, so the one missing newline is added.
    assert_eq!(loaded(&events), [format!("{config}\n").as_str()]);
    assert_eq!(calls(&events), expected_calls(&["/dev/stdin"], &[], false));
    assert!(!std::path::Path::new(&pwned).exists(), "a config line ran as a command");
    // Nothing but the script's own statements ran.
    assert_eq!(traced(&events), ["[", "source", "configure", "load", "commit"]);
    guest.agent.transport().close().await;
}

#[tokio::test]
async fn an_empty_config_loads_the_default_and_unsaved_skips_save() {
    let guest = Guest::prepare().await;
    let events = guest.apply("", "set system host-name r2", false).await;
    assert!(loaded(&events).is_empty());
    assert_eq!(
        calls(&events),
        expected_calls(
            &["/opt/vyatta/etc/config.boot.default"],
            &[&["system", "host-name", "r2"]],
            false
        )
    );
    guest.agent.transport().close().await;
}

#[tokio::test]
async fn a_config_spanning_many_write_chunks_arrives_whole() {
    let guest = Guest::prepare().await;
    // About 300 KiB: seven 48 KiB writes for the script.
    let config: String = (0..6000)
        .map(|i| {
            format!(
                "    static-route 10.{}.{}.0/24 {{ next-hop 192.0.2.{} }}\n",
                i / 256,
                i % 256,
                i % 250 + 1
            )
        })
        .collect();
    let config = format!("protocols {{\n{config}}}\n");
    assert!(config.len() > 6 * vrouter_qga::constants::WRITE_CHUNK_BYTES);
    let events = guest.apply(&config, "", true).await;
    let received = loaded(&events);
    assert_eq!(received.len(), 1);
    assert!(
        received[0] == config,
        "load received {} bytes, expected {}",
        received[0].len(),
        config.len()
    );
    guest.agent.transport().close().await;
}
