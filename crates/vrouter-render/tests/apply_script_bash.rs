//! The apply script executed by bash with stub vyatta functions: `load` receives
//! exactly the config, and nothing but the script's own commands runs.

mod support;

use std::cell::RefCell;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use vrouter_render::delimiter::{DELIMITER_PREFIX, render_apply_script_with};
use vrouter_render::testing::{BashHarness, ScriptRun, StubEvent, run_script_file};
use vrouter_render::{ScriptError, render_apply_script};

/// CI runs this many scripts through bash (one bash process, a subshell per
/// case); the quick loop a tenth.
const BASH_CASES: u32 = 10_000;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Lines chosen to break out of a heredoc or a shell word if anything were
/// expanded or the heredoc closed early.
fn hostile_line(seed_delimiter: String) -> impl Strategy<Value = String> {
    prop_oneof![
        3 => Just(DELIMITER_PREFIX.to_owned()),
        3 => Just(seed_delimiter.clone()),
        3 => Just(format!("{seed_delimiter}\r")),
        3 => Just(format!(" {seed_delimiter}")),
        3 => "[0-9a-f]{0,64}".prop_map(|h| format!("{DELIMITER_PREFIX}{h}")),
        3 => Just("$(touch /tmp/vrouter-pwned)".to_owned()),
        3 => Just("`id`".to_owned()),
        3 => Just("'".to_owned()),
        3 => Just("\"".to_owned()),
        3 => Just("'\"'\"'".to_owned()),
        3 => Just("${HOME} $PATH $0 $@ $$".to_owned()),
        3 => Just("\\".to_owned()),
        3 => Just("\\\\n".to_owned()),
        3 => Just("EOF".to_owned()),
        3 => Just("; reboot; #".to_owned()),
        3 => Just("&& echo x || true | cat > /etc/passwd".to_owned()),
        3 => Just("<<EOF".to_owned()),
        3 => Just("\t indented\t".to_owned()),
        3 => Just(String::new()),
        3 => Just("interfaces { ethernet eth0 { address 192.0.2.1/24 } }".to_owned()),
        3 => Just("é 日本語 \u{2028} \u{feff} 🚀 e\u{301} ＂＇＄（）".to_owned()),
        6 => "\\PC{0,40}",
        6 => "[ -~]{0,40}",
        // Very long lines, rarely: the 70,000-byte one is past bash's pipe buffer, so
        // bash spools that heredoc to a temporary file instead.
        1 => prop::sample::select(vec![1000usize, 5000, 70_000]).prop_map(|n| "x".repeat(n)),
    ]
}

#[derive(Debug)]
struct Case {
    config: String,
    commands: Vec<String>,
    save: bool,
    seed: [u8; 16],
}

fn case() -> impl Strategy<Value = Case> {
    (any::<[u8; 16]>(), any::<bool>(), any::<bool>(), any::<bool>()).prop_flat_map(
        |(seed, crlf, trailing_newline, save)| {
            let seed_delimiter = format!("{DELIMITER_PREFIX}{}", hex(&seed));
            let lines = prop::collection::vec(hostile_line(seed_delimiter), 0..8);
            let commands = prop::collection::vec("[a-z0-9-]{1,12}", 0..3);
            (lines, commands).prop_map(move |(lines, words)| {
                let mut config = lines.join(if crlf { "\r\n" } else { "\n" });
                if trailing_newline && !config.is_empty() {
                    config.push('\n');
                }
                let commands = words.iter().map(|w| format!("set system host-name '{w}'")).collect();
                Case {
                    config,
                    commands,
                    save,
                    seed,
                }
            })
        },
    )
}

/// Delimiter randomness that starts from `seed`, so a config can hold the first
/// candidate and force the grow-and-retry path under bash.
fn seeded(seed: [u8; 16]) -> impl FnMut(&mut [u8]) -> Result<(), ScriptError> {
    let mut round = 0u8;
    move |buf: &mut [u8]| {
        for (i, b) in buf.iter_mut().enumerate() {
            *b = seed[i % 16] ^ round.wrapping_mul(0x5b);
        }
        round = round.wrapping_add(1);
        Ok(())
    }
}

fn expected_names(commands: usize, save: bool) -> Vec<(u32, &'static str)> {
    let mut names = vec![(0, "["), (1, "id"), (0, "source"), (0, "configure"), (0, "load")];
    names.extend(std::iter::repeat_n((0, "set"), commands));
    names.push((0, "commit"));
    if save {
        names.push((0, "save"));
    }
    names
}

fn check_run(run: &ScriptRun, config: &str, commands: &[String], save: bool) -> Result<(), TestCaseError> {
    prop_assert_eq!(run.status, 0, "stderr: {}", run.stderr);
    prop_assert_eq!(&run.stdout, "");
    prop_assert_eq!(&run.stderr, "");
    let mut expected_calls: Vec<(String, Vec<String>)> = vec![
        (
            "source".into(),
            vec!["/opt/vyatta/etc/functions/script-template".into()],
        ),
        ("configure".into(), vec![]),
    ];
    if config.is_empty() {
        expected_calls.push(("load".into(), vec!["/opt/vyatta/etc/config.boot.default".into()]));
        prop_assert_eq!(run.loaded(), None);
    } else {
        expected_calls.push(("load".into(), vec!["/dev/stdin".into()]));
        // A heredoc always ends its last line.
        let expected = if config.ends_with('\n') {
            config.to_owned()
        } else {
            format!("{config}\n")
        };
        prop_assert_eq!(run.loaded(), Some(expected.as_str()));
    }
    for _ in commands {
        expected_calls.push(("set".into(), vec![]));
    }
    expected_calls.push(("commit".into(), vec![]));
    if save {
        expected_calls.push(("save".into(), vec![]));
    }
    let calls = run.calls();
    prop_assert_eq!(calls.len(), expected_calls.len(), "calls: {:?}", calls);
    let mut set_index = 0;
    for ((name, args), (expected_name, expected_args)) in calls.iter().zip(&expected_calls) {
        prop_assert_eq!(name, expected_name);
        if *name == "set" {
            let word = commands[set_index].split('\'').nth(1).unwrap();
            prop_assert_eq!(args, &vec!["system", "host-name", word]);
            set_index += 1;
        } else {
            prop_assert_eq!(args, expected_args);
        }
    }
    prop_assert_eq!(run.traced_command_names(), expected_names(commands.len(), save));
    Ok(())
}

#[test]
fn load_receives_exactly_the_config_and_nothing_else_runs() {
    let harness = RefCell::new(BashHarness::start().expect("this test runs the apply script under bash"));
    let mut runner = TestRunner::new(Config {
        cases: support::property_cases(BASH_CASES),
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&case(), |case| {
        let commands = case.commands.join("\n");
        let script = render_apply_script_with(&case.config, &commands, case.save, &mut seeded(case.seed))
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let run = harness
            .borrow_mut()
            .run(&script)
            .map_err(|e| TestCaseError::fail(format!("bash harness: {e}")))?;
        check_run(&run, &case.config, &case.commands, case.save)
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
}

#[test]
fn a_config_holding_the_first_candidate_delimiter_still_arrives_whole() {
    let seed = [0x42; 16];
    let first = format!("{DELIMITER_PREFIX}{}", hex(&seed));
    let config = format!("a\n{first}\n$(touch /tmp/vrouter-pwned)\n{first}\n");
    let script = render_apply_script_with(&config, "", true, &mut seeded(seed)).unwrap();
    assert!(!script.contains(&format!("<<'{first}'")));
    let run = BashHarness::start().unwrap().run(&script).unwrap();
    check_run(&run, &config, &[], true).unwrap();
}

#[test]
fn outside_the_vyattacfg_group_the_script_re_execs_itself_under_sg_and_does_nothing_else() {
    let script = render_apply_script("system {\n}\n", "set system host-name r1", true).unwrap();
    let run = run_script_file(&script, "root").unwrap();
    let sg: Vec<_> = run
        .events
        .iter()
        .filter(|e| matches!(e, StubEvent::Sg { .. }))
        .collect();
    let [StubEvent::Sg { args }] = sg.as_slice() else {
        panic!("expected one sg call: {:?}", run.events)
    };
    assert_eq!(args.len(), 3, "{args:?}");
    assert_eq!((args[0].as_str(), args[1].as_str()), ("vyattacfg", "-c"));
    assert!(
        args[2].starts_with("/bin/vbash /") && args[2].ends_with("/apply.sh "),
        "{:?}",
        args[2]
    );
    assert!(
        run.calls().is_empty(),
        "nothing may run before the re-exec: {:?}",
        run.calls()
    );
    assert_eq!(
        run.traced_command_names(),
        vec![(0, "["), (1, "id"), (0, "exec"), (1, "readlink")]
    );
    assert_eq!((run.status, run.stderr.as_str()), (0, ""));
}

#[test]
fn run_as_a_file_with_bash_env_the_stubs_see_the_same_as_in_the_harness() {
    let config = "interfaces {\n    ethernet eth0 {\n        address '192.0.2.1/24'\n    }\n}";
    let commands = vec!["set system host-name 'r1'".to_owned()];
    let script = render_apply_script(config, &commands[0], false).unwrap();
    let as_file = run_script_file(&script, "vyattacfg").unwrap();
    check_run(&as_file, config, &commands, false).unwrap();
    let in_harness = BashHarness::start().unwrap().run(&script).unwrap();
    assert_eq!(as_file.calls(), in_harness.calls());
    assert_eq!(as_file.loaded(), in_harness.loaded());
}

#[test]
fn records_written_at_once_by_both_sides_of_pipelines_stay_whole() {
    // Both sides of each pipeline log a call holding newlines at the same moment;
    // a record cut by another's breaks the log's framing or changes an argument.
    // (With the stubs writing newlines as they are, three runs out of three failed.)
    const PIPELINES: usize = 1_000;
    let script =
        format!("for ((i = 0; i < {PIPELINES}; i++)); do set a $'x\\ny\\nz\\n\\\\' | set b $'\\n\\n\\n'; done\n");
    let run = BashHarness::start().unwrap().run(&script).unwrap();
    assert_eq!(run.status, 0, "{}", run.stderr);
    let mut counts = std::collections::BTreeMap::new();
    for call in run.calls() {
        *counts.entry(call).or_insert(0) += 1;
    }
    let expected = std::collections::BTreeMap::from([
        (("set", vec!["a", "x\ny\nz\n\\"]), PIPELINES),
        (("set", vec!["b", "\n\n\n"]), PIPELINES),
    ]);
    assert_eq!(counts, expected);
    let traced_sets = run
        .traced_command_names()
        .iter()
        .filter(|(_, name)| *name == "set")
        .count();
    assert_eq!(traced_sets, 2 * PIPELINES);
}

/// Object names reach the script only through the commit comment; whatever
/// they hold, bash hands `commit` exactly `comment <text>` and runs nothing
/// else (the trace shows every command the script ran).
#[test]
fn a_commit_comment_built_from_hostile_names_reaches_commit_as_one_argument() {
    use vrouter_render::{Commit, CommitComment, CommitOrigin, render_commented_script};
    let hostile = [
        "x'; touch /tmp/vrouter-pwned; '",
        "$(touch /tmp/vrouter-pwned)",
        "`id`",
        "a|b%%c",
        "line\nbreak",
        "; reboot; #",
    ];
    let mut harness = BashHarness::start().unwrap();
    for name in hostile {
        let comment = CommitComment::describe(&CommitOrigin {
            namespace: name,
            config: name,
            binding: Some(name),
            generation: 3,
            apply: name,
        });
        for commit in [Commit::Plain { save: true }, Commit::Confirmed { minutes: 2 }] {
            let script = render_commented_script("", "set x\n", commit, Some(&comment)).unwrap();
            let run = harness.run(&script).unwrap();
            let commits: Vec<_> = run
                .calls()
                .into_iter()
                .filter(|(name, _)| name.starts_with("commit"))
                .collect();
            // A confirmed script's `commit-confirm` runs only where
            // `cli-shell-api` says the session changed; here it is absent, so
            // its `else` branch commits, with the same comment.
            let expected_args = vec!["comment", comment.text()];
            assert_eq!(commits, vec![("commit", expected_args)], "{name:?}: {script}");
            let ran: Vec<_> = run.traced_command_names().into_iter().map(|(_, c)| c).collect();
            assert!(
                ran.iter().all(|c| [
                    "[",
                    "id",
                    "source",
                    "configure",
                    "load",
                    "set",
                    "commit",
                    "save",
                    "/bin/cli-shell-api"
                ]
                .contains(c)),
                "{name:?} ran {ran:?}"
            );
        }
    }
}
