//! A stream's opening (§4.3.1): `hello`, the backlog after the cursor,
//! page by page within the stream budget, then the session's snapshots.

use std::sync::Arc;

use axum::body::Bytes;
use replay_core::protocol::{Envelope, Event, Hello, LiveTurnSnapshot, Scope};
use tokio::sync::OwnedSemaphorePermit;

use super::{push_frame, End, Feed, Kind, Writer, CHUNK};
use crate::app::App;
use crate::budget::{self, UNIT};
use crate::store::{Budget, Page, StoreResult};

/// Backlog page size while streaming, in events.
const BACKLOG_PAGE: usize = 500;
/// Most bytes of event data in one backlog page (less when
/// `--page-max-bytes` is less).
const BACKLOG_PAGE_BYTES: usize = 128 << 10;
/// Reserved per event of a page being read, besides its data: the decoded
/// envelope's fields and the frame's `id:` and `event:` lines.
const EVENT_OVERHEAD: usize = 256;
/// A backlog up to this long (by the head at subscription) is read inline:
/// less than a millisecond, cheaper than a hop to a blocking thread.
const INLINE_BACKLOG: u64 = 64;

impl Writer {
    /// A log's `hello`, its backlog after the feed's cursor, then its
    /// snapshots (§4.3.1); the caller subscribed before.
    pub(in crate::api) async fn open(
        &mut self,
        feed: &mut Feed,
        epoch: String,
        head: u64,
    ) -> Result<(), End> {
        // The backlog is read as soon after subscribing as it can be, and
        // `hello` never waits for a long read: a long backlog's first page is
        // read while `hello` goes out, a short one right after it, inline.
        // Every page is read only once the stream budget has room for it
        // (a long backlog's first one while `hello` goes out if there is
        // room now, else after it).
        let start = feed.last;
        let inline = head.saturating_sub(start) <= INLINE_BACKLOG;
        let first = if inline {
            None
        } else {
            self.try_reserve().map(|held| {
                let task = tokio::spawn(backlog_page(
                    Arc::clone(&self.app),
                    feed.scope.clone(),
                    start,
                ));
                (task, held)
            })
        };
        let boot_id = self.app.log.served_boot_id(&self.app.worker().boot_id);
        let hello = Event::Hello(Hello {
            epoch,
            head,
            boot_id,
        });
        self.write_transient(feed, hello, head).await?;
        // What follows may wait behind other streams' bytes; a `hello`
        // (the first of a multiplexed stream) never does.
        self.opening = false;

        // Backlog, then snapshots, then live; `feed.last` dedups the handoff.
        let mut next = match first {
            Some((task, held)) => Some((task.await.map_err(|_| End::Closed)?, held)),
            None => None,
        };
        let mut first_page = true;
        // One page in memory at a time, bounded in bytes and reserved in
        // the stream budget; the next is read once the connection has
        // taken it: a slow reader holds about one page of its backlog.
        loop {
            let (page, held) = match next.take() {
                Some(got) => got,
                None => {
                    if !first_page {
                        self.drained().await?;
                    }
                    let held = self.reserve().await?;
                    let after = feed.last;
                    let now = if first_page && inline {
                        let budget = backlog_budget(&self.app);
                        self.app.log.try_read_now(|s| match &feed.scope {
                            Some((scope, id)) => s.page_within(*scope, id, after, budget),
                            None => s.global_page_within(after, budget),
                        })
                    } else {
                        None
                    };
                    let page = match now {
                        Some(page) => page,
                        None => {
                            backlog_page(Arc::clone(&self.app), feed.scope.clone(), after).await
                        }
                    };
                    (page, held)
                }
            };
            first_page = false;
            let Page { events, more } = page.map_err(|_| End::Closed)?;
            self.write_page(feed, events, held).await?;
            if !more {
                break;
            }
        }
        if let Some((Scope::Session, id)) = feed.scope.clone() {
            let live_turn = match self.app.worker().live_turn(&id) {
                Some(here) => Some(here),
                // Before the head is read: the durable events it follows
                // are published by then.
                None => self.app.log.remote_live_turn(&id).await,
            };
            let head = self.app.log.published_head(Scope::Session, &id);
            let sid = id.clone();
            let tasks = self
                .app
                .log
                .read(move |s| s.tasks(&sid))
                .await
                .map_err(|_| End::Closed)?;
            self.write_transient(
                feed,
                Event::LiveTurnSnapshot(LiveTurnSnapshot { live_turn }),
                head,
            )
            .await?;
            self.write_transient(feed, Event::TasksSnapshot(tasks), head)
                .await?;
        }
        Ok(())
    }

    /// Room for one backlog page, if the stream budget has it now.
    fn try_reserve(&self) -> Option<OwnedSemaphorePermit> {
        self.try_room(Kind::Pages, page_units(&self.app))
    }

    /// Room for one backlog page, waiting for it ([`Writer::room`]).
    async fn reserve(&mut self) -> Result<OwnedSemaphorePermit, End> {
        self.room(Kind::Pages, page_units(&self.app)).await
    }

    /// Waits until the response body has taken everything sent to it. A
    /// peer that reads nothing stops it: then the connection's write
    /// timeout ends the connection, and with it this wait.
    async fn drained(&mut self) -> Result<(), End> {
        let all = self.tx.max_capacity();
        tokio::select! {
            r = self.tx.reserve_many(all) => r.map(drop).map_err(|_| End::Closed),
            _ = self.close.changed() => Err(End::Closed),
            _ = super::let_go(&mut self.let_go) => Err(End::Closed),
        }
    }

    /// Sends a backlog page, encoded at once, in chunks that hold their part
    /// of `held` (shrunk to what the encoded page needs) until the
    /// connection takes them.
    async fn write_page(
        &mut self,
        feed: &mut Feed,
        events: Vec<Envelope>,
        mut held: OwnedSemaphorePermit,
    ) -> Result<(), End> {
        let Some(last) = events.last().map(|env| feed.cursor_of(env)) else {
            return Ok(());
        };
        let frames = events.len() as u64;
        let mut text = String::new();
        for env in &events {
            let id = self.ids.then(|| feed.cursor_of(env));
            push_frame(&mut text, id, env, &env.to_json());
        }
        drop(events);
        let missing = budget::fit(&mut held, text.len());
        // An event larger than a page: more room if there is some, else it
        // goes out with what the page has.
        if missing > 0 {
            let more = u32::try_from(missing).unwrap_or(u32::MAX);
            let pages = &self.app.streams.pages;
            if let Ok(extra) = Arc::clone(&pages.room.permits).try_acquire_many_owned(more) {
                held.merge(extra);
                self.app.streams.note_peak(pages);
            }
        }
        let mut bytes = Bytes::from(text);
        let mut frames = Some(frames);
        let mut held = Some(held);
        while !bytes.is_empty() {
            let part = bytes.split_to(bytes.len().min(CHUNK));
            let room = if bytes.is_empty() {
                held.take()
            } else {
                held.as_mut().and_then(|h| h.split(part.len() / UNIT))
            };
            self.write_bytes(part, room, frames.take().unwrap_or(0))
                .await?;
        }
        feed.last = last;
        Ok(())
    }
}

/// A backlog page's budget: [`BACKLOG_PAGE`] events, [`BACKLOG_PAGE_BYTES`]
/// or `--page-max-bytes` if less.
fn backlog_budget(app: &App) -> Budget {
    Budget {
        events: BACKLOG_PAGE,
        bytes: app.cfg.page_max_bytes.clamp(1, BACKLOG_PAGE_BYTES),
    }
}

/// The room reserved in the stream budget for reading one backlog page:
/// the decoded page and its encoding exist at once (at most the whole budget).
fn page_units(app: &App) -> u32 {
    let page = backlog_budget(app);
    let bytes = 2 * page.bytes + page.events * EVENT_OVERHEAD;
    app.streams.pages.room.units_for(bytes)
}

/// A backlog page after `after`, in a new snapshot: begun after subscribing,
/// it holds every event published before the subscription.
async fn backlog_page(
    app: Arc<App>,
    scope: Option<(Scope, String)>,
    after: u64,
) -> StoreResult<Page> {
    let budget = backlog_budget(&app);
    match scope {
        Some((scope, id)) => {
            app.log
                .read(move |s| s.page_within(scope, &id, after, budget))
                .await
        }
        None => {
            app.log
                .read(move |s| s.global_page_within(after, budget))
                .await
        }
    }
}
