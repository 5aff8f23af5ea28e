//! A stream's sending side (`Writer`): the frames of one SSE connection,
//! each paid for from the stream budget before it is handed to the body,
//! written in order, several at once when they queued (or, on a busy
//! stream, when they come within `--stream-batch-ms`). It serves one log
//! (a scoped or the global stream) or several (the multiplexed stream);
//! `Feed` is one log's place on it. A log's opening (`hello`, backlog,
//! snapshots) is in [`backlog`].

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use replay_core::protocol::{Envelope, Event, Heartbeat, Scope};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit};

use super::Out;
use crate::app::App;
use crate::budget::{Quota, StreamBudget};
use crate::fanout::{Frame, Subscription};
use crate::faults::StreamFaults;
use crate::log::transient;

mod backlog;

/// `retry:` sent first on every stream, in milliseconds.
const RETRY_MS: u64 = 1000;
/// Bytes of a backlog page handed to the connection at once: the
/// connection takes the next one when it has written most of the last.
const CHUNK: usize = 64 << 10;
/// A stream that wrote a durable frame less than this long ago is busy:
/// its next durable frame waits `--stream-batch-ms` for company
/// ([`Writer::batch_wait`]); a quiet stream's goes out at once.
const BUSY: Duration = Duration::from_millis(100);

/// Why a stream ended.
#[derive(Debug)]
pub(in crate::api) enum End {
    /// The client went away, a fault cut it, or the fan-out let go.
    Closed,
}

/// One log's place on a stream: which log, and the cursor of the last
/// durable event sent (the handoff's dedup point).
pub(in crate::api) struct Feed {
    /// `None` for the global list.
    scope: Option<(Scope, String)>,
    last: u64,
}

impl Feed {
    /// A log whose stream starts after `start`.
    pub(in crate::api) fn new(scope: Option<(Scope, String)>, start: u64) -> Feed {
        Feed { scope, last: start }
    }

    fn cursor_of(&self, env: &Envelope) -> u64 {
        if self.scope.is_some() {
            env.seq.unwrap_or(0)
        } else {
            env.id.unwrap_or(0)
        }
    }

    /// The published head: every event up to it is in our buffer or sent.
    fn current_head(&self, app: &App) -> u64 {
        match &self.scope {
            Some((scope, id)) => app.log.published_head(*scope, id),
            None => app.log.global_info().head,
        }
    }
}

/// One SSE connection's sending side; it serves one log (a scoped or the
/// global stream) or several (the multiplexed stream).
pub(in crate::api) struct Writer {
    app: Arc<App>,
    tx: mpsc::Sender<Out>,
    close: watch::Receiver<u64>,
    faults: StreamFaults,
    /// Whether durable frames carry an `id:` line (not on the multiplexed stream).
    ids: bool,
    /// Until the first `hello` is written: frames are paid from the
    /// `opening` quota.
    opening: bool,
    /// While forwarding queued frames ([`Writer::forward_queued`]): their
    /// text and count, written at once.
    gathered: Option<(String, u64)>,
    /// When the last durable frame was taken to be written (whether this
    /// stream is busy, [`BUSY`]).
    last_durable: Option<Instant>,
    /// Whether the fan-out has let go of the stream's subscriptions
    /// ([`Writer::end_when_let_go`]).
    let_go: Option<watch::Receiver<bool>>,
}

/// The quota of the stream budget a write is paid from.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Pages,
    Frames,
    Opening,
}

impl Kind {
    fn of(self, budget: &StreamBudget) -> &Quota {
        match self {
            Kind::Pages => &budget.pages,
            Kind::Frames => &budget.frames,
            Kind::Opening => &budget.opening,
        }
    }
}

impl Writer {
    /// A writer into `tx`, picking up the stream faults in force now.
    pub(in crate::api) fn new(app: Arc<App>, tx: mpsc::Sender<Out>, ids: bool) -> Writer {
        let mut close = app.faults.close_signal();
        close.mark_unchanged();
        let mut faults = StreamFaults::default();
        app.faults.refresh_stream(&mut faults, true);
        Writer {
            app,
            tx,
            close,
            faults,
            ids,
            opening: true,
            gathered: None,
            last_durable: None,
            let_go: None,
        }
    }

    /// From now on, a wait for the peer or for room ends the stream once
    /// the fan-out has let go of `sub`'s stream (lag, or ended for another
    /// stream): the frames it still holds are for a peer that is not
    /// taking them, and its client resumes from its cursor.
    pub(in crate::api) fn end_when_let_go(&mut self, sub: &Subscription) {
        self.let_go = Some(sub.let_go());
    }

    /// A scoped or global stream from `retry:` to its end: `hello` and the
    /// backlog after `feed`'s cursor, then the live frames and heartbeats.
    pub(in crate::api) async fn run(
        &mut self,
        mut feed: Feed,
        mut sub: Subscription,
        epoch: String,
        head: u64,
    ) -> Result<(), End> {
        self.end_when_let_go(&sub);
        self.write_retry().await?;
        self.open(&mut feed, epoch, head).await?;
        let heartbeat = self.heartbeat();
        loop {
            let next = tokio::select! {
                f = tokio::time::timeout(heartbeat, sub.recv()) => f,
                _ = self.closed() => return Err(End::Closed),
            };
            match next {
                Ok(Some(frame)) => self.forward_queued(&mut feed, &frame, &mut sub).await?,
                Ok(None) => return Err(End::Closed),
                Err(_) => self.beat(&mut feed, &mut sub).await?,
            }
        }
    }

    /// The longest silence a log may have on this stream.
    pub(in crate::api) fn heartbeat(&self) -> Duration {
        Duration::from_millis(self.app.cfg.heartbeat_ms.max(1))
    }

    /// Resolves when a fault closes every stream or the client has gone
    /// (the response body was dropped).
    pub(in crate::api) async fn closed(&mut self) {
        tokio::select! {
            _ = self.close.changed() => {}
            _ = self.tx.closed() => {}
        }
    }

    /// The first frame of every stream.
    pub(in crate::api) async fn write_retry(&mut self) -> Result<(), End> {
        self.write(format!("retry: {RETRY_MS}\n\n")).await
    }

    /// After a heartbeat interval of silence on `sub`: everything up to the
    /// published head has been published, hence is in `sub`'s buffer or
    /// already written: flush it, then send a `heartbeat` with that head.
    pub(in crate::api) async fn beat(
        &mut self,
        feed: &mut Feed,
        sub: &mut Subscription,
    ) -> Result<(), End> {
        let head = feed.current_head(&self.app);
        while let Ok(frame) = sub.try_recv() {
            self.forward(feed, &frame.env, &frame.json).await?;
        }
        self.write_transient(feed, Event::Heartbeat(Heartbeat { head }), head)
            .await
    }

    /// [`Writer::forward`]s `first` and the frames already queued behind
    /// it on `sub` (up to [`CHUNK`] bytes) in one write: a stream that is
    /// behind (a group of events published at once) costs one write, not
    /// one per frame. On a busy stream a durable `first` waits
    /// ([`Writer::batch_wait`]) for the frames published behind it first.
    pub(in crate::api) async fn forward_queued(
        &mut self,
        feed: &mut Feed,
        first: &Frame,
        sub: &mut Subscription,
    ) -> Result<(), End> {
        self.batch_wait(first).await?;
        self.start_gathering();
        let mut out = self.forward(feed, &first.env, &first.json).await;
        if out.is_ok() {
            out = self.gather_queued(feed, sub).await.map(drop);
        }
        self.write_gathered(out).await
    }

    /// On a busy stream (one that wrote a durable frame less than [`BUSY`]
    /// ago), waits `--stream-batch-ms` before a durable `first` is
    /// written, so that the frames published meanwhile (this node's next
    /// groups, other nodes' events) go out in the same write. A write costs
    /// the kernel's send (on loopback, the reader's receive too) and a
    /// wake-up of the connection whatever its size: in the cluster bench,
    /// where each event goes to 100 streams, one write per frame was half
    /// of a node's CPU. A quiet stream's frame goes out at once,
    /// and so does a transient (deltas keep their pace).
    pub(in crate::api) async fn batch_wait(&mut self, first: &Frame) -> Result<(), End> {
        if !first.env.is_durable() {
            return Ok(());
        }
        let now = Instant::now();
        let busy = self
            .last_durable
            .is_some_and(|t| now.duration_since(t) < BUSY);
        let wait = Duration::from_millis(self.app.cfg.stream_batch_ms);
        if busy && !wait.is_zero() {
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.closed() => return Err(End::Closed),
            }
        }
        self.last_durable = Some(Instant::now());
        Ok(())
    }

    /// From now until [`Writer::write_gathered`], frames forwarded are
    /// gathered into one write.
    pub(in crate::api) fn start_gathering(&mut self) {
        self.gathered = Some((String::new(), 0));
    }

    /// While gathering: [`Writer::forward`]s the frames already queued on
    /// `sub`, until [`CHUNK`] bytes are gathered; whether it took any.
    pub(in crate::api) async fn gather_queued(
        &mut self,
        feed: &mut Feed,
        sub: &mut Subscription,
    ) -> Result<bool, End> {
        let mut took = false;
        while self.gathered.as_ref().is_some_and(|g| g.0.len() < CHUNK) {
            let Ok(frame) = sub.try_recv() else { break };
            took = true;
            self.forward(feed, &frame.env, &frame.json).await?;
        }
        Ok(took)
    }

    /// Stops gathering and writes what was gathered, unless forwarding it
    /// failed (`out`).
    pub(in crate::api) async fn write_gathered(&mut self, out: Result<(), End>) -> Result<(), End> {
        let (text, frames) = self.gathered.take().unwrap_or_default();
        out?;
        if frames == 0 {
            return Ok(());
        }
        self.write_frames(text, frames).await
    }

    /// Sends a live event of the feed's log, unless the backlog sent it.
    pub(in crate::api) async fn forward(
        &mut self,
        feed: &mut Feed,
        env: &Envelope,
        json: &str,
    ) -> Result<(), End> {
        if !env.is_durable() {
            if let Some((text, frames)) = self.gathered.as_mut() {
                push_frame(text, None, env, json);
                *frames += 1;
                return Ok(());
            }
            return self.write(frame_text(None, env, json)).await;
        }
        let c = feed.cursor_of(env);
        if c <= feed.last {
            return Ok(()); // already sent from the backlog
        }
        feed.last = c;
        if self.app.faults.take_skip() {
            return Ok(());
        }
        self.write_durable(feed, env, json).await?;
        if self.app.faults.take_duplicate() {
            self.write_durable(feed, env, json).await?;
        }
        Ok(())
    }

    async fn write_durable(&mut self, feed: &Feed, env: &Envelope, json: &str) -> Result<(), End> {
        let id = self.ids.then(|| feed.cursor_of(env));
        if let Some((text, frames)) = self.gathered.as_mut() {
            push_frame(text, id, env, json);
            *frames += 1;
            return Ok(());
        }
        self.write(frame_text(id, env, json)).await
    }

    /// Sends a transient event of the feed's log (the global list's are
    /// named `system`/`global`).
    pub(in crate::api) async fn write_transient(
        &mut self,
        feed: &Feed,
        event: Event,
        head: u64,
    ) -> Result<(), End> {
        let (scope, id) = match &feed.scope {
            Some((s, id)) => (*s, id.as_str()),
            None => (Scope::System, "global"),
        };
        let env = transient(scope, id, head, event, true);
        let json = env.to_json();
        self.write(frame_text(None, &env, &json)).await
    }

    /// Sends a transient envelope as it is.
    pub(in crate::api) async fn write_envelope(&mut self, env: &Envelope) -> Result<(), End> {
        self.write(frame_text(None, env, &env.to_json())).await
    }

    /// Room for `units` in `kind`'s quota, if it has it now.
    fn try_room(&self, kind: Kind, units: u32) -> Option<OwnedSemaphorePermit> {
        let budget = &self.app.streams;
        let quota = kind.of(budget);
        let held = Arc::clone(&quota.room.permits)
            .try_acquire_many_owned(units)
            .ok()?;
        budget.note_peak(quota);
        Some(held)
    }

    /// Room for `units` in `kind`'s quota, waiting for it: other streams
    /// give theirs back as their connections take their bytes (or end). No
    /// room within the write timeout ends the stream (the client resumes
    /// from its cursor).
    async fn room(&mut self, kind: Kind, units: u32) -> Result<OwnedSemaphorePermit, End> {
        if let Some(held) = self.try_room(kind, units) {
            return Ok(held);
        }
        let app = Arc::clone(&self.app);
        let quota = kind.of(&app.streams);
        let permits = Arc::clone(&quota.room.permits);
        let timeout = self.write_timeout();
        let held = tokio::select! {
            p = permits.acquire_many_owned(units) => p.map_err(|_| End::Closed)?,
            _ = self.close.changed() => return Err(End::Closed),
            _ = self.tx.closed() => return Err(End::Closed),
            _ = let_go(&mut self.let_go) => return Err(End::Closed),
            _ = tokio::time::sleep(timeout) => {
                app.streams.starved.fetch_add(1, Ordering::Relaxed);
                return Err(End::Closed);
            }
        };
        app.streams.note_peak(quota);
        Ok(held)
    }

    /// Sends one frame once its quota has room for it.
    async fn write(&mut self, text: String) -> Result<(), End> {
        self.write_frames(text, 1).await
    }

    /// Sends `frames` frames as `text` once its quota has room for it.
    async fn write_frames(&mut self, text: String, frames: u64) -> Result<(), End> {
        let kind = if self.opening {
            Kind::Opening
        } else {
            Kind::Frames
        };
        let units = kind.of(&self.app.streams).room.units_for(text.len());
        let held = self.room(kind, units).await?;
        self.write_bytes(Bytes::from(text), Some(held), frames)
            .await
    }

    /// Sends `frames` frames (or part of them) as `bytes`, holding `held`.
    async fn write_bytes(
        &mut self,
        mut bytes: Bytes,
        held: Option<OwnedSemaphorePermit>,
        frames: u64,
    ) -> Result<(), End> {
        self.wait_stall().await?;
        self.app.faults.refresh_stream(&mut self.faults, false);
        let mut cut = false;
        if let Some(rem) = self.faults.cut_remaining.as_mut() {
            if bytes.len() as u64 >= *rem {
                bytes.truncate(*rem as usize);
                cut = true;
            } else {
                *rem -= bytes.len() as u64;
            }
        }
        let stats = &self.app.log.fanout.stats;
        stats.frames_sent.fetch_add(frames, Ordering::Relaxed);
        stats
            .bytes_sent
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        if !bytes.is_empty() {
            self.send(bytes, held).await?;
        }
        if cut {
            // Give the partial bytes a moment to reach the socket, then end.
            tokio::time::sleep(Duration::from_millis(20)).await;
            return Err(End::Closed);
        }
        Ok(())
    }

    /// Hands bytes to the response body. A peer that reads nothing stops the
    /// body, and this waits: raced against the close signal (a close,
    /// restart or shutdown ends the stream at once) and the write timeout.
    async fn send(&mut self, bytes: Bytes, held: Option<OwnedSemaphorePermit>) -> Result<(), End> {
        // Room in the body's queue now (the usual case): no timer to arm.
        let (bytes, held) = match self.tx.try_send((bytes, held)) {
            Ok(()) => return Ok(()),
            Err(mpsc::error::TrySendError::Closed(_)) => return Err(End::Closed),
            Err(mpsc::error::TrySendError::Full(out)) => out,
        };
        let timeout = self.write_timeout();
        tokio::select! {
            sent = self.tx.send((bytes, held)) => sent.map_err(|_| End::Closed),
            _ = self.close.changed() => Err(End::Closed),
            _ = let_go(&mut self.let_go) => Err(End::Closed),
            _ = tokio::time::sleep(timeout) => Err(End::Closed),
        }
    }

    fn write_timeout(&self) -> Duration {
        Duration::from_millis(self.app.cfg.write_timeout_ms.max(1))
    }

    async fn wait_stall(&mut self) -> Result<(), End> {
        while let Some(until) = self.app.faults.stall() {
            let step = match until {
                Some(u) => u
                    .saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(50)),
                None => Duration::from_millis(50),
            };
            tokio::select! {
                _ = tokio::time::sleep(step) => {}
                _ = self.close.changed() => return Err(End::Closed),
            }
        }
        Ok(())
    }
}

/// Resolves once the fan-out has let go of the stream (never without a
/// subscription to watch).
async fn let_go(watch: &mut Option<watch::Receiver<bool>>) {
    match watch {
        // An error: the fan-out dropped it, which it does only after setting it.
        Some(w) => drop(w.wait_for(|gone| *gone).await),
        None => std::future::pending().await,
    }
}

/// One SSE frame: `id:` only for durable events.
fn frame_text(id: Option<u64>, env: &Envelope, json: &str) -> String {
    let mut text = String::new();
    push_frame(&mut text, id, env, json);
    text
}

/// Appends one SSE frame to `text`.
fn push_frame(text: &mut String, id: Option<u64>, env: &Envelope, json: &str) {
    let ty = env.event.type_name();
    let _ = match id {
        Some(id) => write!(text, "id: {id}\nevent: {ty}\ndata: {json}\n\n"),
        None => write!(text, "event: {ty}\ndata: {json}\n\n"),
    };
}
