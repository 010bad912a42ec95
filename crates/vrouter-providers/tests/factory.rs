//! The factory: which provider a VRouterTarget gets, from which referenced
//! objects, and the clear errors for every bad or missing piece.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use vrouter_api::{
    DaemonConfig, KubeVirtConfig, KubeconfigRef, NameRef, ProviderConfig, ProviderType, ProxmoxCluster,
    ProxmoxClusterSpec, ProxmoxConfig, SecretKeyRef, SecretReference, VRouterTarget, VRouterTargetSpec,
    VRouterTargetStatus,
};
use vrouter_providers::factory::{Plan, plan};
use vrouter_providers::kubevirt::KubeVirtOptions;
use vrouter_providers::{FactoryContext, ProviderError, StaticLookup, build_provider};
use vrouter_test_peers::kube::FakeKubeApi;
use vrouter_test_peers::proxmox::{FakeProxmox, SilentEndpoint};
use vrouter_test_peers::tls::self_signed_server_config;

const NS: &str = "site-a";

fn target(provider: ProviderConfig) -> VRouterTarget {
    let mut t = VRouterTarget::new("r1", VRouterTargetSpec { provider, params: None });
    t.metadata.namespace = Some(NS.into());
    t
}

fn kubevirt(name: &str, namespace: &str, kubeconfig: Option<(&str, &str)>) -> VRouterTarget {
    target(ProviderConfig {
        type_: ProviderType::KubeVirt,
        kubevirt: Some(KubeVirtConfig {
            name: name.into(),
            namespace: namespace.into(),
            kubeconfig: kubeconfig.map(|(name, key)| KubeconfigRef {
                secret_ref: SecretKeyRef {
                    name: name.into(),
                    key: key.into(),
                },
            }),
        }),
        ..Default::default()
    })
}

fn proxmox(cluster_ns: &str, node: &str) -> VRouterTarget {
    let mut t = target(ProviderConfig {
        type_: ProviderType::Proxmox,
        proxmox: Some(ProxmoxConfig {
            vmid: 100,
            cluster_ref: NameRef {
                namespace: cluster_ns.into(),
                name: "pve".into(),
            },
        }),
        ..Default::default()
    });
    t.status = Some(VRouterTargetStatus {
        proxmox_node: node.into(),
        ..Default::default()
    });
    t
}

fn secret(name: &str, data: &[(&str, &str)]) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NS.into()),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect::<BTreeMap<_, _>>(),
        ),
        ..Default::default()
    }
}

fn cluster(endpoints: &[&str]) -> ProxmoxCluster {
    let mut c = ProxmoxCluster::new(
        "pve",
        ProxmoxClusterSpec {
            endpoints: endpoints.iter().map(|e| e.to_string()).collect(),
            credentials_ref: SecretReference {
                name: "pve-token".into(),
            },
            insecure_skip_tls_verify: true,
            sync_interval: Default::default(),
            check_guest_uptime: true,
            ..Default::default()
        },
    );
    c.metadata.namespace = Some(NS.into());
    c
}

#[test]
fn plans_for_each_provider_type() {
    assert_eq!(
        plan(&kubevirt("vm1", "", None)).unwrap(),
        Plan::KubeVirt {
            vm: "vm1".into(),
            namespace: NS.into(),
            kubeconfig: None
        }
    );
    // An explicit VMI namespace is allowed: it locates a VM, not an object of ours.
    match plan(&kubevirt("vm1", "vms", Some(("remote", "config")))).unwrap() {
        Plan::KubeVirt {
            namespace, kubeconfig, ..
        } => {
            assert_eq!(namespace, "vms");
            let k = kubeconfig.unwrap();
            assert_eq!(
                (k.namespace.as_str(), k.name.as_str(), k.key.as_str()),
                (NS, "remote", "config")
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        plan(&proxmox("", "pve2")).unwrap(),
        Plan::Proxmox {
            vmid: 100,
            cluster_namespace: NS.into(),
            cluster_name: "pve".into(),
            cached_node: "pve2".into()
        }
    );
}

#[test]
fn bad_targets_are_named_errors() {
    let no_block = target(ProviderConfig {
        type_: ProviderType::Proxmox,
        ..Default::default()
    });
    let empty_daemon = target(ProviderConfig {
        type_: ProviderType::VRouterDaemon,
        daemon: Some(DaemonConfig {
            address: "d:1".into(),
            agent_id: " ".into(),
            timeout_seconds: 60,
            ca_bundle: None,
        }),
        ..Default::default()
    });
    let mut no_namespace = kubevirt("vm", "", None);
    no_namespace.metadata.namespace = None;
    let cases = [
        (
            no_block,
            "spec.provider.proxmox: must be set when spec.provider.type is proxmox",
        ),
        (kubevirt("", "", None), "spec.provider.kubevirt.name: must not be empty"),
        (
            kubevirt("vm", "", Some(("", "k"))),
            "spec.provider.kubevirt.kubeconfig.secretRef.name: must not be empty",
        ),
        (
            proxmox("other-tenant", ""),
            "spec.provider.proxmox.clusterRef.namespace: references namespace \"other-tenant\", but only this object's own namespace \"site-a\" is allowed",
        ),
        (empty_daemon, "spec.provider.daemon.agentID: must not be empty"),
        (no_namespace, "no namespace"),
    ];
    for (t, expected) in cases {
        let err = plan(&t).unwrap_err();
        assert!(matches!(err, ProviderError::InvalidTarget { .. }), "{err}");
        assert!(err.to_string().contains(expected), "{err} should mention {expected:?}");
    }
}

#[tokio::test]
async fn proxmox_needs_its_cluster_and_credentials() {
    let ctx = FactoryContext::default();
    let t = proxmox(NS, "pve1");
    let err = build_provider(&t, &StaticLookup::default(), &ctx).await.unwrap_err();
    assert!(
        matches!(
            err,
            ProviderError::ReferenceNotFound {
                kind: "ProxmoxCluster",
                ..
            }
        ),
        "{err}"
    );

    let lookup = StaticLookup {
        proxmox_clusters: vec![cluster(&["https://127.0.0.1:8006"])],
        secrets: vec![],
        ..Default::default()
    };
    let err = build_provider(&t, &lookup, &ctx).await.unwrap_err();
    assert!(err.to_string().contains("Secret site-a/pve-token"), "{err}");

    let lookup = StaticLookup {
        proxmox_clusters: vec![cluster(&["https://127.0.0.1:8006"])],
        secrets: vec![secret("pve-token", &[("api-token-id", "root@pam!op")])],
        ..Default::default()
    };
    let err = build_provider(&t, &lookup, &ctx).await.unwrap_err();
    assert!(err.to_string().contains("\"api-token-secret\""), "{err}");

    let lookup = StaticLookup {
        proxmox_clusters: vec![cluster(&["http://127.0.0.1:8006"])],
        secrets: vec![secret(
            "pve-token",
            &[("api-token-id", "root@pam!op"), ("api-token-secret", "s3cr3t")],
        )],
        ..Default::default()
    };
    let err = build_provider(&t, &lookup, &ctx).await.unwrap_err();
    assert!(err.to_string().contains("https://"), "{err}");
    assert!(!format!("{err} {err:?}").contains("s3cr3t"));

    let lookup = StaticLookup {
        proxmox_clusters: vec![cluster(&["https://127.0.0.1:8006"])],
        secrets: vec![secret(
            "pve-token",
            &[("api-token-id", "root@pam!op"), ("api-token-secret", " s3cr3t\n")],
        )],
        ..Default::default()
    };
    let provider = build_provider(&t, &lookup, &ctx).await.unwrap();
    assert_eq!(provider.kind(), ProviderType::Proxmox);
    assert!(!format!("{provider:?}").contains("s3cr3t"), "{provider:?}");
}

#[tokio::test]
async fn daemon_targets_get_the_daemon_provider() {
    let t = target(ProviderConfig {
        type_: ProviderType::VRouterDaemon,
        daemon: Some(DaemonConfig {
            address: "127.0.0.1:50052".into(),
            agent_id: "router-a".into(),
            timeout_seconds: 60,
            ca_bundle: None,
        }),
        ..Default::default()
    });
    let namespace = |grant: &str| k8s_openapi::api::core::v1::Namespace {
        metadata: ObjectMeta {
            name: Some(NS.into()),
            annotations: Some(BTreeMap::from([(
                vrouter_api::daemon_access::ANNOTATION_ALLOWED_DAEMON_AGENTS.to_owned(),
                grant.to_owned(),
            )])),
            ..Default::default()
        },
        ..Default::default()
    };
    let granted = StaticLookup {
        namespaces: vec![namespace("127.0.0.1:50052/router-*")],
        ..Default::default()
    };
    let p = build_provider(&t, &granted, &FactoryContext::default()).await.unwrap();
    assert_eq!(p.kind(), ProviderType::VRouterDaemon);

    // Without the grant on the target's Namespace, no provider.
    for lookup in [
        StaticLookup::default(),
        StaticLookup {
            namespaces: vec![namespace("127.0.0.1:50052/router-b")],
            ..Default::default()
        },
    ] {
        let err = build_provider(&t, &lookup, &FactoryContext::default())
            .await
            .unwrap_err();
        assert!(matches!(err, ProviderError::DaemonAccessDenied { .. }), "{err}");
        assert!(
            err.to_string()
                .contains("\"router-a\" of the vrouter-daemon at \"127.0.0.1:50052\""),
            "{err}"
        );
    }
}

fn kubeconfig_yaml(server: &str, user: &str) -> String {
    kubeconfig_yaml_with(server, "", user)
}

/// `cluster` adds fields to the cluster entry, indented by four spaces.
fn kubeconfig_yaml_with(server: &str, cluster: &str, user: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: remote\nclusters:\n- name: remote\n  cluster:\n    server: {server}\n{cluster}\
         contexts:\n- name: remote\n  context:\n    cluster: remote\n    user: remote\nusers:\n- name: remote\n  user:\n{user}"
    )
}

/// `https://127.0.0.1:<port>` with a fresh self-signed certificate, relaying
/// each connection to a plain-http server on loopback (the fake API speaks
/// http; a remote kubeconfig must say https). Stops when dropped.
struct TlsFront {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl TlsFront {
    async fn start(backend_url: &str) -> Self {
        let backend = backend_url
            .strip_prefix("http://")
            .expect("the backend speaks plain http")
            .to_string();
        let acceptor = TlsAcceptor::from(self_signed_server_config());
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a loopback port");
        let addr = listener.local_addr().expect("local address");
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, backend) = (acceptor.clone(), backend.clone());
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let Ok(mut plain) = TcpStream::connect(&backend).await else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                });
            }
        });
        TlsFront { addr, task }
    }

    fn url(&self) -> String {
        format!("https://{}", self.addr)
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The certificate is self-signed, so the kubeconfig skips its check; that
/// stays allowed (docs/security.md), plain http does not.
const SKIP_VERIFY: &str = "    insecure-skip-tls-verify: true\n";

#[tokio::test]
async fn kubevirt_in_a_remote_cluster_uses_the_kubeconfig_secret() {
    let api = FakeKubeApi::start().await;
    api.put_vmi(NS, "vm1", "uid-1", "Running", "node-a");
    let front = TlsFront::start(&api.url()).await;
    let t = kubevirt("vm1", "", Some(("remote", "kubeconfig")));
    let lookup = StaticLookup {
        secrets: vec![secret(
            "remote",
            &[(
                "kubeconfig",
                &kubeconfig_yaml_with(&front.url(), SKIP_VERIFY, "    token: remote-token\n"),
            )],
        )],
        ..Default::default()
    };
    // No local client: the VMI can only be found through the kubeconfig.
    let p = build_provider(&t, &lookup, &FactoryContext::default()).await.unwrap();
    assert_eq!(p.kind(), ProviderType::KubeVirt);
    assert!(p.is_vm_running().await.unwrap());

    // The same API over plain http: refused before any request is sent.
    let plain = StaticLookup {
        secrets: vec![secret(
            "remote",
            &[("kubeconfig", &kubeconfig_yaml(&api.url(), "    token: remote-token\n"))],
        )],
        ..Default::default()
    };
    let err = build_provider(&t, &plain, &FactoryContext::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ProviderError::InvalidTarget { target, reason }
            if target.contains("Secret site-a/remote key \"kubeconfig\"") && reason.contains("uses http://")),
        "{err:?}"
    );
    assert!(!format!("{err} {err:?}").contains("remote-token"), "{err:?}");

    let err = build_provider(&kubevirt("vm1", "", None), &lookup, &FactoryContext::default())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no Kubernetes client"), "{err}");

    let err = build_provider(
        &kubevirt("vm1", "", Some(("absent", "kubeconfig"))),
        &lookup,
        &FactoryContext::default(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, ProviderError::ReferenceNotFound { kind: "Secret", .. }),
        "{err}"
    );
}

#[tokio::test]
async fn kubeconfigs_that_run_programs_or_read_files_are_refused() {
    let cases = [
        (
            "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/sh\n",
            "exec credential plugin",
        ),
        (
            "    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token\n",
            "tokenFile",
        ),
        (
            "    client-certificate: /etc/cert.pem\n    client-key: /etc/key.pem\n",
            "client-certificate",
        ),
    ];
    for (user, expected) in cases {
        let lookup = StaticLookup {
            secrets: vec![secret(
                "remote",
                &[("kubeconfig", &kubeconfig_yaml("https://127.0.0.1:6443", user))],
            )],
            ..Default::default()
        };
        let err = build_provider(
            &kubevirt("vm1", "", Some(("remote", "kubeconfig"))),
            &lookup,
            &FactoryContext::default(),
        )
        .await
        .unwrap_err();
        assert!(err.to_string().contains(expected), "{err} should mention {expected}");
    }
    let lookup = StaticLookup {
        secrets: vec![secret("remote", &[("kubeconfig", "token: [unclosed sup3r-secret")])],
        ..Default::default()
    };
    let err = build_provider(
        &kubevirt("vm1", "", Some(("remote", "kubeconfig"))),
        &lookup,
        &FactoryContext::default(),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("not a kubeconfig"), "{err}");
    assert!(!format!("{err} {err:?}").contains("sup3r-secret"), "{err:?}");
}

fn short_api_bound() -> FactoryContext {
    FactoryContext {
        kubevirt: KubeVirtOptions {
            api_timeout: Duration::from_millis(300),
            ..KubeVirtOptions::default()
        },
        ..FactoryContext::default()
    }
}

/// A remote API server that accepts the connection and never answers (the
/// TLS handshake hangs): kube-client has no read timeout, so only the
/// provider's own bound ends the call.
#[tokio::test]
async fn a_remote_api_server_that_never_answers_times_out() {
    let silent = SilentEndpoint::start().await;
    let lookup = StaticLookup {
        secrets: vec![secret(
            "remote",
            &[(
                "kubeconfig",
                &kubeconfig_yaml(&silent.url(), "    token: remote-token\n"),
            )],
        )],
        ..Default::default()
    };
    let t = kubevirt("vm1", "", Some(("remote", "kubeconfig")));
    let p = build_provider(&t, &lookup, &short_api_bound()).await.unwrap();

    let err = p.is_vm_running().await.unwrap_err();
    assert!(
        matches!(&err, ProviderError::Timeout { operation, after }
            if operation == "Kubernetes API call get VirtualMachineInstance site-a/vm1"
                && *after == Duration::from_millis(300)),
        "{err:?}"
    );
    // The agent is found through the same call first.
    let err = p.check_ready().await.unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
    assert!(!format!("{err} {err:?}").contains("remote-token"), "{err:?}");
}

/// An https API server that answers the VMI read and never answers the pod
/// list, so the list's own bound is what ends the call.
async fn stalls_on_the_pod_list() -> (SocketAddr, JoinHandle<()>) {
    let acceptor = TlsAcceptor::from(self_signed_server_config());
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a loopback port");
    let addr = listener.local_addr().expect("local address");
    let task = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else { return };
                let service = service_fn(|req: Request<Incoming>| async move {
                    if !req.uri().path().contains("/virtualmachineinstances/") {
                        std::future::pending::<()>().await;
                    }
                    let vmi = serde_json::json!({
                        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                        "metadata": {"name": "vm1", "namespace": NS, "uid": "uid-1"},
                        "status": {"phase": "Running", "nodeName": "node-a"},
                    });
                    Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from(vmi.to_string()))))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    (addr, task)
}

#[tokio::test]
async fn a_pod_list_that_never_answers_times_out() {
    let (addr, server) = stalls_on_the_pod_list().await;
    let lookup = StaticLookup {
        secrets: vec![secret(
            "remote",
            &[(
                "kubeconfig",
                &kubeconfig_yaml_with(&format!("https://{addr}"), SKIP_VERIFY, "    token: remote-token\n"),
            )],
        )],
        ..Default::default()
    };
    let t = kubevirt("vm1", "", Some(("remote", "kubeconfig")));
    let p = build_provider(&t, &lookup, &short_api_bound()).await.unwrap();
    assert!(p.is_vm_running().await.unwrap(), "the VMI read is answered");
    let err = p.check_ready().await.unwrap_err();
    assert!(
        matches!(&err, ProviderError::Timeout { operation, .. }
            if operation == "Kubernetes API call list virt-launcher pods of VirtualMachineInstance site-a/vm1"),
        "{err:?}"
    );
    server.abort();
}

/// A VM in another namespace of this cluster is reached only when that
/// namespace lists the target's namespace; the refusal says how to grant it.
#[tokio::test]
async fn a_vm_in_another_namespace_needs_that_namespace_s_consent() {
    use vrouter_api::vm_access::ANNOTATION_ALLOWED_TARGET_NAMESPACES;
    let client = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap();
    let ctx = FactoryContext {
        client: Some(client),
        ..FactoryContext::default()
    };
    let target = kubevirt("vm1", "vms", None);
    let namespace = |annotation: Option<&str>| -> k8s_openapi::api::core::v1::Namespace {
        serde_json::from_value(serde_json::json!({"metadata": {
            "name": "vms",
            "annotations": annotation.map(|v| serde_json::json!({ANNOTATION_ALLOWED_TARGET_NAMESPACES: v})),
        }}))
        .unwrap()
    };
    for (namespaces, why) in [
        (vec![], "does not exist"),
        (vec![namespace(None)], "kubectl annotate namespace vms --overwrite"),
        (vec![namespace(Some("other,site-b"))], "=other,site-b,site-a"),
    ] {
        let lookup = StaticLookup {
            namespaces,
            ..Default::default()
        };
        let err = build_provider(&target, &lookup, &ctx).await.unwrap_err();
        assert!(matches!(err, ProviderError::VmAccessDenied { .. }), "{err}");
        assert!(err.to_string().contains(why), "{err}");
    }
    let lookup = StaticLookup {
        namespaces: vec![namespace(Some("other, site-a"))],
        ..Default::default()
    };
    let provider = build_provider(&target, &lookup, &ctx).await.unwrap();
    assert_eq!(provider.kind(), ProviderType::KubeVirt);
    // The target's own namespace needs no grant, and no Namespace is read.
    let own = kubevirt("vm1", "site-a", None);
    build_provider(&own, &StaticLookup::default(), &ctx).await.unwrap();
}

/// The factory keeps one Proxmox client per cluster across the providers it
/// builds (one TLS handshake for all), and what the next provider is built
/// from reaches its very next request: a rotated token in the Secret, a
/// changed endpoint list, TLS verification turned on.
#[tokio::test]
async fn providers_share_the_cluster_s_connection_until_its_token_or_endpoints_change() {
    let mut pve = FakeProxmox::start("root@pam!op", "first-secret").await;
    let second = pve.add_endpoint().await;
    pve.add_vm(100, "pve1", "/nonexistent/agent.sock".into());
    let ctx = FactoryContext::default();
    let t = proxmox(NS, "pve1");
    let lookup = |endpoints: &[&str], token_secret: &str, insecure: bool| {
        let mut c = cluster(endpoints);
        c.spec.insecure_skip_tls_verify = insecure;
        StaticLookup {
            proxmox_clusters: vec![c],
            secrets: vec![secret(
                "pve-token",
                &[("api-token-id", "root@pam!op"), ("api-token-secret", token_secret)],
            )],
            ..Default::default()
        }
    };
    let first = pve.url(0);

    for reconcile in 0..3 {
        let provider = build_provider(&t, &lookup(&[&first], "first-secret", true), &ctx)
            .await
            .unwrap();
        assert!(provider.is_vm_running().await.unwrap(), "reconcile {reconcile}");
    }
    assert_eq!(pve.tls_handshakes(), 1, "three providers, one connection");

    pve.set_token("root@pam!op", "rotated-secret");
    let provider = build_provider(&t, &lookup(&[&first], "rotated-secret", true), &ctx)
        .await
        .unwrap();
    assert!(
        provider.is_vm_running().await.unwrap(),
        "the rotated token is the one sent"
    );
    assert!(pve.seen().last().unwrap().authorized);
    assert_eq!(pve.tls_handshakes(), 2, "a new client for the new token");

    let provider = build_provider(&t, &lookup(&[&second], "rotated-secret", true), &ctx)
        .await
        .unwrap();
    assert!(provider.is_vm_running().await.unwrap());
    assert_eq!(
        pve.seen().last().unwrap().endpoint,
        1,
        "the changed endpoint is the one asked"
    );

    let provider = build_provider(&t, &lookup(&[&second], "rotated-secret", false), &ctx)
        .await
        .unwrap();
    let err = provider.is_vm_running().await.unwrap_err();
    assert!(matches!(err, ProviderError::CertificateNotTrusted { .. }), "{err}");

    // A Proxmox API that stops takes the connections kept open with it.
    let kept = build_provider(&t, &lookup(&[&second], "rotated-secret", true), &ctx)
        .await
        .unwrap();
    assert!(kept.is_vm_running().await.unwrap());
    drop(pve);
    let err = kept.is_vm_running().await.unwrap_err();
    assert!(matches!(err, ProviderError::Unreachable { .. }), "{err}");
}
