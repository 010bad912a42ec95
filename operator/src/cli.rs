//! Command-line flags; each also reads an environment variable so the
//! Deployment can set them either way.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use vrouter_api::Duration;

use crate::telemetry::LogFormat;

#[derive(Parser, Debug, Clone)]
#[command(
    name = "vrouter-operator",
    version,
    about = "Keeps VyOS and DozenOS routers configured as declared"
)]
pub struct Args {
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Where /metrics, /healthz and /readyz are served (plain HTTP).
    #[arg(long, env = "METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,

    /// Serve the validating admission webhooks.
    #[arg(long, env = "ENABLE_WEBHOOKS", default_value_t = true, action = clap::ArgAction::Set)]
    pub enable_webhooks: bool,

    /// Where the webhooks are served (HTTPS).
    #[arg(long, env = "WEBHOOK_ADDR", default_value = "0.0.0.0:9443")]
    pub webhook_addr: SocketAddr,

    /// Directory holding the webhook serving certificate as tls.crt and tls.key
    /// (a cert-manager Secret mount); reloaded when the files change.
    #[arg(
        long,
        env = "WEBHOOK_CERT_DIR",
        default_value = "/tmp/k8s-webhook-server/serving-certs"
    )]
    pub webhook_cert_dir: PathBuf,

    /// Compete for a Lease so that only one replica reconciles.
    #[arg(long, env = "LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,

    /// Name of the Lease; by default the Go vrouter-operator's, so that the
    /// two never lead at once in one namespace.
    #[arg(long, env = "LEASE_NAME", default_value = crate::leader::DEFAULT_LEASE_NAME)]
    pub lease_name: String,

    /// Namespace of the Lease; the pod's own namespace in a cluster.
    #[arg(long, env = "POD_NAMESPACE", default_value = "vrouter-system")]
    pub lease_namespace: String,

    /// This replica's identity in the election; the pod name in a cluster.
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,

    /// How long a leader's lease lasts without renewal.
    #[arg(long, env = "LEASE_DURATION", default_value = "15s")]
    pub lease_duration: Duration,

    /// The longest an apply may run before the config is marked Failed.
    #[arg(long, env = "APPLY_TIMEOUT", default_value = "5m")]
    pub apply_timeout: Duration,

    /// Re-apply a VRouterConfig whose router's config drifted; `false` only
    /// shows drift on the VRouterStatus (for all configs; one config is
    /// paused with its annotation).
    #[arg(long, env = "DRIFT_REPAIR", default_value_t = true, action = clap::ArgAction::Set)]
    pub drift_repair: bool,

    /// Watch only this namespace instead of the whole cluster.
    #[arg(long, env = "WATCH_NAMESPACE")]
    pub watch_namespace: Option<String>,

    #[arg(long, env = "LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
}

/// What to do instead of running the operator.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum Command {
    /// Print the VRouterConfigs the cluster would hold for the given
    /// manifests (files or directories of *.yaml), without a cluster: those
    /// the bindings write and the hand-written ones, each checked as
    /// admission would. Fields no resource knows are warned about.
    /// Exit codes: 0 rendered, 1 invalid or unrenderable manifests, 2
    /// unreadable files.
    Render {
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Also print each router's apply script, byte for byte after `#   `.
        #[arg(long)]
        script: bool,
        /// Treat unknown fields as errors (exit 1), as kubectl's
        /// `--validate=strict` does.
        #[arg(long)]
        strict: bool,
    },
    /// Show what applying the given manifests (files or directories of
    /// *.yaml) would change: each VRouterConfig they render against the one
    /// in the cluster (from KUBECONFIG), as unified diffs, secrets masked.
    /// Also `kubectl vrouter diff` when installed as `kubectl-vrouter`.
    /// Exit codes: 0 no differences, 1 differences, 2 invalid manifests or
    /// the cluster could not be read.
    Diff {
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
    /// Convert the VRouterTemplates of the given manifests (files or
    /// directories of *.yaml) from the Go operator's text/template + sprig to
    /// tera, and print the manifests (or rewrite them with --in-place). Fields
    /// that are already tera, and every other object, are left as they are.
    /// What has no tera form is reported with its file, object, field and
    /// line:column, and nothing is written. Exit codes: 0 converted, 1 a
    /// template could not be converted, 2 unreadable files.
    Convert {
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Rewrite the files instead of printing them.
        #[arg(long)]
        in_place: bool,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_production_ready() {
        let args = Args::try_parse_from(["vrouter-operator"]).unwrap();
        assert!(args.enable_webhooks && args.leader_elect && args.drift_repair);
        assert_eq!(args.apply_timeout, Duration::from_secs(300));
        assert_eq!(args.lease_duration, Duration::from_secs(15));
        assert_eq!(args.lease_name, "d9121dda.kojuro.date", "the Go operator's Lease");
    }

    #[test]
    fn webhooks_can_be_disabled_and_durations_are_go_strings() {
        let args = Args::try_parse_from([
            "vrouter-operator",
            "--enable-webhooks=false",
            "--apply-timeout",
            "1m30s",
        ])
        .unwrap();
        assert!(!args.enable_webhooks);
        assert_eq!(args.apply_timeout, Duration::from_secs(90));
        let args = Args::try_parse_from(["vrouter-operator", "--drift-repair=false"]).unwrap();
        assert!(!args.drift_repair);
        let err = Args::try_parse_from(["vrouter-operator", "--apply-timeout", "soon"]).unwrap_err();
        assert!(err.to_string().contains("invalid duration \"soon\""), "{err}");
    }
}
