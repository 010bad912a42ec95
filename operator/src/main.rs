//! The operator binary: serves metrics, health and admission webhooks on
//! every replica, and runs the controllers on the elected leader.

use std::sync::Arc;

use anyhow::Context as _;
use kube::Client;
use tokio::sync::watch;
use vrouter_operator::cli::webhook_cert_args::CertSource;
use vrouter_operator::cli::{self, Args, Command};
use vrouter_operator::cli::{diff, render as offline_render};
use vrouter_operator::controllers;
use vrouter_operator::runtime::context::{Context, FactoryProviders, Settings};
use vrouter_operator::runtime::leader::{self, Election};
use vrouter_operator::runtime::metrics::Metrics;
use vrouter_operator::runtime::telemetry;
use vrouter_operator::server::health_and_metrics::{self, Readiness};
use vrouter_operator::server::listen::Listen;
use vrouter_operator::server::metrics_auth::MetricsAuth;
use vrouter_operator::server::tls::ReloadingCert;
use vrouter_operator::server::webhook_certs;
use vrouter_operator::server::webhooks::review::Admission;
use vrouter_operator::server::webhooks::server;
use vrouter_operator::server::webhooks::target_cache::TargetCache;
use vrouter_providers::api_client::{self, ApiTimeouts};
use vrouter_providers::lookup_cache::{self, CachedLookup};
use vrouter_providers::{FactoryContext, KubeLookup};
use vrouter_render::TemplateEngine;

fn main() -> anyhow::Result<()> {
    let args = Args::from_command_line();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.worker_threads.into())
        .enable_all()
        .build()
        .context("starting the async runtime")?
        .block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    if args.command.is_none() && invoked_as_kubectl_plugin() {
        eprintln!("usage: kubectl vrouter <command> ...; see kubectl vrouter --help");
        std::process::exit(diff::EXIT_ERROR);
    }
    match &args.command {
        Some(Command::Diff {
            binding: Some(binding), ..
        }) => std::process::exit(diff_binding(binding, args.kubeconfig.as_deref()).await),
        Some(Command::Diff { paths, binding: None }) => {
            std::process::exit(diff_with_cluster(paths, args.kubeconfig.as_deref()).await)
        }
        Some(Command::Render { paths, script, strict }) => std::process::exit(render_offline(paths, *script, *strict)),
        Some(Command::Convert { paths, in_place }) => std::process::exit(convert_manifests(paths, *in_place)),
        Some(Command::Resume { binding }) => {
            std::process::exit(resume_binding(binding, args.kubeconfig.as_deref()).await)
        }
        Some(other) => std::process::exit(history_command(other, &args).await),
        None => {}
    }
    telemetry::init(&args.logging(std::env::var("RUST_LOG").ok().as_deref()));
    for note in args.flags_without_effect() {
        tracing::info!("{note}");
    }
    let client = connect(args.kubeconfig.as_deref()).await?;
    let metrics = Metrics::new();
    let health = Readiness::default();
    let (stop, stopping) = watch::channel(false);

    serve_probes(&args, health.clone()).await?;
    serve_metrics(&args, &client, &metrics, &health, stopping.clone()).await?;

    if args.enable_webhooks {
        serve_webhooks(&args, &client, &metrics, &health, stopping.clone()).await?;
    } else {
        tracing::info!("admission webhooks disabled (ENABLE_WEBHOOKS=false)");
    }

    let settings = Settings {
        apply_timeout: args.apply_timeout.to_std(),
        drift_repair: args.drift_repair,
        concurrency: args.concurrency(),
        ..Settings::default()
    };
    let providers = Arc::new(FactoryProviders::new(
        CachedLookup::new(KubeLookup::new(client.clone()), lookup_cache::DEFAULT_TTL),
        FactoryContext {
            client: Some(client.clone()),
            ..FactoryContext::default()
        },
    ));
    let ctx = Arc::new(Context::new(client.clone(), metrics, settings, providers));

    let mut candidate = match args.leader_elect {
        true => Some(campaign(&args, &client).await?),
        false => None,
    };
    health.set_ready();
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!("shutting down");
        let _ = stop.send(true);
    });
    match controllers::lead(ctx, candidate.as_mut(), args.watch_namespace.clone(), stopping).await {
        controllers::Ended::Shutdown => {
            if let Some(candidate) = candidate {
                candidate.release().await;
            }
            Ok(())
        }
        controllers::Ended::LostLease => {
            // Exit at once, without waiting for anything in flight: another
            // replica may lead already, and nothing of this term (queues,
            // holds, requests) may go on. The kubelet restarts this replica
            // as a follower.
            tracing::error!("lost the leader Lease: exiting");
            std::process::exit(EXIT_LOST_LEASE);
        }
    }
}

/// The exit status of a replica that lost the Lease.
const EXIT_LOST_LEASE: i32 = 3;

/// A client from `--kubeconfig` when given, else as kube finds one
/// (KUBECONFIG, ~/.kube/config, the pod's ServiceAccount).
async fn connect(kubeconfig: Option<&std::path::Path>) -> anyhow::Result<Client> {
    let mut config = match kubeconfig {
        None => kube::Config::infer()
            .await
            .context("connecting to the Kubernetes API: no Kubernetes configuration found")?,
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading --kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
                .await
                .with_context(|| format!("loading --kubeconfig {}", path.display()))?
        }
    };
    // Names the operator in managedFields of writes that set no field
    // manager themselves (kube-runtime's Events).
    let agent = hyper::header::HeaderValue::from_str(&vrouter_operator::runtime::context::user_agent())?;
    config.headers.push((hyper::header::USER_AGENT, agent));
    api_client::client(config, &ApiTimeouts::default()).context("connecting to the Kubernetes API")
}

/// `/healthz` and `/readyz` on `--health-probe-addr`, unless it is `0`.
async fn serve_probes(args: &Args, readiness: Readiness) -> anyhow::Result<()> {
    let Some(listener) = bind(args.health_probe_addr, "--health-probe-addr").await? else {
        tracing::info!("serving no health probes (--health-probe-addr=0)");
        return Ok(());
    };
    tokio::spawn(async move { axum::serve(listener, health_and_metrics::health_router(readiness)).await });
    Ok(())
}

async fn bind(listen: Listen, flag: &str) -> anyhow::Result<Option<tokio::net::TcpListener>> {
    listen.bind().await.with_context(|| format!("binding {flag}={listen}"))
}

/// Serves the admission webhooks over TLS, with the certificate reloaded
/// from its files as it rotates, until `stopping` turns true.
async fn serve_webhooks(
    args: &Args,
    client: &Client,
    metrics: &Metrics,
    health: &Readiness,
    stopping: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let tls = webhook_tls(args, client).await?;
    let admission = Admission {
        client: client.clone(),
        metrics: metrics.clone(),
        templates: Arc::new(TemplateEngine::new()),
        targets: TargetCache::watch(client.clone(), args.watch_namespace.clone()),
    };
    let listener = bind(args.webhook_addr, "--webhook-addr")
        .await?
        .context("the webhook address is never off")?;
    // /readyz fails if this task ever ends: the API server would
    // otherwise keep calling a replica whose webhook is gone.
    let serving = health.listener("webhook");
    tokio::spawn(async move {
        let _serving = serving;
        server::serve_tls(listener, tls, server::router(admission), stopping).await
    });
    tracing::info!(addr = %args.webhook_addr, "serving admission webhooks");
    Ok(())
}

/// The webhook's TLS: the mounted files, reloaded as they rotate, or the
/// certificate the operator makes and rotates in its Secret.
async fn webhook_tls(args: &Args, client: &Client) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    if args.webhook_cert_source.webhook_certs == CertSource::Operator {
        let pod_namespace =
            args.lease_namespace(std::fs::read_to_string(cli::IN_CLUSTER_NAMESPACE_FILE).ok().as_deref());
        let settings = args.webhook_cert_source.settings(&pod_namespace)?;
        return webhook_certs::start(client.clone(), settings)
            .await
            .context("making or reading the operator-managed webhook certificate");
    }
    let (cert_file, key_file) = args.webhook_cert_files();
    let cert = ReloadingCert::new(cert_file, key_file).context("loading the webhook serving certificate")?;
    tokio::spawn(cert.clone().watch(std::time::Duration::from_secs(10)));
    Ok(cert.server_config())
}

/// Starts competing for the leader lease as this pod.
async fn campaign(args: &Args, client: &Client) -> anyhow::Result<leader::Candidate> {
    let identity = args
        .identity
        .clone()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .context("--identity (POD_NAME) is required for leader election")?;
    let election = Election {
        lease_name: args.lease_name.clone(),
        namespace: args.lease_namespace(std::fs::read_to_string(cli::IN_CLUSTER_NAMESPACE_FILE).ok().as_deref()),
        identity,
        timing: args.election_timing()?,
    };
    tracing::info!(identity = %election.identity, lease = %election.lease_name, timing = %leader::describe(&election.timing), "competing for the Lease");
    leader::campaign(client.clone(), &election).await
}

/// `/metrics` on `--metrics-addr`: HTTPS for callers the API server
/// allows, or plain HTTP with `--metrics-secure=false`.
async fn serve_metrics(
    args: &Args,
    client: &Client,
    metrics: &Metrics,
    health: &Readiness,
    stopping: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let Some(listener) = bind(args.metrics_addr, "--metrics-addr").await? else {
        tracing::info!("serving no metrics (--metrics-addr=0)");
        return Ok(());
    };
    let serving = health.listener("metrics");
    if !args.metrics_secure {
        tracing::warn!(addr = %args.metrics_addr, "serving /metrics in plain HTTP to anyone (METRICS_SECURE=false)");
        let router = health_and_metrics::metrics_router(metrics.clone(), None);
        tokio::spawn(async move {
            let _serving = serving;
            axum::serve(listener, router).await
        });
        return Ok(());
    }
    let tls = match args.metrics_cert_files() {
        Some((cert_file, key_file)) => {
            let cert = ReloadingCert::new(cert_file, key_file).context("loading the metrics serving certificate")?;
            tokio::spawn(cert.clone().watch(std::time::Duration::from_secs(10)));
            cert.server_config()
        }
        None => vrouter_operator::server::tls::self_signed_server_config(vec![
            "vrouter-operator-metrics".into(),
            "localhost".into(),
        ])
        .context("making a self-signed metrics certificate")?,
    };
    let auth = Arc::new(MetricsAuth::new(client.clone()));
    let router = health_and_metrics::metrics_router(metrics.clone(), Some(auth));
    tokio::spawn(async move {
        let _serving = serving;
        server::serve_tls(listener, tls, router, stopping).await
    });
    tracing::info!(addr = %args.metrics_addr, "serving /metrics over HTTPS to callers the API server allows");
    Ok(())
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// `vrouter-operator render`: prints to stdout, problems to stderr.
fn convert_manifests(paths: &[std::path::PathBuf], in_place: bool) -> i32 {
    use vrouter_operator::cli::convert::{EXIT_UNCONVERTIBLE, EXIT_UNREADABLE, convert_paths};
    let outcome = match convert_paths(paths) {
        Ok(outcome) => outcome,
        Err(message) => {
            eprintln!("error: {message}");
            return EXIT_UNREADABLE;
        }
    };
    let mut problems = 0;
    for (_, converted) in &outcome.files {
        for note in &converted.notes {
            eprintln!("{note}");
        }
        for problem in &converted.problems {
            eprintln!("error: {problem}");
        }
        problems += converted.problems.len();
    }
    if problems > 0 {
        eprintln!("error: {problems} construct(s) have no tera form; nothing was written");
        return EXIT_UNCONVERTIBLE;
    }
    let fields: usize = outcome.files.iter().map(|(_, c)| c.fields).sum();
    for (file, converted) in &outcome.files {
        if in_place {
            if converted.fields > 0
                && let Err(e) = std::fs::write(file, &converted.text)
            {
                eprintln!("error: {}: {e}", file.display());
                return EXIT_UNREADABLE;
            }
        } else {
            if !converted.text.starts_with("---") {
                println!("---");
            }
            println!("# Source: {}", file.display());
            print!("{}", converted.text);
        }
    }
    eprintln!(
        "converted {fields} template field(s) in {} file(s)",
        outcome.files.iter().filter(|(_, c)| c.fields > 0).count()
    );
    0
}

/// Installed as `kubectl-vrouter` on the PATH, kubectl runs this binary for
/// `kubectl vrouter ...`: there it is a tool, never the operator.
fn invoked_as_kubectl_plugin() -> bool {
    std::env::args_os()
        .next()
        .and_then(|arg0| {
            std::path::Path::new(&arg0)
                .file_name()
                .map(|n| n.to_string_lossy().starts_with("kubectl-"))
        })
        .unwrap_or(false)
}

async fn diff_with_cluster(paths: &[std::path::PathBuf], kubeconfig: Option<&std::path::Path>) -> i32 {
    let objects = match offline_render::load(paths) {
        Ok(objects) => objects,
        Err(message) => {
            eprintln!("error: {message}");
            return diff::EXIT_ERROR;
        }
    };
    let rendered = match offline_render::render_with_warnings(&objects) {
        Ok(rendered) => rendered,
        Err(problems) => {
            for problem in &problems {
                eprintln!("error: {problem}");
            }
            return diff::EXIT_ERROR;
        }
    };
    for warning in &rendered.warnings {
        eprintln!("warning: {warning}");
    }
    let live = match connect(kubeconfig).await {
        Ok(client) => diff::read_live(&client, &rendered.configs).await,
        Err(e) => {
            eprintln!("error: {e:#}");
            return diff::EXIT_ERROR;
        }
    };
    let live = match live {
        Ok(live) => live,
        Err(e) => {
            eprintln!("error: reading from the Kubernetes API: {e}");
            return diff::EXIT_ERROR;
        }
    };
    let mut code = diff::EXIT_SAME;
    for (config, live) in rendered.configs.iter().zip(&live) {
        if let Some(text) = diff::diff_config(config, live) {
            print!("{text}");
            code = diff::EXIT_DIFFERS;
        }
    }
    code
}

/// `diff --binding`: the binding in the cluster, rendered now, against what
/// the cluster and each router hold.
async fn diff_binding(binding: &str, kubeconfig: Option<&std::path::Path>) -> i32 {
    let client = match connect(kubeconfig).await {
        Ok(client) => client,
        Err(e) => {
            eprintln!("error: {e:#}");
            return diff::EXIT_ERROR;
        }
    };
    let (namespace, name) = match diff::live::parse_binding_ref(binding, client.default_namespace()) {
        Ok(found) => found,
        Err(message) => {
            eprintln!("error: {message}");
            return diff::EXIT_ERROR;
        }
    };
    let targets = match diff::live::read(&client, &namespace, &name).await {
        Ok(targets) => targets,
        Err(e) => {
            eprintln!("error: {e}");
            return diff::EXIT_ERROR;
        }
    };
    let rendered = format!("binding {name}, rendered from the cluster");
    let mut code = diff::EXIT_SAME;
    for target in &targets {
        let router = target
            .router
            .as_ref()
            .and_then(|router| diff::diff_router_config(&target.desired, router));
        let config = diff::diff_config_from(&target.desired, &rendered, &target.live);
        for text in [config, router].into_iter().flatten() {
            print!("{text}");
            code = diff::EXIT_DIFFERS;
        }
    }
    code
}

async fn resume_binding(binding: &str, kubeconfig: Option<&std::path::Path>) -> i32 {
    let resumed = async {
        let client = connect(kubeconfig).await?;
        let (namespace, name) = diff::live::parse_binding_ref(binding, client.default_namespace())
            .map_err(|m| anyhow::anyhow!(m.replace("--binding ", "")))?;
        Ok::<_, anyhow::Error>(vrouter_operator::cli::resume::resume(&client, &namespace, &name).await?)
    };
    match resumed.await {
        Ok(note) => {
            println!("{note}");
            0
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            diff::EXIT_ERROR
        }
    }
}

/// `history` or `rollback --to-revision`.
async fn history_command(command: &Command, args: &Args) -> i32 {
    match command {
        Command::History { config, namespace } => {
            config_history(config, namespace.as_deref(), None, args.kubeconfig.as_deref()).await
        }
        Command::Rollback {
            config,
            namespace,
            to_revision,
        } => {
            config_history(
                config,
                namespace.as_deref(),
                Some(*to_revision),
                args.kubeconfig.as_deref(),
            )
            .await
        }
        _ => unreachable!("run handles every other command"),
    }
}

/// Lists the history (no `rollback_to`) or asks for the rollback.
async fn config_history(
    config: &str,
    namespace: Option<&str>,
    rollback_to: Option<u64>,
    kubeconfig: Option<&std::path::Path>,
) -> i32 {
    use vrouter_operator::cli::history;
    let done = async {
        let client = connect(kubeconfig).await?;
        let (namespace, name) = history::config_ref(config, namespace, client.default_namespace())?;
        Ok::<_, anyhow::Error>(match rollback_to {
            None => history::list(&client, &namespace, &name).await?,
            Some(revision) => history::rollback(&client, &namespace, &name, revision).await? + "\n",
        })
    };
    match done.await {
        Ok(out) => {
            print!("{out}");
            0
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            diff::EXIT_ERROR
        }
    }
}

fn render_offline(paths: &[std::path::PathBuf], script: bool, strict: bool) -> i32 {
    let objects = match offline_render::load(paths) {
        Ok(objects) => objects,
        Err(message) => {
            eprintln!("error: {message}");
            return offline_render::EXIT_UNREADABLE;
        }
    };
    let unknown = offline_render::unknown_fields(&objects);
    if strict && !unknown.is_empty() {
        for problem in &unknown {
            eprintln!("error: {problem}");
        }
        return offline_render::EXIT_INVALID;
    }
    match offline_render::render_with_warnings(&objects).and_then(|rendered| {
        for warning in &rendered.warnings {
            eprintln!("warning: {warning}");
        }
        offline_render::to_yaml(&rendered.configs, script).map_err(|m| {
            vec![offline_render::Problem {
                source: "<output>".into(),
                object: String::new(),
                field: None,
                message: m,
            }]
        })
    }) {
        Ok(text) => {
            print!("{text}");
            0
        }
        Err(problems) => {
            for problem in &problems {
                eprintln!("error: {problem}");
            }
            offline_render::EXIT_INVALID
        }
    }
}
