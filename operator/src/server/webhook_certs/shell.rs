//! The imperative shell: reads the Secret and the webhook configurations,
//! asks [`super::plan`] what to do, writes the Secret (optimistically: a
//! `resourceVersion` precondition, so of replicas racing one write wins and
//! the others re-read on their next check), then publishes the bundle and
//! serves the Secret's certificate.
//!
//! Every replica runs it: each serves what the Secret holds, and the writes
//! are the same whoever makes them, so no leadership is needed. Order
//! matters: a bundle is published only from a Secret already written, and a
//! replica serves only what a written Secret holds.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use rustls::ServerConfig;

use super::material::{self, Lifetimes, MaterialError, Stored, bundle_ids};
use super::plan::{self, Observed, Policy, Requested};
use super::serving::{ServingError, SwappableCert};

/// Annotations on the Secret by which an administrator asks for a rotation
/// now: any new value is honoured once.
pub const ROTATE_SERVING: &str = "vrouter.kojuro.date/rotate-serving";
pub const ROTATE_CA: &str = "vrouter.kojuro.date/rotate-ca";

const FIELD_MANAGER: &str = "vrouter-operator";

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("reading or writing Secret {secret} or the webhook configurations: {source}")]
    Api { secret: String, source: kube::Error },
    #[error("webhook configuration {0} does not exist: the chart creates it with the operator")]
    NoConfiguration(String),
    #[error(transparent)]
    Material(#[from] MaterialError),
    #[error(transparent)]
    Serving(#[from] ServingError),
    #[error("Secret {0} holds no serving certificate yet")]
    NothingToServe(String),
}

#[derive(Clone, Debug)]
pub struct Settings {
    pub namespace: String,
    pub secret: String,
    /// The ValidatingWebhookConfigurations whose every webhook gets the bundle.
    pub configurations: Vec<String>,
    /// The serving certificate's DNS names (or IP addresses).
    pub names: Vec<String>,
    pub policy: Policy,
    pub check_every: Duration,
    pub lifetimes: Lifetimes,
}

struct Manager {
    secrets: Api<Secret>,
    configs: Api<ValidatingWebhookConfiguration>,
    settings: Settings,
    /// CA id -> since when this process has seen it in every bundle.
    published_since: Mutex<HashMap<String, SystemTime>>,
}

/// Makes or reads the certificate, serves it, and keeps checking it every
/// `settings.check_every`. An error on the first check is returned: a
/// replica that cannot get a certificate must not pretend to serve.
pub async fn start(client: Client, settings: Settings) -> Result<Arc<ServerConfig>, CertError> {
    let manager = Manager {
        secrets: Api::namespaced(client.clone(), &settings.namespace),
        configs: Api::all(client),
        settings,
        published_since: Mutex::default(),
    };
    let stored = manager.check().await?;
    let serving = stored
        .serving
        .ok_or_else(|| CertError::NothingToServe(manager.settings.secret.clone()))?;
    let served = SwappableCert::new(&serving.cert, &serving.key)?;
    let config = served.server_config();
    tokio::spawn(manager.keep_checking(served));
    Ok(config)
}

impl Manager {
    async fn keep_checking(self, served: Arc<SwappableCert>) {
        let mut tick = tokio::time::interval(self.settings.check_every);
        tick.tick().await;
        loop {
            tick.tick().await;
            match self.check().await.and_then(|stored| serve(&served, &stored)) {
                Ok(()) => {}
                Err(error) => tracing::warn!(%error, "checking the webhook certificate; serving the current one"),
            }
        }
    }

    /// One round: read, decide, write, publish. Returns what the Secret
    /// holds afterwards (as read, when another replica won the write).
    async fn check(&self) -> Result<Stored, CertError> {
        let secret = self
            .secrets
            .get_opt(&self.settings.secret)
            .await
            .map_err(|e| self.api(e))?;
        let stored = read_stored(secret.as_ref());
        let published = self.published().await?;
        let now = SystemTime::now();
        self.note_published(&stored, &published, now);
        let (cas, serving) = (stored.plan_cas(|id| self.since(id)), stored.plan_serving());
        let (requested, honoured) = requests(secret.as_ref(), &stored, now);
        let observed = Observed {
            now,
            cas: &cas,
            serving: serving.as_ref(),
            names: &self.settings.names,
            published: &published,
            requested,
        };
        let plan = plan::decide(&observed, self.settings.policy);
        let mut next = stored.clone();
        if plan.writes_secret(&observed) || honoured != stored.honoured {
            next = material::carry_out(&plan, &stored, now, &self.settings.names, self.settings.lifetimes)?;
            next.honoured = honoured;
            if !self.write(secret, &next).await? {
                // Another replica wrote first (a first start races): serve
                // what it wrote; the next check plans from there.
                let written = self
                    .secrets
                    .get_opt(&self.settings.secret)
                    .await
                    .map_err(|e| self.api(e))?;
                return Ok(read_stored(written.as_ref()));
            }
            tracing::info!(
                new_ca = plan.new_ca,
                serving = plan.issue_serving.is_some(),
                cas = next.cas.len(),
                "wrote the webhook certificate Secret"
            );
        }
        if plan.publish || plan.writes_secret(&observed) {
            self.publish(&next).await?;
        }
        Ok(next)
    }

    fn api(&self, source: kube::Error) -> CertError {
        CertError::Api {
            secret: format!("{}/{}", self.settings.namespace, self.settings.secret),
            source,
        }
    }

    fn since(&self, id: &str) -> Option<SystemTime> {
        self.published_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .copied()
    }

    /// Remembers since when each stored CA is in every webhook's bundle;
    /// one missing from any bundle starts over.
    fn note_published(&self, stored: &Stored, published: &[Vec<String>], now: SystemTime) {
        let mut since = self.published_since.lock().unwrap_or_else(PoisonError::into_inner);
        for ca in &stored.cas {
            let id = &ca.record.id;
            if !published.is_empty() && published.iter().all(|held| held.contains(id)) {
                since.entry(id.clone()).or_insert(now);
            } else {
                since.remove(id);
            }
        }
    }

    /// The CA ids each webhook of each configuration trusts.
    async fn published(&self) -> Result<Vec<Vec<String>>, CertError> {
        let mut held = Vec::new();
        for name in &self.settings.configurations {
            let config = self.configs.get_opt(name).await.map_err(|e| self.api(e))?;
            let config = config.ok_or_else(|| CertError::NoConfiguration(name.clone()))?;
            held.extend(config.webhooks.unwrap_or_default().iter().map(|webhook| {
                webhook
                    .client_config
                    .ca_bundle
                    .as_ref()
                    .map(|pem| bundle_ids(&pem.0))
                    .unwrap_or_default()
            }));
        }
        Ok(held)
    }

    /// Creates or replaces the Secret; `false` when another writer won.
    async fn write(&self, current: Option<Secret>, stored: &Stored) -> Result<bool, CertError> {
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PostParams::default()
        };
        let result = match current {
            Some(mut secret) => {
                secret.data = Some(stored.to_data());
                self.secrets.replace(&self.settings.secret, &params, &secret).await
            }
            None => self.secrets.create(&params, &self.new_secret(stored)).await,
        };
        match result {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(e) => Err(self.api(e)),
        }
    }

    fn new_secret(&self, stored: &Stored) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some(self.settings.secret.clone()),
                namespace: Some(self.settings.namespace.clone()),
                labels: Some(BTreeMap::from([(
                    "app.kubernetes.io/managed-by".to_owned(),
                    "vrouter-operator".to_owned(),
                )])),
                ..ObjectMeta::default()
            },
            type_: Some("kubernetes.io/tls".to_owned()),
            data: Some(stored.to_data()),
            ..Secret::default()
        }
    }

    /// Writes the stored bundle into every webhook of the configurations
    /// that lack it; a conflict is left to the next check.
    async fn publish(&self, stored: &Stored) -> Result<(), CertError> {
        let bundle = ByteString(stored.bundle_pem().into_bytes());
        for name in &self.settings.configurations {
            let Some(mut config) = self.configs.get_opt(name).await.map_err(|e| self.api(e))? else {
                return Err(CertError::NoConfiguration(name.clone()));
            };
            let webhooks = config.webhooks.get_or_insert_with(Vec::new);
            if webhooks
                .iter()
                .all(|w| w.client_config.ca_bundle.as_ref() == Some(&bundle))
            {
                continue;
            }
            for webhook in webhooks.iter_mut() {
                webhook.client_config.ca_bundle = Some(bundle.clone());
            }
            let params = PostParams {
                field_manager: Some(FIELD_MANAGER.to_owned()),
                ..PostParams::default()
            };
            match self.configs.replace(name, &params, &config).await {
                Ok(_) => {
                    tracing::info!(configuration = %name, cas = stored.cas.len(), "published the webhook CA bundle")
                }
                Err(kube::Error::Api(status)) if status.code == 409 => {}
                Err(e) => return Err(self.api(e)),
            }
        }
        Ok(())
    }
}

/// What the Secret holds; a Secret that is not what this operator writes
/// (hand-edited, truncated) is started over, as on a first start.
fn read_stored(secret: Option<&Secret>) -> Stored {
    let Some(data) = secret.and_then(|s| s.data.as_ref()) else {
        return Stored::default();
    };
    Stored::from_data(data).unwrap_or_else(|error| {
        tracing::warn!(%error, "the webhook certificate Secret is not usable; making new certificates");
        Stored::default()
    })
}

/// The rotation requests on the Secret not yet honoured (as made now), and
/// the values to record as honoured once written.
fn requests(secret: Option<&Secret>, stored: &Stored, now: SystemTime) -> (Requested, material::Honoured) {
    let annotation = |key: &str| {
        secret
            .and_then(|s| s.metadata.annotations.as_ref())
            .and_then(|a| a.get(key))
            .cloned()
    };
    let honoured = material::Honoured {
        serving: annotation(ROTATE_SERVING),
        ca: annotation(ROTATE_CA),
    };
    let requested = Requested {
        serving: (honoured.serving.is_some() && honoured.serving != stored.honoured.serving).then_some(now),
        ca: (honoured.ca.is_some() && honoured.ca != stored.honoured.ca).then_some(now),
    };
    (requested, honoured)
}

fn serve(served: &SwappableCert, stored: &Stored) -> Result<(), CertError> {
    if let Some(serving) = &stored.serving
        && served.swap(&serving.cert, &serving.key)?
    {
        tracing::info!("serving the webhook certificate from the Secret");
    }
    Ok(())
}
