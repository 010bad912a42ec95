//! Inputs the walk refuses, and the mapping helpers for stored status.

mod common;

use common::*;
use vrouter_rollout::{ConditionStatus, Frontier, Phase, Policy, RolloutError, Timestamp};

#[test]
fn refused_inputs_name_what_is_wrong() {
    let table = [
        (
            "FixedInterval with a zero interval",
            Policy::FixedInterval { wait_interval: secs(0) },
            vec![new_target("a", 1)],
            RolloutError::ZeroWaitInterval,
            "rollout mode FixedInterval needs waitInterval greater than zero",
        ),
        (
            "a target listed twice",
            wait_for_applied(10, 0),
            vec![new_target("a", 1), new_target("b", 2), new_target("a", 3)],
            RolloutError::DuplicateTarget {
                name: "a".into(),
                first: 0,
                second: 2,
            },
            r#"target "a" appears more than once in targetRefs (positions 0 and 2)"#,
        ),
        (
            "a target without a name, even in Disabled mode",
            Policy::Disabled,
            vec![new_target("a", 1), new_target("", 2)],
            RolloutError::EmptyTargetName { index: 1 },
            "target at position 1 in targetRefs has an empty name",
        ),
    ];
    for (case, policy, targets, expected, message) in table {
        let error = run(policy, &None, &targets, 0).unwrap_err();
        assert_eq!(error, expected, "{case}");
        assert_eq!(error.to_string(), message, "{case}");
    }
}

#[test]
fn fixed_interval_fields_do_not_matter_to_other_modes() {
    // Only the selected mode's fields exist in `Policy`; a zero
    // waitInterval written next to mode WaitForApplied never reaches here.
    let targets = vec![new_target("a", 1)];
    assert!(run(wait_for_applied(0, 0), &None, &targets, 0).is_ok());
}

#[test]
fn condition_status_and_phase_parse_as_kubernetes_writes_them() {
    for (text, status) in [
        ("True", ConditionStatus::True),
        ("False", ConditionStatus::False),
        ("Unknown", ConditionStatus::Unknown),
    ] {
        assert_eq!(text.parse::<ConditionStatus>(), Ok(status));
        assert_eq!(status.to_string(), text);
    }
    assert_eq!(
        "true".parse::<ConditionStatus>().unwrap_err().to_string(),
        r#"invalid condition status "true": expected "True", "False" or "Unknown""#
    );

    for (text, phase) in [
        ("", Phase::Pending),
        ("Pending", Phase::Pending),
        ("Applying", Phase::Applying),
        ("Applied", Phase::Applied),
        ("Failed", Phase::Failed),
    ] {
        assert_eq!(text.parse::<Phase>(), Ok(phase), "{text:?}");
    }
    assert_eq!(
        "Broken".parse::<Phase>().unwrap_err(),
        RolloutError::InvalidPhase { value: "Broken".into() }
    );
}

#[test]
fn frontier_from_stored_status() {
    assert_eq!(Frontier::from_status("", Some(at(5))), None);
    assert_eq!(
        Frontier::from_status("a", Some(at(5))),
        Some(Frontier {
            target: "a".into(),
            stamped_at: at(5)
        })
    );
    assert_eq!(
        Frontier::from_status("a", None),
        Some(Frontier {
            target: "a".into(),
            stamped_at: Timestamp::UNIX_EPOCH
        })
    );
}
