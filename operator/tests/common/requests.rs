//! What the API server itself counts: `apiserver_request_total` read from
//! its `/metrics` through the kube client, summed by verb, resource and
//! subresource, so the harness and the tests measure requests at the
//! server rather than trusting the client.

use std::collections::BTreeMap;

/// verb / resource / subresource, e.g. `PATCH vrouterconfigs/status`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Series {
    pub verb: String,
    pub resource: String,
    pub subresource: String,
}

impl Series {
    pub fn is_write(&self) -> bool {
        // APPLY is a server-side apply (a PATCH the API server labels apart).
        matches!(self.verb.as_str(), "POST" | "PUT" | "PATCH" | "APPLY" | "DELETE")
    }

    /// `resource/subresource`, or the resource alone.
    pub fn path(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }

    /// The status writes the spec requires while nothing changes: the
    /// ProxmoxCluster `status.lastSyncTime` once per its syncInterval (§7.3
    /// step 5) and the VRouterStatus `status.lastFetchTime` once per its
    /// syncInterval.
    pub fn is_heartbeat(&self) -> bool {
        self.is_write()
            && self.subresource == "status"
            && matches!(self.resource.as_str(), "proxmoxclusters" | "vrouterstatuses")
    }
}

pub type Counts = BTreeMap<Series, u64>;

fn label<'a>(series: &'a str, name: &str) -> &'a str {
    let key = format!("{name}=\"");
    series
        .find(&key)
        .map(|at| &series[at + key.len()..])
        .and_then(|rest| rest.split_once('"'))
        .map_or("", |(value, _)| value)
}

/// Requests served so far. The API server renews its own identity Lease
/// every 10 s; Leases are left out (the operator under test runs without
/// leader election).
pub async fn served(client: &kube::Client) -> Counts {
    served_with_code(client, |_| true).await
}

/// Requests the API server answered with 409 Conflict so far (a write
/// whose resourceVersion precondition failed, or a create of an existing
/// name), by verb and resource.
pub async fn conflicts(client: &kube::Client) -> Counts {
    served_with_code(client, |code| code == "409").await
}

async fn served_with_code(client: &kube::Client, code: impl Fn(&str) -> bool) -> Counts {
    let request = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client
        .request_text(request)
        .await
        .expect("reading the API server's /metrics");
    let mut counts = Counts::new();
    for line in text.lines().filter(|l| l.starts_with("apiserver_request_total{")) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        if !code(label(series, "code")) {
            continue;
        }
        let key = Series {
            verb: label(series, "verb").to_owned(),
            resource: label(series, "resource").to_owned(),
            subresource: label(series, "subresource").to_owned(),
        };
        if key.resource == "leases" || key.resource.is_empty() {
            continue;
        }
        *counts.entry(key).or_default() += value.parse::<f64>().unwrap_or(0.0) as u64;
    }
    counts
}

/// What grew from `before` to `after`, leaving out series that did not.
pub fn delta(before: &Counts, after: &Counts) -> Counts {
    after
        .iter()
        .filter_map(|(series, count)| {
            let grown = count.saturating_sub(before.get(series).copied().unwrap_or(0));
            (grown > 0).then(|| (series.clone(), grown))
        })
        .collect()
}

pub fn total(counts: &Counts, keep: impl Fn(&Series) -> bool) -> u64 {
    counts.iter().filter(|(s, _)| keep(s)).map(|(_, n)| n).sum()
}
