//! When to make a new CA or serving certificate, which CAs the bundle keeps,
//! and when to publish it: pure, from what the shell observed.
//!
//! Invariants that keep every admission request answered through a
//! rotation (each replica serves the Secret's certificate within moments of
//! its change; the API server trusts what the webhook configurations'
//! `caBundle` says once its informer has seen them):
//! - a serving certificate is signed only by a CA that has been in every
//!   webhook configuration's bundle for at least [`Policy::propagation`]
//!   (so the API server already trusts it when replicas start serving it),
//!   except when no such CA exists at all (first start, or every CA lapsed);
//! - a CA leaves the bundle only when it has expired, or when it is neither
//!   the newest nor the issuer of the serving certificate and that
//!   certificate has been in place for [`Policy::propagation`] (so no
//!   replica still serves one it signed).

use std::time::{Duration, SystemTime};

/// When a certificate is valid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validity {
    pub not_before: SystemTime,
    pub not_after: SystemTime,
}

impl Validity {
    /// Two thirds into the lifetime: a renewal has a third of it to succeed.
    pub fn renew_at(&self) -> SystemTime {
        let lifetime = self.not_after.duration_since(self.not_before).unwrap_or_default();
        self.not_before + lifetime * 2 / 3
    }

    pub fn expired(&self, now: SystemTime) -> bool {
        now >= self.not_after
    }
}

/// One CA of the stored bundle, identified by its fingerprint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ca {
    pub id: String,
    pub validity: Validity,
    /// Since when every webhook configuration's bundle holds it, as far as
    /// this process has seen; `None` while any lacks it.
    pub published_since: Option<SystemTime>,
}

/// The stored serving certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Serving {
    /// The fingerprint of the CA that signed it.
    pub issuer: String,
    pub validity: Validity,
    /// When it was written to the Secret (its `not_before` is set earlier,
    /// against clock skew, so it cannot say).
    pub issued_at: SystemTime,
    pub names: Vec<String>,
}

/// An administrator's request to rotate now (a Secret annotation): honoured
/// once for each certificate made before it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Requested {
    pub serving: Option<SystemTime>,
    pub ca: Option<SystemTime>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// How long a change to the webhook configurations or the Secret takes
    /// to reach every API server and replica, with margin.
    pub propagation: Duration,
}

/// What the shell observed.
#[derive(Clone, Debug)]
pub struct Observed<'a> {
    pub now: SystemTime,
    /// The stored CAs, oldest first; the last one's key is stored.
    pub cas: &'a [Ca],
    pub serving: Option<&'a Serving>,
    /// The DNS names of the webhook Service.
    pub names: &'a [String],
    /// The CA fingerprints each webhook configuration's bundle holds.
    pub published: &'a [Vec<String>],
    pub requested: Requested,
}

/// A CA of the bundle to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BundleCa {
    Kept(String),
    /// The one [`Plan::new_ca`] makes.
    New,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub new_ca: bool,
    /// The bundle to store and publish, oldest first.
    pub bundle: Vec<BundleCa>,
    /// Issue a serving certificate signed by this CA.
    pub issue_serving: Option<BundleCa>,
    /// Write the bundle into the webhook configurations.
    pub publish: bool,
}

impl Plan {
    /// Whether the Secret must be written.
    pub fn writes_secret(&self, observed: &Observed<'_>) -> bool {
        self.new_ca || self.issue_serving.is_some() || self.bundle.len() != observed.cas.len()
    }
}

pub fn decide(observed: &Observed<'_>, policy: Policy) -> Plan {
    let live: Vec<&Ca> = observed
        .cas
        .iter()
        .filter(|ca| !ca.validity.expired(observed.now))
        .collect();
    let new_ca = needs_new_ca(observed, live.last().copied());
    let signer = signer(observed, &live, new_ca, policy);
    let issue_serving = serving_due(observed, signer.as_ref())
        .then_some(signer)
        .flatten()
        .map(|(ca, _)| ca);
    let mut bundle: Vec<BundleCa> = live
        .iter()
        .filter(|ca| keeps(observed, ca, live.last().copied(), policy))
        .map(|ca| BundleCa::Kept(ca.id.clone()))
        .collect();
    if new_ca {
        bundle.push(BundleCa::New);
    }
    let publish = new_ca || observed.published.iter().any(|held| !same_ids(held, &bundle));
    Plan {
        new_ca,
        bundle,
        issue_serving,
        publish,
    }
}

fn needs_new_ca(observed: &Observed<'_>, newest: Option<&Ca>) -> bool {
    let Some(newest) = newest else { return true };
    observed.now >= newest.validity.renew_at()
        || observed
            .requested
            .ca
            .is_some_and(|at| at > newest.validity.not_before && at <= observed.now)
}

/// Who signs a serving certificate made now, and whether it is ready
/// (published long enough): the newest ready live CA; else the newest live
/// one, else the new one, so that a first start serves at all.
fn signer(observed: &Observed<'_>, live: &[&Ca], new_ca: bool, policy: Policy) -> Option<(BundleCa, bool)> {
    let ready = live.iter().rev().find(|ca| {
        ca.published_since
            .is_some_and(|since| since + policy.propagation <= observed.now)
    });
    match (ready, live.last(), new_ca) {
        (Some(ca), _, _) => Some((BundleCa::Kept(ca.id.clone()), true)),
        (None, Some(newest), _) => Some((BundleCa::Kept(newest.id.clone()), false)),
        (None, None, true) => Some((BundleCa::New, false)),
        (None, None, false) => None,
    }
}

/// A serving certificate is due when missing, two thirds through its
/// lifetime, for other names, requested, signed by a CA no longer live, or
/// signed by another CA than a ready signer (a CA rotation's second step).
fn serving_due(observed: &Observed<'_>, signer: Option<&(BundleCa, bool)>) -> bool {
    let Some(serving) = observed.serving else { return true };
    let issuer_live = observed
        .cas
        .iter()
        .any(|ca| ca.id == serving.issuer && !ca.validity.expired(observed.now));
    let requested = observed
        .requested
        .serving
        .is_some_and(|at| at > serving.issued_at && at <= observed.now);
    let moves = signer.is_some_and(|(ca, ready)| *ready && *ca != BundleCa::Kept(serving.issuer.clone()));
    !issuer_live || observed.now >= serving.validity.renew_at() || serving.names != observed.names || requested || moves
}

fn keeps(observed: &Observed<'_>, ca: &Ca, newest: Option<&Ca>, policy: Policy) -> bool {
    let Some(serving) = observed.serving else { return true };
    newest.is_some_and(|n| n.id == ca.id)
        || serving.issuer == ca.id
        || observed.now < serving.issued_at + policy.propagation
}

fn same_ids(held: &[String], bundle: &[BundleCa]) -> bool {
    held.len() == bundle.len()
        && held
            .iter()
            .zip(bundle)
            .all(|(id, ca)| matches!(ca, BundleCa::Kept(kept) if kept == id))
}

#[cfg(test)]
mod tests;
