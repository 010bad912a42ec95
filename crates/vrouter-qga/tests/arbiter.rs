//! The router as the arbiter of its applies, against a real qemu-ga and the
//! machine's own `/bin/sh`, `flock` and `setsid`: applies never overlap, an
//! apply id runs at most once however often it is dispatched, the result
//! outlives the agent that started it, and a stopped apply frees the lock.

use std::time::Duration;

use vrouter_qga::arbiter::{self, ApplyId, ApplyRecord};
use vrouter_qga::testing::AgentProcess;
use vrouter_qga::{Agent, ApplyPaths, Dispatch, ExecRequest, PollOptions, UnixSocketTransport};

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
