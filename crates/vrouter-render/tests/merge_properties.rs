//! The merge table of spec §4.3, row by row, as properties; the fold; integers.

use proptest::prelude::*;
use serde_json::{Map, Number, Value, json};
use vrouter_render::{merge, merge_layers};

/// Keys drawn from a small set, so maps overlap often.
fn key() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["a", "b", "c", "d", "asn", "neighbors"]).prop_map(str::to_owned)
}

fn integer() -> impl Strategy<Value = Number> {
    prop_oneof![
        any::<i64>().prop_map(Number::from),
        any::<u64>().prop_map(Number::from),
        Just(Number::from(0)),
        Just(Number::from(4_294_967_295u64)),
        Just(Number::from(9_007_199_254_740_993u64)),
        Just(Number::from(u64::MAX)),
        Just(Number::from(i64::MIN)),
    ]
}

/// Non-null scalars, zero values weighted in.
fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!(false)),
        Just(json!("")),
        Just(json!(0)),
        any::<bool>().prop_map(Value::Bool),
        integer().prop_map(Value::Number),
        "[a-z0-9 ]{0,8}".prop_map(Value::String),
        (-1.0e6f64..1.0e6).prop_map(|f| json!(f)),
    ]
}

/// Any JSON value, nulls included.
fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![scalar(), Just(Value::Null)];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(key(), inner, 0..4).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn object() -> impl Strategy<Value = Value> {
    prop::collection::btree_map(key(), value(), 0..5).prop_map(|m| Value::Object(m.into_iter().collect()))
}

fn non_empty_array() -> impl Strategy<Value = Value> {
    prop::collection::vec(value(), 1..4).prop_map(Value::Array)
}

/// What an object contributes when nothing is under it: itself with every `null`
/// in its objects (not in its arrays) removed.
fn without_nulls(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn with(base: &Value, key: &str, value: Value) -> Value {
    let mut map = base.as_object().cloned().unwrap_or_default();
    map.insert(key.to_owned(), value);
    Value::Object(map)
}

proptest! {
    /// Row "scalar override scalar": the override wins, zero values included.
    #[test]
    fn a_present_scalar_wins_even_when_it_is_a_zero_value(
        base in object(), over in object(), k in key(), old in scalar(), new in scalar(),
    ) {
        let merged = merge(&with(&base, &k, old), &with(&over, &k, new.clone()));
        prop_assert_eq!(&merged[&k], &new);
    }

    /// Row "map override map": merged key by key, recursively.
    #[test]
    fn maps_merge_key_by_key(base in object(), over in object(), k in key(), inner_base in object(), inner_over in object()) {
        let merged = merge(&with(&base, &k, inner_base.clone()), &with(&over, &k, inner_over.clone()));
        prop_assert_eq!(&merged[&k], &merge(&inner_base, &inner_over));
        for (ik, iv) in inner_base.as_object().unwrap() {
            if !inner_over.as_object().unwrap().contains_key(ik) {
                prop_assert_eq!(&merged[&k][ik], iv);
            }
        }
    }

    /// Row "slice override slice, non-empty": replaced, never appended.
    #[test]
    fn a_non_empty_array_replaces_the_base_array(base in object(), over in object(), k in key(), old in non_empty_array(), new in non_empty_array()) {
        let merged = merge(&with(&base, &k, old), &with(&over, &k, new.clone()));
        prop_assert_eq!(&merged[&k], &new);
    }

    /// Row "slice override slice, override is []": the empty array clears the base.
    #[test]
    fn an_empty_array_clears_the_base_array(base in object(), over in object(), k in key(), old in non_empty_array()) {
        let merged = merge(&with(&base, &k, old), &with(&over, &k, json!([])));
        prop_assert_eq!(&merged[&k], &json!([]));
    }

    /// Row "key entirely absent from the override": the base value is kept.
    #[test]
    fn an_absent_key_keeps_the_base_value(base in object(), over in object()) {
        let merged = merge(&base, &over);
        for (k, v) in base.as_object().unwrap() {
            if !over.as_object().unwrap().contains_key(k) {
                prop_assert_eq!(&merged[k], v);
            }
        }
        for k in merged.as_object().unwrap().keys() {
            prop_assert!(base.as_object().unwrap().contains_key(k) || over.as_object().unwrap().contains_key(k));
        }
    }

    /// Improvement over mergo: a `null` removes the key (mergo stores the null).
    #[test]
    fn a_null_removes_the_key(base in object(), over in object(), k in key(), old in value()) {
        let merged = merge(&with(&base, &k, old), &with(&over, &k, Value::Null));
        prop_assert!(!merged.as_object().unwrap().contains_key(&k));
    }

    /// A map or array replaces a scalar or an array of another shape, like every
    /// other present key.
    #[test]
    fn a_map_or_array_replaces_a_value_of_another_shape(
        base in object(), over in object(), k in key(),
        old in prop_oneof![scalar(), non_empty_array()],
        new in prop_oneof![object(), non_empty_array()],
    ) {
        prop_assume!(!(old.is_array() && new.is_array()));
        let merged = merge(&with(&base, &k, old), &with(&over, &k, new.clone()));
        prop_assert_eq!(&merged[&k], &without_nulls(&new));
    }

    /// Nothing in the inputs changes, and merging onto nothing gives the override
    /// without its nulls.
    #[test]
    fn merge_onto_an_empty_map_is_the_override_without_nulls(over in object()) {
        prop_assert_eq!(merge(&json!({}), &over), without_nulls(&over));
    }

    /// Folding layers is pairwise merging left to right.
    #[test]
    fn folding_layers_is_pairwise_merging_left_to_right(layers in prop::collection::vec(object(), 0..5)) {
        let folded = merge_layers(&layers).unwrap();
        let pairwise = layers.iter().fold(json!({}), |acc, layer| merge(&acc, layer));
        prop_assert_eq!(folded, pairwise);
    }

    /// Merging keeps every integer's exact value, wherever it sits.
    #[test]
    fn integers_keep_their_exact_value(base in object(), n in integer(), k in key(), nested in any::<bool>()) {
        let placed = if nested { json!({"x": [n.clone()]}) } else { Value::Number(n.clone()) };
        let merged = merge_layers(&[base.clone(), with(&json!({}), &k, placed.clone())]).unwrap();
        let landed = if nested { &merged[&k]["x"][0] } else { &merged[&k] };
        prop_assert_eq!(landed, &Value::Number(n.clone()));
        let text = serde_json::to_string(landed).unwrap();
        prop_assert!(text.contains(&n.to_string()));
    }
}

#[test]
fn no_layers_give_an_empty_map() {
    assert_eq!(merge_layers(&[]).unwrap(), Value::Object(Map::new()));
}

#[test]
fn the_integers_named_in_the_issue_survive_a_merge_and_a_round_trip() {
    let text =
        r#"{"asn": 4294967295, "id": 9007199254740993, "max": 18446744073709551615, "min": -9223372036854775808}"#;
    let layer: Value = serde_json::from_str(text).unwrap();
    let merged = merge_layers(&[json!({"asn": 1}), layer]).unwrap();
    assert_eq!(merged["asn"].as_u64(), Some(4_294_967_295));
    assert_eq!(merged["id"].as_u64(), Some(9_007_199_254_740_993));
    assert_eq!(merged["max"].as_u64(), Some(u64::MAX));
    assert_eq!(merged["min"].as_i64(), Some(i64::MIN));
    let out = serde_json::to_string(&merged).unwrap();
    assert!(
        out.contains("9007199254740993") && out.contains("18446744073709551615"),
        "{out}"
    );
}

/// The three priorities of spec §4.1: paramsRefs, then binding.params, then
/// target.params.
#[test]
fn target_params_win_over_binding_params_over_params_refs() {
    let merged = merge_layers(&[
        json!({"dns": "ref-1", "ntp": "ref-1", "asn": 1, "only_ref": true}),
        json!({"dns": "ref-2"}),
        json!({"dns": "binding", "ntp": "binding"}),
        json!({"dns": "target"}),
    ])
    .unwrap();
    assert_eq!(
        merged,
        json!({"dns": "target", "ntp": "binding", "asn": 1, "only_ref": true})
    );
}
