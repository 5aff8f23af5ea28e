//! The subscribers of one client: called when the machine says
//! [`Pace::Notify`](crate::core::machine::Pace::Notify).

use std::rc::Rc;

/// A subscriber callback.
pub type Subscriber = Rc<dyn Fn()>;

/// The subscribers of one client, in the order they subscribed.
#[derive(Default)]
pub struct Subscribers {
    list: Vec<(u32, Subscriber)>,
    next_id: u32,
}

impl Subscribers {
    /// Adds `f`; returns its id for [`remove`](Self::remove).
    pub fn add(&mut self, f: Subscriber) -> u32 {
        self.next_id += 1;
        self.list.push((self.next_id, f));
        self.next_id
    }

    /// Removes a subscriber (idempotent); returns it, to drop unborrowed.
    pub fn remove(&mut self, id: u32) -> Option<Subscriber> {
        let i = self.list.iter().position(|s| s.0 == id)?;
        Some(self.list.remove(i).1)
    }

    /// Forgets every subscriber; returns them, to drop unborrowed.
    pub fn clear(&mut self) -> Vec<(u32, Subscriber)> {
        std::mem::take(&mut self.list)
    }

    /// The subscribers to call now (call them with no borrow held).
    pub fn all(&self) -> Vec<Subscriber> {
        self.list.iter().map(|s| s.1.clone()).collect()
    }
}
