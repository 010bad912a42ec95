//! Command-line flags; each of ours also reads an environment variable so
//! the Deployment can set them either way. The Go operator's flags
//! (controller-runtime's names, its zap logging flags, `--kubeconfig`) are
//! accepted too, as aliases of ours or, where nothing here corresponds,
//! checked and named in the log as changing nothing (docs/operations.md).
//! Booleans read as Go reads them: a bare `--flag` is true.

use std::path::{Path, PathBuf};

use clap::{ArgAction, CommandFactory, Parser};
use vrouter_api::Duration;

use crate::cli::go_flags::{self, ZapLevel};
use crate::runtime::context::Concurrency;
use crate::runtime::telemetry::LogFormat;
use crate::server::listen::{self, Listen};

/// A path where empty is a value (controller-runtime's "not given"), which
/// clap's own path parser refuses.
fn path_or_empty(text: &str) -> Result<PathBuf, std::convert::Infallible> {
    Ok(PathBuf::from(text))
}

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
    /// HOST:PORT, :PORT for every interface (IPv6 and IPv4, or IPv4 alone
    /// on a host without IPv6), or 0 to serve no metrics.
    /// Also `--metrics-bind-address` (controller-runtime's name).
    #[arg(long, env = "METRICS_ADDR", alias = "metrics-bind-address", default_value = ":8443", value_parser = listen::metrics_flag)]
    pub metrics_addr: Listen,

    /// Serve /metrics over HTTPS, only to callers whose bearer token the API
    /// server authenticates (TokenReview) and allows to get /metrics
    /// (SubjectAccessReview). `false` serves it in plain HTTP to anyone.
    #[arg(long, env = "METRICS_SECURE", default_value_t = true, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = go_flags::parse_bool, action = ArgAction::Set)]
    pub metrics_secure: bool,

    /// Directory holding the metrics serving certificate (--metrics-cert-name
    /// and --metrics-cert-key in it), reloaded when they change; without it
    /// (or empty) a self-signed certificate is made at start.
    /// Also `--metrics-cert-path` (controller-runtime's name).
    #[arg(long, env = "METRICS_CERT_DIR", alias = "metrics-cert-path", value_parser = path_or_empty)]
    pub metrics_cert_dir: Option<PathBuf>,

    /// File name of the metrics certificate in --metrics-cert-dir.
    #[arg(long, env = "METRICS_CERT_NAME", default_value = "tls.crt")]
    pub metrics_cert_name: PathBuf,

    /// File name of the metrics certificate's key in --metrics-cert-dir.
    #[arg(long, env = "METRICS_CERT_KEY", default_value = "tls.key")]
    pub metrics_cert_key: PathBuf,

    /// Where /healthz and /readyz are served (plain HTTP, for the kubelet):
    /// HOST:PORT, :PORT for every interface, or 0 (or empty) to serve no probes.
    /// Also `--health-probe-bind-address` (controller-runtime's name).
    #[arg(long, env = "HEALTH_PROBE_ADDR", alias = "health-probe-bind-address", default_value = ":8081", value_parser = listen::health_flag)]
    pub health_probe_addr: Listen,

    /// Serve the validating admission webhooks.
    #[arg(long, env = "ENABLE_WEBHOOKS", default_value_t = true, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = go_flags::parse_bool, action = ArgAction::Set)]
    pub enable_webhooks: bool,

    /// Where the webhooks are served (HTTPS): HOST:PORT, or :PORT for every interface.
    #[arg(long, env = "WEBHOOK_ADDR", default_value = ":9443", value_parser = listen::webhook_flag)]
    pub webhook_addr: Listen,

    /// Directory holding the webhook serving certificate (--webhook-cert-name
    /// and --webhook-cert-key in it; a cert-manager Secret mount); reloaded
    /// when the files change. Empty means the default.
    /// Also `--webhook-cert-path` (controller-runtime's name).
    #[arg(
        long,
        env = "WEBHOOK_CERT_DIR",
        alias = "webhook-cert-path",
        default_value = DEFAULT_WEBHOOK_CERT_DIR,
        value_parser = path_or_empty
    )]
    pub webhook_cert_dir: PathBuf,

    /// File name of the webhook certificate in --webhook-cert-dir.
    #[arg(long, env = "WEBHOOK_CERT_NAME", default_value = "tls.crt")]
    pub webhook_cert_name: PathBuf,

    /// File name of the webhook certificate's key in --webhook-cert-dir.
    #[arg(long, env = "WEBHOOK_CERT_KEY", default_value = "tls.key")]
    pub webhook_cert_key: PathBuf,

    #[command(flatten)]
    pub webhook_cert_source: crate::cli::webhook_cert_args::WebhookCertArgs,

    /// Serve HTTP/2 on the metrics and webhook listeners. Accepted for the
    /// Go operator's args; both listeners speak HTTP/1.1 only (the Go
    /// operator's default, against HTTP/2's stream-reset attacks), so `true`
    /// is named in the log as changing nothing.
    #[arg(long, env = "ENABLE_HTTP2", default_value_t = false, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = go_flags::parse_bool, action = ArgAction::Set)]
    pub enable_http2: bool,

    /// A kubeconfig file to connect with, instead of the KUBECONFIG
    /// variable's files, ~/.kube/config or the pod's ServiceAccount
    /// (controller-runtime's `--kubeconfig`).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,

    /// Compete for a Lease so that only one replica reconciles.
    #[arg(long, env = "LEADER_ELECT", default_value_t = true, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = go_flags::parse_bool, action = ArgAction::Set)]
    pub leader_elect: bool,

    /// Name of the Lease; by default the Go vrouter-operator's, so that the
    /// two never lead at once in one namespace.
    #[arg(long, env = "LEASE_NAME", default_value = crate::runtime::leader::DEFAULT_LEASE_NAME)]
    pub lease_name: String,

    /// Namespace of the Lease. Without it, the pod's own namespace as its
    /// ServiceAccount mount names it (where the Go operator puts its Lease:
    /// the Go chart sets no POD_NAMESPACE), else `vrouter-system`.
    #[arg(long, env = "POD_NAMESPACE")]
    pub lease_namespace: Option<String>,

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
    #[arg(long, env = "DRIFT_REPAIR", default_value_t = true, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = go_flags::parse_bool, action = ArgAction::Set)]
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
    /// (docs/decisions.md, "One async worker thread").
    #[arg(long, env = "WORKER_THREADS", default_value_t = 1, value_parser = at_least_one())]
    pub worker_threads: u16,

    /// Watch only this namespace instead of the whole cluster.
    #[arg(long, env = "WATCH_NAMESPACE")]
    pub watch_namespace: Option<String>,

    /// text (also `console`) or json; text by default, or as --zap-devel
    /// says. Also `--zap-encoder` (controller-runtime's name).
    #[arg(long, env = "LOG_FORMAT", alias = "zap-encoder", value_enum, ignore_case = true)]
    pub log_format: Option<LogFormat>,

    /// How much is logged, as controller-runtime's `--zap-log-level` says:
    /// debug, info, error, panic (logged as error) or N > 0 (1 is debug, 2
    /// or more trace). debug and beyond apply to the operator's own crates.
    /// Takes the place of RUST_LOG.
    #[arg(long, value_parser = go_flags::parse_zap_level)]
    pub zap_log_level: Option<ZapLevel>,

    /// controller-runtime's presets: `true` (or bare) logs text at debug
    /// level, `false` JSON at info, each where --log-format, --zap-log-level
    /// and RUST_LOG say nothing.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = go_flags::parse_bool, action = ArgAction::Set)]
    pub zap_devel: Option<bool>,

    /// Accepted for the Go operator's args (info, error or panic) and
    /// changes nothing: no stack traces are captured here; an error carries
    /// its chain of causes instead.
    #[arg(long, value_parser = go_flags::parse_zap_stacktrace_level)]
    pub zap_stacktrace_level: Option<String>,

    /// Accepted for the Go operator's args (epoch, millis, nanos, iso8601,
    /// rfc3339 or rfc3339nano) and changes nothing: timestamps are always
    /// RFC 3339 in UTC.
    #[arg(long, value_parser = go_flags::parse_zap_time_encoding)]
    pub zap_time_encoding: Option<String>,
}

/// The Lease's namespace outside a pod, when none is given.
pub const DEFAULT_LEASE_NAMESPACE: &str = "vrouter-system";

/// Where a pod's ServiceAccount mount names the pod's namespace.
pub const IN_CLUSTER_NAMESPACE_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// Where a cert-manager Secret is mounted by the charts (ours and Go's).
pub const DEFAULT_WEBHOOK_CERT_DIR: &str = "/tmp/k8s-webhook-server/serving-certs";

impl Args {
    /// The command line, read with the Go operator's spellings accepted
    /// ([`go_flags::with_double_dashes`]); exits with clap's message on an
    /// error, naming the flag.
    pub fn from_command_line() -> Args {
        let names = Args::long_names();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        Args::parse_from(go_flags::with_double_dashes(std::env::args_os(), &names))
    }

    /// Every top-level long flag name and alias, and `help` and `version`.
    pub fn long_names() -> Vec<String> {
        let command = Args::command();
        let mut names = vec!["help", "version"];
        for arg in command.get_arguments() {
            names.extend(arg.get_long());
            names.extend(arg.get_all_aliases().unwrap_or_default());
        }
        names.into_iter().map(str::to_owned).collect()
    }

    /// The Lease's namespace: --lease-namespace (POD_NAMESPACE), else
    /// `in_cluster` (the content of the pod's ServiceAccount `namespace`
    /// file, when there is one), else `vrouter-system`.
    pub fn lease_namespace(&self, in_cluster: Option<&str>) -> String {
        let given = self.lease_namespace.as_deref().filter(|ns| !ns.is_empty());
        let in_cluster = in_cluster.map(str::trim).filter(|ns| !ns.is_empty());
        given.or(in_cluster).unwrap_or(DEFAULT_LEASE_NAMESPACE).to_owned()
    }

    /// The metrics certificate and key files, when a directory is given.
    pub fn metrics_cert_files(&self) -> Option<(PathBuf, PathBuf)> {
        let dir = self.metrics_cert_dir.as_deref().filter(|d| !d.as_os_str().is_empty())?;
        Some((dir.join(&self.metrics_cert_name), dir.join(&self.metrics_cert_key)))
    }

    /// The webhook certificate and key files.
    pub fn webhook_cert_files(&self) -> (PathBuf, PathBuf) {
        let dir = match self.webhook_cert_dir.as_os_str().is_empty() {
            true => Path::new(DEFAULT_WEBHOOK_CERT_DIR),
            false => &self.webhook_cert_dir,
        };
        (dir.join(&self.webhook_cert_name), dir.join(&self.webhook_cert_key))
    }

    /// The log format and filter: explicit settings first (--log-format,
    /// then --zap-log-level, then `rust_log`, the RUST_LOG variable), then
    /// --zap-devel's preset, then text at info.
    pub fn logging(&self, rust_log: Option<&str>) -> crate::runtime::telemetry::Logging {
        let devel = self.zap_devel;
        let format = self.log_format.unwrap_or(match devel {
            Some(false) => LogFormat::Json,
            _ => LogFormat::Text,
        });
        let filter = match (self.zap_log_level, rust_log.filter(|f| !f.is_empty()), devel) {
            (Some(level), _, _) => level.filter(),
            (None, Some(filter), _) => filter.to_owned(),
            (None, None, Some(true)) => ZapLevel::Debug.filter(),
            (None, None, _) => "info".to_owned(),
        };
        crate::runtime::telemetry::Logging { format, filter }
    }

    /// What to log about the Go operator's flags that were given and change
    /// nothing here, one line each.
    pub fn flags_without_effect(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if self.enable_http2 {
            notes.push("--enable-http2: accepted; the metrics and webhook listeners speak HTTP/1.1 only, which every client falls back to".to_owned());
        }
        if let Some(level) = &self.zap_stacktrace_level {
            notes.push(format!("--zap-stacktrace-level={level}: accepted; no stack traces are captured, an error carries its chain of causes"));
        }
        if let Some(encoding) = &self.zap_time_encoding {
            notes.push(format!(
                "--zap-time-encoding={encoding}: accepted; timestamps are always RFC 3339 in UTC"
            ));
        }
        notes
    }
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
    /// End the hold of a VRouterBinding rolling out in waves with
    /// `untilResumed` (its Ready reason RolloutPaused): writes a new value
    /// into `spec.rollout.waves.resume`, and the next wave starts.
    /// Also `kubectl vrouter resume` when installed as `kubectl-vrouter`.
    /// Exit codes: 0 resumed, 2 not found, not in mode Waves, or the
    /// cluster could not be written.
    Resume {
        /// `<namespace>/<name>`, or `<name>` in the kubeconfig context's namespace.
        #[arg(value_name = "NAMESPACE/NAME")]
        binding: String,
    },
    /// List a VRouterConfig's applied revisions: number, time, result,
    /// binding, generation, apply id (never the content, which stays in
    /// the Secret `<config>-history`).
    /// Also `kubectl vrouter history` when installed as `kubectl-vrouter`.
    /// Exit codes: 0 listed, 2 not found or unreadable.
    History {
        /// `<namespace>/<name>`, or `<name>` with `-n` or in the kubeconfig context's namespace.
        #[arg(value_name = "CONFIG")]
        config: String,
        #[arg(short = 'n', long)]
        namespace: Option<String>,
    },
    /// Apply revision K of a VRouterConfig's history again: writes
    /// `spec.rollbackTo`, and the operator applies it like any apply. A
    /// binding-owned config keeps it until the binding's spec changes.
    /// Also `kubectl vrouter rollback` when installed as `kubectl-vrouter`.
    /// Exit codes: 0 asked for, 2 not found, revision not kept, or the
    /// cluster could not be written.
    Rollback {
        /// `<namespace>/<name>`, or `<name>` with `-n` or in the kubeconfig context's namespace.
        #[arg(value_name = "CONFIG")]
        config: String,
        #[arg(short = 'n', long)]
        namespace: Option<String>,
        /// The revision to apply, as `history` numbers it.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        to_revision: u64,
    },
}

impl Args {
    /// The election's durations, checked ([`crate::runtime::leader::Timing::validated`]).
    pub fn election_timing(&self) -> Result<crate::runtime::leader::Timing, crate::runtime::leader::TimingError> {
        crate::runtime::leader::Timing {
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
    use crate::runtime::telemetry::Logging;

    #[test]
    fn defaults_are_production_ready() {
        let args = Args::try_parse_from(["vrouter-operator"]).unwrap();
        assert!(args.enable_webhooks && args.leader_elect && args.drift_repair && args.metrics_secure);
        // Both families: a cluster whose pods have only IPv6 reaches them too.
        assert_eq!(args.metrics_addr, Listen::AllInterfaces(8443));
        assert_eq!(args.health_probe_addr, Listen::AllInterfaces(8081));
        assert_eq!(args.webhook_addr, Listen::AllInterfaces(9443));
        assert!(!args.enable_http2);
        assert_eq!(args.metrics_cert_files(), None);
        assert_eq!(
            args.webhook_cert_files(),
            (
                PathBuf::from("/tmp/k8s-webhook-server/serving-certs/tls.crt"),
                PathBuf::from("/tmp/k8s-webhook-server/serving-certs/tls.key")
            )
        );
        assert_eq!(
            args.logging(None),
            Logging {
                format: LogFormat::Text,
                filter: "info".into()
            }
        );
        assert_eq!(args.apply_timeout, Duration::from_secs(300));
        assert_eq!(args.lease_duration, Duration::from_secs(15));
        assert_eq!(args.renew_deadline, Duration::from_secs(10));
        assert_eq!(args.retry_period, Duration::from_secs(2));
        assert_eq!(args.election_timing(), Ok(crate::runtime::leader::Timing::default()));
        assert_eq!(args.lease_name, "d9121dda.kojuro.date", "the Go operator's Lease");
        assert_eq!(args.worker_threads, 1);
    }

    /// What `Args::from_command_line` reads `argv` as.
    fn go_parse(argv: &[&str]) -> Result<Args, clap::Error> {
        let names = Args::long_names();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let argv = std::iter::once("vrouter-operator")
            .chain(argv.iter().copied())
            .map(Into::into);
        Args::try_parse_from(go_flags::with_double_dashes(argv, &names))
    }

    #[test]
    fn the_go_charts_args_mean_what_they_meant_to_the_go_operator() {
        let args = go_parse(&[
            "--metrics-bind-address=:8443",
            "--leader-elect",
            "--health-probe-bind-address=:8081",
            "--webhook-cert-path=/tmp/k8s-webhook-server/serving-certs",
        ])
        .unwrap();
        assert_eq!(args.metrics_addr, Listen::AllInterfaces(8443));
        assert!(args.leader_elect);
        assert_eq!(args.health_probe_addr, Listen::AllInterfaces(8081));
        assert_eq!(
            args.webhook_cert_dir,
            PathBuf::from("/tmp/k8s-webhook-server/serving-certs")
        );
    }

    #[test]
    fn every_flag_of_the_go_main_is_accepted_with_its_meaning() {
        let args = go_parse(&[
            "--metrics-bind-address=127.0.0.1:8080",
            "--health-probe-bind-address=0",
            "--leader-elect=false",
            "--metrics-secure=false",
            "--webhook-cert-path=/w",
            "--webhook-cert-name=w.crt",
            "--webhook-cert-key=w.key",
            "--metrics-cert-path=/m",
            "--metrics-cert-name=m.crt",
            "--metrics-cert-key=m.key",
            "--enable-http2",
            "--zap-devel=false",
            "--zap-encoder=console",
            "--zap-log-level=error",
            "--zap-stacktrace-level=panic",
            "--zap-time-encoding=iso8601",
            "--kubeconfig=/k",
        ])
        .unwrap();
        assert_eq!(args.metrics_addr, Listen::Socket(([127, 0, 0, 1], 8080).into()));
        assert_eq!(args.health_probe_addr, Listen::Disabled);
        assert!(!args.leader_elect && !args.metrics_secure && args.enable_http2);
        assert_eq!(args.webhook_cert_files(), ("/w/w.crt".into(), "/w/w.key".into()));
        assert_eq!(args.metrics_cert_files(), Some(("/m/m.crt".into(), "/m/m.key".into())));
        assert_eq!(
            args.logging(None),
            Logging {
                format: LogFormat::Text,
                filter: "error".into()
            }
        );
        assert_eq!(args.kubeconfig, Some(PathBuf::from("/k")));
        let notes = args.flags_without_effect();
        assert_eq!(notes.len(), 3, "{notes:?}");
        assert!(notes[0].starts_with("--enable-http2: accepted;"), "{notes:?}");
        assert!(
            notes[1].starts_with("--zap-stacktrace-level=panic: accepted;"),
            "{notes:?}"
        );
        assert!(
            notes[2].starts_with("--zap-time-encoding=iso8601: accepted;"),
            "{notes:?}"
        );
        // Go's flag package takes one dash and a flag's value apart from it.
        let args = go_parse(&["-leader-elect=false", "-metrics-bind-address", ":9000", "-zap-devel"]).unwrap();
        assert!(!args.leader_elect);
        assert_eq!(args.metrics_addr, Listen::AllInterfaces(9000));
        assert_eq!(args.zap_devel, Some(true));
        assert!(go_parse(&[]).unwrap().flags_without_effect().is_empty());
    }

    #[test]
    fn booleans_are_bare_or_take_a_go_value_after_an_equals_sign() {
        for flag in [
            "--leader-elect",
            "--metrics-secure",
            "--enable-webhooks",
            "--drift-repair",
            "--enable-http2",
        ] {
            for (form, expected) in [
                (flag.to_owned(), true),
                (format!("{flag}=false"), false),
                (format!("{flag}=1"), true),
                (format!("{flag}=F"), false),
            ] {
                // A bare boolean does not swallow the flag after it.
                let args = go_parse(&[&form, "--worker-threads=2"]).unwrap();
                let value = [
                    args.leader_elect,
                    args.metrics_secure,
                    args.enable_webhooks,
                    args.drift_repair,
                    args.enable_http2,
                ];
                let index = [
                    "--leader-elect",
                    "--metrics-secure",
                    "--enable-webhooks",
                    "--drift-repair",
                    "--enable-http2",
                ]
                .iter()
                .position(|f| *f == flag)
                .unwrap();
                assert_eq!(value[index], expected, "{form}");
                assert_eq!(args.worker_threads, 2, "{form}");
            }
            let err = go_parse(&[&format!("{flag}=yes")]).unwrap_err().to_string();
            assert!(err.contains(flag) && err.contains("`yes` is not a boolean"), "{err}");
        }
    }

    #[test]
    fn a_bad_go_value_is_refused_naming_the_flag() {
        let cases = [
            (
                "--metrics-bind-address=8443",
                "--metrics-addr",
                "`8443` is not a listen address",
            ),
            (
                "--health-probe-bind-address=:http",
                "--health-probe-addr",
                "`:http`: the port must be",
            ),
            ("--webhook-addr=0", "--webhook-addr", "--enable-webhooks=false"),
            ("--zap-log-level=warn", "--zap-log-level", "invalid log level `warn`"),
            ("--zap-encoder=xml", "--log-format", "xml"),
            (
                "--zap-time-encoding=nano",
                "--zap-time-encoding",
                "invalid time encoding `nano`",
            ),
            (
                "--zap-stacktrace-level=debug",
                "--zap-stacktrace-level",
                "invalid stacktrace level `debug`",
            ),
        ];
        for (arg, flag, reason) in cases {
            let err = go_parse(&[arg]).unwrap_err().to_string();
            assert!(err.contains(flag) && err.contains(reason), "{arg}: {err}");
        }
    }

    #[test]
    fn logging_takes_explicit_settings_before_the_zap_devel_preset() {
        let debug = ZapLevel::Debug.filter();
        let cases: &[(&[&str], Option<&str>, LogFormat, &str)] = &[
            (&[], None, LogFormat::Text, "info"),
            (&[], Some("warn,kube=debug"), LogFormat::Text, "warn,kube=debug"),
            (&["--zap-devel"], None, LogFormat::Text, &debug),
            (&["--zap-devel=false"], None, LogFormat::Json, "info"),
            (&["--zap-devel", "--log-format=json"], None, LogFormat::Json, &debug),
            (
                &["--zap-devel", "--zap-encoder=JSON"],
                Some("warn"),
                LogFormat::Json,
                "warn",
            ),
            (
                &["--zap-devel=false", "--zap-encoder=console", "--zap-log-level=2"],
                Some("warn"),
                LogFormat::Text,
                &ZapLevel::Verbosity(2).filter(),
            ),
            (&["--log-format=json"], Some(""), LogFormat::Json, "info"),
        ];
        for (argv, rust_log, format, filter) in cases {
            let logging = go_parse(argv).unwrap().logging(*rust_log);
            assert_eq!(
                logging,
                Logging {
                    format: *format,
                    filter: (*filter).to_owned()
                },
                "{argv:?} {rust_log:?}"
            );
        }
    }

    #[test]
    fn the_lease_namespace_is_given_else_the_pods_else_the_default() {
        let none = go_parse(&[]).unwrap();
        assert_eq!(none.lease_namespace(None), "vrouter-system");
        assert_eq!(none.lease_namespace(Some("")), "vrouter-system");
        assert_eq!(none.lease_namespace(Some("go-system\n")), "go-system");
        let given = go_parse(&["--lease-namespace=ours"]).unwrap();
        assert_eq!(given.lease_namespace(Some("go-system")), "ours");
    }

    #[test]
    fn empty_certificate_directories_mean_what_they_mean_to_controller_runtime() {
        let args = go_parse(&["--metrics-cert-path=", "--webhook-cert-path="]).unwrap();
        assert_eq!(args.metrics_cert_files(), None, "a self-signed metrics certificate");
        assert_eq!(
            args.webhook_cert_files().0,
            PathBuf::from("/tmp/k8s-webhook-server/serving-certs/tls.crt")
        );
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
