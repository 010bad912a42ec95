//! A VRouterConfig's revision history: what each apply that reached the
//! router delivered, and how it ended. The content may hold resolved secret
//! params, so the history lives in a Secret (`<config>-history`, key
//! [`DATA_KEY`]) owned by the config; this module is its format and the
//! pure bookkeeping (numbering, trimming), shared by the controller that
//! writes it and the CLI that lists it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// The Secret data key holding the history as JSON.
pub const DATA_KEY: &str = "history.json";

/// The bytes the history's JSON may take: a Secret holds at most 1 MiB of
/// data; the rest is left for the object's metadata.
pub const MAX_BYTES: usize = 900 * 1024;

/// The Secret holding the history of the config `config`.
pub fn secret_name(config: &str) -> String {
    format!("{config}-history")
}

/// How an apply ended on the router.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Applied,
    Failed,
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Outcome::Applied => "Applied",
            Outcome::Failed => "Failed",
        })
    }
}

/// What one apply delivered and who asked for it; staged when the apply
/// starts, recorded as a [`Revision`] once its result is known.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Delivery {
    /// The apply id the router records the apply under.
    pub apply_id: String,
    /// `namespace/name` of the controlling VRouterBinding, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binding: Option<String>,
    /// The config's generation the apply was for.
    pub generation: i64,
    /// The revision this apply rolled back to (`spec.rollbackTo`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_of: Option<u64>,
    /// The config.boot fragment delivered, secret params resolved.
    #[serde(default)]
    pub config: String,
    /// The commands delivered, secret params resolved.
    #[serde(default)]
    pub commands: String,
    /// The content was too large to keep within [`MAX_BYTES`]: this
    /// revision is listed but cannot be rolled back to.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub content_dropped: bool,
}

/// One recorded apply.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Revision {
    /// Numbered from 1, never reused within one history.
    pub revision: u64,
    /// When the result was known.
    pub time: Time,
    pub result: Outcome,
    #[serde(flatten)]
    pub delivery: Delivery,
}

/// The whole history of one config.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct History {
    /// The number the newest revision got (0: none yet).
    #[serde(default)]
    pub last_revision: u64,
    /// Oldest first.
    #[serde(default)]
    pub revisions: Vec<Revision>,
    /// The apply in flight, staged before its script started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<Delivery>,
}

/// Why a stored history cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("the history Secret's {DATA_KEY:?} is not a revision history: {0}")]
    Unreadable(#[from] serde_json::Error),
}

impl History {
    pub fn parse(bytes: &[u8]) -> Result<History, HistoryError> {
        Ok(serde_json::from_slice(bytes)?)
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a history serializes")
    }

    /// Stages the apply starting now, replacing one that never ended (its
    /// result is lost; it is not a revision).
    pub fn stage(&mut self, delivery: Delivery) {
        self.pending = Some(delivery);
    }

    /// Records the staged apply `apply_id` as the next revision, then
    /// trims to `limit` revisions and [`MAX_BYTES`]. Returns its number;
    /// `None` (nothing changes) when no apply of that id is staged, so
    /// recording one result twice records it once.
    pub fn record(&mut self, apply_id: &str, result: Outcome, time: Timestamp, limit: u32) -> Option<u64> {
        if self.pending.as_ref()?.apply_id != apply_id {
            return None;
        }
        let delivery = self.pending.take()?;
        self.last_revision += 1;
        self.revisions.push(Revision {
            revision: self.last_revision,
            time: Time(time),
            result,
            delivery,
        });
        self.trim(limit as usize, MAX_BYTES);
        Some(self.last_revision)
    }

    /// Drops the oldest revisions beyond `limit`, then while the JSON is
    /// over `max_bytes`. The newest revision always stays listed; should it
    /// alone be too large, its content goes (marked `contentDropped`).
    pub fn trim(&mut self, limit: usize, max_bytes: usize) {
        let limit = limit.max(1);
        if self.revisions.len() > limit {
            self.revisions.drain(..self.revisions.len() - limit);
        }
        while self.revisions.len() > 1 && self.to_bytes().len() > max_bytes {
            self.revisions.remove(0);
        }
        if self.to_bytes().len() > max_bytes
            && let Some(newest) = self.revisions.last_mut()
        {
            newest.delivery.config.clear();
            newest.delivery.commands.clear();
            newest.delivery.content_dropped = true;
        }
    }

    /// Revision `number`, while the history keeps it.
    pub fn revision(&self, number: u64) -> Option<&Revision> {
        self.revisions.iter().find(|r| r.revision == number)
    }

    /// The numbers kept, as `first..=last` for a message.
    pub fn kept(&self) -> String {
        match (self.revisions.first(), self.revisions.last()) {
            (Some(first), Some(last)) => format!("revisions {}..={}", first.revision, last.revision),
            _ => "no revisions".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(apply: &str, content: &str) -> Delivery {
        Delivery {
            apply_id: apply.into(),
            binding: Some("net/edge".into()),
            generation: 3,
            config: content.into(),
            ..Default::default()
        }
    }

    fn applied(history: &mut History, apply: &str, content: &str, limit: u32) -> Option<u64> {
        history.stage(delivery(apply, content));
        history.record(apply, Outcome::Applied, Timestamp::UNIX_EPOCH, limit)
    }

    #[test]
    fn numbers_follow_the_newest_and_are_never_reused_after_trimming() {
        // (applies, limit, numbers kept, next number)
        let table: [(usize, u32, Vec<u64>, u64); 4] = [
            (0, 10, vec![], 1),
            (3, 10, vec![1, 2, 3], 4),
            (5, 2, vec![4, 5], 6),
            (3, 0, vec![3], 4),
        ];
        for (applies, limit, kept, next) in table {
            let mut history = History::default();
            for i in 0..applies {
                applied(&mut history, &format!("g1-{i}"), "x", limit);
            }
            let numbers: Vec<u64> = history.revisions.iter().map(|r| r.revision).collect();
            assert_eq!(numbers, kept, "{applies} applies, limit {limit}");
            assert_eq!(applied(&mut history, "g2-next", "y", limit), Some(next));
        }
    }

    #[test]
    fn only_the_staged_apply_is_recorded_and_only_once() {
        let mut history = History::default();
        assert_eq!(
            history.record("g1-a", Outcome::Applied, Timestamp::UNIX_EPOCH, 10),
            None
        );
        history.stage(delivery("g1-a", "a"));
        assert_eq!(
            history.record("g1-other", Outcome::Applied, Timestamp::UNIX_EPOCH, 10),
            None
        );
        assert_eq!(
            history.record("g1-a", Outcome::Failed, Timestamp::UNIX_EPOCH, 10),
            Some(1)
        );
        assert_eq!(history.record("g1-a", Outcome::Failed, Timestamp::UNIX_EPOCH, 10), None);
        let first = history.revision(1).unwrap();
        assert_eq!((first.result, first.delivery.config.as_str()), (Outcome::Failed, "a"));
        // A staged apply replaced by a newer one is not a revision.
        history.stage(delivery("g2-lost", "b"));
        history.stage(delivery("g2-new", "c"));
        assert_eq!(
            history.record("g2-lost", Outcome::Applied, Timestamp::UNIX_EPOCH, 10),
            None
        );
        assert_eq!(
            history.record("g2-new", Outcome::Applied, Timestamp::UNIX_EPOCH, 10),
            Some(2)
        );
    }

    #[test]
    fn the_size_bound_drops_oldest_first_and_at_last_the_newest_content() {
        let big = "x".repeat(400);
        let mut history = History::default();
        for i in 0..5 {
            history.stage(delivery(&format!("g1-{i}"), &big));
            history.record(&format!("g1-{i}"), Outcome::Applied, Timestamp::UNIX_EPOCH, 10);
        }
        history.trim(10, 1_500);
        assert!(history.to_bytes().len() <= 1_500);
        let numbers: Vec<u64> = history.revisions.iter().map(|r| r.revision).collect();
        assert_eq!(numbers, [4, 5]);
        history.trim(10, 300);
        assert_eq!(history.revisions.len(), 1);
        let newest = &history.revisions[0];
        assert_eq!((newest.revision, newest.delivery.content_dropped), (5, true));
        assert!(newest.delivery.config.is_empty());
    }

    #[test]
    fn a_stored_history_reads_back_and_garbage_is_refused() {
        let mut history = History::default();
        applied(&mut history, "g1-a", "set system host-name r1", 10);
        let back = History::parse(&history.to_bytes()).unwrap();
        assert_eq!(back, history);
        let e = History::parse(b"{\"revisions\": 5}").unwrap_err();
        assert!(e.to_string().contains("history.json"), "{e}");
    }
}
