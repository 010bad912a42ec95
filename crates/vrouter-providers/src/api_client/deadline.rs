//! A deadline on every Kubernetes request, chosen by what the request is
//! ([`RequestKind`]): a plain request (get, list page, patch, create) gets
//! its whole answer, body included, within it; a watch or an upgrade
//! (exec, attach) gets its answer's head within it and then streams for as
//! long as it lasts (the watcher's idle timeout and the connection's read
//! timeout bound those, see [`super::ApiTimeouts`]).
//!
//! The deadline sits outside the retries, so it bounds a request with all
//! its attempts: a request sent on a connection that silently died ends
//! with an error at its deadline instead of waiting forever.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use http::{Request, Response};
use http_body::{Body as HttpBody, Frame, SizeHint};
use kube::client::Body;
use tokio::time::{Instant, Sleep};
use tower::{BoxError, Layer, Service};

/// What a request is, as far as its deadline goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestKind {
    /// Answered once: the whole answer within the deadline.
    Plain,
    /// A watch (`watch=true` or `watch=1`): its events stream on.
    Watch,
    /// A protocol switch (exec, attach, port-forward): the connection
    /// becomes the session's.
    Upgrade,
}

impl RequestKind {
    pub fn of<B>(request: &Request<B>) -> RequestKind {
        if request.headers().contains_key(http::header::UPGRADE) {
            return RequestKind::Upgrade;
        }
        let watch = request
            .uri()
            .query()
            .unwrap_or_default()
            .split('&')
            .any(|pair| matches!(pair, "watch=true" | "watch=1"));
        if watch { RequestKind::Watch } else { RequestKind::Plain }
    }

    /// Whether the deadline also covers the answer's body.
    fn bounds_body(self) -> bool {
        self == RequestKind::Plain
    }
}

/// The request ran past its deadline (named in the message, so a status
/// or log line says what ended it).
#[derive(Debug, thiserror::Error)]
#[error("the Kubernetes API did not answer within {0:?} (request deadline)")]
pub struct DeadlineExceeded(pub Duration);

/// Adds [`Deadlines`] to a service.
#[derive(Clone, Copy, Debug)]
pub struct DeadlineLayer {
    pub deadline: Duration,
}

impl<S> Layer<S> for DeadlineLayer {
    type Service = Deadlines<S>;

    fn layer(&self, inner: S) -> Deadlines<S> {
        Deadlines {
            inner,
            deadline: self.deadline,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Deadlines<S> {
    inner: S,
    deadline: Duration,
}

impl<S, B> Service<Request<Body>> for Deadlines<S>
where
    S: Service<Request<Body>, Response = Response<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Response = Response<DeadlineBody<B>>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Self::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let kind = RequestKind::of(&request);
        let limit = self.deadline;
        let deadline = Instant::now() + limit;
        let answer = self.inner.call(request);
        Box::pin(async move {
            let response = tokio::time::timeout_at(deadline, answer)
                .await
                .map_err(|_| DeadlineExceeded(limit))?
                .map_err(Into::into)?;
            let body_deadline = kind.bounds_body().then_some(deadline);
            Ok(response.map(|body| DeadlineBody::new(body, body_deadline, limit)))
        })
    }
}

/// A response body that fails once its deadline (if any) has passed.
pub struct DeadlineBody<B> {
    inner: B,
    sleep: Option<Pin<Box<Sleep>>>,
    limit: Duration,
}

impl<B> DeadlineBody<B> {
    fn new(inner: B, deadline: Option<Instant>, limit: Duration) -> Self {
        DeadlineBody {
            inner,
            sleep: deadline.map(|at| Box::pin(tokio::time::sleep_until(at))),
            limit,
        }
    }
}

impl<B> HttpBody for DeadlineBody<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(sleep) = self.sleep.as_mut()
            && sleep.as_mut().poll(cx).is_ready()
        {
            return Poll::Ready(Some(Err(DeadlineExceeded(self.limit).into())));
        }
        Pin::new(&mut self.inner).poll_frame(cx).map_err(Into::into)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(uri: &str, upgrade: bool) -> Request<()> {
        let mut request = Request::builder().uri(uri);
        if upgrade {
            request = request.header("Upgrade", "websocket").header("Connection", "Upgrade");
        }
        request.body(()).unwrap()
    }

    #[test]
    fn each_request_is_classified_by_what_it_is() {
        use RequestKind::*;
        let table = [
            ("/api/v1/namespaces/a/secrets/s", false, Plain),
            (
                "/apis/vrouter.kojuro.date/v1/namespaces/a/vrouterconfigs?limit=500",
                false,
                Plain,
            ),
            (
                "/apis/vrouter.kojuro.date/v1/namespaces/a/vrouterconfigs/c/status?fieldManager=x",
                false,
                Plain,
            ),
            (
                "/apis/vrouter.kojuro.date/v1/vrouterconfigs?&watch=true&timeoutSeconds=290&allowWatchBookmarks=true&resourceVersion=5",
                false,
                Watch,
            ),
            ("/api/v1/pods?watch=1", false, Watch),
            // Only the parameter itself counts, not a name holding the word.
            ("/api/v1/namespaces/watch=true/pods", false, Plain),
            (
                "/api/v1/pods?fieldSelector=metadata.name%3Dwatch&watch=false",
                false,
                Plain,
            ),
            (
                "/api/v1/namespaces/a/pods/virt-launcher-x/exec?command=virsh&stdout=true",
                true,
                Upgrade,
            ),
        ];
        for (uri, upgrade, kind) in table {
            assert_eq!(RequestKind::of(&request(uri, upgrade)), kind, "{uri}");
        }
    }

    /// A body that never yields a frame: a silently dead connection.
    struct Silent;

    impl HttpBody for Silent {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            Poll::Pending
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_plain_answer_whose_body_stalls_fails_at_the_deadline_a_watch_streams_on() {
        use http_body_util::BodyExt;
        let limit = Duration::from_secs(3);
        let plain = DeadlineBody::new(Silent, Some(Instant::now() + limit), limit);
        let error = plain.collect().await.expect_err("the stalled body fails");
        assert!(error.to_string().contains("request deadline"), "{error}");

        let watch = DeadlineBody::new(Silent, None, limit);
        let ended = tokio::time::timeout(Duration::from_secs(3600), watch.collect()).await;
        assert!(ended.is_err(), "a watch's body has no deadline of its own");
    }
}
