//! A vrouter-daemon target at an `https://` address, through Debian's
//! stunnel terminating TLS in front of the real vrouter-daemon, against a
//! real kube-apiserver: the CA bundle is read from a Secret of the target's
//! namespace, an untrusted certificate shows on the config's status and
//! nothing is applied, and the config applies once the Secret holds the
//! right CA.

mod common;

use std::time::Duration;

use serde_json::json;
use vrouter_api::{Phase, VRouterConfig, VRouterTarget};
use vrouter_operator::runtime::context::Settings;
use vrouter_test_peers::daemon::{AgentFlags, Daemon};
use vrouter_test_peers::stunnel::Stunnel;
use vrouter_test_peers::tls::ServerIdentity;

use common::{create, final_phase, site, wait_for};

fn ca_secret(pem: &str) -> k8s_openapi::api::core::v1::Secret {
    serde_json::from_value(json!({
        "metadata": {"name": "daemon-ca"},
        "stringData": {"ca.crt": pem},
    }))
    .unwrap()
}

#[tokio::test]
async fn an_untrusted_daemon_certificate_shows_on_the_status_until_the_secret_holds_the_right_ca() {
    let site = site("daemon-tls", &[], Settings::default()).await;
    let ns = &site.ns;
    let daemon = Daemon::start();
    let agent = daemon.start_agent("edge-1", AgentFlags::default()).await;
    let identity = ServerIdentity::issued_by_ca();
    let stunnel = Stunnel::start(&daemon.address(), &identity);
    let grant = format!("{}/edge-1", stunnel.accept_address());
    common::grant_daemon_agents(&ns.client(), ns.name(), Some(&grant)).await;

    let secrets = ns.api::<k8s_openapi::api::core::v1::Secret>();
    let wrong_ca = ServerIdentity::issued_by_ca().ca_pem.unwrap();
    secrets
        .create(&Default::default(), &ca_secret(&wrong_ca))
        .await
        .unwrap();
    create::<VRouterTarget>(
        ns,
        json!({"metadata": {"name": "edge-1"}, "spec": {"provider": {"type": "vrouter-daemon", "daemon": {
            "address": stunnel.https_address(), "agentID": "edge-1",
            "caBundle": {"secretRef": {"name": "daemon-ca", "key": "ca.crt"}},
        }}}}),
    )
    .await;
    create::<VRouterConfig>(
        ns,
        json!({"metadata": {"name": "edge-1"}, "spec": {"targetRef": {"name": "edge-1"}, "commands": "set system host-name edge-1\n"}}),
    )
    .await;

    let configs = ns.api::<VRouterConfig>();
    let message = wait_for(
        "the TLS refusal on the config's status",
        Duration::from_secs(90),
        || async {
            let status = configs.get("edge-1").await.ok()?.status?;
            status.message.contains("not trusted").then_some(status.message)
        },
    )
    .await;
    for needle in [
        stunnel.https_address().as_str(),
        "presented a certificate that is not trusted",
        identity.sha256_fingerprint().as_str(),
        "only the certificates of spec.provider.daemon.caBundle",
    ] {
        assert!(message.contains(needle), "{needle:?} not in {message}");
    }
    assert!(!message.contains("BEGIN"), "{message}");
    let config = configs.get("edge-1").await.unwrap();
    let status = config.status.unwrap();
    assert_ne!(status.phase, Phase::Applied);
    let ready = common::condition(&status.conditions, "Ready").expect("a Ready condition");
    assert_eq!(
        (ready.0.as_str(), ready.1.as_str()),
        ("False", "CertificateNotTrusted"),
        "{ready:?}"
    );
    assert!(agent.sandbox().calls().is_empty(), "{:?}", agent.sandbox().calls());

    // The right CA in the Secret: the next reconcile trusts it and applies.
    let right_ca = identity.ca_pem.clone().unwrap();
    secrets
        .replace("daemon-ca", &Default::default(), &{
            let mut s = secrets.get("daemon-ca").await.unwrap();
            s.data = None;
            s.string_data = Some([("ca.crt".to_owned(), right_ca)].into());
            s
        })
        .await
        .unwrap();
    let (phase, applied, message) = final_phase(&configs, "edge-1", Duration::from_secs(120)).await;
    assert_eq!(phase, Phase::Applied, "{message}\nagent log:\n{}", agent.log());
    assert_eq!(applied, Some(("True".into(), "ConfigApplied".into())));
    assert!(
        agent
            .sandbox()
            .calls()
            .contains(&"set system host-name edge-1".to_string()),
        "{:?}",
        agent.sandbox().calls()
    );
    assert!(stunnel.log().contains("accepted connection"), "{}", stunnel.log());
}
