//! One gRPC channel per daemon address for the whole process. A channel
//! multiplexes every call over one HTTP/2 connection and reconnects on its
//! own, so building a provider per reconcile costs no new connection.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use tonic::transport::{Channel, Endpoint};

use crate::error::ProviderError;

static CHANNELS: LazyLock<Mutex<HashMap<String, Channel>>> = LazyLock::new(Default::default);

/// How long establishing the HTTP/2 connection may take before a call fails.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The URI a daemon address names: `host:port` as written in a
/// VRouterTarget, or an explicit `http://host:port`.
pub(crate) fn endpoint_uri(address: &str) -> Result<String, ProviderError> {
    let address = address.trim();
    let invalid = |reason: String| ProviderError::InvalidTarget {
        target: format!("vrouter-daemon address {address:?}"),
        reason,
    };
    if address.is_empty() {
        return Err(invalid("the address is empty".into()));
    }
    if address.starts_with("https://") {
        return Err(ProviderError::NotSupported {
            provider: "vrouter-daemon",
            what: format!("TLS to the ControlService ({address}); the published daemon serves plaintext gRPC"),
        });
    }
    let uri = if address.starts_with("http://") {
        address.to_string()
    } else if address.contains("://") {
        return Err(invalid("only host:port or http://host:port is accepted".into()));
    } else {
        format!("http://{address}")
    };
    let parsed: http::Uri = uri.parse().map_err(|e| invalid(format!("not a valid URI: {e}")))?;
    if parsed.port_u16().is_none() {
        return Err(invalid("the address needs a port, e.g. host:50052".into()));
    }
    Ok(uri)
}

/// The shared channel for `address`, created lazily: nothing is dialled
/// until the first call. Must be called inside a tokio runtime, which then
/// owns the channel's background task.
pub(crate) fn channel_for(address: &str) -> Result<Channel, ProviderError> {
    let uri = endpoint_uri(address)?;
    let mut channels = CHANNELS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(channel) = channels.get(&uri) {
        return Ok(channel.clone());
    }
    let channel = Endpoint::from_shared(uri.clone())
        .map_err(|e| ProviderError::InvalidTarget {
            target: format!("vrouter-daemon address {address:?}"),
            reason: e.to_string(),
        })?
        .connect_timeout(CONNECT_TIMEOUT)
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_while_idle(true)
        .connect_lazy();
    channels.insert(uri, channel.clone());
    Ok(channel)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_become_http_uris() {
        assert_eq!(endpoint_uri("svc.ns.svc:50052").unwrap(), "http://svc.ns.svc:50052");
        assert_eq!(endpoint_uri(" http://127.0.0.1:9 ").unwrap(), "http://127.0.0.1:9");
        for bad in ["", "svc.ns.svc", "grpc://x:1", "http://"] {
            let err = endpoint_uri(bad).unwrap_err();
            assert!(matches!(err, ProviderError::InvalidTarget { .. }), "{bad:?}: {err}");
        }
        assert!(matches!(
            endpoint_uri("https://x:1").unwrap_err(),
            ProviderError::NotSupported { .. }
        ));
    }
}
