//! What an executor needs of its platform: the [`Io`] trait. The browser's
//! is `wasm::BrowserIo` (fetch, storage, timers, animation frames); the
//! native tests' is a fake that records what it is asked and answers as the
//! test says.

use crate::core::fold::ViewChange;
use crate::core::machine::{Action, Machine};

/// A stored value read at once, or later.
pub enum Loaded {
    /// The value (`None`: nothing stored).
    Ready(Option<String>),
    /// The storage answers later, through [`Executor::stored`] or
    /// [`Executor::storage_failed`].
    ///
    /// [`Executor::stored`]: super::Executor::stored
    /// [`Executor::storage_failed`]: super::Executor::storage_failed
    Pending,
}

/// The platform under one [`Executor`](super::Executor): each method carries
/// out one kind of action and decides nothing. Methods are called with no
/// borrow of the executor held, so they may call user code (a custom
/// storage, `getToken`) that re-enters the client; the answers come back
/// through the executor's inputs (`response`, `timeout`, `frame`, …), never
/// from inside these calls but for a synchronous storage read's value.
pub trait Io {
    /// A request in flight; dropping it aborts it.
    type Request;

    /// The machine's clock: monotonic milliseconds.
    fn now(&self) -> u64;
    /// The wall clock (ms since the Unix epoch), read only to interpret an
    /// answer's `Retry-After` date.
    fn wall_clock(&self) -> u64;

    /// Starts the request an `OpenStream`, `Fetch` or `Post` asks for; its
    /// answer's facts go to [`Executor::response`](super::Executor::response).
    fn start(&self, request: &Action) -> Option<Self::Request>;
    /// The next request asks the token provider for a fresh token.
    fn refresh_credentials(&self);
    /// Lets go of a claim a `Post` took (`Action::Release`); a platform
    /// without claims sends every `Post` and has none to release.
    fn release(&self, _claim: &str) {}

    /// Reads the stored value.
    fn load(&self) -> Result<Loaded, String>;
    /// Stores `value`; a failure that comes later goes to
    /// [`Executor::storage_failed`](super::Executor::storage_failed).
    fn save(&self, value: &str) -> Result<(), String>;
    /// Forgets the stored value.
    fn remove(&self);

    /// Calls [`Executor::timeout`](super::Executor::timeout) at `at` (the
    /// machine's clock), replacing the wake-up asked before; `None`: none.
    fn arm_timer(&self, at: Option<u64>);
    /// Calls [`Executor::frame`](super::Executor::frame) in the next
    /// animation frame.
    fn request_frame(&self);
    /// Whether the body reader holds the live stream's chunks, up to
    /// `max_bytes` of them (0: it does not), reporting the first through
    /// [`Executor::chunks_held`](super::Executor::chunks_held).
    fn hold_chunks(&self, max_bytes: usize);
    /// Delivers the held chunks now.
    fn release_chunks(&self);
    /// Calls [`Executor::read_waiting_page`](super::Executor::read_waiting_page)
    /// once the requests started so far are on their way.
    fn after_requests(&self);

    /// The view changed (called with the machine borrowed: no user code).
    fn view_changed(&self, _change: ViewChange) {}
    /// Nothing to read now: a moment to prepare UI objects (called with the
    /// machine borrowed: no user code).
    fn idle(&self, _machine: &mut Machine) {}
    /// The client closed: release listeners and timers.
    fn close(&self) {}
}
