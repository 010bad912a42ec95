use super::*;

const DAY: u64 = 86_400;
const PROPAGATION: Duration = Duration::from_secs(300);
const POLICY: Policy = Policy {
    propagation: PROPAGATION,
};

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

fn valid(from: u64, days: u64) -> Validity {
    Validity {
        not_before: at(from),
        not_after: at(from + days * DAY),
    }
}

fn ca(id: &str, from: u64, published_since: Option<u64>) -> Ca {
    Ca {
        id: id.to_owned(),
        validity: valid(from, 3 * 365),
        published_since: published_since.map(at),
    }
}

fn serving(issuer: &str, from: u64) -> Serving {
    Serving {
        issuer: issuer.to_owned(),
        validity: valid(from, 365),
        issued_at: at(from),
        names: names(),
    }
}

fn names() -> Vec<String> {
    vec!["vr-webhook.ns.svc".to_owned()]
}

fn kept(ids: &[&str]) -> Vec<BundleCa> {
    ids.iter().map(|id| BundleCa::Kept((*id).to_owned())).collect()
}

fn published(ids: &[&str]) -> Vec<Vec<String>> {
    // Two webhook configurations (validating and mutating) hold the same.
    let one: Vec<String> = ids.iter().map(|id| (*id).to_owned()).collect();
    vec![one.clone(), one]
}

struct Case {
    name: &'static str,
    now: u64,
    cas: Vec<Ca>,
    serving: Option<Serving>,
    published: Vec<Vec<String>>,
    requested: Requested,
    want: Plan,
}

fn plan(new_ca: bool, bundle: Vec<BundleCa>, issue: Option<BundleCa>, publish: bool) -> Plan {
    Plan {
        new_ca,
        bundle,
        issue_serving: issue,
        publish,
    }
}

fn k(id: &str) -> Option<BundleCa> {
    Some(BundleCa::Kept(id.to_owned()))
}

#[test]
fn rotation_decisions() {
    let settled = 10 * DAY;
    let ca_renew = 2 * 365 * DAY; // two thirds of three years
    let cases = vec![
        Case {
            name: "first start: a CA and a serving certificate it signs, published",
            now: 0,
            cas: vec![],
            serving: None,
            published: vec![vec![], vec![]],
            requested: Requested::default(),
            want: plan(true, vec![BundleCa::New], Some(BundleCa::New), true),
        },
        Case {
            name: "steady: nothing to do",
            now: settled,
            cas: vec![ca("a", 0, Some(0))],
            serving: Some(serving("a", 0)),
            published: published(&["a"]),
            requested: Requested::default(),
            want: plan(false, kept(&["a"]), None, false),
        },
        Case {
            name: "a configuration lost its bundle (reinstalled): published again",
            now: settled,
            cas: vec![ca("a", 0, None)],
            serving: Some(serving("a", 0)),
            published: vec![vec!["a".to_owned()], vec![]],
            requested: Requested::default(),
            want: plan(false, kept(&["a"]), None, true),
        },
        Case {
            name: "serving two thirds through its year: renewed by the same CA",
            now: 244 * DAY,
            cas: vec![ca("a", 0, Some(0))],
            serving: Some(serving("a", 0)),
            published: published(&["a"]),
            requested: Requested::default(),
            want: plan(false, kept(&["a"]), k("a"), false),
        },
        Case {
            name: "serving just before two thirds: kept",
            now: 243 * DAY,
            cas: vec![ca("a", 0, Some(0))],
            serving: Some(serving("a", 0)),
            published: published(&["a"]),
            requested: Requested::default(),
            want: plan(false, kept(&["a"]), None, false),
        },
        Case {
            name: "CA two thirds through: a new CA joins the bundle; serving stays with the old",
            now: ca_renew,
            cas: vec![ca("a", 0, Some(0))],
            serving: Some(serving("a", ca_renew - DAY)),
            published: published(&["a"]),
            requested: Requested::default(),
            want: plan(true, vec![BundleCa::Kept("a".into()), BundleCa::New], None, true),
        },
        Case {
            name: "new CA published, not yet long enough: serving stays with the old",
            now: ca_renew + 60,
            cas: vec![ca("a", 0, Some(0)), ca("b", ca_renew, Some(ca_renew + 10))],
            serving: Some(serving("a", ca_renew - DAY)),
            published: published(&["a", "b"]),
            requested: Requested::default(),
            want: plan(false, kept(&["a", "b"]), None, false),
        },
        Case {
            name: "new CA published long enough: serving moves to it, old CA still trusted",
            now: ca_renew + 10 + 300,
            cas: vec![ca("a", 0, Some(0)), ca("b", ca_renew, Some(ca_renew + 10))],
            serving: Some(serving("a", ca_renew - DAY)),
            published: published(&["a", "b"]),
            requested: Requested::default(),
            want: plan(false, kept(&["a", "b"]), k("b"), false),
        },
        Case {
            name: "serving by the new CA only just issued: old CA kept",
            now: ca_renew + 400,
            cas: vec![ca("a", 0, Some(0)), ca("b", ca_renew, Some(ca_renew + 10))],
            serving: Some(serving("b", ca_renew + 350)),
            published: published(&["a", "b"]),
            requested: Requested::default(),
            want: plan(false, kept(&["a", "b"]), None, false),
        },
        Case {
            name: "serving by the new CA in place long enough: old CA dropped and published",
            now: ca_renew + 350 + 300,
            cas: vec![ca("a", 0, Some(0)), ca("b", ca_renew, Some(ca_renew + 10))],
            serving: Some(serving("b", ca_renew + 350)),
            published: published(&["a", "b"]),
            requested: Requested::default(),
            want: plan(false, kept(&["b"]), None, true),
        },
        Case {
            name: "an expired CA leaves the bundle and its serving certificate is replaced",
            now: 3 * 365 * DAY,
            cas: vec![ca("a", 0, Some(0)), ca("b", 2 * 365 * DAY, Some(2 * 365 * DAY))],
            serving: Some(serving("a", 3 * 365 * DAY - 10 * DAY)),
            published: published(&["a", "b"]),
            requested: Requested::default(),
            want: plan(false, kept(&["b"]), k("b"), true),
        },
        Case {
            name: "serving for other names (Service renamed): reissued",
            now: settled,
            cas: vec![ca("a", 0, Some(0))],
            serving: Some(Serving {
                names: vec!["old.ns.svc".to_owned()],
                ..serving("a", 0)
            }),
            published: published(&["a"]),
            requested: Requested::default(),
            want: plan(false, kept(&["a"]), k("a"), false),
        },
        Case {
            name: "requested serving rotation after its issue: reissued",
            now: settled,
            cas: vec![ca("a", 0, Some(0))],
            serving: Some(serving("a", DAY)),
            published: published(&["a"]),
            requested: Requested {
                serving: Some(at(2 * DAY)),
                ca: None,
            },
            want: plan(false, kept(&["a"]), k("a"), false),
        },
        Case {
            name: "a request older than the serving certificate is already honoured",
            now: settled,
            cas: vec![ca("a", 0, Some(0))],
            serving: Some(serving("a", 3 * DAY)),
            published: published(&["a"]),
            requested: Requested {
                serving: Some(at(2 * DAY)),
                ca: Some(at(0)),
            },
            want: plan(false, kept(&["a"]), None, false),
        },
        Case {
            name: "a request dated in the future is not honoured until then",
            now: settled,
            cas: vec![ca("a", 0, Some(0))],
            serving: Some(serving("a", DAY)),
            published: published(&["a"]),
            requested: Requested {
                serving: Some(at(settled + 1)),
                ca: Some(at(settled + 1)),
            },
            want: plan(false, kept(&["a"]), None, false),
        },
        Case {
            name: "requested CA rotation: the same two-step path as expiry",
            now: settled,
            cas: vec![ca("a", 0, Some(0))],
            serving: Some(serving("a", DAY)),
            published: published(&["a"]),
            requested: Requested {
                serving: None,
                ca: Some(at(2 * DAY)),
            },
            want: plan(true, vec![BundleCa::Kept("a".into()), BundleCa::New], None, true),
        },
        Case {
            name: "a new leader has not seen the new CA published long: waits, signing nothing early",
            now: ca_renew + DAY,
            cas: vec![
                ca("a", 0, Some(ca_renew + DAY)),
                ca("b", ca_renew, Some(ca_renew + DAY)),
            ],
            serving: Some(serving("a", ca_renew - DAY)),
            published: published(&["a", "b"]),
            requested: Requested::default(),
            want: plan(false, kept(&["a", "b"]), None, false),
        },
    ];
    for case in cases {
        let observed = Observed {
            now: at(case.now),
            cas: &case.cas,
            serving: case.serving.as_ref(),
            names: &names(),
            published: &case.published,
            requested: case.requested,
        };
        assert_eq!(decide(&observed, POLICY), case.want, "{}", case.name);
    }
}

#[test]
fn renewal_is_two_thirds_through_the_lifetime() {
    assert_eq!(valid(300, 3).renew_at(), at(300 + 2 * DAY));
    // A certificate whose dates are reversed is due at once, never later.
    let reversed = Validity {
        not_before: at(DAY),
        not_after: at(0),
    };
    assert_eq!(reversed.renew_at(), at(DAY));
}
