//! When a Kubernetes request answered "try again" is sent again, and how
//! long after: a pure decision ([`retry_delay`]) and the tower policy that
//! applies it ([`BoundedRetry`]).
//!
//! Invariant: one request is sent at most `1 + MAX_RETRIES` times and waits
//! at most `MAX_RETRIES * MAX_DELAY` between its attempts, whatever the
//! server says in `Retry-After`. A server that asks for more is asking the
//! reconcile to wait, and the reconcile's own requeue (with the work queue's
//! backoff) does that without holding a reconcile slot meanwhile.

use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use tower::BoxError;
use tower::retry::Policy;

/// Retries after the first attempt.
pub const MAX_RETRIES: u32 = 3;
/// The wait before the first retry when the server names none; doubled
/// for each retry after.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(200);
/// No wait between two attempts is longer, a server's `Retry-After`
/// included.
pub const MAX_DELAY: Duration = Duration::from_secs(5);

/// The wait before retry number `retry` (1 for the first) of a `method`
/// request answered `status` with `retry_after` (the header's text), or
/// `None` when it is not sent again. `jitter` in `[0, 1]` spreads the
/// retries of requests refused together over the second half of each
/// backoff.
///
/// 429 and 503 mean the request was not carried out (API priority and
/// fairness, max-in-flight, a server starting), so any method is sent again.
/// 504 may come after the request was carried out, so only reads are.
/// `Retry-After` in seconds is followed up to [`MAX_DELAY`]; in any other
/// form (an HTTP date) it is ignored for the backoff.
pub fn retry_delay(
    retry: u32,
    method: &Method,
    status: StatusCode,
    retry_after: Option<&str>,
    jitter: f64,
) -> Option<Duration> {
    let retryable = match status {
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => true,
        StatusCode::GATEWAY_TIMEOUT => matches!(*method, Method::GET | Method::HEAD),
        _ => false,
    };
    if !retryable || retry == 0 || retry > MAX_RETRIES {
        return None;
    }
    let asked = retry_after.and_then(|text| text.trim().parse::<u64>().ok());
    Some(match asked {
        Some(seconds) => Duration::from_secs(seconds).min(MAX_DELAY),
        None => backoff(retry, jitter),
    })
}

fn backoff(retry: u32, jitter: f64) -> Duration {
    let full = FIRST_BACKOFF.saturating_mul(1 << (retry - 1).min(16)).min(MAX_DELAY);
    full.mul_f64(0.5 + 0.5 * jitter.clamp(0.0, 1.0))
}

/// [`retry_delay`] as a tower retry policy; one per request (tower clones
/// the policy for each call).
#[derive(Clone, Debug, Default)]
pub struct BoundedRetry {
    retries: u32,
}

fn jitter() -> f64 {
    f64::from(getrandom::u32().unwrap_or(u32::MAX / 2)) / f64::from(u32::MAX)
}

impl<B> Policy<Request<Body>, Response<B>, BoxError> for BoundedRetry {
    type Future = tokio::time::Sleep;

    fn retry(&mut self, req: &mut Request<Body>, result: &mut Result<Response<B>, BoxError>) -> Option<Self::Future> {
        let response = result.as_ref().ok()?;
        let retry_after = response
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok());
        let delay = retry_delay(self.retries + 1, req.method(), response.status(), retry_after, jitter())?;
        self.retries += 1;
        Some(tokio::time::sleep(delay))
    }

    fn clone_request(&mut self, req: &Request<Body>) -> Option<Request<Body>> {
        // Only a body held whole can be sent twice (a streamed one cannot).
        let body = req.body().try_clone()?;
        let mut copy = Request::new(body);
        *copy.method_mut() = req.method().clone();
        *copy.uri_mut() = req.uri().clone();
        *copy.version_mut() = req.version();
        *copy.headers_mut() = req.headers().clone();
        *copy.extensions_mut() = req.extensions().clone();
        Some(copy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;
    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn which_answers_are_retried_and_after_how_long() {
        let (get, patch, post) = (Method::GET, Method::PATCH, Method::POST);
        let too_many = StatusCode::TOO_MANY_REQUESTS;
        let unavailable = StatusCode::SERVICE_UNAVAILABLE;
        let gateway = StatusCode::GATEWAY_TIMEOUT;
        // retry, method, status, Retry-After, jitter: the wait, if any.
        type Row<'a> = (u32, &'a Method, StatusCode, Option<&'a str>, f64, Option<Duration>);
        #[rustfmt::skip]
        let table: &[Row] = &[
            // The server's wait, followed while short.
            (1, &patch, too_many, Some("1"), 0.0, Some(S(1))),
            (1, &patch, too_many, Some("0"), 0.0, Some(S(0))),
            (2, &post, unavailable, Some(" 4 "), 0.0, Some(S(4))),
            // ... capped when long: a status write never waits an hour.
            (1, &patch, too_many, Some("3600"), 1.0, Some(MAX_DELAY)),
            (3, &patch, too_many, Some("18446744073709551615"), 0.5, Some(MAX_DELAY)),
            // No wait named, or one that is not seconds: doubling backoff,
            // jitter spreading it over its second half, capped.
            (1, &get, too_many, None, 0.0, Some(MS(100))),
            (1, &get, too_many, None, 1.0, Some(MS(200))),
            (2, &get, unavailable, None, 1.0, Some(MS(400))),
            (3, &get, unavailable, Some("Wed, 21 Oct 2026 07:28:00 GMT"), 1.0, Some(MS(800))),
            (3, &get, unavailable, Some("-5"), 0.5, Some(MS(600))),
            (3, &get, too_many, None, 7.0, Some(MS(800))),
            // 504: reads only; a write may have been carried out.
            (1, &get, gateway, None, 1.0, Some(MS(200))),
            (1, &patch, gateway, Some("1"), 1.0, None),
            (1, &post, gateway, None, 1.0, None),
            // At most MAX_RETRIES retries.
            (MAX_RETRIES, &patch, too_many, Some("1"), 0.0, Some(S(1))),
            (MAX_RETRIES + 1, &patch, too_many, Some("1"), 0.0, None),
            (u32::MAX, &get, too_many, None, 0.0, None),
            // Other answers are the caller's to handle.
            (1, &get, StatusCode::OK, Some("1"), 0.0, None),
            (1, &patch, StatusCode::CONFLICT, None, 0.0, None),
            (1, &get, StatusCode::INTERNAL_SERVER_ERROR, Some("1"), 0.0, None),
            (1, &get, StatusCode::BAD_GATEWAY, None, 0.0, None),
        ];
        for (retry, method, status, retry_after, jitter, expected) in table {
            assert_eq!(
                retry_delay(*retry, method, *status, *retry_after, *jitter),
                *expected,
                "retry {retry} of {method} answered {status} with Retry-After {retry_after:?}, jitter {jitter}"
            );
        }
    }

    #[test]
    fn a_request_waits_at_most_max_retries_times_max_delay_in_all() {
        let total: Duration = (1..=u32::MAX)
            .map_while(|retry| retry_delay(retry, &Method::PATCH, StatusCode::TOO_MANY_REQUESTS, Some("3600"), 1.0))
            .sum();
        assert_eq!(total, MAX_DELAY * MAX_RETRIES);
    }

    fn refused(retry_after: &str) -> Result<Response<()>, BoxError> {
        Ok(Response::builder()
            .status(StatusCode::TOO_MANY_REQUESTS)
            .header("Retry-After", retry_after)
            .body(())
            .unwrap())
    }

    #[tokio::test(start_paused = true)]
    async fn the_policy_stops_after_max_retries_and_sleeps_at_most_max_delay() {
        let mut policy = BoundedRetry::default();
        let mut request = Request::new(Body::from(b"{}".to_vec()));
        *request.method_mut() = Method::PATCH;
        for _ in 0..MAX_RETRIES {
            let started = tokio::time::Instant::now();
            let sleep = policy.retry(&mut request, &mut refused("3600")).expect("retried");
            assert_eq!(sleep.deadline() - started, MAX_DELAY);
            let copy = Policy::<_, Response<()>, BoxError>::clone_request(&mut policy, &request);
            assert!(copy.is_some(), "a whole body is sent again");
        }
        assert!(policy.retry(&mut request, &mut refused("3600")).is_none());
    }
}
