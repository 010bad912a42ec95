//! Listen addresses as the flags give them, in our form (`HOST:PORT`) and in
//! the Go operator's (controller-runtime's `:PORT`, and `0` for "off"), and
//! binding them.
//!
//! The bind rule for `:PORT` (the form with no host): every interface of
//! both families, as Go's `net.Listen("tcp", ":PORT")` does. That is one
//! socket on `[::]:PORT` with `IPV6_V6ONLY` off, so IPv4 clients arrive on
//! it as IPv4-mapped addresses. Where the host has no IPv6 (the kernel
//! refuses an IPv6 socket, or `::` cannot be bound), it is `0.0.0.0:PORT`
//! instead. A port that is taken, or not ours to take, is an error in either
//! family: it is never a reason to fall back.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use tokio::net::TcpListener;

/// Where one listener binds, or that it is off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listen {
    /// Not served at all (controller-runtime's `0`).
    Disabled,
    /// `:PORT`: every interface of both families (the module's bind rule).
    AllInterfaces(u16),
    /// `HOST:PORT` with an IP address (or `localhost`) as the host.
    Socket(SocketAddr),
}

impl std::fmt::Display for Listen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Listen::Disabled => f.write_str("0 (off)"),
            Listen::AllInterfaces(port) => write!(f, ":{port}"),
            Listen::Socket(addr) => write!(f, "{addr}"),
        }
    }
}

/// Why a flag's value is not a listen address.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ListenError {
    #[error(
        "`{0}` is not a listen address: expected HOST:PORT with an IP address or localhost as HOST \
         (e.g. 0.0.0.0:8443 or [::]:8443), :PORT for every interface{1}"
    )]
    NotAnAddress(String, &'static str),
    #[error("`{0}`: the port must be a number from 0 to 65535")]
    BadPort(String),
    #[error("this listener cannot be turned off with `{0}`{1}")]
    CannotDisable(String, &'static str),
}

/// What a flag makes of the two values controller-runtime gives a meaning
/// of its own: `0` and the empty string.
#[derive(Clone, Copy, Debug)]
pub struct Policy {
    /// What `0` means; `None` refuses it, with `hint` after the reason.
    pub zero: Option<Listen>,
    /// What the empty string means; `None` refuses it.
    pub empty: Option<Listen>,
    /// Said after a refusal of `0` or the empty string (how to turn the
    /// listener off instead), and after the forms accepted.
    pub hint: &'static str,
}

impl Listen {
    /// Reads `text` as `policy` says; pure.
    pub fn parse(text: &str, policy: Policy) -> Result<Listen, ListenError> {
        let special = match text {
            "0" => Some(policy.zero),
            "" => Some(policy.empty),
            _ => None,
        };
        if let Some(meaning) = special {
            return meaning.ok_or_else(|| ListenError::CannotDisable(text.to_owned(), policy.hint));
        }
        if let Some(port) = text.strip_prefix(':').filter(|port| !port.contains(':')) {
            return port
                .parse()
                .map(Listen::AllInterfaces)
                .map_err(|_| ListenError::BadPort(text.to_owned()));
        }
        if let Ok(addr) = text.parse::<SocketAddr>() {
            return Ok(Listen::Socket(addr));
        }
        match text.rsplit_once(':') {
            Some((host, port)) if host.eq_ignore_ascii_case("localhost") => port
                .parse()
                .map(|port| Listen::Socket(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port)))
                .map_err(|_| ListenError::BadPort(text.to_owned())),
            Some((host, port)) if port.parse::<u16>().is_err() && host.parse::<IpAddr>().is_ok() => {
                Err(ListenError::BadPort(text.to_owned()))
            }
            _ => Err(ListenError::NotAnAddress(text.to_owned(), policy.hint)),
        }
    }

    /// Binds it as the module's rule says; `None` when it is off.
    pub async fn bind(self) -> io::Result<Option<TcpListener>> {
        let socket = match self {
            Listen::Disabled => return Ok(None),
            Listen::Socket(addr) => TcpListener::bind(addr).await?,
            Listen::AllInterfaces(port) => match bind_dual_stack(port) {
                Ok(listener) => listener,
                Err(e) if ipv6_unavailable(&e) => {
                    tracing::info!(port, error = %e, "no IPv6 on this host: listening on 0.0.0.0 only");
                    TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)).await?
                }
                Err(e) => return Err(e),
            },
        };
        Ok(Some(socket))
    }
}

/// `[::]:port` with IPv4-mapped addresses accepted too.
fn bind_dual_stack(port: u16) -> io::Result<TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::IPV6, Type::STREAM, Some(Protocol::TCP))?;
    socket.set_only_v6(false)?;
    // As tokio's and Go's listeners do: a restarted process rebinds at once
    // while the old connections sit in TIME_WAIT.
    socket.set_reuse_address(true)?;
    socket.bind(&SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port).into())?;
    socket.listen(1024)?;
    socket.set_nonblocking(true)?;
    TcpListener::from_std(socket.into())
}

/// Whether a failed `[::]` bind means the host has no IPv6 (fall back to
/// IPv4) rather than a problem IPv4 would have too (port taken, no
/// permission: report it).
pub fn ipv6_unavailable(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::AddrNotAvailable
        || matches!(error.raw_os_error(), Some(code) if code == libc::EAFNOSUPPORT || code == libc::EPROTONOSUPPORT)
}

const METRICS: Policy = Policy {
    zero: Some(Listen::Disabled),
    // controller-runtime's default when the address is empty.
    empty: Some(Listen::AllInterfaces(8080)),
    hint: ", or 0 to serve no metrics",
};
const HEALTH: Policy = Policy {
    zero: Some(Listen::Disabled),
    empty: Some(Listen::Disabled),
    hint: ", or 0 to serve no probes",
};
const WEBHOOK: Policy = Policy {
    zero: None,
    empty: None,
    hint: " (to serve no webhooks: --enable-webhooks=false)",
};

/// `--metrics-addr` / `--metrics-bind-address`.
pub fn metrics_flag(text: &str) -> Result<Listen, ListenError> {
    Listen::parse(text, METRICS)
}

/// `--health-probe-addr` / `--health-probe-bind-address`.
pub fn health_flag(text: &str) -> Result<Listen, ListenError> {
    Listen::parse(text, HEALTH)
}

/// `--webhook-addr`.
pub fn webhook_flag(text: &str) -> Result<Listen, ListenError> {
    Listen::parse(text, WEBHOOK)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One flag's parser.
    type Flag = fn(&str) -> Result<Listen, ListenError>;

    fn socket(text: &str) -> Listen {
        Listen::Socket(text.parse().unwrap())
    }

    #[test]
    fn every_form_reads_as_the_flag_says() {
        let cases: &[(&str, Flag, Listen)] = &[
            (":8443", metrics_flag, Listen::AllInterfaces(8443)),
            (":0", health_flag, Listen::AllInterfaces(0)),
            ("0.0.0.0:8443", metrics_flag, socket("0.0.0.0:8443")),
            ("127.0.0.1:8081", health_flag, socket("127.0.0.1:8081")),
            ("[::]:8443", metrics_flag, socket("[::]:8443")),
            ("[::1]:9443", webhook_flag, socket("[::1]:9443")),
            ("localhost:8080", metrics_flag, socket("127.0.0.1:8080")),
            ("0", metrics_flag, Listen::Disabled),
            ("0", health_flag, Listen::Disabled),
            ("", health_flag, Listen::Disabled),
            ("", metrics_flag, Listen::AllInterfaces(8080)),
        ];
        for (text, flag, expected) in cases {
            assert_eq!(flag(text).as_ref(), Ok(expected), "{text:?}");
        }
    }

    #[test]
    fn bad_values_are_refused_with_the_reason() {
        let cases: &[(&str, Flag, &str)] = &[
            (
                ":https",
                metrics_flag,
                "`:https`: the port must be a number from 0 to 65535",
            ),
            (":70000", metrics_flag, "`:70000`: the port must be"),
            ("0.0.0.0:99999", metrics_flag, "`0.0.0.0:99999`: the port must be"),
            ("localhost:x", metrics_flag, "`localhost:x`: the port must be"),
            ("8443", metrics_flag, "`8443` is not a listen address"),
            ("::8443", metrics_flag, "`::8443` is not a listen address"),
            (
                "example.com:8443",
                health_flag,
                "`example.com:8443` is not a listen address",
            ),
            ("[::]", metrics_flag, "`[::]` is not a listen address"),
            (
                "0",
                webhook_flag,
                "cannot be turned off with `0` (to serve no webhooks: --enable-webhooks=false)",
            ),
            ("", webhook_flag, "cannot be turned off with ``"),
        ];
        for (text, flag, expected) in cases {
            let err = flag(text).unwrap_err().to_string();
            assert!(err.contains(expected), "{text:?}: {err}");
        }
        let err = metrics_flag("nowhere").unwrap_err().to_string();
        assert!(
            err.ends_with(":PORT for every interface, or 0 to serve no metrics"),
            "{err}"
        );
    }

    #[test]
    fn only_a_missing_ipv6_falls_back_to_ipv4() {
        let cases = [
            (io::Error::from_raw_os_error(libc::EAFNOSUPPORT), true),
            (io::Error::from_raw_os_error(libc::EPROTONOSUPPORT), true),
            (io::Error::from_raw_os_error(libc::EADDRNOTAVAIL), true),
            (io::Error::from_raw_os_error(libc::EADDRINUSE), false),
            (io::Error::from_raw_os_error(libc::EACCES), false),
            (io::Error::from_raw_os_error(libc::EMFILE), false),
        ];
        for (error, falls_back) in cases {
            assert_eq!(ipv6_unavailable(&error), falls_back, "{error}");
        }
    }

    #[tokio::test]
    async fn all_interfaces_takes_both_families_and_off_binds_nothing() {
        assert!(Listen::Disabled.bind().await.unwrap().is_none());
        let listener = Listen::AllInterfaces(0).bind().await.unwrap().unwrap();
        let port = listener.local_addr().unwrap().port();
        // Both loopbacks reach the one listener (on a host without IPv6,
        // only 127.0.0.1 is dialled).
        let mut dialled = vec![SocketAddr::from((Ipv4Addr::LOCALHOST, port))];
        if listener.local_addr().unwrap().is_ipv6() {
            dialled.push(SocketAddr::from((Ipv6Addr::LOCALHOST, port)));
        }
        for addr in dialled {
            let client = tokio::net::TcpStream::connect(addr).await.unwrap();
            let (_, from) = listener.accept().await.unwrap();
            assert_eq!(from.port(), client.local_addr().unwrap().port(), "{addr}");
        }
        // A taken port is an error, not a quiet fallback to the other family.
        let taken = Listen::AllInterfaces(port).bind().await.unwrap_err();
        assert_eq!(taken.kind(), io::ErrorKind::AddrInUse, "{taken}");
    }
}
