//! The command lines of the node's Kubernetes components, every one run
//! inside the node's namespace and talking to the API server on its
//! loopback there.

use std::path::{Path, PathBuf};
use std::process::Command;

use vrouter_test_apiserver::{NodeBinaries, SERVICE_CLUSTER_IP_RANGE};

use crate::Error;
use crate::config::{self, NODE_NAME};
use crate::credentials::{Credentials, Identity};
use crate::forward::APISERVER_PORT;
use crate::netns::{NODE_IP, NetNs};
use crate::process::write_file;

/// What every component's command needs.
pub(crate) struct Components<'a> {
    pub dir: &'a Path,
    pub netns: &'a NetNs,
    pub binaries: &'a NodeBinaries,
    pub credentials: &'a Credentials,
    /// The API server's CA certificate and service-account key.
    pub ca: PathBuf,
    pub service_account_key: PathBuf,
}

impl Components<'_> {
    fn kubeconfig(&self, name: &str, identity: &Identity) -> Result<PathBuf, Error> {
        let server = format!("https://127.0.0.1:{APISERVER_PORT}");
        let text = config::kubeconfig(&server, &self.ca, &identity.user, &identity.token);
        write_file(self.dir, &format!("{name}.kubeconfig"), &text)
    }

    pub fn controller_manager(&self) -> Result<Command, Error> {
        let kubeconfig = self.kubeconfig("kube-controller-manager", &self.credentials.controller_manager)?;
        let mut command = self.netns.command(&self.binaries.kube_controller_manager);
        command
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--authentication-kubeconfig={}", kubeconfig.display()))
            .arg(format!("--authorization-kubeconfig={}", kubeconfig.display()))
            .args([
                "--bind-address=127.0.0.1",
                "--secure-port=10257",
                "--leader-elect=false",
            ])
            .arg(format!(
                "--service-account-private-key-file={}",
                self.service_account_key.display()
            ))
            .arg(format!("--root-ca-file={}", self.ca.display()))
            // Each controller under its own ServiceAccount, as RBAC's
            // bootstrap policy grants them.
            .arg("--use-service-account-credentials=true")
            .arg(format!("--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}"))
            .arg(format!(
                "--flex-volume-plugin-dir={}",
                self.dir.join("flexvolume").display()
            ));
        Ok(command)
    }

    pub fn scheduler(&self) -> Result<Command, Error> {
        let kubeconfig = self.kubeconfig("kube-scheduler", &self.credentials.scheduler)?;
        let mut command = self.netns.command(&self.binaries.kube_scheduler);
        command
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--authentication-kubeconfig={}", kubeconfig.display()))
            .arg(format!("--authorization-kubeconfig={}", kubeconfig.display()))
            .args([
                "--bind-address=127.0.0.1",
                "--secure-port=10259",
                "--leader-elect=false",
            ]);
        Ok(command)
    }

    pub fn kubelet(&self, containerd_socket: &Path) -> Result<Command, Error> {
        let kubeconfig = self.kubeconfig("kubelet", &self.credentials.kubelet)?;
        let root = self.dir.join("kubelet");
        let text = config::kubelet(self.dir, containerd_socket, &self.credentials.kubelet_client_ca);
        let config = write_file(self.dir, "kubelet.yaml", &text)?;
        let mut command = self.netns.command(&self.binaries.kubelet);
        command
            .arg(format!("--config={}", config.display()))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--hostname-override={NODE_NAME}"))
            .arg(format!("--node-ip={NODE_IP}"))
            .arg(format!("--root-dir={}", root.display()))
            .arg(format!("--cert-dir={}", root.join("pki").display()))
            .arg("--v=1");
        Ok(command)
    }

    pub fn kube_proxy(&self) -> Result<Command, Error> {
        let kubeconfig = self.kubeconfig("kube-proxy", &self.credentials.kube_proxy)?;
        let config = write_file(self.dir, "kube-proxy.yaml", &config::kube_proxy(&kubeconfig))?;
        let mut command = self.netns.command(&self.binaries.kube_proxy);
        command.arg(format!("--config={}", config.display()));
        Ok(command)
    }
}
