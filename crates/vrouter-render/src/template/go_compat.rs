//! The engine's side of `vrouter_gotemplate`: its Go-compatible filters and
//! functions registered on tera, each drawing on the render's budget like
//! every other filter, and the engine as the converter's check.

use std::collections::HashMap;

use serde_json::Value;
use tera::Tera;
use vrouter_gotemplate::sprig::{self, FILTERS, FUNCTIONS};
use vrouter_gotemplate::{Check, Location, Refusal, TemplateKind};

use super::budget::{Budget, with_active};
use super::functions::value_size;
use super::{TemplateEngine, TemplateError};

impl sprig::Budget for Budget {
    fn max_value_bytes(&self) -> usize {
        Budget::max_value_bytes(self)
    }

    fn check_value_size(&self, size: usize) -> tera::Result<()> {
        Ok(Budget::check_value_size(self, size)?)
    }

    fn check_range_len(&self, requested: u128) -> tera::Result<()> {
        Ok(Budget::check_range_len(self, requested)?)
    }
}

/// Registers every Go-compatible filter and function on `tera`: its time is
/// checked before it runs and its result's size after.
pub(super) fn install(tera: &mut Tera) {
    for &(name, f) in FILTERS.iter().flat_map(|family| family.iter()) {
        tera.register_filter(name, move |value: &Value, args: &HashMap<String, Value>| {
            with_active(|budget| {
                budget.check_time()?;
                let out = f(value, args, budget)?;
                budget.check_value_size(value_size(&out))?;
                Ok(out)
            })
        });
    }
    for &(name, f) in FUNCTIONS {
        tera.register_function(name, move |args: &HashMap<String, Value>| {
            with_active(|budget| {
                budget.check_time()?;
                let out = f(args, budget)?;
                budget.check_value_size(value_size(&out))?;
                Ok(out)
            })
        });
    }
}

/// A converted template passes when the engine would admit it.
impl Check for TemplateEngine {
    fn check_conversion(&self, kind: TemplateKind, tera: &str) -> Result<(), Refusal> {
        self.check_converted(kind, tera).map_err(|error| Refusal {
            location: error_location(&error),
            message: error.to_string(),
        })
    }
}

fn error_location(error: &TemplateError) -> Option<Location> {
    match error {
        TemplateError::Syntax { location, .. }
        | TemplateError::NotAllowed { location, .. }
        | TemplateError::LimitExceeded { location, .. } => *location,
        TemplateError::MisplacedInterpolation { location, .. } => Some(*location),
        _ => None,
    }
}
