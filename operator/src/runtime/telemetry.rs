//! Structured logs: human-readable text for a terminal, JSON for a log
//! pipeline. What is logged is a tracing filter ([`crate::cli::Args::logging`]
//! picks it: --zap-log-level, RUST_LOG, or `info`).

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Lines for a terminal (zap's `console`).
    #[value(alias = "console")]
    Text,
    Json,
}

/// How the process logs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Logging {
    pub format: LogFormat,
    /// A tracing filter; one that does not parse logs at `info` instead.
    pub filter: String,
}

pub fn init(logging: &Logging) {
    let filter = EnvFilter::try_new(&logging.filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match logging.format {
        // Colour codes only where a person reads them: in a file or a pipe
        // to a log collector they are noise that breaks grep. The formatter
        // writes to stdout, so stdout is what is asked.
        LogFormat::Text => builder.with_ansi(std::io::stdout().is_terminal()).init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}
