//! The one response handler: the IO layer reports the raw facts of every
//! answer, in order (its head, its body's bytes, its end, or a failure), and
//! the machine decides what they are: a stream's events, a page, a write's
//! answer, or an HTTP error with its body. The IO layer branches on no
//! status and arms no deadline: a request that has not answered within
//! [`Config::connect_timeout_ms`](super::Config::connect_timeout_ms) (its
//! head, and for a stream its first body byte: a stream's headers alone do
//! not prove it alive) is aborted here, from [`poll_timeout`](Machine::poll_timeout),
//! and a body read whole is bounded by [`Config::max_body_bytes`](super::Config::max_body_bytes).

use super::{Action, CoreError, FetchKind, Machine, RequestId};
use crate::protocol::Envelope;

/// One fact of one answer: as the IO layer saw it, or as the share hub
/// serves a virtual stream (PROTOCOL.md §4.6).
#[derive(Clone, Debug, PartialEq)]
pub enum Response {
    /// The status line and the headers the machine reads.
    Head {
        /// The HTTP status.
        status: u16,
        /// `Content-Type`.
        content_type: Option<String>,
        /// `Retry-After`, raw (report the wall clock first when it is set:
        /// [`Machine::handle_wall_clock`]).
        retry_after: Option<String>,
    },
    /// The next bytes of the body, any chunking.
    Body(Vec<u8>),
    /// Events of a stream, already read: what the share hub hands the
    /// machines of the scopes it routes them to (one reading per event).
    Events(Vec<StreamEvent>),
    /// The body ended cleanly.
    End,
    /// No (more) answer: the transport failed (`Network`) or the
    /// credentials could not be had (`Credentials`).
    Failed(CoreError),
}

/// One event of a stream, read once.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamEvent {
    /// The event.
    pub envelope: Envelope,
    /// Bytes of its `data` as sent (what holding it counts).
    pub size: usize,
}

/// The answers in progress.
#[derive(Debug, Default)]
pub(super) struct Answers {
    /// Requests that have not answered yet (no head; a stream: no body
    /// byte), with their deadline.
    waiting: Vec<(RequestId, u64)>,
    /// Request ids up to this one are tracked (ids only grow).
    tracked: u64,
    /// Bodies read whole (pages, writes, and any non-2xx answer).
    bodies: Vec<Body>,
}

/// A body read whole, with the head it came with.
#[derive(Debug)]
struct Body {
    id: RequestId,
    status: u16,
    retry_after: Option<String>,
    bytes: Vec<u8>,
}

impl Answers {
    /// The earliest first-byte deadline.
    pub(super) fn deadline(&self) -> Option<u64> {
        self.waiting.iter().map(|w| w.1).min()
    }

    /// Request `id` answered (or failed): its first-byte deadline is over.
    pub(super) fn answered(&mut self, id: RequestId) {
        self.waiting.retain(|w| w.0 != id);
    }

    fn body(&mut self, id: RequestId) -> Option<&mut Body> {
        self.bodies.iter_mut().find(|b| b.id == id)
    }

    fn take_body(&mut self, id: RequestId) -> Option<Body> {
        let i = self.bodies.iter().position(|b| b.id == id)?;
        Some(self.bodies.swap_remove(i))
    }

    /// Forgets everything (close).
    pub(super) fn clear(&mut self) {
        self.waiting.clear();
        self.bodies.clear();
    }
}

impl Machine {
    /// One fact of the answer to request `id` (see [`Response`]): the one
    /// input for every request's answer.
    pub fn handle_response(&mut self, id: RequestId, response: Response, now: u64) {
        if self.closed {
            return;
        }
        match response {
            Response::Head {
                status,
                content_type,
                retry_after,
            } => {
                let stream_ok = self.is_stream(id) && (200..300).contains(&status);
                if stream_ok {
                    // Still waiting: for its first body byte.
                    self.handle_stream_opened(
                        id,
                        status,
                        content_type.as_deref(),
                        retry_after.as_deref(),
                        now,
                    );
                } else if self.is_live_request(id) {
                    self.answers.answered(id);
                    self.answers.bodies.push(Body {
                        id,
                        status,
                        retry_after,
                        bytes: Vec::new(),
                    });
                }
            }
            Response::Body(bytes) => {
                let limit = self.cfg.max_body_bytes;
                if let Some(body) = self.answers.body(id) {
                    if body.bytes.len().saturating_add(bytes.len()) > limit {
                        self.answers.take_body(id);
                        self.actions.push_back(Action::Abort { id });
                        let error = CoreError::BodyTooLarge {
                            limit: limit as u64,
                        };
                        return self.handle_request_failed(id, error, now);
                    }
                    if body.bytes.is_empty() {
                        // A body in one chunk is kept as it came.
                        body.bytes = bytes;
                    } else {
                        body.bytes.extend_from_slice(&bytes);
                    }
                } else if self.is_stream(id) {
                    self.handle_stream_bytes(id, &bytes, now);
                }
            }
            Response::Events(events) => self.handle_stream_events(id, events, now),
            Response::End => match self.answers.take_body(id) {
                Some(body) => self.answered_whole(body, now),
                None => self.handle_stream_end(id, now),
            },
            Response::Failed(error) => {
                self.answers.answered(id);
                self.answers.take_body(id);
                self.handle_request_failed(id, error, now);
            }
        }
    }

    /// A body read whole, delivered as what it answers.
    fn answered_whole(&mut self, body: Body, now: u64) {
        let Body {
            id,
            status,
            retry_after,
            bytes,
        } = body;
        if !(200..300).contains(&status) {
            return self.handle_http_error(id, status, retry_after.as_deref(), &bytes, now);
        }
        if self.writes.owns(id) {
            return self.handle_post_answer(id, &bytes, now);
        }
        match self.fetch_kind(id) {
            Some(FetchKind::Replay) => self.handle_replay_page(id, &bytes, now),
            Some(FetchKind::Events) => self.handle_event_page(id, &bytes, now),
            None => {}
        }
    }

    /// Whether the machine still waits on request `id`.
    fn is_live_request(&self, id: RequestId) -> bool {
        self.is_stream(id) || self.fetch_kind(id).is_some() || self.writes.owns(id)
    }

    /// Starts the first-byte deadline of every request asked for since the
    /// last input, and forgets the requests the machine gave up (aborted
    /// or replaced): called after every input.
    pub(super) fn track_answers(&mut self, now: u64) {
        let deadline = now.saturating_add(self.cfg.connect_timeout_ms);
        for a in &self.actions {
            if let Action::OpenStream { id, .. }
            | Action::Fetch { id, .. }
            | Action::Post { id, .. } = a
            {
                if id.0 > self.answers.tracked {
                    self.answers.tracked = id.0;
                    self.answers.waiting.push((*id, deadline));
                }
            }
        }
        if self.answers.waiting.is_empty() && self.answers.bodies.is_empty() {
            return;
        }
        let mut answers = std::mem::take(&mut self.answers);
        answers.waiting.retain(|w| self.is_live_request(w.0));
        answers.bodies.retain(|b| self.is_live_request(b.id));
        self.answers = answers;
    }

    /// Aborts the requests whose first-byte deadline passed; each fails
    /// with [`CoreError::Timeout`] (retried as the machine retries it).
    pub(super) fn answer_timeouts(&mut self, now: u64) {
        let late: Vec<RequestId> = self
            .answers
            .waiting
            .iter()
            .filter(|w| w.1 <= now)
            .map(|w| w.0)
            .collect();
        for id in late {
            self.answers.answered(id);
            self.actions.push_back(Action::Abort { id });
            let error = CoreError::Timeout {
                after_ms: self.cfg.connect_timeout_ms,
            };
            if self.writes.owns(id) {
                self.write_failed(id, error, now);
            } else {
                self.on_request_failed(id, error, now);
            }
        }
    }
}
