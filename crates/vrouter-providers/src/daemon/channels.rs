//! One gRPC channel per daemon endpoint for the whole process. A channel
//! multiplexes every call over one HTTP/2 connection and reconnects on its
//! own, so building a provider per reconcile costs no new connection.
//!
//! Channels are keyed by URI, server name and CA bundle hash: a bundle
//! rotated in its Secret gets a channel of its own (its next connection
//! already checks with the new roots), and two targets naming one address
//! with different bundles never share a connection one of them would not
//! trust.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use tonic::transport::{Channel, Endpoint};
use vrouter_api::DaemonTransport;

use super::tls::{DaemonCaBundle, DaemonTls};
use crate::error::ProviderError;

/// What makes two channels interchangeable.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ChannelKey {
    uri: String,
    /// `None` for plaintext.
    server_name: Option<String>,
    ca_hash: Option<[u8; 32]>,
}

static CHANNELS: LazyLock<Mutex<HashMap<ChannelKey, Channel>>> = LazyLock::new(Default::default);

/// How long establishing the connection (TCP, then TLS) may take before a call fails.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The URI a daemon address names: `host:port` as written in a
/// VRouterTarget, or an explicit `http://host:port` or `https://host:port`.
pub(crate) fn endpoint_uri(address: &str) -> Result<(String, DaemonTransport), ProviderError> {
    let address = address.trim();
    let invalid = |reason: String| ProviderError::InvalidTarget {
        target: format!("vrouter-daemon address {address:?}"),
        reason,
    };
    if address.is_empty() {
        return Err(invalid("the address is empty".into()));
    }
    let transport = DaemonTransport::of(address).map_err(invalid)?;
    let uri = match address.split_once("://") {
        Some((_, rest)) if transport == DaemonTransport::Tls => format!("https://{rest}"),
        Some((_, rest)) => format!("http://{rest}"),
        None => format!("http://{address}"),
    };
    let parsed: http::Uri = uri.parse().map_err(|e| invalid(format!("not a valid URI: {e}")))?;
    if parsed.port_u16().is_none() {
        return Err(invalid("the address needs a port, e.g. host:50052".into()));
    }
    Ok((uri, transport))
}

/// The shared channel for `address`, created lazily: nothing is dialled
/// until the first call. An `https://` address is dialled through TLS
/// trusting `bundle` alone when given, the system roots otherwise; a CA
/// bundle with a plaintext address is refused (it would secure nothing).
/// Must be called inside a tokio runtime, which then owns the channel's
/// background task.
pub(crate) fn channel_for(address: &str, bundle: Option<&DaemonCaBundle>) -> Result<Channel, ProviderError> {
    let (uri, transport) = endpoint_uri(address)?;
    let endpoint = Endpoint::from_shared(uri.clone())
        .map_err(|e| ProviderError::InvalidTarget {
            target: format!("vrouter-daemon address {address:?}"),
            reason: e.to_string(),
        })?
        .connect_timeout(CONNECT_TIMEOUT)
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_while_idle(true);
    let tls = match transport {
        DaemonTransport::Tls => Some(Arc::new(DaemonTls::new(endpoint.uri(), bundle)?)),
        DaemonTransport::Plaintext if bundle.is_some() => {
            return Err(ProviderError::InvalidTls {
                reason: "spec.provider.daemon.caBundle is only used with an https:// address".into(),
            });
        }
        DaemonTransport::Plaintext => None,
    };
    let key = ChannelKey {
        uri,
        server_name: tls.as_ref().map(|t| t.server_name.to_str().into_owned()),
        ca_hash: tls.as_ref().and_then(|t| t.ca_hash),
    };
    let mut channels = CHANNELS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(channel) = channels.get(&key) {
        return Ok(channel.clone());
    }
    let channel = match tls {
        Some(tls) => endpoint.connect_with_connector_lazy(tls.connector()),
        None => endpoint.connect_lazy(),
    };
    channels.insert(key, channel.clone());
    Ok(channel)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_become_http_or_https_uris() {
        let plain = DaemonTransport::Plaintext;
        let tls = DaemonTransport::Tls;
        for (address, uri, transport) in [
            ("svc.ns.svc:50052", "http://svc.ns.svc:50052", plain),
            (" http://127.0.0.1:9 ", "http://127.0.0.1:9", plain),
            ("https://127.0.0.1:9", "https://127.0.0.1:9", tls),
            ("HTTPS://d.example:443", "https://d.example:443", tls),
        ] {
            assert_eq!(
                endpoint_uri(address).unwrap(),
                (uri.to_string(), transport),
                "{address:?}"
            );
        }
        for bad in ["", "svc.ns.svc", "grpc://x:1", "http://", "https://x"] {
            let err = endpoint_uri(bad).unwrap_err();
            assert!(matches!(err, ProviderError::InvalidTarget { .. }), "{bad:?}: {err}");
        }
    }

    fn bundle(pem: &str) -> DaemonCaBundle {
        DaemonCaBundle {
            pem: pem.into(),
            source: "Secret ns/ca key \"ca.crt\"".into(),
        }
    }

    fn ca_pem() -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.self_signed(&key).unwrap().pem()
    }

    /// Shared channels are told apart by every input of their handshake.
    #[tokio::test]
    async fn a_channel_is_shared_only_with_the_same_address_and_bundle() {
        let count = || CHANNELS.lock().unwrap().len();
        let (one, two) = (bundle(&ca_pem()), bundle(&ca_pem()));
        let address = "https://127.0.0.1:7";
        channel_for(address, Some(&one)).unwrap();
        let after_one = count();
        channel_for(address, Some(&one)).unwrap();
        assert_eq!(count(), after_one, "same address and bundle: shared");
        channel_for(address, Some(&two)).unwrap();
        assert_eq!(count(), after_one + 1, "another bundle: a channel of its own");
        channel_for(address, None).unwrap();
        assert_eq!(count(), after_one + 2, "the system roots: a channel of their own");
        channel_for("https://localhost:7", Some(&one)).unwrap();
        assert_eq!(count(), after_one + 3, "another server name: a channel of its own");
    }

    #[tokio::test]
    async fn bad_bundles_and_plaintext_with_a_bundle_are_refused_naming_the_field() {
        for (address, pem, needle) in [
            (
                "https://127.0.0.1:7",
                "not PEM",
                "spec.provider.daemon.caBundle (Secret ns/ca key \"ca.crt\"): the CA bundle holds no PEM certificate",
            ),
            (
                "https://127.0.0.1:7",
                "-----BEGIN CERTIFICATE-----\n!!\n-----END CERTIFICATE-----\n",
                "not valid PEM",
            ),
            ("http://127.0.0.1:7", &ca_pem(), "only used with an https:// address"),
            ("127.0.0.1:7", &ca_pem(), "only used with an https:// address"),
        ] {
            let err = channel_for(address, Some(&bundle(pem))).unwrap_err();
            assert!(matches!(err, ProviderError::InvalidTls { .. }), "{err}");
            assert!(err.to_string().contains(needle), "{address} {pem:?}: {err}");
        }
    }
}
