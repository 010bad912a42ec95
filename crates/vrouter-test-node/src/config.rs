//! The configuration files of containerd, the CNI plugins, the kubelet and
//! kube-proxy, every path in them under the node's own directory. The
//! kubelet and kube-proxy read YAML, of which JSON is a subset.

use std::path::Path;

use serde_json::json;

use crate::netns::NODE_IP;

/// Pod addresses: a bridge inside the node's namespace.
pub const POD_CIDR: &str = "10.88.0.0/24";
const POD_GATEWAY: &str = "10.88.0.1";
/// The bridge's name; it exists only in the node's namespace.
const BRIDGE: &str = "vrnode0";
/// The kubelet's name for this node.
pub const NODE_NAME: &str = "vrouter-test-node";
/// The sandbox ("pause") image, imported before the kubelet starts.
pub const PAUSE_IMAGE: &str = "localhost/vrouter-test-node/pause:1";

/// containerd's config (v2 schema of containerd 1.6): root, state, socket
/// and runc's state under `dir`.
pub fn containerd(dir: &Path, runc: &Path, cni_bin: &Path) -> String {
    let d = dir.display();
    format!(
        r#"version = 2
root = "{d}/root"
state = "{d}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.internal.v1.opt", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "{d}/containerd.sock"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  enable_cdi = false
  # This machine kind lacks CAP_SYS_RESOURCE: without this every sandbox
  # fails with "can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "{runc}"
        Root = "{d}/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni}"
    conf_dir = "{d}/cni"
"#,
        runc = runc.display(),
        cni = cni_bin.display(),
    )
}

/// The CNI network: a bridge with host-local addresses from [`POD_CIDR`],
/// the bridge the pods' gateway (the route to the node IP and Service IPs).
pub fn cni_conflist(ipam_dir: &Path) -> String {
    json!({
        "cniVersion": "1.0.0",
        "name": "vrouter-test-node",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": true,
                "ipMasq": false,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_CIDR, "gateway": POD_GATEWAY}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": ipam_dir,
                }
            },
            {"type": "portmap", "capabilities": {"portMappings": true}}
        ]
    })
    .to_string()
}

/// The kubelet's configuration. This machine kind has cgroup v1 only
/// (a hybrid host that cannot switch), hence `failCgroupV1: false` and the
/// cgroupfs driver. The API server authenticates with a client
/// certificate signed by `client_ca`; every authenticated caller may do
/// anything, as the kubelet is reachable only inside the namespace.
pub fn kubelet(dir: &Path, containerd_socket: &Path, client_ca: &Path) -> String {
    json!({
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": false,
        "failSwapOn": false,
        "cgroupDriver": "cgroupfs",
        "containerRuntimeEndpoint": format!("unix://{}", containerd_socket.display()),
        "address": NODE_IP,
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "authentication": {
            "anonymous": {"enabled": false},
            "webhook": {"enabled": false},
            "x509": {"clientCAFile": client_ca},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "podCIDR": POD_CIDR,
        "clusterDomain": "cluster.local",
        // No DNS: nothing in a test pod resolves names.
        "resolvConf": "",
        "serializeImagePulls": false,
        "rotateCertificates": false,
        "serverTLSBootstrap": false,
        "maxPods": 50,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "2%", "imagefs.available": "2%"},
        "imageGCHighThresholdPercent": 95,
        "imageGCLowThresholdPercent": 90,
        "podLogsDir": dir.join("pod-logs"),
        "volumePluginDir": dir.join("volume-plugins"),
        // Fast pod status for tests.
        "nodeStatusUpdateFrequency": "4s",
        "syncFrequency": "10s",
    })
    .to_string()
}

/// kube-proxy's configuration: iptables rules in the node's namespace.
/// The conntrack zeros keep it from touching host-wide conntrack limits.
pub fn kube_proxy(kubeconfig: &Path) -> String {
    json!({
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": kubeconfig},
        "hostnameOverride": NODE_NAME,
        "mode": "iptables",
        "clusterCIDR": POD_CIDR,
        "bindAddress": NODE_IP,
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        "nodePortAddresses": [format!("{NODE_IP}/32")],
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
            "tcpBeLiberal": false,
            "udpTimeout": "0s",
            "udpStreamTimeout": "0s",
        },
    })
    .to_string()
}

/// A kubeconfig for a component inside the namespace: the API server on
/// the namespace's loopback, a bearer token of the component's own.
pub fn kubeconfig(server: &str, ca: &Path, user: &str, token: &str) -> String {
    json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "node", "cluster": {"server": server, "certificate-authority": ca}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "node", "context": {"cluster": "node", "user": user}}],
        "current-context": "node",
    })
    .to_string()
}
