//! The group's side: leadership changes, and the channel messages of
//! [`wire`](super::wire).

use super::wire::{self, Body};
use super::{Remote, Role, Share, Subs, MAX_CONTEXTS, MAX_MESSAGE_BYTES, MAX_SUBS};
use super::{SET_DEBOUNCE_MS, SUB_EXPIRY_MS, SUB_REFRESH_MS};

impl Share {
    /// This context got the lock: it opens the group's connection (after a
    /// short wait for re-announcements), starting each scope where the
    /// broadcast it followed left it, so the followers' machines go on
    /// without noticing.
    pub fn handle_became_leader(&mut self, now: u64) {
        if self.closed || self.role != Role::Follower {
            return;
        }
        self.role = Role::Leader;
        self.leader = Some(self.cfg.context);
        self.diag.leader_changes += 1;
        self.sub_refresh_at = None;
        self.router.pause();
        self.broadcast(&Body::Leader);
        self.set_check_at = Some(now.saturating_add(SET_DEBOUNCE_MS));
        // Every remote counts as heard now: its refresh is due within the expiry.
        for r in &mut self.remotes {
            r.seen_at = r.seen_at.max(now);
        }
    }

    /// The lock is gone (frozen, back/forward cache, closing): the
    /// connection is aborted and this context follows again; its machines
    /// keep their virtual streams and the next leader carries on.
    pub fn handle_lost_leadership(&mut self, now: u64) {
        if !self.closed && self.role == Role::Leader {
            self.resign(now);
        }
    }

    pub(super) fn resign(&mut self, now: u64) {
        self.abort_muxes();
        self.router.pause();
        self.role = Role::Follower;
        self.leader = None;
        self.broadcast(&Body::Resign);
        self.announce(now);
    }

    /// Tells the group this context's scopes (followers only).
    pub(super) fn announce(&mut self, now: u64) {
        if self.role != Role::Follower || self.closed {
            return;
        }
        let mut subs = self.router.subscriptions();
        subs.truncate(MAX_SUBS);
        self.broadcast(&Body::Sub(subs));
        self.sub_refresh_at = Some(now.saturating_add(SUB_REFRESH_MS));
    }

    /// A message from the group's channel. Malformed, foreign, oversized
    /// and out-of-role messages are ignored (counted).
    pub fn handle_channel_message(&mut self, bytes: &[u8], now: u64) {
        if self.closed || self.role == Role::Solo {
            return;
        }
        let msg = (bytes.len() <= MAX_MESSAGE_BYTES)
            .then(|| wire::decode(bytes))
            .flatten()
            .filter(|m| m.group == self.cfg.group && m.from != self.cfg.context);
        let Some(msg) = msg else {
            self.diag.messages_ignored += 1;
            return;
        };
        let from = msg.from;
        let ok = match msg.body {
            Body::Sub(subs) => self.remote_subs(from, subs, now),
            Body::Leader => self.leader_announced(from, now),
            body @ (Body::Resign | Body::Bye) => {
                if self.leader == Some(from) {
                    self.leader = None;
                }
                if body == Body::Bye {
                    self.forget_remotes(&|r| r.context == from, now);
                }
                true
            }
            Body::Event(text) => self.leader_event(from, &text),
            Body::End(keys, why) => {
                let ok = self.accept_broadcast(from);
                if ok {
                    self.router.end(&keys, &why, &mut self.out);
                }
                ok
            }
        };
        if !ok {
            self.diag.messages_ignored += 1;
        }
    }

    /// Whether a broadcast from `from` is to be followed: from the leader,
    /// or from anyone while no leader is known (it then is the leader).
    fn accept_broadcast(&mut self, from: u64) -> bool {
        if self.role != Role::Follower {
            return false;
        }
        match self.leader {
            Some(l) => l == from,
            None => {
                self.leader = Some(from);
                self.diag.leader_changes += 1;
                true
            }
        }
    }

    fn leader_announced(&mut self, from: u64, now: u64) -> bool {
        if self.role != Role::Follower {
            // Two holders cannot be (Web Locks); a stale message is ignored.
            return false;
        }
        if self.leader != Some(from) {
            self.leader = Some(from);
            self.diag.leader_changes += 1;
        }
        self.announce(now);
        true
    }

    fn leader_event(&mut self, from: u64, text: &str) -> bool {
        if !self.accept_broadcast(from) {
            return false;
        }
        let Some(env) = Self::read_envelope(text) else {
            return false;
        };
        self.diag.frames_received += 1;
        self.router.event(text, &env, None, &mut self.out);
        true
    }

    /// A context's whole set of scopes. The leader greets its machines on
    /// the scopes already flowing that it did not follow before (the
    /// others' routers keep what they know).
    fn remote_subs(&mut self, from: u64, mut subs: Subs, now: u64) -> bool {
        subs.truncate(MAX_SUBS);
        let before = self.group_keys();
        let (i, old) = match self.remotes.iter().position(|r| r.context == from) {
            Some(i) => {
                let r = &mut self.remotes[i];
                r.seen_at = now;
                (i, Some(std::mem::replace(&mut r.subs, subs)))
            }
            None if self.remotes.len() >= MAX_CONTEXTS => return false,
            None => {
                self.remotes.push(Remote {
                    context: from,
                    subs,
                    seen_at: now,
                });
                (self.remotes.len() - 1, None)
            }
        };
        if self.role == Role::Leader {
            if old.is_none() {
                // A newcomer learns who leads.
                self.broadcast(&Body::Leader);
            }
            let mut fresh = Vec::new();
            for (k, _) in self.remotes[i].subs.iter() {
                self.idle.remove(k);
                if !old.as_ref().is_some_and(|o| o.has(k)) {
                    fresh.push(k.to_owned());
                }
            }
            for k in fresh {
                if let Some([hello, beat]) = self.router.greeting(&k) {
                    self.broadcast(&Body::Event(hello.into()));
                    self.broadcast(&Body::Event(beat.into()));
                }
            }
        }
        self.keys_left(&before, now);
        true
    }

    /// Forgets the contexts `gone` selects.
    fn forget_remotes(&mut self, gone: &dyn Fn(&Remote) -> bool, now: u64) {
        let before = self.group_keys();
        let n = self.remotes.len();
        self.remotes.retain(|r| !gone(r));
        if self.remotes.len() < n {
            self.keys_left(&before, now);
        }
    }

    /// Scopes the group no longer follows linger; the set is checked.
    fn keys_left(&mut self, before: &Subs, now: u64) {
        let after = self.group_keys();
        for (k, _) in before.iter().filter(|(k, _)| !after.has(k)) {
            self.idle_since(k, now);
        }
        self.set_changed(now);
    }

    /// Forgets contexts not heard of for [`SUB_EXPIRY_MS`] (crashed).
    pub(super) fn expire_remotes(&mut self, now: u64) {
        self.forget_remotes(&|r| now >= r.seen_at.saturating_add(SUB_EXPIRY_MS), now);
    }
}
