//! The router as the arbiter of its applies, against a real qemu-ga and the
//! machine's own `/bin/sh`, `flock` and `setsid`: applies never overlap, an
//! apply id runs at most once however often it is dispatched, the result
//! outlives the agent that started it, a stopped apply frees the lock, and
//! the lock covers the script itself: a killed wrapper (or wrapper and
//! runner) leaves no way for the next apply to overlap a script that runs
//! on, while what a script leaves behind holds up nothing.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use vrouter_qga::arbiter::{self, ApplyId, ApplyRecord};
use vrouter_qga::testing::AgentProcess;
use vrouter_qga::{Agent, ApplyPaths, Dispatch, ExecRequest, ExitStatus, Pid, PollOptions, UnixSocketTransport};

const POLL: PollOptions = PollOptions {
    interval: Duration::from_millis(20),
    timeout: Duration::from_secs(120),
};

fn paths(process: &AgentProcess) -> ApplyPaths {
    ApplyPaths {
        state_dir: process.guest_path("state"),
        interpreter: "/bin/sh".into(),
    }
}

async fn start(agent: &Agent<UnixSocketTransport>, apply: &ApplyId, script: &str, paths: &ApplyPaths) -> i64 {
    match agent.start_script(apply, script.as_bytes(), paths).await.unwrap() {
        Dispatch::Started(pid) => pid.0,
        Dispatch::Known(record) => panic!("{apply} was known: {record:?}"),
    }
}

/// The journal's lines, each `<id> started` or `<id> <exit code>`.
async fn journal(agent: &Agent<UnixSocketTransport>, paths: &ApplyPaths) -> Vec<String> {
    let bytes = agent.read_file(&format!("{}/journal", paths.state_dir)).await.unwrap();
    String::from_utf8(bytes).unwrap().lines().map(str::to_owned).collect()
}

/// Asserts every run in the journal ends before the next starts, and
/// returns the ids in the order they ran.
fn runs_in_order(journal: &[String]) -> Vec<String> {
    assert!(journal.len().is_multiple_of(2), "a run has not ended: {journal:?}");
    journal
        .chunks(2)
        .map(|pair| {
            let id = pair[0]
                .strip_suffix(" started")
                .unwrap_or_else(|| panic!("{journal:?}"));
            assert!(pair[1].starts_with(&format!("{id} ")), "runs overlap: {journal:?}");
            id.to_owned()
        })
        .collect()
}

async fn journal_exists(agent: &Agent<UnixSocketTransport>, paths: &ApplyPaths) -> bool {
    agent
        .read_file(&format!("{}/journal", paths.state_dir))
        .await
        .is_ok_and(|j| !j.is_empty())
}

async fn finished(agent: &Agent<UnixSocketTransport>, apply: &ApplyId, paths: &ApplyPaths) -> ApplyRecord {
    for _ in 0..6000 {
        match agent.apply_record(apply, paths).await.unwrap() {
            ApplyRecord::Running { .. } => tokio::time::sleep(Duration::from_millis(20)).await,
            other => return other,
        }
    }
    panic!("{apply} did not finish");
}

async fn claimed(agent: &Agent<UnixSocketTransport>, apply: &ApplyId, paths: &ApplyPaths) -> ApplyRecord {
    for _ in 0..6000 {
        match agent.apply_record(apply, paths).await.unwrap() {
            ApplyRecord::Unknown => tokio::time::sleep(Duration::from_millis(20)).await,
            other => return other,
        }
    }
    panic!("{apply} was never claimed");
}

#[tokio::test]
async fn applies_never_overlap_and_a_redispatched_id_runs_once() {
    let process = AgentProcess::start().unwrap_or_else(|e| panic!("{e}"));
    let (agent, paths) = (process.agent(), paths(&process));
    let ids: Vec<ApplyId> = (1..=3).map(ApplyId::fresh).collect();
    let script = "sleep 0.3\necho ran\n";
    let mut pids = Vec::new();
    for apply in &ids {
        pids.push(start(&agent, apply, script, &paths).await);
    }
    // The first id dispatched again, its answer lost the first time: the
    // second wrapper runs nothing and says so.
    let staged = arbiter::staged_script_path(&paths.state_dir, &ids[0]);
    agent.write_file(&staged, script.as_bytes()).await.unwrap();
    let argv = arbiter::wrapper_argv(&paths.state_dir, &ids[0], &staged, &paths.interpreter);
    let again = agent
        .run(&ExecRequest::new(&argv[0]).args(&argv[1..]), POLL)
        .await
        .unwrap();
    let (code, stderr) = (again.status.shell_code(), again.stderr_text());
    assert!(arbiter::is_duplicate(code, &stderr), "{code} {stderr}");
    for pid in pids {
        let output = agent.wait(vrouter_qga::Pid(pid), POLL).await.unwrap();
        assert!(output.success() && output.stdout_text() == "ran\n", "{output:?}");
    }
    let mut ran = runs_in_order(&journal(&agent, &paths).await);
    ran.sort();
    let mut want: Vec<String> = ids.iter().map(ToString::to_string).collect();
    want.sort();
    assert_eq!(ran, want, "each id ran exactly once");
    assert!(
        agent.read_file(&staged).await.is_err(),
        "the duplicate's staged script is removed"
    );
}

#[tokio::test]
async fn the_result_outlives_a_restarted_agent() {
    let mut process = AgentProcess::start().unwrap_or_else(|e| panic!("{e}"));
    let paths = paths(&process);
    let apply = ApplyId::fresh(1);
    let agent = process.agent();
    let pid = start(
        &agent,
        &apply,
        "sleep 1\necho applied\necho warning >&2\nexit 3\n",
        &paths,
    )
    .await;
    agent.transport().close().await;
    process.restart().unwrap();
    let agent = process.agent();
    let lost = agent.exec_status(vrouter_qga::Pid(pid)).await.unwrap_err();
    assert!(lost.is_unknown_pid(), "{lost}");
    let record = finished(&agent, &apply, &paths).await;
    assert_eq!(
        record,
        ApplyRecord::Finished {
            exit_code: 3,
            stdout: "applied\n".into(),
            stderr: "warning\n".into()
        }
    );
    assert_eq!(
        journal(&agent, &paths).await,
        [format!("{apply} started"), format!("{apply} 3")]
    );
}

#[tokio::test]
async fn a_stopped_apply_ends_and_the_next_one_runs_after_it() {
    let process = AgentProcess::start().unwrap_or_else(|e| panic!("{e}"));
    let (agent, paths) = (process.agent(), paths(&process));
    let (stuck, next) = (ApplyId::fresh(1), ApplyId::fresh(2));
    start(&agent, &stuck, "sleep 600 & wait\n", &paths).await;
    // The stuck apply holds the lock: the next one waits, it does not start.
    for attempt in 0.. {
        if journal_exists(&agent, &paths).await {
            break;
        }
        assert!(attempt < 6000, "the stuck apply never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    start(&agent, &next, "echo next\n", &paths).await;
    // The agent answers with a pid before the wrapper has claimed the id,
    // so the router may not know it for a moment; once it does, it is a
    // running wrapper (that it waits for the lock, not runs, is what the
    // journal's order shows at the end).
    let claimed = claimed(&agent, &next, &paths).await;
    assert!(matches!(claimed, ApplyRecord::Running { .. }), "{claimed:?}");
    agent.stop_script(&stuck, &paths).await.unwrap();
    let stopped = finished(&agent, &stuck, &paths).await;
    assert!(
        matches!(stopped, ApplyRecord::Finished { exit_code, .. } if exit_code > 128),
        "{stopped:?}"
    );
    let record = finished(&agent, &next, &paths).await;
    assert!(
        matches!(record, ApplyRecord::Finished { exit_code: 0, ref stdout, .. } if stdout == "next\n"),
        "{record:?}"
    );
    assert_eq!(
        runs_in_order(&journal(&agent, &paths).await),
        [stuck.to_string(), next.to_string()]
    );
}

/// Waits until `path` has a line `line` (written by a script under test).
async fn line_appears(path: &str, line: &str) {
    for _ in 0..6000 {
        if std::fs::read_to_string(path).is_ok_and(|text| text.lines().any(|l| l == line)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{path} never had the line {line:?}");
}

/// The pid a script's leftover wrote to `path`, once it has.
async fn pid_in(path: &str) -> String {
    for _ in 0..6000 {
        if let Ok(text) = std::fs::read_to_string(path)
            && text.ends_with('\n')
        {
            return text.trim().to_owned();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{path} never had a pid");
}

fn lines(path: &str) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.lines().map(str::to_owned).collect()
}

/// SIGKILLs `pid` (a process of this machine: the agent runs here).
fn kill(pid: i64) {
    let status = Command::new("kill").args(["-KILL", &pid.to_string()]).status().unwrap();
    assert!(status.success(), "kill -KILL {pid}: {status}");
}

/// The pids of the processes one of whose arguments is exactly `arg`.
fn processes_with_argument(arg: &str) -> Vec<i64> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i64>().ok()) else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if cmdline.split(|b| *b == 0).any(|a| a == arg.as_bytes()) {
            pids.push(pid);
        }
    }
    pids
}

/// A script that marks its start, waits for `go` to exist, marks its end
/// and prints `first`. It gives up waiting after 2 minutes, so a test that
/// failed before creating `go` leaves no process looping behind it.
fn waits_for(marks: &str, go: &str) -> String {
    format!(
        "echo start-1 >>{marks}\nn=0\nwhile [ ! -e {go} ] && [ $n -lt 2400 ]; do sleep 0.05; n=$((n+1)); done\necho end-1 >>{marks}\necho first\n"
    )
}

fn marks_both(marks: &str) -> String {
    format!("echo start-2 >>{marks}\necho end-2 >>{marks}\n")
}

/// A forked subshell left behind by a script: it shows the same command
/// line as the script's interpreter, writes its pid to `pid_file` and
/// lives until `done` exists or the test's directory is gone.
fn leave_behind(pid_file: &str, done: &str, dir: &str) -> String {
    format!(
        "( sh -c 'echo $PPID' >{pid_file}; while [ -d {dir} ] && [ ! -e {done} ]; do sleep 0.1; done ) </dev/null >/dev/null 2>&1 &\n"
    )
}

const ORDER: [&str; 4] = ["start-1", "end-1", "start-2", "end-2"];

#[tokio::test]
async fn a_script_whose_wrapper_was_killed_runs_on_under_the_lock_and_keeps_its_result() {
    let process = AgentProcess::start().unwrap_or_else(|e| panic!("{e}"));
    let (agent, paths) = (process.agent(), paths(&process));
    let (marks, go) = (process.guest_path("marks"), process.guest_path("go"));
    let (first, second) = (ApplyId::fresh(1), ApplyId::fresh(2));
    let wrapper = start(&agent, &first, &waits_for(&marks, &go), &paths).await;
    line_appears(&marks, "start-1").await;
    kill(wrapper);
    let killed = agent.wait(Pid(wrapper), POLL).await.unwrap();
    assert_eq!(
        killed.status,
        ExitStatus::Signal(9),
        "the wrapper really died: {killed:?}"
    );
    let record = agent.apply_record(&first, &paths).await.unwrap();
    assert_eq!(record, ApplyRecord::Running { pid: wrapper }, "its script still runs");

    start(&agent, &second, &marks_both(&marks), &paths).await;
    let waiting = claimed(&agent, &second, &paths).await;
    assert!(matches!(waiting, ApplyRecord::Running { .. }), "{waiting:?}");
    std::fs::write(&go, "").unwrap();
    let next = finished(&agent, &second, &paths).await;
    assert!(matches!(next, ApplyRecord::Finished { exit_code: 0, .. }), "{next:?}");
    assert_eq!(lines(&marks), ORDER, "the second script started after the first ended");
    let record = finished(&agent, &first, &paths).await;
    assert_eq!(
        record,
        ApplyRecord::Finished {
            exit_code: 0,
            stdout: "first\n".into(),
            stderr: String::new()
        },
        "the killed wrapper's script kept its result"
    );
    assert_eq!(
        runs_in_order(&journal(&agent, &paths).await),
        [first.to_string(), second.to_string()]
    );
}

#[tokio::test]
async fn a_script_left_without_wrapper_and_runner_holds_up_the_next_apply_and_ends_vanished() {
    let process = AgentProcess::start().unwrap_or_else(|e| panic!("{e}"));
    let (agent, paths) = (process.agent(), paths(&process));
    let (marks, go) = (process.guest_path("marks"), process.guest_path("go"));
    let (left, done) = (process.guest_path("left.pid"), process.guest_path("done"));
    let (first, second) = (ApplyId::fresh(1), ApplyId::fresh(2));
    let script = leave_behind(&left, &done, &process.dir().display().to_string()) + &waits_for(&marks, &go);
    start(&agent, &first, &script, &paths).await;
    line_appears(&marks, "start-1").await;
    let left = pid_in(&left).await;
    // Everything of the apply that names its id (the wrapper, the runner),
    // not its interpreter.
    loop {
        let pids = processes_with_argument(first.as_str());
        if pids.is_empty() {
            break;
        }
        pids.into_iter().for_each(kill);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let record = agent.apply_record(&first, &paths).await.unwrap();
    assert!(
        matches!(record, ApplyRecord::Running { .. }),
        "its script still runs: {record:?}"
    );

    start(&agent, &second, &marks_both(&marks), &paths).await;
    claimed(&agent, &second, &paths).await;
    std::fs::write(&go, "").unwrap();
    let next = finished(&agent, &second, &paths).await;
    assert!(matches!(next, ApplyRecord::Finished { exit_code: 0, .. }), "{next:?}");
    assert_eq!(lines(&marks), ORDER, "the second script started after the first ended");
    let record = finished(&agent, &first, &paths).await;
    assert_eq!(record, ApplyRecord::Vanished, "no result was recorded for the first");
    assert!(
        Path::new(&format!("/proc/{left}")).exists(),
        "what the first script left behind still runs, and held up nothing"
    );
    std::fs::write(&done, "").unwrap();
}

#[tokio::test]
async fn what_a_script_leaves_behind_never_holds_up_the_next_apply() {
    let process = AgentProcess::start().unwrap_or_else(|e| panic!("{e}"));
    let (agent, paths) = (process.agent(), paths(&process));
    let (left, done) = (process.guest_path("left.pid"), process.guest_path("done"));
    let (first, second) = (ApplyId::fresh(1), ApplyId::fresh(2));
    let script = leave_behind(&left, &done, &process.dir().display().to_string()) + "echo first\n";
    start(&agent, &first, &script, &paths).await;
    claimed(&agent, &first, &paths).await;
    let record = finished(&agent, &first, &paths).await;
    assert!(
        matches!(record, ApplyRecord::Finished { exit_code: 0, .. }),
        "{record:?}"
    );
    let left = pid_in(&left).await;
    start(&agent, &second, "echo second\n", &paths).await;
    claimed(&agent, &second, &paths).await;
    let record = finished(&agent, &second, &paths).await;
    assert!(
        matches!(record, ApplyRecord::Finished { exit_code: 0, .. }),
        "{record:?}"
    );
    assert!(
        Path::new(&format!("/proc/{left}")).exists(),
        "what the first script left behind (a subshell showing the script's own command line) still runs"
    );
    std::fs::write(&done, "").unwrap();
}

#[tokio::test]
async fn a_stopped_apply_whose_wrapper_was_killed_ends_and_frees_the_lock() {
    let process = AgentProcess::start().unwrap_or_else(|e| panic!("{e}"));
    let (agent, paths) = (process.agent(), paths(&process));
    let marks = process.guest_path("marks");
    let (stuck, next) = (ApplyId::fresh(1), ApplyId::fresh(2));
    let wrapper = start(
        &agent,
        &stuck,
        &format!("echo start-1 >>{marks}\nsleep 600 & wait\n"),
        &paths,
    )
    .await;
    line_appears(&marks, "start-1").await;
    kill(wrapper);
    let killed = agent.wait(Pid(wrapper), POLL).await.unwrap();
    assert_eq!(killed.status, ExitStatus::Signal(9), "{killed:?}");
    start(&agent, &next, "echo next\n", &paths).await;
    claimed(&agent, &next, &paths).await;
    agent.stop_script(&stuck, &paths).await.unwrap();
    let stopped = finished(&agent, &stuck, &paths).await;
    assert!(
        matches!(stopped, ApplyRecord::Finished { exit_code, .. } if exit_code > 128),
        "{stopped:?}"
    );
    let record = finished(&agent, &next, &paths).await;
    assert!(
        matches!(record, ApplyRecord::Finished { exit_code: 0, ref stdout, .. } if stdout == "next\n"),
        "{record:?}"
    );
    assert_eq!(
        runs_in_order(&journal(&agent, &paths).await),
        [stuck.to_string(), next.to_string()]
    );
}
