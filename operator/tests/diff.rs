//! `vrouter-operator diff` (and `kubectl vrouter diff`) against a real API
//! server whose controllers applied the same manifests to a router: no
//! change exits 0; a param change shows exactly the lines it changes; secret
//! values never appear.

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::{Value, json};
use vrouter_api::{Phase, VRouterBinding, VRouterTemplate};
use vrouter_operator::cli::diff::{EXIT_DIFFERS, EXIT_ERROR, EXIT_SAME};
use vrouter_operator::runtime::context::Settings;
use vrouter_test_apiserver::TestEnv;

use common::{create, final_phase, site};

fn template(ns: &str) -> Value {
    json!({"apiVersion": "vrouter.kojuro.date/v1", "kind": "VRouterTemplate",
        "metadata": {"name": "base", "namespace": ns},
        "spec": {"commands": "set system host-name {{ hostName }}\nset system ntp server {{ ntp }}\nset system login user vyos authentication plaintext-password {{ pw }}\n"}})
}

fn binding(ns: &str, ntp: &str, pw: &str) -> Value {
    json!({"apiVersion": "vrouter.kojuro.date/v1", "kind": "VRouterBinding",
        "metadata": {"name": "b", "namespace": ns},
        "spec": {"templateRefs": [{"name": "base"}], "targetRefs": [{"name": "r1"}], "params": {"ntp": ntp, "pw": pw}}})
}

/// The target as `common::site` created it.
fn target(ns: &str) -> Value {
    json!({"apiVersion": "vrouter.kojuro.date/v1", "kind": "VRouterTarget",
        "metadata": {"name": "r1", "namespace": ns},
        "spec": {"provider": {"type": "proxmox", "proxmox": {"vmid": 100, "clusterRef": {"name": "pve"}}},
                 "params": {"hostName": "r1", "asn": 4_200_000_000u64}}})
}

fn write_manifests(dir: &Path, objects: &[Value]) {
    let text: Vec<String> = objects.iter().map(|o| serde_yaml::to_string(o).unwrap()).collect();
    std::fs::write(dir.join("site.yaml"), text.join("---\n")).unwrap();
}

fn run(program: &Path, args: &[&str], dir: &Path, kubeconfig: &Path) -> Output {
    Command::new(program)
        .args(args)
        .arg(dir)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .unwrap()
}

/// The `-`/`+` lines of a unified diff, headers left out.
fn changed_lines(diff: &str) -> Vec<&str> {
    diff.lines()
        .filter(|l| (l.starts_with('-') && !l.starts_with("---")) || (l.starts_with('+') && !l.starts_with("+++")))
        .collect()
}

#[tokio::test]
async fn diff_shows_exactly_what_a_param_change_would_change_and_masks_secrets() {
    let site = site("diff", &["r1"], Settings::default()).await;
    let ns = site.ns.name().to_owned();
    create::<VRouterTemplate>(&site.ns, template(&ns)).await;
    create::<VRouterBinding>(&site.ns, binding(&ns, "192.0.2.1", "s3cret-one")).await;
    let configs = site.ns.api::<vrouter_api::VRouterConfig>();
    let (phase, _, message) = final_phase(&configs, "b.r1", Duration::from_secs(60)).await;
    assert_eq!(phase, Phase::Applied, "{message}");

    let kubeconfig = TestEnv::shared().await.kubeconfig_path().to_owned();
    let binary = Path::new(env!("CARGO_BIN_EXE_vrouter-operator"));
    let dir = tempfile::tempdir().unwrap();

    // The manifests the cluster holds: nothing to change.
    write_manifests(
        dir.path(),
        &[template(&ns), target(&ns), binding(&ns, "192.0.2.1", "s3cret-one")],
    );
    let same = run(binary, &["diff"], dir.path(), &kubeconfig);
    let stderr = String::from_utf8_lossy(&same.stderr);
    assert_eq!(same.status.code(), Some(EXIT_SAME), "{stderr}");
    assert!(same.stdout.is_empty(), "{}", String::from_utf8_lossy(&same.stdout));

    // A new NTP server and a new password: those two lines, the password masked.
    write_manifests(
        dir.path(),
        &[template(&ns), target(&ns), binding(&ns, "192.0.2.2", "s3cret-two")],
    );
    let changed = run(binary, &["diff"], dir.path(), &kubeconfig);
    let stdout = String::from_utf8(changed.stdout.clone()).unwrap();
    assert_eq!(
        changed.status.code(),
        Some(EXIT_DIFFERS),
        "{stdout}{}",
        String::from_utf8_lossy(&changed.stderr)
    );
    assert_eq!(
        changed_lines(&stdout),
        [
            "-set system ntp server 192.0.2.1",
            "-set system login user vyos authentication plaintext-password <masked#1>",
            "+set system ntp server 192.0.2.2",
            "+set system login user vyos authentication plaintext-password <masked#2>",
        ],
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("--- {ns}/b.r1 commands (cluster)")),
        "{stdout}"
    );
    assert!(!stdout.contains("s3cret"), "a secret in the output: {stdout}");

    // Nothing was written: the cluster's config is as the controllers left it.
    let live = configs.get("b.r1").await.unwrap();
    assert!(live.spec.commands.contains("192.0.2.1"));

    // The same through kubectl's plugin name; bare, it does not start an operator.
    let plugin_dir = tempfile::tempdir().unwrap();
    let plugin = plugin_dir.path().join("kubectl-vrouter");
    std::os::unix::fs::symlink(binary, &plugin).unwrap();
    let through_kubectl = run(&plugin, &["diff"], dir.path(), &kubeconfig);
    assert_eq!(through_kubectl.status.code(), Some(EXIT_DIFFERS));
    assert_eq!(through_kubectl.stdout, changed.stdout);
    let bare = Command::new(&plugin).env("KUBECONFIG", &kubeconfig).output().unwrap();
    assert_eq!(bare.status.code(), Some(EXIT_ERROR));
    assert!(String::from_utf8_lossy(&bare.stderr).contains("usage: kubectl vrouter"));

    // Manifests that do not render: 2, naming the problem.
    write_manifests(dir.path(), &[template(&ns), binding(&ns, "192.0.2.2", "x")]);
    let invalid = run(binary, &["diff"], dir.path(), &kubeconfig);
    assert_eq!(invalid.status.code(), Some(EXIT_ERROR));
    assert!(String::from_utf8_lossy(&invalid.stderr).contains("VRouterTarget \"r1\" is not among the given manifests"));
}

/// A template of config.boot only: what `load` puts on the router is all of it.
fn boot_template(ns: &str) -> Value {
    json!({"apiVersion": "vrouter.kojuro.date/v1", "kind": "VRouterTemplate",
        "metadata": {"name": "boot", "namespace": ns},
        "spec": {"config": "system {\n    host-name {{ hostName }}\n    ntp {\n        server {{ ntp }}\n    }\n    login {\n        user vyos {\n            authentication {\n                plaintext-password {{ pw }}\n            }\n        }\n    }\n}\n"}})
}

/// The `-`/`+` lines of each file of a unified diff, by its `---` header.
fn changed_lines_by_file(diff: &str) -> Vec<(String, Vec<&str>)> {
    let mut out: Vec<(String, Vec<&str>)> = Vec::new();
    for line in diff.lines() {
        if let Some(header) = line.strip_prefix("--- ") {
            out.push((header.to_owned(), Vec::new()));
        } else if let Some((_, lines)) = out.last_mut()
            && !line.starts_with("+++")
            && (line.starts_with('-') || line.starts_with('+'))
        {
            lines.push(line);
        }
    }
    out
}

#[tokio::test]
async fn diff_of_a_live_binding_compares_with_the_cluster_and_the_router_and_masks_secrets() {
    let site = site("diff-live", &["r1"], Settings::default()).await;
    let ns = site.ns.name().to_owned();
    create::<VRouterTemplate>(&site.ns, boot_template(&ns)).await;
    let mut bound = binding(&ns, "192.0.2.1", "s3cret-one");
    bound["spec"]["templateRefs"] = json!([{"name": "boot"}]);
    create::<VRouterBinding>(&site.ns, bound).await;
    let configs = site.ns.api::<vrouter_api::VRouterConfig>();
    let (phase, _, message) = final_phase(&configs, "b.r1", Duration::from_secs(60)).await;
    assert_eq!(phase, Phase::Applied, "{message}");
    // Drift detection reads the router once after the apply, into its Secret.
    let secrets = site.ns.api::<k8s_openapi::api::core::v1::Secret>();
    let secret_name = vrouter_api::VRouterStatus::config_secret_name_of("b.r1");
    common::wait_for(
        "the router's config in its drift Secret",
        Duration::from_secs(60),
        || async {
            let secret = secrets.get_opt(&secret_name).await.ok()??;
            let running = secret.data?.get("running")?.0.clone();
            String::from_utf8_lossy(&running).contains("192.0.2.1").then_some(())
        },
    )
    .await;

    let kubeconfig = TestEnv::shared().await.kubeconfig_path().to_owned();
    let binary = Path::new(env!("CARGO_BIN_EXE_vrouter-operator"));
    let live = |program: &Path, name: &str| {
        Command::new(program)
            .args(["diff", "--binding", &format!("{ns}/{name}")])
            .env("KUBECONFIG", &kubeconfig)
            .output()
            .unwrap()
    };

    // As applied: nothing differs, from the cluster or on the router.
    let same = live(binary, "b");
    assert_eq!(
        same.status.code(),
        Some(EXIT_SAME),
        "{}{}",
        String::from_utf8_lossy(&same.stdout),
        String::from_utf8_lossy(&same.stderr)
    );
    assert!(same.stdout.is_empty(), "{}", String::from_utf8_lossy(&same.stdout));

    // With the controllers stopped, the binding's params change in the
    // cluster: the diff shows what the next apply would change, exactly
    // those lines, in the config the cluster holds and on the router.
    site.stop.send(true).unwrap();
    site.ns
        .api::<VRouterBinding>()
        .patch(
            "b",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"params": {"ntp": "192.0.2.2", "pw": "s3cret-two"}}})),
        )
        .await
        .unwrap();
    let changed = live(binary, "b");
    let stdout = String::from_utf8(changed.stdout.clone()).unwrap();
    assert_eq!(
        changed.status.code(),
        Some(EXIT_DIFFERS),
        "{stdout}{}",
        String::from_utf8_lossy(&changed.stderr)
    );
    let expected = [
        "-        server 192.0.2.1",
        "+        server 192.0.2.2",
        "-                plaintext-password <masked#1>",
        "+                plaintext-password <masked#2>",
    ];
    let files = changed_lines_by_file(&stdout);
    let headers: Vec<&str> = files.iter().map(|(h, _)| h.as_str()).collect();
    assert_eq!(
        headers,
        [
            format!("{ns}/b.r1 config (cluster)"),
            format!("{ns}/b.r1 config.boot (router's running config, read by drift detection)"),
        ],
        "{stdout}"
    );
    // The router's side is compared as VyOS reads it: children in VyOS's
    // order, so `login` comes before `ntp` there.
    let router_order = [expected[2], expected[3], expected[0], expected[1]];
    assert_eq!(files[0].1, expected, "{}:\n{stdout}", files[0].0);
    assert_eq!(files[1].1, router_order, "{}:\n{stdout}", files[1].0);
    assert!(
        stdout.contains(&format!("+++ {ns}/b.r1 config (binding b, rendered from the cluster)")),
        "{stdout}"
    );
    assert!(!stdout.contains("s3cret"), "a secret in the output: {stdout}");

    // The same through kubectl's plugin name.
    let plugin_dir = tempfile::tempdir().unwrap();
    let plugin = plugin_dir.path().join("kubectl-vrouter");
    std::os::unix::fs::symlink(binary, &plugin).unwrap();
    let through_kubectl = live(&plugin, "b");
    assert_eq!(through_kubectl.status.code(), Some(EXIT_DIFFERS));
    assert_eq!(through_kubectl.stdout, changed.stdout);

    // Without the drift Secret, the router holds what was last applied.
    secrets.delete(&secret_name, &Default::default()).await.unwrap();
    let from_applied = live(binary, "b");
    let stdout = String::from_utf8(from_applied.stdout).unwrap();
    assert_eq!(from_applied.status.code(), Some(EXIT_DIFFERS), "{stdout}");
    let files = changed_lines_by_file(&stdout);
    assert_eq!(files[1].0, format!("{ns}/b.r1 config.boot (last applied)"), "{stdout}");
    assert_eq!(files[1].1, router_order, "{stdout}");
    assert!(!stdout.contains("s3cret"), "a secret in the output: {stdout}");

    // Nothing was written, and a binding that is not there is an error.
    let live_config = configs.get("b.r1").await.unwrap();
    assert!(live_config.spec.config.contains("192.0.2.1"));
    let missing = live(binary, "nope");
    assert_eq!(missing.status.code(), Some(EXIT_ERROR));
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(
        stderr.contains(&format!("VRouterBinding {ns}/nope not found")),
        "{stderr}"
    );
}

#[test]
fn a_config_not_in_the_cluster_is_shown_whole() {
    let desired: vrouter_api::VRouterConfig = serde_json::from_value(json!({
        "apiVersion": "vrouter.kojuro.date/v1", "kind": "VRouterConfig",
        "metadata": {"name": "new", "namespace": "net"},
        "spec": {"targetRef": {"name": "r9"}, "commands": "set system host-name r9\n"}}))
    .unwrap();
    let text = vrouter_operator::cli::diff::diff_config(&desired, &Default::default()).expect("a new config differs");
    assert_eq!(
        changed_lines(&text),
        ["+r9", "+true", "+set system host-name r9"],
        "{text}"
    );
    assert!(text.contains("--- net/new commands (not in the cluster)"), "{text}");
}

#[test]
fn the_router_side_ignores_layout_skips_commands_only_configs_and_masks_secrets() {
    let desired = |config: &str| -> vrouter_api::VRouterConfig {
        serde_json::from_value(json!({
            "apiVersion": "vrouter.kojuro.date/v1", "kind": "VRouterConfig",
            "metadata": {"name": "b.r1", "namespace": "net"},
            "spec": {"targetRef": {"name": "r1"}, "config": config, "commands": "set system host-name r1\n"}}))
        .unwrap()
    };
    let router = |text: &str| vrouter_operator::cli::diff::RouterConfig {
        text: text.to_owned(),
        source: "router".to_owned(),
    };
    let rendered = "system {\n    login {\n        user vyos {\n            authentication {\n                plaintext-password s3cret\n            }\n        }\n    }\n}\n";
    // The same tree as VyOS saves it: other layout, a `//` comment, quotes.
    // (A `/* */` comment with no node after it is a syntax error to VyOS.)
    let saved = "system {\n  login {\n    user \"vyos\" {\n      authentication {\n        plaintext-password \"s3cret\"\n      }\n    }\n  }\n}\n// vyos-config-version: \"system@27\"\n";
    let diff_router = vrouter_operator::cli::diff::diff_router_config;
    assert_eq!(diff_router(&desired(rendered), &router(saved)), None);
    // Commands only: `load` resets the router to a default only it knows.
    assert_eq!(diff_router(&desired(""), &router(saved)), None);
    let changed = saved.replace("s3cret", "0ther");
    let text = diff_router(&desired(rendered), &router(&changed)).expect("a changed password differs");
    assert_eq!(
        changed_lines(&text),
        [
            "-                plaintext-password <masked#1>",
            "+                plaintext-password <masked#2>"
        ],
        "{text}"
    );
    assert!(!text.contains("s3cret") && !text.contains("0ther"), "{text}");
    assert!(
        text.starts_with("--- net/b.r1 config.boot (router)\n+++ net/b.r1 config.boot (rendered)\n"),
        "{text}"
    );
}

/// A Secret's value, in the manifests given to `render` and `diff`, that
/// must never be printed.
const SECRET_VALUE: &str = "v4lue-of-the-secret";

fn secret_param_manifests(ns: &str) -> Vec<Value> {
    let mut binding = binding(ns, "192.0.2.1", "unused");
    binding["spec"]["params"]["pw"] = json!({"secretKeyRef": {"name": "db", "key": "password"}});
    binding["spec"]["params"]["note"] = json!({"secretKeyRef": {"name": "db", "key": "note"}});
    let mut template = template(ns);
    template["spec"]["commands"] = json!(
        "set system login user vyos authentication plaintext-password {{ pw }}\nset system ntp server {{ ntp }}\nset interfaces ethernet eth0 description {{ note }}\n"
    );
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db", "namespace": ns},
        "stringData": {"password": SECRET_VALUE, "note": SECRET_VALUE}});
    vec![secret, template, target(ns), binding]
}

fn assert_no_secret_value(output: &str) {
    use base64::Engine as _;
    for encoded in [
        SECRET_VALUE.to_owned(),
        base64::engine::general_purpose::STANDARD.encode(SECRET_VALUE),
        "v4lue".to_owned(),
    ] {
        assert!(!output.contains(&encoded), "{encoded:?} printed: {output}");
    }
}

#[tokio::test]
async fn render_and_diff_show_secret_params_as_the_secret_they_name_never_a_value() {
    let env = TestEnv::shared().await;
    let ns = env.namespace("diff-secret-params").await;
    let dir = tempfile::tempdir().unwrap();
    write_manifests(dir.path(), &secret_param_manifests(ns.name()));
    let binary = Path::new(env!("CARGO_BIN_EXE_vrouter-operator"));

    // render: the configs hold the reference (they stay appliable), never the value.
    for args in [&["render"][..], &["render", "--script"][..]] {
        let out = Command::new(binary).args(args).arg(dir.path()).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("@vrouter-secret:db/password@"), "{stdout}");
        assert_no_secret_value(&stdout);
        assert_no_secret_value(&String::from_utf8_lossy(&out.stderr));
    }

    // diff: a config not in the cluster yet, shown whole, each secret
    // param as the Secret key it names.
    let out = run(binary, &["diff"], dir.path(), env.kubeconfig_path());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(EXIT_DIFFERS),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let changed = changed_lines(&stdout);
    assert!(
        changed.contains(&"+set system login user vyos authentication plaintext-password <secret db/password>"),
        "{stdout}"
    );
    assert!(
        changed.contains(&"+set interfaces ethernet eth0 description <secret db/note>"),
        "{stdout}"
    );
    assert!(!stdout.contains("@vrouter-secret:"), "{stdout}");
    assert_no_secret_value(&stdout);
    assert_no_secret_value(&String::from_utf8_lossy(&out.stderr));
}
