//! Presence-based deep merge of params layers (spec §4.2, §4.3).
//!
//! The rule is JSON Merge Patch (RFC 7396) applied layer by layer: a key present in
//! the overlay wins whatever its value (`false`, `""`, `0`, `[]` included), objects
//! merge key by key, every other value (arrays too) replaces, a key absent from the
//! overlay keeps the base, and a `null` in the overlay removes the key. The crate
//! README sets this beside what the Go operator's `mergo` call does.

use serde_json::{Map, Value};

/// A params layer that cannot take part in a merge.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MergeError {
    /// Params layers are JSON objects (a map of names to values); `null` counts as an
    /// empty layer, anything else is rejected.
    #[error("params layer {index} is {found}, but params must be a JSON object (a map of names to values)")]
    LayerNotObject {
        /// Position of the layer in the list given to [`merge_layers`], from 0.
        index: usize,
        /// What the layer was instead: "an array", "a string", …
        found: &'static str,
    },
}

/// Merges `overlay` onto `base` and returns the result; neither input changes.
///
/// ```
/// use serde_json::json;
/// let merged = vrouter_render::merge(
///     &json!({"bgp": {"asn": 65001, "peers": [1, 2]}, "ntp": true}),
///     &json!({"bgp": {"peers": []}, "ntp": false}),
/// );
/// assert_eq!(merged, json!({"bgp": {"asn": 65001, "peers": []}, "ntp": false}));
/// ```
pub fn merge(base: &Value, overlay: &Value) -> Value {
    let mut merged = base.clone();
    merge_into(&mut merged, overlay);
    merged
}

/// Merges `overlay` onto `target` in place (the allocation-free form of [`merge`]).
pub fn merge_into(target: &mut Value, overlay: &Value) {
    let Value::Object(overlay_map) = overlay else {
        // Scalars and arrays replace whatever was there, whatever its shape.
        *target = overlay.clone();
        return;
    };
    if !target.is_object() {
        // An object replaces a scalar or array: it is merged onto an empty object so
        // nulls inside it are dropped exactly as they would be onto an existing one.
        *target = Value::Object(Map::new());
    }
    let Value::Object(target_map) = target else {
        unreachable!("target was made an object above")
    };
    for (key, value) in overlay_map {
        if value.is_null() {
            target_map.remove(key);
        } else if let Some(existing) = target_map.get_mut(key) {
            merge_into(existing, value);
        } else {
            let mut fresh = Value::Null;
            merge_into(&mut fresh, value);
            target_map.insert(key.clone(), fresh);
        }
    }
}

/// Folds params layers, lowest priority first, into one params map.
///
/// The first layer is the base and each later layer is merged onto the result so
/// far, so `merge_layers(&[a, b, c]) == merge(&merge(&a, &b), &c)`. No layers give an
/// empty map; a `null` layer (params left out) counts as an empty one.
///
/// ```
/// use serde_json::json;
/// let params = vrouter_render::merge_layers(&[
///     json!({"dns": "192.0.2.53", "asn": 65000}),   // paramsRefs
///     json!({"dns": "8.8.8.8"}),                   // binding.params
///     json!({"asn": 4294967295u64}),              // target.params
/// ])?;
/// assert_eq!(params, json!({"dns": "8.8.8.8", "asn": 4294967295u64}));
/// # Ok::<(), vrouter_render::MergeError>(())
/// ```
pub fn merge_layers(layers: &[Value]) -> Result<Value, MergeError> {
    let mut merged = Value::Object(Map::new());
    for (index, layer) in layers.iter().enumerate() {
        match layer {
            Value::Null => {}
            Value::Object(_) => merge_into(&mut merged, layer),
            other => {
                return Err(MergeError::LayerNotObject {
                    index,
                    found: json_kind(other),
                });
            }
        }
    }
    Ok(merged)
}

/// How a message names a value's JSON type, as the Go-compatible filters do.
pub(crate) use vrouter_gotemplate::sprig::json_kind;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_nested_null_in_a_new_subtree_is_dropped_like_at_the_top() {
        let merged = merge(&json!({}), &json!({"a": {"b": null, "c": 1}}));
        assert_eq!(merged, json!({"a": {"c": 1}}));
    }

    #[test]
    fn nulls_inside_arrays_are_values_not_removals() {
        let merged = merge(&json!({"a": [1]}), &json!({"a": [null, 2]}));
        assert_eq!(merged, json!({"a": [null, 2]}));
    }

    #[test]
    fn a_non_object_layer_is_rejected_with_its_position_and_kind() {
        let err = merge_layers(&[json!({}), json!([1])]).unwrap_err();
        assert_eq!(
            err,
            MergeError::LayerNotObject {
                index: 1,
                found: "an array"
            }
        );
        assert_eq!(
            err.to_string(),
            "params layer 1 is an array, but params must be a JSON object (a map of names to values)"
        );
    }

    #[test]
    fn a_null_layer_is_an_empty_layer() {
        let merged = merge_layers(&[json!({"a": 1}), Value::Null]).unwrap();
        assert_eq!(merged, json!({"a": 1}));
    }
}
