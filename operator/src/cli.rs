//! Command-line flags; each also reads an environment variable so the
//! Deployment can set them either way.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use vrouter_api::Duration;

use crate::context::Concurrency;
use crate::telemetry::LogFormat;

/// A concurrency of 0 would mean "unbounded" to kube-runtime: refused.
fn at_least_one() -> clap::builder::RangedI64ValueParser<u16> {
    clap::value_parser!(u16).range(1..)
}

#[derive(Parser, Debug, Clone)]
#[command(
    name = "vrouter-operator",
    version,
    about = "Keeps VyOS and DozenOS routers configured as declared"
)]
pub struct Args {
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Where /metrics is served: HTTPS, or plain HTTP with `--metrics-secure=false`.
    #[arg(long, env = "METRICS_ADDR", default_value = "0.0.0.0:8443")]
    pub metrics_addr: SocketAddr,

    /// Serve /metrics over HTTPS, only to callers whose bearer token the API
    /// server authenticates (TokenReview) and allows to get /metrics
    /// (SubjectAccessReview). `false` serves it in plain HTTP to anyone.
    #[arg(long, env = "METRICS_SECURE", default_value_t = true, action = clap::ArgAction::Set)]
    pub metrics_secure: bool,

    /// Directory holding the metrics serving certificate as tls.crt and
    /// tls.key, reloaded when they change; without it a self-signed
    /// certificate is made at start.
    #[arg(long, env = "METRICS_CERT_DIR")]
    pub metrics_cert_dir: Option<PathBuf>,

    /// Where /healthz and /readyz are served (plain HTTP, for the kubelet).
    #[arg(long, env = "HEALTH_PROBE_ADDR", default_value = "0.0.0.0:8081")]
    pub health_probe_addr: SocketAddr,

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

    /// How long a follower waits, after it last saw the Lease renewed,
    /// before it takes over: the longest a dead leader blocks the others.
    /// Longer than --renew-deadline; whole seconds.
    #[arg(long, env = "LEASE_DURATION", default_value = "15s")]
    pub lease_duration: Duration,

    /// How long the leader keeps leading without renewing the Lease; past
    /// it, the replica stops starting work and exits (the kubelet restarts
    /// it as a follower). Shorter than --lease-duration.
    #[arg(long, env = "RENEW_DEADLINE", default_value = "10s")]
    pub renew_deadline: Duration,

    /// How often the Lease is renewed, or its takeover attempted.
    #[arg(long, env = "RETRY_PERIOD", default_value = "2s")]
    pub retry_period: Duration,

    /// The longest an apply may run before the config is marked Failed.
    #[arg(long, env = "APPLY_TIMEOUT", default_value = "5m")]
    pub apply_timeout: Duration,

    /// Re-apply a VRouterConfig whose router's config drifted; `false` only
    /// shows drift on the VRouterStatus (for all configs; one config is
    /// paused with its annotation).
    #[arg(long, env = "DRIFT_REPAIR", default_value_t = true, action = clap::ArgAction::Set)]
    pub drift_repair: bool,

    /// VRouterConfigs reconciled at once (each holds a connection to its
    /// router while it checks, dispatches or polls an apply).
    #[arg(long, env = "CONFIG_CONCURRENCY", default_value_t = Concurrency::default().configs, value_parser = at_least_one())]
    pub config_concurrency: u16,

    /// VRouterStatuses reconciled at once (each reads a router's configs
    /// back); also the missing VRouterStatuses the sweep creates at once.
    #[arg(long, env = "STATUS_CONCURRENCY", default_value_t = Concurrency::default().statuses, value_parser = at_least_one())]
    pub status_concurrency: u16,

    /// VRouterTargets reconciled at once (each asks whether its VM runs).
    #[arg(long, env = "TARGET_CONCURRENCY", default_value_t = Concurrency::default().targets, value_parser = at_least_one())]
    pub target_concurrency: u16,

    /// VRouterBindings reconciled at once (each renders all its configs).
    #[arg(long, env = "BINDING_CONCURRENCY", default_value_t = Concurrency::default().bindings, value_parser = at_least_one())]
    pub binding_concurrency: u16,

    /// ProxmoxClusters reconciled at once (each lists its cluster's VMs).
    #[arg(long, env = "CLUSTER_CONCURRENCY", default_value_t = Concurrency::default().clusters, value_parser = at_least_one())]
    pub cluster_concurrency: u16,

    /// Targets one ProxmoxCluster sync updates at once (each reads its
    /// guest's uptime when checkGuestUptime is on, and writes its status).
    #[arg(long, env = "CLUSTER_SWEEP_CONCURRENCY", default_value_t = Concurrency::default().cluster_sweep, value_parser = at_least_one())]
    pub cluster_sweep_concurrency: u16,

    /// Threads that run the operator's async work: watches, reconciles,
    /// API and router connections, webhooks. Rendering runs on blocking
    /// threads of its own. The work waits on I/O; one thread is enough for
    /// 1,000 routers, and a second mostly adds the cost of waking it
    /// (docs/architecture.md has the measurement).
    #[arg(long, env = "WORKER_THREADS", default_value_t = 1, value_parser = at_least_one())]
    pub worker_threads: u16,

    /// Watch only this namespace instead of the whole cluster.
    #[arg(long, env = "WATCH_NAMESPACE")]
    pub watch_namespace: Option<String>,

    #[arg(long, env = "LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
}

impl Args {
    /// The reconciles each controller runs at once.
    pub fn concurrency(&self) -> Concurrency {
        Concurrency {
            configs: self.config_concurrency,
            statuses: self.status_concurrency,
            targets: self.target_concurrency,
            bindings: self.binding_concurrency,
            clusters: self.cluster_concurrency,
            cluster_sweep: self.cluster_sweep_concurrency,
        }
    }
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
    /// With --binding, what the binding in the cluster would change: each
    /// config it renders now against the one the cluster holds, and the
    /// rendered config.boot against the router's config as drift detection
    /// last read it (or the last applied one).
    /// Also `kubectl vrouter diff` when installed as `kubectl-vrouter`.
    /// Exit codes: 0 no differences, 1 differences, 2 invalid manifests or
    /// the cluster could not be read.
    Diff {
        #[arg(required_unless_present = "binding")]
        paths: Vec<PathBuf>,
        /// A VRouterBinding in the cluster: `<namespace>/<name>`, or
        /// `<name>` in the kubeconfig context's namespace.
        #[arg(long, value_name = "NAMESPACE/NAME", conflicts_with = "paths")]
        binding: Option<String>,
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

impl Args {
    /// The election's durations, checked ([`crate::leader::Timing::validated`]).
    pub fn election_timing(&self) -> Result<crate::leader::Timing, crate::leader::TimingError> {
        crate::leader::Timing {
            lease_duration: self.lease_duration.to_std(),
            renew_deadline: self.renew_deadline.to_std(),
            retry_period: self.retry_period.to_std(),
        }
        .validated()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_production_ready() {
        let args = Args::try_parse_from(["vrouter-operator"]).unwrap();
        assert!(args.enable_webhooks && args.leader_elect && args.drift_repair && args.metrics_secure);
        assert_eq!(args.metrics_addr.port(), 8443);
        assert_eq!(args.health_probe_addr.port(), 8081);
        assert_eq!(args.apply_timeout, Duration::from_secs(300));
        assert_eq!(args.lease_duration, Duration::from_secs(15));
        assert_eq!(args.renew_deadline, Duration::from_secs(10));
        assert_eq!(args.retry_period, Duration::from_secs(2));
        assert_eq!(args.election_timing(), Ok(crate::leader::Timing::default()));
        assert_eq!(args.lease_name, "d9121dda.kojuro.date", "the Go operator's Lease");
        assert_eq!(args.worker_threads, 1);
    }

    #[test]
    fn the_worker_threads_are_a_flag_and_zero_is_refused() {
        let args = Args::try_parse_from(["vrouter-operator", "--worker-threads=4"]).unwrap();
        assert_eq!(args.worker_threads, 4);
        let err = Args::try_parse_from(["vrouter-operator", "--worker-threads=0"]).unwrap_err();
        assert!(err.to_string().contains("--worker-threads"), "{err}");
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
        let args = Args::try_parse_from([
            "vrouter-operator",
            "--lease-duration=4s",
            "--renew-deadline=3s",
            "--retry-period=500ms",
        ])
        .unwrap();
        assert_eq!(
            args.election_timing().unwrap().retry_period,
            std::time::Duration::from_millis(500)
        );
        let args = Args::try_parse_from(["vrouter-operator", "--renew-deadline=20s"]).unwrap();
        let err = args.election_timing().unwrap_err().to_string();
        assert!(
            err.contains("lease duration (15s) must be longer than the renew deadline (20s)"),
            "{err}"
        );
        let err = Args::try_parse_from(["vrouter-operator", "--apply-timeout", "soon"]).unwrap_err();
        assert!(err.to_string().contains("invalid duration \"soon\""), "{err}");
    }

    #[test]
    fn diff_takes_manifests_or_a_binding_not_both_and_not_neither() {
        let args = Args::try_parse_from(["vrouter-operator", "diff", "--binding", "net/edge"]).unwrap();
        assert!(
            matches!(args.command, Some(Command::Diff { binding: Some(b), paths }) if b == "net/edge" && paths.is_empty())
        );
        let args = Args::try_parse_from(["vrouter-operator", "diff", "site/"]).unwrap();
        assert!(matches!(args.command, Some(Command::Diff { binding: None, paths }) if paths.len() == 1));
        assert!(Args::try_parse_from(["vrouter-operator", "diff"]).is_err());
        assert!(Args::try_parse_from(["vrouter-operator", "diff", "site/", "--binding", "net/edge"]).is_err());
    }

    #[test]
    fn every_controller_concurrency_is_a_flag_and_zero_is_refused() {
        let args = Args::try_parse_from(["vrouter-operator"]).unwrap();
        assert_eq!(args.concurrency(), Concurrency::default());
        let args = Args::try_parse_from([
            "vrouter-operator",
            "--config-concurrency=8",
            "--status-concurrency=7",
            "--target-concurrency=6",
            "--binding-concurrency=2",
            "--cluster-concurrency=1",
            "--cluster-sweep-concurrency=5",
        ])
        .unwrap();
        let expected = Concurrency {
            configs: 8,
            statuses: 7,
            targets: 6,
            bindings: 2,
            clusters: 1,
            cluster_sweep: 5,
        };
        assert_eq!(args.concurrency(), expected);
        for flag in ["--config-concurrency", "--cluster-sweep-concurrency"] {
            let err = Args::try_parse_from(["vrouter-operator", &format!("{flag}=0")]).unwrap_err();
            assert!(err.to_string().contains(flag), "{err}");
        }
    }
}
