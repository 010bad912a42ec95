//! `https://` vrouter-daemon addresses, through Debian's stunnel
//! terminating TLS in front of the real vrouter-daemon (which serves
//! plaintext gRPC itself, as in production behind such a proxy). The CA
//! bundle comes from a Secret in the target's namespace, read by the
//! factory as the operator reads it.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use vrouter_api::proxmox_cluster::CaBundleRef;
use vrouter_api::{DaemonConfig, ProviderConfig, ProviderType, SecretKeyRef, VRouterTarget, VRouterTargetSpec};
use vrouter_providers::daemon::DaemonOptions;
use vrouter_providers::{ApplyId, FactoryContext, Provider, ProviderError, StaticLookup, build_provider};
use vrouter_test_peers::daemon::{Agent, AgentFlags, Daemon};
use vrouter_test_peers::poll_until_exited as wait;
use vrouter_test_peers::stunnel::Stunnel;
use vrouter_test_peers::tls::ServerIdentity;

const NS: &str = "site-a";
const AGENT: &str = "r1";

fn target(address: &str, ca_bundle: bool) -> VRouterTarget {
    let mut t = VRouterTarget::new(
        "r1",
        VRouterTargetSpec {
            provider: ProviderConfig {
                type_: ProviderType::VRouterDaemon,
                daemon: Some(DaemonConfig {
                    address: address.into(),
                    agent_id: AGENT.into(),
                    timeout_seconds: 30,
                    ca_bundle: ca_bundle.then(|| CaBundleRef {
                        secret_ref: SecretKeyRef {
                            name: "daemon-ca".into(),
                            key: "ca.crt".into(),
                        },
                    }),
                }),
                ..Default::default()
            },
            params: None,
        },
    );
    t.metadata.namespace = Some(NS.into());
    t
}

/// The target's namespace granted the agent, and the CA Secret holding `pem`
/// under `key` (none when `pem` is `None`).
fn world(endpoint: &str, key: &str, pem: Option<&str>) -> StaticLookup {
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(NS.into()),
            annotations: Some(BTreeMap::from([(
                vrouter_api::daemon_access::ANNOTATION_ALLOWED_DAEMON_AGENTS.to_owned(),
                format!("{endpoint}/{AGENT}"),
            )])),
            ..Default::default()
        },
        ..Default::default()
    };
    let secrets = pem
        .map(|pem| Secret {
            metadata: ObjectMeta {
                name: Some("daemon-ca".into()),
                namespace: Some(NS.into()),
                ..Default::default()
            },
            data: Some(BTreeMap::from([(key.to_owned(), ByteString(pem.as_bytes().to_vec()))])),
            ..Default::default()
        })
        .into_iter()
        .collect();
    StaticLookup {
        secrets,
        namespaces: vec![namespace],
        ..Default::default()
    }
}

fn context() -> FactoryContext {
    FactoryContext {
        daemon: DaemonOptions {
            grace: Duration::from_secs(5),
            call_timeout: Duration::from_secs(10),
            registry: std::sync::Arc::new(vrouter_providers::daemon::ExecRegistry::new()),
        },
        ..Default::default()
    }
}

/// The real daemon with one connected agent, behind stunnel presenting a
/// certificate issued by a CA of its own.
struct Setup {
    _daemon: Daemon,
    agent: Agent,
    stunnel: Stunnel,
    identity: ServerIdentity,
}

impl Setup {
    async fn start() -> Setup {
        let daemon = Daemon::start();
        let agent = daemon.start_agent(AGENT, AgentFlags::default()).await;
        let identity = ServerIdentity::issued_by_ca();
        let stunnel = Stunnel::start(&daemon.address(), &identity);
        Setup {
            _daemon: daemon,
            agent,
            stunnel,
            identity,
        }
    }

    fn ca_pem(&self) -> String {
        self.identity.ca_pem.clone().expect("issued by a CA")
    }

    fn endpoint(&self) -> String {
        self.stunnel.accept_address().to_string()
    }
}

/// Applies one config through `provider` and returns once the agent ran it.
async fn apply_through(provider: &dyn Provider, agent: &Agent, host_name: &str) {
    let before = agent.sandbox().calls().len();
    let command = format!("set system host-name {host_name}\n");
    let handle = provider
        .exec_script(&ApplyId::fresh(1), "", &command, true)
        .await
        .unwrap();
    let outcome = wait(provider, handle).await.unwrap();
    assert_eq!(outcome.exit_code, 0, "{outcome:?}");
    let calls = agent.sandbox().calls();
    assert!(
        calls[before..].contains(&format!("set system host-name {host_name}")),
        "the agent ran {calls:?}"
    );
}

/// A certificate refusal: typed, naming what was seen and what is trusted,
/// bounded, and without any PEM.
fn assert_not_trusted(err: &ProviderError, roots: &str) {
    let message = err.to_string();
    assert!(
        matches!(err, ProviderError::DaemonTls { untrusted: true, .. }),
        "{message}"
    );
    assert!(err.needs_a_person(), "{message}");
    for needle in [
        "presented a certificate that is not trusted",
        "SHA-256 fingerprint",
        roots,
    ] {
        assert!(message.contains(needle), "{needle:?} not in {message}");
    }
    assert!(!message.contains("BEGIN"), "{message}");
    assert!(message.len() < 1500, "{message}");
}

async fn wait_for_stunnel_log(stunnel: &Stunnel, text: &str) {
    let started = Instant::now();
    while !stunnel.log().contains(text) {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{text:?} not in the stunnel log:\n{}",
            stunnel.log()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// (a) The CA of the Secret trusts stunnel's certificate: the agent is seen
/// connected and an apply runs on it, through stunnel.
#[tokio::test]
async fn an_https_address_with_the_right_ca_applies_through_the_tls_proxy() {
    let setup = Setup::start().await;
    let address = setup.stunnel.https_address();
    let lookup = world(&setup.endpoint(), "ca.crt", Some(&setup.ca_pem()));
    let provider = build_provider(&target(&address, true), &lookup, &context())
        .await
        .unwrap();
    assert!(provider.is_vm_running().await.unwrap());
    apply_through(&*provider, &setup.agent, "through-tls").await;
    wait_for_stunnel_log(&setup.stunnel, "accepted connection").await;
}

/// (b) A CA that did not issue stunnel's certificate: refused with the
/// certificate named, nothing reaches the agent, and an apply ends lost
/// with nothing run.
#[tokio::test]
async fn a_wrong_ca_is_refused_clearly_and_nothing_is_applied() {
    let setup = Setup::start().await;
    let address = setup.stunnel.https_address();
    let other_ca = ServerIdentity::issued_by_ca().ca_pem.unwrap();
    let lookup = world(&setup.endpoint(), "ca.crt", Some(&other_ca));
    let provider = build_provider(&target(&address, true), &lookup, &context())
        .await
        .unwrap();
    let err = provider.is_vm_running().await.unwrap_err();
    assert_not_trusted(&err, "only the certificates of spec.provider.daemon.caBundle");
    assert!(err.to_string().contains(&address), "{err}");
    assert!(
        err.to_string().contains(&setup.identity.sha256_fingerprint()),
        "the refusal names stunnel's certificate: {err}"
    );

    let handle = provider
        .exec_script(&ApplyId::fresh(1), "", "set system host-name never\n", true)
        .await
        .unwrap();
    let lost = wait(&*provider, handle).await.unwrap_err();
    assert!(lost.to_string().contains("nothing ran"), "{lost}");
    assert!(
        !setup.agent.sandbox().calls().iter().any(|c| c.contains("never")),
        "the agent ran {:?}",
        setup.agent.sandbox().calls()
    );
    // stunnel saw the client give up in the handshake, never a request.
    wait_for_stunnel_log(&setup.stunnel, "SSL_accept").await;
}

/// Without a CA bundle, the system roots decide, and a private CA is not
/// among them.
#[tokio::test]
async fn without_a_ca_bundle_the_system_roots_refuse_a_private_ca() {
    let setup = Setup::start().await;
    let lookup = world(&setup.endpoint(), "ca.crt", None);
    let provider = build_provider(&target(&setup.stunnel.https_address(), false), &lookup, &context())
        .await
        .unwrap();
    let err = provider.is_vm_running().await.unwrap_err();
    assert_not_trusted(
        &err,
        "the operator's system roots (spec.provider.daemon.caBundle is not set)",
    );
}

/// An `https://` address never falls back to plaintext: pointed at the
/// daemon's plaintext port itself, the handshake fails and no call is made.
#[tokio::test]
async fn an_https_address_on_a_plaintext_daemon_fails_the_handshake_and_never_speaks_plaintext() {
    let setup = Setup::start().await;
    let plaintext = setup._daemon.address();
    let lookup = world(&plaintext, "ca.crt", Some(&setup.ca_pem()));
    let provider = build_provider(&target(&format!("https://{plaintext}"), true), &lookup, &context())
        .await
        .unwrap();
    let err = provider.is_vm_running().await.unwrap_err();
    assert!(
        matches!(err, ProviderError::DaemonTls { untrusted: false, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("did not complete a TLS handshake"), "{err}");
    // The same daemon answers plaintext gRPC: the failure was the transport.
    let plain = build_provider(&target(&format!("http://{plaintext}"), false), &lookup, &context())
        .await
        .unwrap();
    assert!(plain.is_vm_running().await.unwrap());
}

/// (c) The Secret changes from a wrong CA to the right one: the next
/// provider trusts the new bundle (a new channel, not the refused one).
#[tokio::test]
async fn a_ca_rotated_in_the_secret_is_picked_up() {
    let setup = Setup::start().await;
    let address = setup.stunnel.https_address();
    let t = target(&address, true);
    let old_ca = ServerIdentity::issued_by_ca().ca_pem.unwrap();
    let before = world(&setup.endpoint(), "ca.crt", Some(&old_ca));
    let refused = build_provider(&t, &before, &context()).await.unwrap();
    assert_not_trusted(
        &refused.is_vm_running().await.unwrap_err(),
        "only the certificates of spec.provider.daemon.caBundle",
    );
    let after = world(&setup.endpoint(), "ca.crt", Some(&setup.ca_pem()));
    let provider = build_provider(&t, &after, &context()).await.unwrap();
    assert!(provider.is_vm_running().await.unwrap());
    apply_through(&*provider, &setup.agent, "rotated").await;
    // And back: the old bundle is refused again, the good channel not reused.
    let again = build_provider(&t, &before, &context()).await.unwrap();
    assert!(again.is_vm_running().await.is_err());
}

/// A missing Secret, a missing key, and a value that is not PEM are refused
/// when the provider is built, each naming the field, Secret and key.
#[tokio::test]
async fn a_missing_or_bad_ca_bundle_is_refused_naming_the_secret_and_key() {
    let endpoint = "127.0.0.1:9";
    let t = target(&format!("https://{endpoint}"), true);
    for (lookup, needle) in [
        (
            world(endpoint, "ca.crt", None),
            "spec.provider.daemon.caBundle.secretRef): Secret site-a/daemon-ca was not found",
        ),
        (
            world(endpoint, "other", Some("x")),
            "Secret site-a/daemon-ca has no key \"ca.crt\"",
        ),
        (
            world(endpoint, "ca.crt", Some("not a certificate")),
            "spec.provider.daemon.caBundle (Secret site-a/daemon-ca key \"ca.crt\"): the CA bundle holds no PEM certificate",
        ),
    ] {
        let err = build_provider(&t, &lookup, &context()).await.unwrap_err();
        assert!(matches!(err, ProviderError::InvalidTls { .. }), "{err}");
        assert!(err.to_string().contains(needle), "{needle:?} not in {err}");
    }
}
