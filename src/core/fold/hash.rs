//! A fast hasher for the fold's string-keyed indices.
//!
//! SipHash (std's default) guards against keys chosen to collide; these keys
//! (message, call, question and turn ids) come from the runtime the client
//! already trusts with its whole state, and hashing them with SipHash showed
//! up in the pipeline profile. This is the multiply-rotate hash rustc uses
//! (FxHash), written out here.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// The hasher.
#[derive(Default, Clone, Copy)]
pub struct IdHasher(u64);

const K: u64 = 0x517c_c1b7_2722_0a95;

impl IdHasher {
    fn mix(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(K);
    }
}

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0; 8];
            w.copy_from_slice(c);
            self.mix(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.mix(u64::from_le_bytes(w));
        }
    }

    fn write_u8(&mut self, b: u8) {
        self.mix(u64::from(b));
    }

    fn write_usize(&mut self, n: usize) {
        self.mix(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// A `HashMap` keyed by ids.
pub type IdMap<V> = HashMap<String, V, BuildHasherDefault<IdHasher>>;

/// A set of ids, kept in the map type of the fold's index (`IdMap<usize>`,
/// values unused): one hash table type in the wasm instead of two (a
/// `HashSet<String>` beside the map cost about 700 B gzipped, docs/size.md).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IdSet(IdMap<usize>);

impl IdSet {
    /// Adds `id`; false if it was there.
    pub fn insert(&mut self, id: String) -> bool {
        self.0.insert(id, 0).is_none()
    }

    /// Whether `id` is in the set.
    pub fn contains(&self, id: &str) -> bool {
        self.0.contains_key(id)
    }
}
