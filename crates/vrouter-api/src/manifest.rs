//! Reading manifests (multi-document YAML) into the typed resources, with
//! errors that name the document, the object and the field at fault.

use std::fmt;

use serde::de::DeserializeOwned;

use crate::{
    ProxmoxCluster, VRouterBinding, VRouterConfig, VRouterParams, VRouterStatus, VRouterTarget, VRouterTemplate,
};

/// One object of a manifest.
#[derive(Clone, Debug, PartialEq)]
pub enum Manifest {
    Template(VRouterTemplate),
    Target(VRouterTarget),
    Binding(VRouterBinding),
    Params(VRouterParams),
    Config(VRouterConfig),
    ProxmoxCluster(ProxmoxCluster),
    Status(VRouterStatus),
    /// An object of another kind (a Secret, a Namespace…), kept as written.
    Other(serde_json::Value),
}

impl Manifest {
    pub fn kind(&self) -> &str {
        match self {
            Manifest::Template(_) => "VRouterTemplate",
            Manifest::Target(_) => "VRouterTarget",
            Manifest::Binding(_) => "VRouterBinding",
            Manifest::Params(_) => "VRouterParams",
            Manifest::Config(_) => "VRouterConfig",
            Manifest::ProxmoxCluster(_) => "ProxmoxCluster",
            Manifest::Status(_) => "VRouterStatus",
            Manifest::Other(v) => v.get("kind").and_then(|k| k.as_str()).unwrap_or(""),
        }
    }

    /// The metadata of an object of ours; `None` for other kinds.
    pub fn metadata(&self) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta> {
        match self {
            Manifest::Template(o) => Some(&o.metadata),
            Manifest::Target(o) => Some(&o.metadata),
            Manifest::Binding(o) => Some(&o.metadata),
            Manifest::Params(o) => Some(&o.metadata),
            Manifest::Config(o) => Some(&o.metadata),
            Manifest::ProxmoxCluster(o) => Some(&o.metadata),
            Manifest::Status(o) => Some(&o.metadata),
            Manifest::Other(_) => None,
        }
    }

    /// The object as JSON, as it would be sent to the API server.
    pub fn to_value(&self) -> serde_json::Value {
        let result = match self {
            Manifest::Template(o) => serde_json::to_value(o),
            Manifest::Target(o) => serde_json::to_value(o),
            Manifest::Binding(o) => serde_json::to_value(o),
            Manifest::Params(o) => serde_json::to_value(o),
            Manifest::Config(o) => serde_json::to_value(o),
            Manifest::ProxmoxCluster(o) => serde_json::to_value(o),
            Manifest::Status(o) => serde_json::to_value(o),
            Manifest::Other(v) => Ok(v.clone()),
        };
        result.expect("typed resources always serialize")
    }
}

/// A manifest that cannot be read, located as precisely as possible.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ManifestError {
    /// Where the text came from (a file path, or `<stdin>`).
    pub source_name: String,
    /// 1-based index of the YAML document in the text.
    pub document: usize,
    pub kind: Option<String>,
    pub name: Option<String>,
    /// Dotted path of the field at fault (`spec.provider.proxmox.vmid`), when known.
    pub field: Option<String>,
    pub message: String,
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: document {}", self.source_name, self.document)?;
        match (&self.kind, &self.name) {
            (Some(kind), Some(name)) => write!(f, " ({kind} {name:?})")?,
            (Some(kind), None) => write!(f, " ({kind})")?,
            _ => {}
        }
        if let Some(field) = &self.field {
            write!(f, ": field `{field}`")?;
        }
        write!(f, ": {}", self.message)
    }
}

const API_VERSION: &str = "vrouter.kojuro.date/v1";

/// One object of a text, with the fields of it that no typed resource knows
/// (a typo such as `comands:`): the API server's strict field validation
/// would refuse them; a plain parse drops them.
#[derive(Clone, Debug, PartialEq)]
pub struct Parsed {
    /// 1-based index of the YAML document in the text.
    pub document: usize,
    pub manifest: Manifest,
    /// Dotted paths (`spec.comands`, `spec.targetRefs[0].nmae`).
    pub unknown_fields: Vec<String>,
}

/// Parses every document of `text`; `source_name` is used in errors only.
/// Unknown fields of our kinds are dropped; [`parse_documents_strictly`]
/// names them.
// The error is large because it locates the fault precisely; it is built once
// per failed parse, never on a hot path, so boxing would buy nothing.
#[allow(clippy::result_large_err)]
pub fn parse_documents(text: &str, source_name: &str) -> Result<Vec<Manifest>, ManifestError> {
    Ok(parse_documents_strictly(text, source_name)?
        .into_iter()
        .map(|parsed| parsed.manifest)
        .collect())
}

/// [`parse_documents`], also naming every field of our kinds that no typed
/// resource knows (objects of other kinds are kept as written, unchecked).
#[allow(clippy::result_large_err)]
pub fn parse_documents_strictly(text: &str, source_name: &str) -> Result<Vec<Parsed>, ManifestError> {
    let mut out = Vec::new();
    for (index, document) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let number = index + 1;
        let error =
            |kind: Option<String>, name: Option<String>, field: Option<String>, message: String| ManifestError {
                source_name: source_name.to_owned(),
                document: number,
                kind,
                name,
                field,
                message,
            };
        let value: serde_json::Value =
            serde::Deserialize::deserialize(document).map_err(|e| error(None, None, None, e.to_string()))?;
        if value.is_null() {
            continue; // an empty document, e.g. after a trailing `---`
        }
        let kind = value.get("kind").and_then(|k| k.as_str()).map(str::to_owned);
        let name = value
            .pointer("/metadata/name")
            .and_then(|n| n.as_str())
            .map(str::to_owned);
        let Some(kind_str) = kind.clone() else {
            return Err(error(None, name, Some("kind".into()), "missing `kind`".into()));
        };
        let api_version = value.get("apiVersion").and_then(|v| v.as_str()).unwrap_or("");
        let ours = api_version == API_VERSION;
        let mut unknown = Vec::new();
        let parsed = match (ours, kind_str.as_str()) {
            (true, "VRouterTemplate") => typed(value, &mut unknown).map(Manifest::Template),
            (true, "VRouterTarget") => typed(value, &mut unknown).map(Manifest::Target),
            (true, "VRouterBinding") => typed(value, &mut unknown).map(Manifest::Binding),
            (true, "VRouterParams") => typed(value, &mut unknown).map(Manifest::Params),
            (true, "VRouterConfig") => typed(value, &mut unknown).map(Manifest::Config),
            (true, "ProxmoxCluster") => typed(value, &mut unknown).map(Manifest::ProxmoxCluster),
            (true, "VRouterStatus") => typed(value, &mut unknown).map(Manifest::Status),
            (true, other) => Err((Some("kind".into()), format!("unknown kind {other:?} in {API_VERSION}"))),
            (false, _) if api_version.starts_with("vrouter.kojuro.date/") => Err((
                Some("apiVersion".into()),
                format!("unsupported apiVersion {api_version:?}; this operator serves {API_VERSION}"),
            )),
            (false, _) => Ok(Manifest::Other(value)),
        };
        let manifest = parsed.map_err(|(field, message)| error(Some(kind_str), name, field, message))?;
        out.push(Parsed {
            document: number,
            manifest,
            unknown_fields: unknown,
        });
    }
    Ok(out)
}

/// Deserializes one of our kinds, locating a failure by field and noting
/// every field the type does not know.
fn typed<T: DeserializeOwned>(
    value: serde_json::Value,
    unknown: &mut Vec<String>,
) -> Result<T, (Option<String>, String)> {
    // The derived resources check `apiVersion` and `kind` by hand (above),
    // not as fields.
    let mut note = |path: serde_ignored::Path<'_>| match field_path(&path) {
        top if top == "apiVersion" || top == "kind" => {}
        field => unknown.push(field),
    };
    serde_path_to_error::deserialize(serde_ignored::Deserializer::new(value, &mut note)).map_err(|e| {
        let path = e.path().to_string();
        let field = (path != ".").then_some(path);
        (field, e.into_inner().to_string())
    })
}

/// `spec.targetRefs[0].name`, the way the other errors name a field.
fn field_path(path: &serde_ignored::Path<'_>) -> String {
    use serde_ignored::Path;
    match path {
        Path::Root => String::new(),
        Path::Seq { parent, index } => format!("{}[{index}]", field_path(parent)),
        Path::Map { parent, key } => match field_path(parent) {
            p if p.is_empty() => key.clone(),
            p => format!("{p}.{key}"),
        },
        Path::Some { parent } | Path::NewtypeStruct { parent } | Path::NewtypeVariant { parent } => field_path(parent),
    }
}
