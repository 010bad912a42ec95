//! The test node runs workloads as a real cluster does: a Deployment's pod
//! from a locally imported image is scheduled and started, `exec` goes
//! through the API server to the kubelet, pods reach the API server's
//! Service IP through kube-proxy, a deleted pod is replaced, and a
//! container killed from the host is restarted by the kubelet. Stopped,
//! the node leaves the host as it found it.

use std::collections::BTreeSet;
use std::path::Path;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{AttachParams, DeleteParams, ListParams, PostParams};
use serde_json::json;
use tokio::io::AsyncReadExt;
use vrouter_test_node::{BUSYBOX_IMAGE, NODE_NAME, TestNode};

const APP: &str = "probe";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_runs_answers_exec_and_recovers_on_the_test_node() {
    let host_before = HostView::now();
    let mut node = match TestNode::start().await {
        Ok(node) => node,
        Err(e) => panic!("cannot start the test node: {e}"),
    };
    a_taken_port_is_not_exposed(&mut node);
    let ns = node
        .namespace("node-probe")
        .await
        .expect("a namespace with its ServiceAccount");
    let pods: Api<Pod> = ns.api();
    let deployments: Api<Deployment> = ns.api();
    deployments
        .create(&PostParams::default(), &probe_deployment())
        .await
        .expect("the Deployment is created");

    let first = node
        .until("the probe pod Running and Ready", || ready_pod(&pods, None))
        .await;
    assert_eq!(
        first.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some(NODE_NAME)
    );
    let pod_ip = first.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap_or_default();
    assert!(
        pod_ip.starts_with("10.88.0."),
        "pod IP {pod_ip:?} is not on the node's bridge"
    );
    let name = first.metadata.name.clone().expect("pods have names");

    let answer = exec(&pods, &name, "echo exec-ok from $(hostname)").await;
    assert_eq!(
        answer,
        format!("exec-ok from {name}\n"),
        "exec through the API server and the kubelet"
    );

    // kube-proxy's rules take the Service IP to the API server's advertised address.
    let reached = exec(&pods, &name, "nc -w 5 10.0.0.1 443 </dev/null && echo reached").await;
    assert_eq!(reached, "reached\n", "the kubernetes Service through kube-proxy");

    restarts_a_killed_container(&node, &pods, &name).await;

    pods.delete(&name, &DeleteParams::default())
        .await
        .expect("the pod is deleted");
    let second = node
        .until("a replacement pod Running and Ready", || ready_pod(&pods, Some(&name)))
        .await;
    assert_ne!(second.metadata.name.as_deref(), Some(name.as_str()));

    let running = HostView::now();
    assert_ne!(running, host_before, "the node changes the host while it runs");
    drop(node);
    assert_eq!(HostView::now(), host_before, "the host after the node stopped");
}

/// What the kubelet, containerd and the CNI plugins change on the host
/// outside the node's directory and namespace, as read here (independently
/// of the harness's own record): host-wide kernel tunables the kubelet sets,
/// paths they hard-code, pod network namespaces, `kubepods` cgroups, and
/// mounts under any of those.
#[derive(Debug, PartialEq)]
struct HostView {
    sysctls: Vec<(String, String)>,
    paths: Vec<(&'static str, bool)>,
    netns: BTreeSet<String>,
    kubepods: BTreeSet<String>,
    mounts: BTreeSet<String>,
}

impl HostView {
    const SYSCTLS: [&str; 4] = [
        "vm/overcommit_memory",
        "vm/panic_on_oom",
        "kernel/panic",
        "kernel/panic_on_oops",
    ];
    const PATHS: [&str; 5] = [
        "/var/lib/kubelet",
        "/var/log/containers",
        "/var/log/pods",
        "/var/lib/cni",
        "/run/containerd",
    ];

    fn now() -> HostView {
        let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
        let names = |dir: &str| -> BTreeSet<String> {
            std::fs::read_dir(dir)
                .map(|entries| {
                    entries
                        .filter_map(Result::ok)
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default()
        };
        let kubepods = names("/sys/fs/cgroup")
            .into_iter()
            .map(|hierarchy| format!("/sys/fs/cgroup/{hierarchy}/kubepods"))
            .chain(["/sys/fs/cgroup/kubepods.slice".to_owned()])
            .filter(|path| Path::new(path).is_dir())
            .collect();
        let watched = |mount_point: &str| {
            Self::PATHS
                .iter()
                .chain(&["/run/netns"])
                .any(|p| mount_point.starts_with(p))
        };
        let mounts = read("/proc/self/mountinfo")
            .lines()
            .filter_map(|line| line.split(' ').nth(4))
            .filter(|mount_point| watched(mount_point))
            .map(str::to_owned)
            .collect();
        HostView {
            sysctls: Self::SYSCTLS
                .iter()
                .map(|name| (name.to_string(), read(&format!("/proc/sys/{name}")).trim().to_owned()))
                .collect(),
            paths: Self::PATHS.iter().map(|p| (*p, Path::new(p).exists())).collect(),
            netns: names("/run/netns"),
            kubepods,
            mounts,
        }
    }
}

/// The API server listens on all the namespace's addresses at 6443:
/// exposing that port fails at once, naming it, and twice is refused too.
fn a_taken_port_is_not_exposed(node: &mut TestNode) {
    let taken = node.expose(6443).expect_err("the API server's port is taken");
    assert!(taken.to_string().contains("6443"), "{taken}");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let port = listener.local_addr().expect("its address").port();
    node.expose(port).expect("a free port is exposed");
    let twice = node.expose(port).expect_err("a port exposed twice");
    assert!(twice.to_string().contains(&port.to_string()), "{twice}");
}

/// SIGKILLs the container's main process from the host; the kubelet must
/// start the container again in the same pod.
async fn restarts_a_killed_container(node: &TestNode, pods: &Api<Pod>, name: &str) {
    let pod = pods.get(name).await.expect("the pod is readable");
    let status = &pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.clone())
        .unwrap_or_default()[0];
    assert_eq!(status.restart_count, 0);
    let container_id = status.container_id.clone().expect("a running container has an ID");
    node.kill_container(&container_id).expect("kill -9 of the container");
    let killed_id = container_id.as_str();
    node.until("the killed container restarted and Ready", move || async move {
        let pod = pods.get(name).await.ok()?;
        let status = pod.status?.container_statuses?.into_iter().next()?;
        (status.restart_count >= 1 && status.ready && status.container_id.as_deref() != Some(killed_id)).then_some(())
    })
    .await;
}

fn probe_deployment() -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": APP},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": APP}},
            "template": {
                "metadata": {"labels": {"app": APP}},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{
                        "name": "main",
                        "image": BUSYBOX_IMAGE,
                        "imagePullPolicy": "Never",
                        "command": ["/bin/sh", "-c", "echo started; while true; do sleep 1; done"],
                        "readinessProbe": {"exec": {"command": ["/bin/echo", "ready"]}, "periodSeconds": 1},
                    }],
                },
            },
        },
    }))
    .expect("a valid Deployment")
}

/// The probe pod that is Running and Ready, other than `not`.
async fn ready_pod(pods: &Api<Pod>, not: Option<&str>) -> Option<Pod> {
    let list = pods
        .list(&ListParams::default().labels(&format!("app={APP}")))
        .await
        .ok()?;
    list.items.into_iter().find(|pod| {
        let ready = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|conditions| conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        ready && pod.metadata.deletion_timestamp.is_none() && pod.metadata.name.as_deref() != not
    })
}

/// What `sh -c script` in the pod's container prints on stdout.
async fn exec(pods: &Api<Pod>, name: &str, script: &str) -> String {
    let params = AttachParams::default().stdin(false).stdout(true).stderr(false);
    let mut attached = pods
        .exec(name, ["sh", "-c", script], &params)
        .await
        .unwrap_or_else(|e| panic!("exec {script:?} in {name}: {e}"));
    let mut stdout = attached.stdout().expect("stdout was asked for");
    let mut out = String::new();
    stdout.read_to_string(&mut out).await.expect("exec output is UTF-8");
    drop(stdout);
    attached.join().await.expect("the exec session ends");
    out
}
