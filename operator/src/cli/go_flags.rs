//! The Go operator's command line, read as its `flag` package and
//! controller-runtime read it, so that the args of its Deployment run this
//! binary unchanged: booleans as `strconv.ParseBool` takes them (and a bare
//! `--flag` meaning true), `-flag` with one dash, and the zap logging flags.
//! The flags themselves, and what each maps to, are in [`crate::cli`].

use std::ffi::OsString;

/// A boolean as Go's `strconv.ParseBool` reads it.
pub fn parse_bool(text: &str) -> Result<bool, String> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!(
            "`{text}` is not a boolean: expected true or false (or 1, t, T, TRUE, True, 0, f, F, FALSE, False)"
        )),
    }
}

/// controller-runtime's `--zap-log-level`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZapLevel {
    Debug,
    Info,
    Error,
    /// Only panics. Nothing here logs at that level, so it is logged as
    /// `error`: errors are shown, never fewer lines than asked for.
    Panic,
    /// `N > 0`: logr's verbosity `V(N)`, more detail as it grows.
    Verbosity(u8),
}

impl ZapLevel {
    /// The tracing filter it means: debug and beyond only for the
    /// operator's own crates (the HTTP and TLS libraries' debug lines are
    /// per-packet noise that zap never had), info for the rest.
    pub fn filter(self) -> String {
        let ours = |level: &str| {
            [
                "vrouter_operator",
                "vrouter_providers",
                "vrouter_rollout",
                "vrouter_render",
                "vrouter_qga",
                "kube_runtime",
            ]
            .map(|target| format!(",{target}={level}"))
            .concat()
        };
        match self {
            ZapLevel::Info => "info".to_owned(),
            ZapLevel::Error | ZapLevel::Panic => "error".to_owned(),
            ZapLevel::Debug | ZapLevel::Verbosity(1) => format!("info{}", ours("debug")),
            ZapLevel::Verbosity(_) => format!("info{}", ours("trace")),
        }
    }
}

/// `--zap-log-level`: `debug`, `info`, `error`, `panic` (any case) or an
/// integer above 0, as controller-runtime takes it.
pub fn parse_zap_level(text: &str) -> Result<ZapLevel, String> {
    match text.to_ascii_lowercase().as_str() {
        "debug" => Ok(ZapLevel::Debug),
        "info" => Ok(ZapLevel::Info),
        "error" => Ok(ZapLevel::Error),
        "panic" => Ok(ZapLevel::Panic),
        _ => match text.parse::<i64>() {
            Ok(n) if n > 0 => Ok(ZapLevel::Verbosity(n.min(127) as u8)),
            _ => Err(format!(
                "invalid log level `{text}`: expected debug, info, error, panic or an integer above 0"
            )),
        },
    }
}

/// `--zap-stacktrace-level`: checked as controller-runtime checks it, and
/// kept only to be named in the log (it changes nothing here).
pub fn parse_zap_stacktrace_level(text: &str) -> Result<String, String> {
    match text.to_ascii_lowercase().as_str() {
        "info" | "error" | "panic" => Ok(text.to_owned()),
        _ => Err(format!(
            "invalid stacktrace level `{text}`: expected info, error or panic"
        )),
    }
}

/// `--zap-time-encoding`: checked as controller-runtime checks it, and kept
/// only to be named in the log (it changes nothing here).
pub fn parse_zap_time_encoding(text: &str) -> Result<String, String> {
    match text.to_ascii_lowercase().as_str() {
        "epoch" | "millis" | "nanos" | "iso8601" | "rfc3339" | "rfc3339nano" => Ok(text.to_owned()),
        _ => Err(format!(
            "invalid time encoding `{text}`: expected epoch, millis, nanos, iso8601, rfc3339 or rfc3339nano"
        )),
    }
}

/// Go's `flag` package takes `-name` as well as `--name`; clap reads
/// `-name` as a cluster of short flags. Each argument that is `-name` or
/// `-name=value`, where `name` is one of `long_names`, gains its second
/// dash; nothing after `--` is touched. A flag's separate value or a path
/// is left as it is unless it is itself `-` and one of our long names.
pub fn with_double_dashes(args: impl IntoIterator<Item = OsString>, long_names: &[&str]) -> Vec<OsString> {
    let mut args = args.into_iter();
    let mut out: Vec<OsString> = args.next().into_iter().collect();
    let mut rewriting = true;
    for arg in args {
        let text = arg.to_str().unwrap_or_default();
        if text == "--" {
            rewriting = false;
        }
        let name = text.strip_prefix('-').unwrap_or_default();
        let name = name.split_once('=').map_or(name, |(name, _)| name);
        if rewriting && !name.starts_with('-') && name.len() > 1 && long_names.contains(&name) {
            out.push(format!("-{text}").into());
        } else {
            out.push(arg);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn booleans_read_as_go_reads_them() {
        for text in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(parse_bool(text), Ok(true), "{text}");
        }
        for text in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(parse_bool(text), Ok(false), "{text}");
        }
        for text in ["", "yes", "on", "tRuE", "2"] {
            let err = parse_bool(text).unwrap_err();
            assert!(err.starts_with(&format!("`{text}` is not a boolean")), "{err}");
        }
    }

    #[test]
    fn zap_levels_map_to_filters() {
        let ours_debug = parse_zap_level("debug").unwrap().filter();
        assert!(ours_debug.starts_with("info,vrouter_operator=debug,"), "{ours_debug}");
        let cases = [
            ("info", ZapLevel::Info, "info".to_owned()),
            ("INFO", ZapLevel::Info, "info".to_owned()),
            ("error", ZapLevel::Error, "error".to_owned()),
            ("panic", ZapLevel::Panic, "error".to_owned()),
            ("Debug", ZapLevel::Debug, ours_debug.clone()),
            ("1", ZapLevel::Verbosity(1), ours_debug.clone()),
            ("3", ZapLevel::Verbosity(3), ours_debug.replace("=debug", "=trace")),
            ("1000", ZapLevel::Verbosity(127), ours_debug.replace("=debug", "=trace")),
        ];
        for (text, level, filter) in cases {
            assert_eq!(parse_zap_level(text), Ok(level), "{text}");
            assert_eq!(level.filter(), filter, "{text}");
            tracing_subscriber::EnvFilter::try_new(&filter).unwrap();
        }
        for text in ["0", "-1", "warn", "loud", ""] {
            let err = parse_zap_level(text).unwrap_err();
            assert!(err.starts_with(&format!("invalid log level `{text}`")), "{err}");
        }
    }

    #[test]
    fn zap_stacktrace_and_time_values_are_checked_as_go_checks_them() {
        assert!(parse_zap_stacktrace_level("Error").is_ok());
        assert!(parse_zap_stacktrace_level("debug").is_err());
        for text in ["epoch", "millis", "nanos", "ISO8601", "rfc3339", "rfc3339nano"] {
            assert!(parse_zap_time_encoding(text).is_ok(), "{text}");
        }
        let err = parse_zap_time_encoding("nano").unwrap_err();
        assert!(err.starts_with("invalid time encoding `nano`"), "{err}");
    }

    #[test]
    fn one_dash_long_flags_gain_a_second() {
        let names = ["leader-elect", "metrics-bind-address", "kubeconfig", "help"];
        let cases: &[(&[&str], &[&str])] = &[
            (&["-leader-elect"], &["--leader-elect"]),
            (&["-leader-elect=false"], &["--leader-elect=false"]),
            (&["-metrics-bind-address=:8443"], &["--metrics-bind-address=:8443"]),
            (
                &["-kubeconfig", "/k", "-leader-elect"],
                &["--kubeconfig", "/k", "--leader-elect"],
            ),
            (&["--leader-elect"], &["--leader-elect"]),
            (&["-help"], &["--help"]),
            // Not ours, a short flag, after `--`.
            (&["-unknown-flag"], &["-unknown-flag"]),
            (&["-h", "-V"], &["-h", "-V"]),
            (&["--", "-leader-elect"], &["--", "-leader-elect"]),
        ];
        for (args, expected) in cases {
            let argv = std::iter::once("op").chain(args.iter().copied()).map(OsString::from);
            let out = with_double_dashes(argv, &names);
            let expected: Vec<OsString> = std::iter::once("op")
                .chain(expected.iter().copied())
                .map(OsString::from)
                .collect();
            assert_eq!(out, expected, "{args:?}");
        }
    }
}
