//! [`Subs`]: the hub's one map, scope key → the smallest cursor asked.
//!
//! Every set the hub keeps is small (at most 64 scopes per connection), so
//! one sorted `Vec` with a binary search serves them all. `BTreeMap`s cost their node code once per key/value
//! type (about 5 KB of raw wasm each) and sorting afterwards costs a sort
//! per element type; here the order is kept on insert (docs/size.md).

/// Scope keys (sorted, unique), each with the smallest `after` asked for
/// it (`None`: live only).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Subs(Vec<(String, Option<u64>)>);

impl Subs {
    fn find(&self, key: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.as_str().cmp(key))
    }

    /// Adds `key`; if present, keeps the smaller cursor ([`min_some`]).
    pub fn add(&mut self, key: &str, after: Option<u64>) {
        match self.find(key) {
            Ok(i) => self.0[i].1 = min_some(self.0[i].1, after),
            Err(i) => self.0.insert(i, (key.to_owned(), after)),
        }
    }

    /// Drops the entries whose value `gone` selects; true if any was.
    pub fn drop_where(&mut self, gone: &dyn Fn(Option<u64>) -> bool) -> bool {
        let n = self.0.len();
        self.0.retain(|(_, v)| !gone(*v));
        self.0.len() < n
    }

    /// Drops `key` if present.
    pub fn remove(&mut self, key: &str) {
        if let Ok(i) = self.find(key) {
            self.0.remove(i);
        }
    }

    /// Keeps the first `n` keys.
    pub fn truncate(&mut self, n: usize) {
        self.0.truncate(n);
    }

    /// The entries, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, Option<u64>)> {
        self.0.iter().map(|(k, a)| (k.as_str(), *a))
    }

    /// The number of keys.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The smaller of two values, where `None` yields to any: of two cursors
/// (`None`: live only), of two deadlines (`None`: none).
pub fn min_some(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) | (None, x) => x,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn keys_stay_sorted_and_unique_with_the_smallest_cursor() {
        let mut s = Subs::default();
        s.add("team:t", None);
        s.add("session:b", Some(9));
        s.add("session:a", None);
        s.add("session:b", Some(4));
        s.add("session:b", None);
        s.add("session:a", Some(7));
        let got: Vec<_> = s.iter().collect();
        assert_eq!(
            got,
            [
                ("session:a", Some(7)),
                ("session:b", Some(4)),
                ("team:t", None)
            ]
        );
        s.remove("session:b");
        s.remove("nope");
        let got: Vec<_> = s.iter().collect();
        assert_eq!(got, [("session:a", Some(7)), ("team:t", None)]);
        assert_eq!(s.len(), 2);
    }
}
