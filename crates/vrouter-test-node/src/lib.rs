//! A real single-node Kubernetes for end-to-end tests: the operator's
//! image, installed as users install it, on a node with a kubelet.
//!
//! [`TestNode::start`] creates a network namespace of its own and starts in
//! it etcd and kube-apiserver (through vrouter-test-apiserver, with
//! `Node,RBAC` authorization and ServiceAccount admission),
//! kube-controller-manager, kube-scheduler, containerd (Debian's, with
//! runc and the CNI bridge plugin), the kubelet and kube-proxy; imports a
//! static `pause` as the sandbox image and a static busybox as
//! [`BUSYBOX_IMAGE`]; and waits until the Node is Ready.
//! [`TestNode::import_curl_image`] adds the host's curl as [`CURL_IMAGE`]
//! for the tests that scrape over TLS, [`TestNode::import_virsh_image`]
//! the host's virsh as [`VIRSH_IMAGE`] for KubeVirt-shaped launcher pods.
//!
//! # Networking
//!
//! Every non-loopback address lives in that namespace only: the node IP
//! ([`NODE_IP`], on the namespace's `lo`, since the kubelet refuses a
//! loopback node IP), the pod bridge and pod IPs, the Service IPs of
//! kube-proxy's rules. The API server runs there too, so that it reaches
//! the kubelet (exec, logs) and webhook pods on their addresses; the test
//! process reaches it through two `socat`s joined by a Unix socket
//! ([`forward`](crate::forward)), on a 127.0.0.1 port its kubeconfig names.
//!
//! # Cleanup
//!
//! Dropping the node SIGKILLs the components, the containers and the
//! containerd shims, deletes the namespace, puts back the host-wide
//! sysctls the kubelet sets, removes what the kubelet, containerd and
//! libcni wrote outside the node's directory, and removes the directory.
//! A watchdog process ([`watchdog`](crate::watchdog)) does the same when
//! the test process dies without dropping the node (SIGKILL, `abort`).
//!
//! # Requirements
//!
//! Root; `cargo xtask testenv` for the Kubernetes binaries; the Debian
//! packages `cargo xtask test` installs (containerd, runc,
//! containernetworking-plugins, iptables, socat, busybox-static, gcc,
//! procps; curl for [`CURL_IMAGE`], libvirt-clients for [`VIRSH_IMAGE`]). A
//! test that finds one missing fails saying so; it never passes without a node.

mod components;
mod config;
mod containerd;
mod credentials;
mod error;
mod forward;
mod host_state;
mod image;
mod netns;
mod node;
mod process;
mod programs;
mod watchdog;

pub use config::NODE_NAME;
pub use error::Error;
pub use image::{BUSYBOX_IMAGE, CURL_IMAGE, VIRSH_IMAGE};
pub use netns::NODE_IP;
pub use node::{TestNode, WAIT_TIMEOUT};
