//! What the tests of the move from the real Go operator share: a site as a
//! Go operator user writes it, `kubectl` and `vrouter-operator convert` as
//! the guide (docs/migrating-from-go.md) runs them, and what the routers
//! and the objects say afterwards.

use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use vrouter_api::VRouterBinding;
use vrouter_test_apiserver::{TestEnv, TestNamespace};
use vrouter_test_peers::daemon::{Agent, Daemon};

/// A site as a Go operator user writes it: one template in Go syntax,
/// shared params, a daemon target per router (router-ids from
/// 192.0.2.`first_id`), one binding `site-a`.
pub fn go_site(daemon: &Daemon, routers: &[&str], first_id: usize, dns: &str) -> String {
    let targets: String = routers
        .iter()
        .enumerate()
        .map(|(i, name)| {
            format!(
                "---\napiVersion: vrouter.kojuro.date/v1\nkind: VRouterTarget\nmetadata:\n  name: {name}\nspec:\n\
                 \x20 provider:\n    type: vrouter-daemon\n    daemon:\n      address: {address}\n      agentID: {name}\n\
                 \x20 params:\n    hostname: {name}\n    routerId: 192.0.2.{}\n",
                first_id + i,
                address = daemon.address(),
            )
        })
        .collect();
    let refs: String = routers.iter().map(|r| format!("    - name: {r}\n")).collect();
    format!(
        "apiVersion: vrouter.kojuro.date/v1\nkind: VRouterTemplate\nmetadata:\n  name: bgp-router\nspec:\n\
         \x20 commands: |\n\
         \x20   set system host-name {{{{ .hostname }}}}\n\
         \x20   set system name-server {{{{ default \"192.0.2.53\" .dnsServer }}}}\n\
         \x20   set protocols bgp system-as {{{{ .asn }}}}\n\
         \x20   set protocols bgp parameters router-id {{{{ .routerId }}}}\n\
         \x20   {{{{- range .neighbors }}}}\n\
         \x20   set protocols bgp neighbor {{{{ .ip }}}} remote-as {{{{ .remoteAs }}}}\n\
         \x20   {{{{- end }}}}\n\
         ---\napiVersion: vrouter.kojuro.date/v1\nkind: VRouterParams\nmetadata:\n  name: bgp-defaults\nspec:\n\
         \x20 params:\n    asn: 65000\n    dnsServer: {dns}\n    neighbors:\n      - ip: 192.0.2.1\n        remoteAs: 64512\n\
         \x20     - ip: 192.0.2.2\n        remoteAs: 64513\n\
         ---\napiVersion: vrouter.kojuro.date/v1\nkind: VRouterBinding\nmetadata:\n  name: site-a\nspec:\n\
         \x20 templateRefs:\n    - name: bgp-router\n  paramsRefs:\n    - name: bgp-defaults\n  targetRefs:\n\
         {refs}{targets}",
    )
}

/// Grants namespace `ns` every agent of `daemon`, with the command the
/// guide gives a cluster administrator (docs/migrating-from-go.md): this
/// operator reaches a daemon agent only with that grant.
pub fn grant_daemon(env: &TestEnv, ns: &TestNamespace, daemon: &Daemon) {
    let grant = format!(
        "{}={}/*",
        vrouter_api::daemon_access::ANNOTATION_ALLOWED_DAEMON_AGENTS,
        daemon.address()
    );
    kubectl(env, &["annotate", "namespace", ns.name(), "--overwrite", &grant]);
}

/// `kubectl` of the API server's release against `env`, as the guide runs
/// it (from the repository's root); panics with its output when it fails.
pub fn kubectl(env: &TestEnv, args: &[&str]) -> String {
    try_kubectl(env, args).unwrap_or_else(|e| panic!("{e}"))
}

/// [`kubectl`], its output or what it said when it failed.
pub fn try_kubectl(env: &TestEnv, args: &[&str]) -> Result<String, String> {
    let binary = vrouter_test_apiserver::kubectl().unwrap_or_else(|e| panic!("kubectl: {e}"));
    let output = Command::new(binary)
        .arg(format!("--kubeconfig={}", env.kubeconfig_path().display()))
        .args(args)
        .current_dir(repository_root())
        .output()
        .expect("run kubectl");
    let (out, err) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    match output.status.success() {
        true => Ok(out.into_owned()),
        false => Err(format!("kubectl {args:?}: {out}{err}")),
    }
}

pub fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// How many times each router ran an apply: the stub `vbash` logs one
/// `configure` per script the agent ran.
pub fn runs(agents: &[Agent]) -> Vec<usize> {
    agents
        .iter()
        .map(|a| a.sandbox().calls().iter().filter(|c| *c == "configure").count())
        .collect()
}

/// The Ready condition of binding `site-a`: status and message.
pub async fn binding_ready(ns: &TestNamespace) -> Option<(String, String)> {
    let binding = ns.api::<VRouterBinding>().get("site-a").await.ok()?;
    let ready = binding.status?.conditions.into_iter().find(|c| c.type_ == "Ready")?;
    Some((ready.status, ready.message))
}

/// `vrouter-operator convert --in-place` on the manifest, then `kubectl
/// apply` of it, as the guide's section 1 and step 4 do.
pub fn convert_and_apply(env: &TestEnv, ns: &TestNamespace, manifest: &Path) {
    let convert = Command::new(env!("CARGO_BIN_EXE_vrouter-operator"))
        .args(["convert", "--in-place"])
        .arg(manifest)
        .output()
        .unwrap();
    assert_eq!(
        convert.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&convert.stderr)
    );
    kubectl(env, &["apply", "-n", ns.name(), "-f", manifest.to_str().unwrap()]);
}

/// Who holds the Lease `name`, if anyone.
pub async fn lease_holder(leases: &Api<Lease>, name: &str) -> Option<String> {
    leases
        .get_opt(name)
        .await
        .ok()??
        .spec?
        .holder_identity
        .filter(|h| !h.is_empty())
}

/// The heading of the guide's steps from the Go kustomize install.
const KUSTOMIZE_PATH: &str = "### With the Go operator's kustomize install";

/// The shell commands of step `step` of section 2 of
/// docs/migrating-from-go.md (from the Go kustomize install), each as its words (`\` continuations joined),
/// in the guide's order: what a user following the guide types.
pub fn guide_step(step: usize) -> Vec<Vec<String>> {
    let guide = std::fs::read_to_string(repository_root().join("docs/migrating-from-go.md")).unwrap();
    let section = guide
        .split("\n## ")
        .find(|s| s.starts_with("2. "))
        .expect("the guide has a section 2");
    let section = section
        .split_once(KUSTOMIZE_PATH)
        .unwrap_or_else(|| panic!("the guide's section 2 has no {KUSTOMIZE_PATH:?}"))
        .1;
    let (mut current, mut in_block) = (0, false);
    let mut commands: Vec<Vec<String>> = Vec::new();
    let mut pending = String::new();
    for line in section.lines() {
        let numbered = line.split_once(". ").and_then(|(n, _)| n.parse::<usize>().ok());
        if let Some(n) = numbered.filter(|_| !in_block) {
            current = n;
        }
        let text = line.trim();
        if text.starts_with("```") {
            in_block = text == "```sh";
            continue;
        }
        if !in_block || current != step || text.is_empty() || text.starts_with('#') {
            continue;
        }
        pending.push_str(text.trim_end_matches('\\'));
        pending.push(' ');
        if !text.ends_with('\\') {
            commands.push(pending.split_whitespace().map(str::to_owned).collect());
            pending.clear();
        }
    }
    assert!(
        !commands.is_empty(),
        "step {step} of the guide's section 2 has no commands"
    );
    commands
}

/// Runs step `step` of the guide's section 2 as a user would, from the
/// repository's root, against `env` (helm's own state in `dir`); the output
/// of each command.
pub fn run_guide_step(env: &TestEnv, step: usize, dir: &Path) -> Vec<String> {
    run_commands(env, &guide_step(step), dir)
}

/// The heading of the guide's part on the Go operator's Helm release, and
/// the heading after it.
const HELM_PATH: &str = "### With the Go operator's Helm chart";

/// The shell commands of the guide's part on the Go operator's Helm
/// release (section 2), each as its words, in the guide's order.
pub fn helm_path_commands() -> Vec<Vec<String>> {
    let guide = std::fs::read_to_string(repository_root().join("docs/migrating-from-go.md")).unwrap();
    let part = guide
        .split_once(HELM_PATH)
        .unwrap_or_else(|| panic!("the guide has no {HELM_PATH:?}"))
        .1;
    let part = part.split("\n### ").next().unwrap();
    let mut in_block = false;
    let mut commands: Vec<Vec<String>> = Vec::new();
    let mut pending = String::new();
    for line in part.lines() {
        let text = line.trim();
        if text.starts_with("```") {
            in_block = text == "```sh";
            continue;
        }
        if !in_block || text.is_empty() || text.starts_with('#') {
            continue;
        }
        pending.push_str(text.trim_end_matches('\\'));
        pending.push(' ');
        if !text.ends_with('\\') {
            commands.push(pending.split_whitespace().map(str::to_owned).collect());
            pending.clear();
        }
    }
    assert!(!commands.is_empty(), "the guide's {HELM_PATH:?} has no commands");
    commands
}

/// Runs `commands` (`kubectl` or `helm` ones) as a user would, from the
/// repository's root, against `env` (helm's own state in `dir`); the output
/// of each.
pub fn run_commands(env: &TestEnv, commands: &[Vec<String>], dir: &Path) -> Vec<String> {
    let mut outputs = Vec::new();
    for command in commands {
        let args: Vec<&str> = command[1..].iter().map(String::as_str).collect();
        let output = match command[0].as_str() {
            "kubectl" => kubectl(env, &args),
            "helm" => helm(env, &args, dir),
            other => panic!("the guide runs `{other}`, which this test does not know: {command:?}"),
        };
        outputs.push(output);
    }
    outputs
}

/// `helm` of the testenv against `env`, from the repository's root, its
/// cache and configuration in `dir`; panics with its output when it fails.
pub fn helm(env: &TestEnv, args: &[&str], dir: &Path) -> String {
    let output = super::shipped_rbac::helm()
        .args(args)
        .arg(format!("--kubeconfig={}", env.kubeconfig_path().display()))
        .current_dir(repository_root())
        .env("HELM_CACHE_HOME", dir.join("helm/cache"))
        .env("HELM_CONFIG_HOME", dir.join("helm/config"))
        .env("HELM_DATA_HOME", dir.join("helm/data"))
        .output()
        .expect("run helm");
    let (out, err) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(output.status.success(), "helm {args:?}: {out}{err}");
    out.into_owned()
}
