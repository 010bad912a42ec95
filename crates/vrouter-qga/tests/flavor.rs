//! Guest OS flavor and router-service state through a real qemu-ga. The
//! agent reads this machine's own os-release, so expectations are derived
//! from that file; the fallback path reads files in the test's temp dir.

use std::fs;
use std::time::Duration;

use vrouter_qga::testing::{AgentOptions, AgentProcess};
use vrouter_qga::{ExitStatus, GuestFlavor, PollOptions, QgaError, constants, os_release_id};

const POLL: PollOptions = PollOptions {
    interval: Duration::from_millis(20),
    timeout: Duration::from_secs(30),
};

fn host_os_id() -> String {
    let contents = fs::read_to_string(constants::OS_RELEASE_PATH).expect("this machine has /etc/os-release");
    os_release_id(&contents).expect("this machine's os-release has an ID")
}

#[tokio::test]
async fn the_os_id_comes_from_guest_get_osinfo() {
    let process = AgentProcess::start().unwrap_or_else(|e| panic!("{e}"));
    let agent = process.agent();
    assert_eq!(agent.os_info().await.unwrap().id, Some(host_os_id()));
    assert_eq!(agent.os_id().await.unwrap(), host_os_id());
    // This machine is not a router: an id other than vyos/dozenos is refused.
    match (agent.flavor().await, GuestFlavor::from_os_id(&host_os_id())) {
        (Ok(flavor), Ok(expected)) => assert_eq!(flavor, expected),
        (Err(QgaError::UnknownFlavor { id }), Err(_)) => assert_eq!(id, host_os_id()),
        (got, expected) => panic!("got {got:?}, expected {expected:?}"),
    }
    agent.transport().close().await;
}

#[tokio::test]
async fn a_disabled_osinfo_falls_back_to_reading_os_release() {
    let process = AgentProcess::start_with(AgentOptions {
        blocked_rpcs: vec!["guest-get-osinfo".into()],
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let agent = process.agent();
    let error = agent.os_info().await.unwrap_err();
    assert!(
        matches!(
            error,
            QgaError::Agent {
                command: "guest-get-osinfo",
                ..
            }
        ),
        "{error:?}"
    );

    let cases = [
        ("NAME=\"VyOS\"\nID=vyos\nVERSION_ID=\"1.4\"\n", Ok(GuestFlavor::Vyos)),
        ("NAME=DozenOS\nID=\"dozenos\"\n", Ok(GuestFlavor::DozenOs)),
        ("ID=alpine\n", Err("unknown guest OS id \"alpine\"")),
        ("NAME=nothing\n", Err("no ID= in os-release")),
    ];
    for (i, (contents, expected)) in cases.into_iter().enumerate() {
        let path = process.guest_path(&format!("os-release-{i}"));
        fs::write(&path, contents).unwrap();
        let flavor = match agent.os_id_from(&path).await {
            Ok(id) => GuestFlavor::from_os_id(&id),
            Err(error) => Err(error),
        };
        match (flavor, expected) {
            (Ok(flavor), Ok(expected)) => assert_eq!(flavor, expected),
            (Err(error), Err(expected)) => assert!(error.to_string().contains(expected), "{error}"),
            (got, expected) => panic!("{contents:?}: got {got:?}, expected {expected:?}"),
        }
    }
    agent.transport().close().await;
}

#[tokio::test]
async fn service_substate_reads_systemctl_output() {
    let process = AgentProcess::start().unwrap_or_else(|e| panic!("{e}"));
    let agent = process.agent();
    // A stand-in systemctl that answers like a finished oneshot unit and
    // records its arguments, all inside the temp dir.
    let args_file = process.guest_path("systemctl-args");
    let fake = process.guest_path("systemctl");
    fs::write(&fake, format!("#!/bin/sh\necho \"$@\" > '{args_file}'\necho exited\n")).unwrap();
    std::process::Command::new("chmod")
        .args(["+x", &fake])
        .status()
        .unwrap();

    let substate = agent
        .service_substate_via(&fake, GuestFlavor::Vyos.router_service(), POLL)
        .await
        .unwrap();
    assert_eq!(substate, vrouter_qga::SUBSTATE_EXITED);
    assert_eq!(
        fs::read_to_string(&args_file).unwrap(),
        "show -p SubState --value vyos-router.service\n"
    );

    // A failing systemctl is an error with its stderr, not an empty state.
    let failing = process.guest_path("systemctl-failing");
    fs::write(&failing, "#!/bin/sh\necho 'Failed to connect to bus' >&2\nexit 1\n").unwrap();
    std::process::Command::new("chmod")
        .args(["+x", &failing])
        .status()
        .unwrap();
    match agent
        .service_substate_via(&failing, "dozenos-router.service", POLL)
        .await
    {
        Err(QgaError::GuestCommandFailed {
            command,
            status,
            stderr,
        }) => {
            assert!(
                command.ends_with("show -p SubState --value dozenos-router.service"),
                "{command}"
            );
            assert_eq!(status, ExitStatus::Code(1));
            assert_eq!(stderr, "Failed to connect to bus");
        }
        other => panic!("expected GuestCommandFailed, got {other:?}"),
    }
    agent.transport().close().await;
}
