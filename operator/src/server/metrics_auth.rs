//! Who may read `/metrics`: the API server decides, as for any request to
//! a Kubernetes component. The caller's bearer token is checked with a
//! TokenReview (who is it?) and the identity with a SubjectAccessReview
//! (may it `get` the non-resource URL `/metrics`?), the same pair
//! controller-runtime's secure metrics server and kube-rbac-proxy use. A
//! Prometheus is granted it by binding its ServiceAccount to the
//! `metrics-reader` ClusterRole the manifests ship.
//!
//! Decisions are cached for a minute per token (keyed by the token's
//! SHA-256, never the token): Prometheus scrapes every few seconds, and two
//! API requests per scrape would be its own load.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::api::Api;
use sha2::{Digest, Sha256};

/// The answer for one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Allowed,
    /// No usable bearer token, or one the API server does not accept (401).
    Unauthenticated(String),
    /// An identity the API server does not allow to read this path (403).
    Forbidden(String),
}

/// How long a decision is reused for the same token.
pub const DECISION_TTL: Duration = Duration::from_secs(60);
/// Tokens remembered at most; past that the cache starts over.
const MAX_CACHED: usize = 1024;

/// Asks the API server about bearer tokens, with a small cache.
pub struct MetricsAuth {
    client: kube::Client,
    cache: Mutex<HashMap<[u8; 32], (Decision, Instant)>>,
}

impl MetricsAuth {
    pub fn new(client: kube::Client) -> Self {
        MetricsAuth {
            client,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The decision for a request to `path` with this `Authorization`
    /// header. `Err` when the API server could not be asked (not cached).
    pub async fn decide(&self, authorization: Option<&str>, path: &str) -> Result<Decision, kube::Error> {
        let Some(token) = bearer_token(authorization) else {
            return Ok(Decision::Unauthenticated("a bearer token is required".into()));
        };
        let key: [u8; 32] = Sha256::digest(format!("{path}\n{token}")).into();
        if let Some(decision) = self.cached(&key) {
            return Ok(decision);
        }
        let decision = self.ask(token, path).await?;
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= MAX_CACHED {
            cache.retain(|_, (_, at)| at.elapsed() < DECISION_TTL);
            if cache.len() >= MAX_CACHED {
                cache.clear();
            }
        }
        cache.insert(key, (decision.clone(), Instant::now()));
        Ok(decision)
    }

    fn cached(&self, key: &[u8; 32]) -> Option<Decision> {
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache
            .get(key)
            .filter(|(_, at)| at.elapsed() < DECISION_TTL)
            .map(|(decision, _)| decision.clone())
    }

    async fn ask(&self, token: &str, path: &str) -> Result<Decision, kube::Error> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_owned(),
                ..Default::default()
            },
            ..Default::default()
        };
        let reviewed = Api::<TokenReview>::all(self.client.clone())
            .create(&crate::runtime::context::post_params(), &review)
            .await?;
        let status = reviewed.status.unwrap_or_default();
        let user = match (status.authenticated, status.user) {
            (Some(true), Some(user)) => user,
            _ => {
                let why = status
                    .error
                    .filter(|e| !e.is_empty())
                    .unwrap_or_else(|| "not authenticated".into());
                return Ok(Decision::Unauthenticated(format!("the token was not accepted: {why}")));
            }
        };
        let username = user.username.clone().unwrap_or_default();
        let access = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username,
                uid: user.uid,
                groups: user.groups,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.to_owned()),
                    verb: Some("get".to_owned()),
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answered = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&crate::runtime::context::post_params(), &access)
            .await?;
        Ok(if answered.status.is_some_and(|s| s.allowed) {
            Decision::Allowed
        } else {
            Decision::Forbidden(format!("{username:?} may not get {path}"))
        })
    }
}

/// The token of an `Authorization: Bearer <token>` header.
pub fn bearer_token(header: Option<&str>) -> Option<&str> {
    let (scheme, token) = header?.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_bearer_token_is_taken() {
        assert_eq!(bearer_token(Some("Bearer abc.def")), Some("abc.def"));
        assert_eq!(bearer_token(Some("bearer  abc ")), Some("abc"));
        for refused in [
            None,
            Some(""),
            Some("Bearer"),
            Some("Bearer  "),
            Some("Basic dXNlcjpwYXNz"),
        ] {
            assert_eq!(bearer_token(refused), None, "{refused:?}");
        }
    }
}
