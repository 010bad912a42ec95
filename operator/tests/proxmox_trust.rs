//! Proxmox trust per ProxmoxCluster, over real TLS to the in-test Proxmox
//! API on loopback: a CA bundle from a Secret is the cluster's only roots,
//! and a pinned SHA-256 fingerprint is the certificate the cluster must
//! present. A refused certificate shows in the ProxmoxCluster's Synced
//! condition and in the status of the config that uses it, naming the
//! fingerprints, and no request (so no token) reaches the server.

mod common;

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use vrouter_api::{Phase, ProxmoxCluster, VRouterConfig};
use vrouter_test_apiserver::TestNamespace;
use vrouter_test_peers::tls::ServerIdentity;

use common::{Site, config_phase, create, site_with_cluster, start_fake_proxmox, wait_for};

/// The token secret `common` puts in the cluster's credentials Secret.
const TOKEN_SECRET: &str = "0b7c6f0e-test-only";

/// Long enough for a reconcile that waits out the "target unavailable"
/// retry (30 s) after the cluster's settings are fixed.
const APPLY_LIMIT: Duration = Duration::from_secs(120);

fn synced(cluster: &ProxmoxCluster) -> Option<(String, String, String)> {
    let c = cluster
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Synced")?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Waits for the cluster's Synced condition to be `status`/`reason` for the
/// current generation; returns its message (never holding the token).
async fn synced_as(ns: &TestNamespace, status: &str, reason: &str) -> String {
    let clusters = ns.api::<ProxmoxCluster>();
    let (_, _, message) = wait_for(
        &format!("Synced={status}/{reason}"),
        Duration::from_secs(60),
        || async {
            let pve = clusters.get("pve").await.ok()?;
            let current = pve.status.as_ref()?.observed_generation == pve.metadata.generation;
            synced(&pve).filter(|(s, r, _)| current && s == status && r == reason)
        },
    )
    .await;
    assert!(!message.contains(TOKEN_SECRET), "the token leaked: {message}");
    message
}

async fn patch_cluster(ns: &TestNamespace, spec: Value) {
    ns.api::<ProxmoxCluster>()
        .patch("pve", &PatchParams::default(), &Patch::Merge(json!({"spec": spec})))
        .await
        .unwrap();
}

async fn create_config(ns: &TestNamespace) {
    create::<VRouterConfig>(
        ns,
        json!({"metadata": {"name": "direct"}, "spec": {"targetRef": {"name": "r1"}, "commands": "set system host-name r1\n"}}),
    )
    .await;
}

/// Waits for the config's status message to contain every one of `words`.
async fn config_says(ns: &TestNamespace, words: &[&str]) -> String {
    let configs = ns.api::<VRouterConfig>();
    let message = wait_for("the config to name the refusal", Duration::from_secs(60), || async {
        let (_, _, message) = config_phase(&configs, "direct").await?;
        words.iter().all(|w| message.contains(w)).then_some(message)
    })
    .await;
    assert!(!message.contains(TOKEN_SECRET), "the token leaked: {message}");
    message
}

async fn applied(ns: &TestNamespace) {
    let configs = ns.api::<VRouterConfig>();
    let (phase, _, message) = wait_for("the config to be Applied", APPLY_LIMIT, || async {
        config_phase(&configs, "direct")
            .await
            .filter(|(p, _, _)| *p == Phase::Applied)
    })
    .await;
    assert_eq!(phase, Phase::Applied, "{message}");
}

/// No request of any kind reached the Proxmox API: every certificate was
/// refused in the handshake, before the token could be written.
fn nothing_sent(site: &Site) {
    let seen = site.pve.seen();
    assert!(
        seen.is_empty(),
        "requests reached the server past a refused certificate: {seen:?}"
    );
}

async fn add_secret(ns: &TestNamespace, name: &str, data: Value) {
    let secret: Secret = serde_json::from_value(json!({"metadata": {"name": name}, "stringData": data})).unwrap();
    ns.api::<Secret>()
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_ca_bundle_from_a_secret_is_the_clusters_only_trust() {
    let identity = ServerIdentity::issued_by_ca();
    let ca_pem = identity.ca_pem.clone().expect("a CA-issued identity has its CA");
    let leaf = identity.sha256_fingerprint();
    let pve = start_fake_proxmox(identity).await;
    let site = site_with_cluster("pxc-ca", &["r1"], pve, json!({"insecureSkipTLSVerify": false})).await;
    let ns = &site.ns;
    create_config(ns).await;

    // No bundle: the system roots, which do not know the cluster's CA.
    let message = synced_as(ns, "False", "CertificateNotTrusted").await;
    for words in [leaf.as_str(), "system roots", "UnknownIssuer"] {
        assert!(message.contains(words), "{words:?} not in: {message}");
    }
    config_says(ns, &["trusted certificate", &leaf]).await;
    nothing_sent(&site);

    // A bundle whose Secret lacks the key, then one that is not PEM: each
    // named in the status, still nothing sent.
    add_secret(
        ns,
        "pve-ca",
        json!({"ca.crt": ca_pem, "notes.txt": "not a certificate"}),
    )
    .await;
    patch_cluster(
        ns,
        json!({"caBundle": {"secretRef": {"name": "pve-ca", "key": "pve-root-ca.pem"}}}),
    )
    .await;
    let message = synced_as(ns, "False", "InvalidTLSConfig").await;
    assert!(message.contains("has no key \"pve-root-ca.pem\""), "{message}");
    patch_cluster(
        ns,
        json!({"caBundle": {"secretRef": {"name": "pve-ca", "key": "notes.txt"}}}),
    )
    .await;
    let message = synced_as(ns, "False", "InvalidTLSConfig").await;
    assert!(message.contains("holds no PEM certificate"), "{message}");
    nothing_sent(&site);

    // The cluster's CA from the Secret: it syncs, and the config applies.
    patch_cluster(
        ns,
        json!({"caBundle": {"secretRef": {"name": "pve-ca", "key": "ca.crt"}}}),
    )
    .await;
    synced_as(ns, "True", "SyncSucceeded").await;
    applied(ns).await;
    assert!(
        site.pve.seen().iter().all(|s| s.authorized),
        "every request carried the right token"
    );
}

#[tokio::test]
async fn a_pinned_fingerprint_is_the_only_certificate_accepted() {
    let identity = ServerIdentity::self_signed();
    let seen = identity.sha256_fingerprint();
    let wrong = ServerIdentity::self_signed().sha256_fingerprint();
    let pve = start_fake_proxmox(identity).await;
    let site = site_with_cluster(
        "pxc-pin",
        &["r1"],
        pve,
        json!({"insecureSkipTLSVerify": false, "certificateFingerprints": [wrong]}),
    )
    .await;
    let ns = &site.ns;
    create_config(ns).await;

    // The wrong pin: refused, naming the certificate seen and the pin.
    let message = synced_as(ns, "False", "CertificateNotTrusted").await;
    for words in [seen.as_str(), wrong.as_str(), "not in spec.certificateFingerprints"] {
        assert!(message.contains(words), "{words:?} not in: {message}");
    }
    config_says(ns, &[&seen, &wrong]).await;
    nothing_sent(&site);

    // The right pin, as plain lower-case hex: the self-signed certificate
    // is trusted as it is.
    let plain = seen.replace(':', "").to_lowercase();
    patch_cluster(ns, json!({"certificateFingerprints": [plain]})).await;
    synced_as(ns, "True", "SyncSucceeded").await;
    applied(ns).await;
}
