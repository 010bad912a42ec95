//! The admission check's cost: linear in the template's
//! size and nesting, counted by the check itself (never timed; the time goes to
//! `cargo xtask bench`); a template too large to check is refused naming the
//! limit and the loop.

use vrouter_render::testing::template_cost::{NestedTemplate, ReviewWork, review_work};
use vrouter_render::{Limit, Limits, Location, TemplateEngine, TemplateError, TemplateKind};

fn work(engine: &TemplateEngine, source: &str) -> (ReviewWork, Result<(), TemplateError>) {
    review_work(engine, TemplateKind::Commands, source).expect("the template compiles")
}

fn nested(loops: usize, ifs: usize, lines: usize) -> NestedTemplate {
    NestedTemplate {
        loops,
        ifs,
        lines,
        values_per_line: 1,
    }
}

/// One walk writes each byte of the template at most once per loop around it
/// plus once: with every nested loop taking two iterations the text doubled at
/// each level (2^15 copies of the body at 15 loops).
#[test]
fn one_walk_grows_linearly_with_nesting_depth() {
    let engine = TemplateEngine::new();
    let (flat, outcome) = work(&engine, &nested(0, 1, 20).source());
    outcome.unwrap();
    for loops in 1..=15 {
        let source = nested(loops, 1, 20).source();
        let (deep, outcome) = work(&engine, &source);
        assert!(outcome.is_ok(), "{loops} loops: {outcome:?}");
        let bound = (loops as u64 + 1) * (flat.largest_walk + source.len() as u64);
        assert!(
            deep.largest_walk <= bound,
            "{loops} loops: one walk wrote {} bytes, over the linear bound {bound} ({deep:?})",
            deep.largest_walk
        );
    }
}

/// Doubling the template at most doubles the work, at the deepest nesting the
/// limits allow (15 loops and an `if`).
#[test]
fn the_whole_check_grows_at_most_linearly_with_size() {
    let engine = TemplateEngine::new();
    let mut previous: Option<ReviewWork> = None;
    for lines in [10, 20, 40, 80, 160, 320, 640] {
        let (now, outcome) = work(&engine, &nested(15, 1, lines).source());
        assert!(outcome.is_ok(), "{lines} lines: {outcome:?}");
        if let Some(before) = previous {
            assert!(
                now.units() <= 2 * before.units(),
                "{lines} lines: {} units of work, more than twice the {} at half the size",
                now.units(),
                before.units()
            );
        }
        previous = Some(now);
    }
}

/// The shape of the issue's template: 15 nested `for` loops around 9 `if`s and
/// 400 lines. It is accepted, along the paths the check walks.
#[test]
fn the_deep_template_from_the_issue_is_accepted() {
    let source = nested(15, 9, 400).source();
    assert!(source.len() > 13 * 1024, "{} bytes", source.len());
    let warnings = TemplateEngine::new()
        .review("deep", TemplateKind::Commands, &source)
        .expect("accepted");
    assert!(warnings.is_empty());
    // And it still reads every line: a misplaced value in the last `if` of the
    // innermost loop is found.
    let broken = source.replacen(
        "set nat rule 399 source {{ v0 }}",
        "set nat rule 399 source '{{ v0 }}'",
        1,
    );
    assert_ne!(broken, source);
    let err = TemplateEngine::new()
        .check("deep", TemplateKind::Commands, &broken)
        .unwrap_err();
    assert!(matches!(err, TemplateError::MisplacedInterpolation { .. }), "{err}");
}

/// A template whose walk would write more than `max_review_bytes` is refused
/// with that limit and the outermost loop it was repeating.
#[test]
fn a_template_too_large_to_check_is_refused_naming_the_limit_and_the_loop() {
    let engine = TemplateEngine::new();
    let source = format!("set system host-name {{{{ h }}}}\n{}", nested(15, 1, 1250).source());
    assert!(source.len() <= engine.limits().max_template_bytes);
    let err = engine.check("deep", TemplateKind::Commands, &source).unwrap_err();
    assert_eq!(
        err,
        TemplateError::LimitExceeded {
            template: vrouter_render::TemplateId {
                name: "deep".into(),
                kind: TemplateKind::Commands
            },
            limit: Limit::ReviewText { limit: 1024 * 1024 },
            location: Some(Location { line: 2, column: 1 }),
        }
    );
    assert_eq!(
        err.to_string(),
        "template `deep` (commands) exceeded the admission check's limit of 1048576 bytes of text along one \
         path (each `for` read up to twice; nest fewer loops or split the template) at line 2, column 1"
    );
    // The check stopped at the limit instead of writing the rest.
    let (spent, _) = work(&engine, &source);
    assert!(spent.largest_walk <= 1024 * 1024, "{spent:?}");
}

/// The limit is the engine's: a smaller one refuses a smaller template, naming
/// the outermost loop (here the second `for` of the source).
#[test]
fn the_review_limit_is_configurable_and_names_the_outermost_loop() {
    let engine = TemplateEngine::with_limits(Limits {
        max_review_bytes: 4096,
        ..Limits::default()
    });
    let body = "set nat rule 1 source {{ v }}\n".repeat(40);
    let source = format!(
        "{{% for a in l %}}set a {{{{ a }}}}\n{{% endfor %}}\n  {{% for b in l %}}{{% for c in l %}}\n{body}{{% endfor %}}{{% endfor %}}\n"
    );
    let err = engine.check("t", TemplateKind::Commands, &source).unwrap_err();
    let TemplateError::LimitExceeded { limit, location, .. } = err else {
        panic!("{err}")
    };
    assert_eq!(limit, Limit::ReviewText { limit: 4096 });
    assert_eq!(location, Some(Location { line: 3, column: 3 }));
    TemplateEngine::new()
        .check("t", TemplateKind::Commands, &source)
        .expect("within the default limit");
}
