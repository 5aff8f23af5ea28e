//! The answer to a connection that gets no slot (`net.rs`): `503
//! too_many_connections`, `Retry-After`, the API's error JSON, `Connection:
//! close`, and the CORS headers the routes would give its request, so that
//! a page on an allowed origin reads a `503` it can back off on instead of
//! an opaque network error.
//!
//! The answer follows the request head, read within [`REFUSAL_WAIT`] and
//! [`MAX_HEAD_BYTES`] (a client reads an answer to a request it has sent),
//! at most [`MAX_REFUSING`] connections at once. Past that, a connection
//! holds no file descriptor while it is waited for: what it has sent by the
//! time it is accepted is read without waiting (under a flood, when the
//! accept loop is behind, that is usually the whole head), the answer is
//! what fits the socket buffer, and the connection is closed.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{header, HeaderMap, Method, Request, Response, StatusCode};
use replay_core::protocol::ErrorBody;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tower::{Layer, ServiceExt};
use tower_http::cors::CorsLayer;

use crate::head::{HostAllowList, MAX_HEAD_BYTES};

/// Refused connections being answered at once, each for at most three
/// times [`REFUSAL_WAIT`]; past it a refused connection gets its answer
/// only if it fits the socket's buffer at once, and is closed.
pub(crate) const MAX_REFUSING: usize = 16;

/// How long a refused connection is waited for: to send its request head
/// before the `503`, to take the answer, and to close its side after it.
const REFUSAL_WAIT: Duration = Duration::from_secs(1);

/// Headers a refused head may have (hyper's own limit is 100).
const MAX_HEADERS: usize = 100;

/// `Retry-After` (seconds) of a `503 too_many_connections`.
pub const CONNECTIONS_RETRY_AFTER_S: u64 = 1;

/// Why a connection is not served.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Refusal {
    /// Its address holds its cap.
    Address(usize),
    /// Every slot serves a request.
    Full(usize),
}

impl Refusal {
    fn body(self) -> String {
        let message = match self {
            Refusal::Address(n) => format!(
                "this address holds its {n} connections, each serving a request \
                 (--max-connections-per-address)"
            ),
            Refusal::Full(n) => {
                format!("all {n} connections are serving requests (--max-connections)")
            }
        };
        serde_json::to_string(&ErrorBody {
            error: "too_many_connections".into(),
            message,
            epoch: None,
            head: None,
        })
        .unwrap_or_default()
    }
}

/// How refused connections are answered: the `Host` names and the CORS
/// layer of the routes (`None`: no `--allow-origin`), and how many are
/// being answered at once.
#[derive(Debug)]
pub struct Refusals {
    hosts: HostAllowList,
    cors: Option<CorsLayer>,
    answering: Arc<Semaphore>,
}

impl Refusals {
    /// Answers with the routes' `Host` allow-list and CORS layer.
    pub fn new(hosts: HostAllowList, cors: Option<CorsLayer>) -> Refusals {
        Refusals {
            hosts,
            cors,
            answering: Arc::new(Semaphore::new(MAX_REFUSING)),
        }
    }

    /// Answers `tcp`, refused for `why`: in a task in `tasks` while fewer
    /// than [`MAX_REFUSING`] are being answered, else at once.
    pub(crate) async fn refuse(
        self: &Arc<Self>,
        tcp: TcpStream,
        why: Refusal,
        tasks: &mut JoinSet<()>,
    ) {
        match Arc::clone(&self.answering).try_acquire_owned() {
            Ok(permit) => {
                let this = Arc::clone(self);
                tasks.spawn(async move {
                    let _permit = permit;
                    this.answer_waiting(tcp, why).await;
                });
            }
            Err(_) => {
                let mut head = vec![0; MAX_HEAD_BYTES];
                let n = tcp.try_read(&mut head).unwrap_or(0);
                let answer = self.answer(&head[..n], why).await;
                let _ = tcp.try_write(&answer);
            }
        }
    }

    /// Waits (a little) for the request head, sends the answer, closes
    /// the sending side and reads what the peer still sends until it
    /// closes, so that the close is not a reset that could destroy the
    /// answer before the peer has read it.
    async fn answer_waiting(&self, mut tcp: TcpStream, why: Refusal) {
        let mut buf = [0u8; 4096];
        let mut seen = Vec::new();
        let _ = tokio::time::timeout(REFUSAL_WAIT, async {
            while seen.len() < MAX_HEAD_BYTES && !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                match tcp.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => seen.extend_from_slice(&buf[..n]),
                }
            }
        })
        .await;
        let answer = self.answer(&seen, why).await;
        let sent = tokio::time::timeout(REFUSAL_WAIT, async {
            tcp.write_all(&answer).await?;
            tcp.shutdown().await
        })
        .await;
        if matches!(sent, Ok(Ok(()))) {
            let _ = tokio::time::timeout(REFUSAL_WAIT, async {
                while matches!(tcp.read(&mut buf).await, Ok(n) if n > 0) {}
            })
            .await;
        }
    }

    /// The whole answer to a refused connection that has sent `head` (all,
    /// part or none of a request head).
    pub(crate) async fn answer(&self, head: &[u8], why: Refusal) -> Vec<u8> {
        let (status, cors) = match self.cors_answer(head).await {
            Some(answer) => answer,
            None => (StatusCode::SERVICE_UNAVAILABLE, HeaderMap::new()),
        };
        let mut out = Vec::with_capacity(512);
        let reason = status.canonical_reason().unwrap_or("");
        out.extend_from_slice(format!("HTTP/1.1 {} {reason}\r\n", status.as_u16()).as_bytes());
        for (name, value) in &cors {
            out.extend_from_slice(name.as_str().as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        // A preflight is answered as the routes answer it: a browser fails
        // one that is not `2xx`, and then shows the page a network error
        // instead of the `503` its request would get.
        let body = if status == StatusCode::SERVICE_UNAVAILABLE {
            out.extend_from_slice(
                format!(
                    "content-type: application/json\r\nretry-after: {CONNECTIONS_RETRY_AFTER_S}\r\n"
                )
                .as_bytes(),
            );
            why.body()
        } else {
            String::new()
        };
        out.extend_from_slice(
            format!(
                "connection: close\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        );
        out
    }

    /// What the routes' CORS layer makes of the request in `head` answered
    /// `503`: its status (the layer answers a preflight itself) and
    /// headers. `None` (no CORS headers at all) without `--allow-origin`,
    /// for a partial head, without `Origin`, for an origin the layer does
    /// not allow, and for a `Host` the routes would refuse (`403`, which
    /// carries none either).
    async fn cors_answer(&self, head: &[u8]) -> Option<(StatusCode, HeaderMap)> {
        let cors = self.cors.as_ref()?;
        let req = parse_head(head)?;
        let host = req.headers().get(header::HOST)?.to_str().ok()?;
        let origin = req.headers().get(header::ORIGIN)?.clone();
        if !self.hosts.allows(host) {
            return None;
        }
        let refused = tower::service_fn(|_: Request<()>| async {
            let mut resp = Response::new(());
            *resp.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            Ok::<_, Infallible>(resp)
        });
        let resp = cors.layer(refused).oneshot(req).await.ok()?;
        let allowed = resp.headers().get(header::ACCESS_CONTROL_ALLOW_ORIGIN)?;
        (allowed == origin || allowed == "*").then(|| (resp.status(), resp.headers().clone()))
    }
}

/// The request in a whole request head, without its body; `None` for a
/// partial or malformed head.
fn parse_head(head: &[u8]) -> Option<Request<()>> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut headers);
    if !parsed.parse(head).ok()?.is_complete() {
        return None;
    }
    let method = Method::from_bytes(parsed.method?.as_bytes()).ok()?;
    let mut req = Request::builder().method(method).uri(parsed.path?);
    for h in parsed.headers.iter() {
        req = req.header(h.name, h.value);
    }
    req.body(()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusals() -> Refusals {
        let bound = "127.0.0.1:8787".parse().unwrap();
        let origins = ["http://app.example".to_owned()];
        let cors = crate::api::cors(&origins, false);
        Refusals::new(HostAllowList::new(bound, &origins, &[]), cors)
    }

    async fn answer(head: &str) -> String {
        let bytes = refusals().answer(head.as_bytes(), Refusal::Full(4)).await;
        String::from_utf8(bytes).unwrap()
    }

    /// The answer without waiting (past [`MAX_REFUSING`]) is the same
    /// function of what has arrived: CORS for a whole head, none for part.
    #[tokio::test]
    async fn cors_headers_need_a_whole_head_an_allowed_origin_and_host() {
        let whole = "GET /v1/x HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://app.example\r\n\r\n";
        let a = answer(whole).await;
        assert!(a.starts_with("HTTP/1.1 503 Service Unavailable\r\n"), "{a}");
        assert!(
            a.contains("\r\naccess-control-allow-origin: http://app.example\r\n"),
            "{a}"
        );
        assert!(a.ends_with(&Refusal::Full(4).body()), "{a}");
        for bare in [
            &whole[..whole.len() - 2],
            "",
            "GET /v1/x HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://evil.example\r\n\r\n",
            "GET /v1/x HTTP/1.1\r\nHost: evil.example\r\nOrigin: http://app.example\r\n\r\n",
            "GET /v1/x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        ] {
            let a = answer(bare).await;
            assert!(a.starts_with("HTTP/1.1 503"), "{a}");
            assert!(!a.contains("access-control-"), "{bare:?}: {a}");
            assert!(a.contains("\r\nretry-after: 1\r\n"), "{a}");
        }
    }
}
