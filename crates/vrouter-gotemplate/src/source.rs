//! Where a template's text goes and places in it: shared with the renderer,
//! which re-exports both types.

use std::fmt;

/// Which field of a VRouterTemplate a source is: it decides how interpolated values
/// are written out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TemplateKind {
    /// `spec.config`: a config.boot fragment, loaded with `load`.
    Config,
    /// `spec.commands`: configure-mode commands (`set …`, `delete …`) run by vbash.
    Commands,
}

impl fmt::Display for TemplateKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TemplateKind::Config => "config",
            TemplateKind::Commands => "commands",
        })
    }
}

/// A 1-based line and column (in characters) in a template source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    /// Line number, from 1.
    pub line: usize,
    /// Column in characters, from 1.
    pub column: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {}", self.line, self.column)
    }
}
