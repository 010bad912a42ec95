//! The certificates as the Secret stores them, and making new ones.
//!
//! The Secret holds `ca.crt` (the bundle, oldest CA first), `ca.key` (their
//! keys in the same order), `tls.crt` and `tls.key` (the serving pair) and
//! `certs.json` (each certificate's dates, issuer and names, so that no
//! X.509 parser is needed to plan). A CA is known by the SHA-256 of its DER,
//! which is also how a webhook configuration's `caBundle` is read.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use k8s_openapi::ByteString;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::plan::{BundleCa, Ca, Plan, Serving, Validity};

/// Backdating of `notBefore`, against clocks behind this one.
const BACKDATE: Duration = Duration::from_secs(3600);

#[derive(Debug, thiserror::Error)]
pub enum MaterialError {
    #[error("Secret key {0} is missing")]
    Missing(&'static str),
    #[error("Secret key {key} is unreadable: {reason}")]
    Unreadable { key: &'static str, reason: String },
    #[error("the Secret's certs.json does not describe its ca.crt and ca.key")]
    Mismatch,
    #[error("the plan names a CA the Secret does not hold")]
    UnknownCa,
    #[error("making a certificate: {0}")]
    Make(#[from] rcgen::Error),
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CaRecord {
    pub id: String,
    pub name: String,
    pub not_before: u64,
    pub not_after: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServingRecord {
    pub issuer: String,
    pub not_before: u64,
    pub not_after: u64,
    pub issued_at: u64,
    pub names: Vec<String>,
}

/// The values of the rotation-request annotations already acted on.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Honoured {
    pub serving: Option<String>,
    pub ca: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    pub cas: Vec<CaRecord>,
    pub serving: Option<ServingRecord>,
    #[serde(default)]
    pub honoured: Honoured,
}

/// A CA with its key, PEM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredCa {
    pub record: CaRecord,
    pub cert: String,
    pub key: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServingPair {
    pub record: ServingRecord,
    pub cert: String,
    pub key: String,
}

/// What the Secret holds; empty when it does not exist.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stored {
    pub cas: Vec<StoredCa>,
    pub serving: Option<ServingPair>,
    pub honoured: Honoured,
}

/// Lifetimes of what is made; each is renewed two thirds through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lifetimes {
    pub ca: Duration,
    pub serving: Duration,
}

impl Default for Lifetimes {
    fn default() -> Self {
        const DAY: u64 = 86_400;
        Lifetimes {
            ca: Duration::from_secs(3 * 365 * DAY),
            serving: Duration::from_secs(365 * DAY),
        }
    }
}

pub fn fingerprint(der: &[u8]) -> String {
    hex::encode(Sha256::digest(der))
}

/// The fingerprints of the certificates in a PEM bundle; what is not a
/// certificate is skipped (an API server ignores it as well).
pub fn bundle_ids(pem: &[u8]) -> Vec<String> {
    CertificateDer::pem_slice_iter(pem)
        .filter_map(Result::ok)
        .map(|der| fingerprint(der.as_ref()))
        .collect()
}

/// Splits concatenated PEM blocks, each kept with its armour.
fn pem_blocks(text: &str) -> Vec<String> {
    text.split_inclusive("-----\n")
        .fold((Vec::new(), String::new()), |(mut blocks, mut current), piece| {
            current.push_str(piece);
            if piece.starts_with("-----END ") || piece.contains("\n-----END ") {
                blocks.push(std::mem::take(&mut current));
            }
            (blocks, current)
        })
        .0
}

fn text(data: &BTreeMap<String, ByteString>, key: &'static str) -> Result<String, MaterialError> {
    let bytes = data.get(key).ok_or(MaterialError::Missing(key))?;
    String::from_utf8(bytes.0.clone()).map_err(|e| MaterialError::Unreadable {
        key,
        reason: e.to_string(),
    })
}

impl Stored {
    /// Reads a Secret's data; anything inconsistent is an error (the shell
    /// then starts over, as on a first start).
    pub fn from_data(data: &BTreeMap<String, ByteString>) -> Result<Stored, MaterialError> {
        let record: Record =
            serde_json::from_str(&text(data, "certs.json")?).map_err(|e| MaterialError::Unreadable {
                key: "certs.json",
                reason: e.to_string(),
            })?;
        let cas = stored_cas(&record, &text(data, "ca.crt")?, &text(data, "ca.key")?)?;
        let serving = match record.serving {
            Some(record) => Some(ServingPair {
                record,
                cert: text(data, "tls.crt")?,
                key: text(data, "tls.key")?,
            }),
            None => None,
        };
        Ok(Stored {
            cas,
            serving,
            honoured: record.honoured,
        })
    }

    pub fn to_data(&self) -> BTreeMap<String, ByteString> {
        let record = Record {
            cas: self.cas.iter().map(|ca| ca.record.clone()).collect(),
            serving: self.serving.as_ref().map(|s| s.record.clone()),
            honoured: self.honoured.clone(),
        };
        let (cert, key) = self
            .serving
            .as_ref()
            .map(|s| (s.cert.clone(), s.key.clone()))
            .unwrap_or_default();
        [
            ("ca.crt", self.bundle_pem()),
            ("ca.key", self.cas.iter().map(|ca| ca.key.as_str()).collect()),
            ("tls.crt", cert),
            ("tls.key", key),
            (
                "certs.json",
                serde_json::to_string(&record).expect("a record serialises"),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), ByteString(v.into_bytes())))
        .collect()
    }

    /// The CA bundle to publish: every stored CA, oldest first.
    pub fn bundle_pem(&self) -> String {
        self.cas.iter().map(|ca| ca.cert.as_str()).collect()
    }

    /// The plan's view of the stored CAs, with when each was seen published.
    pub fn plan_cas(&self, published_since: impl Fn(&str) -> Option<SystemTime>) -> Vec<Ca> {
        self.cas
            .iter()
            .map(|ca| Ca {
                id: ca.record.id.clone(),
                validity: validity(ca.record.not_before, ca.record.not_after),
                published_since: published_since(&ca.record.id),
            })
            .collect()
    }

    pub fn plan_serving(&self) -> Option<Serving> {
        self.serving.as_ref().map(|s| Serving {
            issuer: s.record.issuer.clone(),
            validity: validity(s.record.not_before, s.record.not_after),
            issued_at: at(s.record.issued_at),
            names: s.record.names.clone(),
        })
    }
}

fn stored_cas(record: &Record, certs: &str, keys: &str) -> Result<Vec<StoredCa>, MaterialError> {
    let (certs, keys) = (pem_blocks(certs), pem_blocks(keys));
    if certs.len() != record.cas.len() || keys.len() != record.cas.len() {
        return Err(MaterialError::Mismatch);
    }
    let stored: Vec<StoredCa> = record
        .cas
        .iter()
        .zip(certs.into_iter().zip(keys))
        .map(|(record, (cert, key))| StoredCa {
            record: record.clone(),
            cert,
            key,
        })
        .collect();
    let described = stored
        .iter()
        .all(|ca| bundle_ids(ca.cert.as_bytes()) == [ca.record.id.clone()]);
    described.then_some(stored).ok_or(MaterialError::Mismatch)
}

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

fn secs(time: SystemTime) -> u64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

fn validity(not_before: u64, not_after: u64) -> Validity {
    Validity {
        not_before: at(not_before),
        not_after: at(not_after),
    }
}

fn dated(params: &mut CertificateParams, not_before: u64, not_after: u64) {
    let epoch = rcgen::date_time_ymd(1970, 1, 1);
    params.not_before = epoch + Duration::from_secs(not_before);
    params.not_after = epoch + Duration::from_secs(not_after);
}

/// The parameters a CA is made with, and rebuilt with to sign: the same
/// name and key give the same subject and key identifier.
fn ca_params(record: &CaRecord) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, record.name.clone());
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    dated(&mut params, record.not_before, record.not_after);
    params
}

fn make_ca(now: SystemTime, lifetime: Duration) -> Result<StoredCa, MaterialError> {
    let key = KeyPair::generate()?;
    let mut record = CaRecord {
        id: String::new(),
        name: format!("vrouter-operator-webhook-ca-{}", secs(now)),
        not_before: secs(now - BACKDATE),
        not_after: secs(now + lifetime),
    };
    let cert = ca_params(&record).self_signed(&key)?;
    record.id = fingerprint(cert.der());
    Ok(StoredCa {
        record,
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

fn issue_serving(
    ca: &StoredCa,
    names: &[String],
    now: SystemTime,
    lifetime: Duration,
) -> Result<ServingPair, MaterialError> {
    let issuer = Issuer::new(ca_params(&ca.record), KeyPair::from_pem(&ca.key)?);
    let record = ServingRecord {
        issuer: ca.record.id.clone(),
        not_before: secs(now - BACKDATE),
        not_after: secs(now + lifetime),
        issued_at: secs(now),
        names: names.to_vec(),
    };
    let mut params = CertificateParams::new(names.to_vec())?;
    params
        .distinguished_name
        .push(DnType::CommonName, names.first().cloned().unwrap_or_default());
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    dated(&mut params, record.not_before, record.not_after);
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;
    Ok(ServingPair {
        record,
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// What the Secret holds once `plan` is carried out.
pub fn carry_out(
    plan: &Plan,
    stored: &Stored,
    now: SystemTime,
    names: &[String],
    lifetimes: Lifetimes,
) -> Result<Stored, MaterialError> {
    let new_ca = plan.new_ca.then(|| make_ca(now, lifetimes.ca)).transpose()?;
    let pick = |ca: &BundleCa| -> Result<StoredCa, MaterialError> {
        match ca {
            BundleCa::New => new_ca.clone().ok_or(MaterialError::UnknownCa),
            BundleCa::Kept(id) => stored
                .cas
                .iter()
                .find(|c| &c.record.id == id)
                .cloned()
                .ok_or(MaterialError::UnknownCa),
        }
    };
    let cas = plan.bundle.iter().map(&pick).collect::<Result<Vec<_>, _>>()?;
    let serving = match &plan.issue_serving {
        Some(signer) => Some(issue_serving(&pick(signer)?, names, now, lifetimes.serving)?),
        None => stored.serving.clone(),
    };
    Ok(Stored {
        cas,
        serving,
        honoured: stored.honoured.clone(),
    })
}

#[cfg(test)]
mod tests;
