//! Remembering which inbound events were already handled, so a platform's redelivery (a reconnect, a resume, an
//! at-least-once push) never starts a second turn.

use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;

use nanobot_util::lock;

/// A bounded, thread-safe memory of recently seen ids: the oldest is forgotten once `capacity` are kept.
#[derive(Debug)]
pub struct RecentIds {
    capacity: usize,
    inner: Mutex<(VecDeque<String>, HashSet<String>)>,
}

impl RecentIds {
    /// Remembers up to `capacity` ids (at least one).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            capacity,
            inner: Mutex::new((
                VecDeque::with_capacity(capacity),
                HashSet::with_capacity(capacity),
            )),
        }
    }

    /// Records `id`; true when it was not remembered yet.
    pub fn insert(&self, id: &str) -> bool {
        let mut guard = lock(&self.inner);
        let (order, set) = &mut *guard;
        if set.contains(id) {
            return false;
        }
        if order.len() == self.capacity
            && let Some(old) = order.pop_front()
        {
            set.remove(&old);
        }
        order.push_back(id.to_owned());
        set.insert(id.to_owned());
        true
    }

    /// Whether `id` is remembered, without recording it (record it with [`RecentIds::insert`] once it is
    /// handled, so an event whose handling was cut short is handled when it comes again).
    pub fn contains(&self, id: &str) -> bool {
        lock(&self.inner).1.contains(id)
    }

    /// True the first time `id` is seen; an empty id (an event without one) always counts as new.
    pub fn first_sighting(&self, id: &str) -> bool {
        id.is_empty() || self.insert(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_are_refused_until_forgotten() {
        let ids = RecentIds::new(2);
        assert!(ids.first_sighting("a"));
        assert!(!ids.first_sighting("a"));
        assert!(
            ids.contains("a") && !ids.contains("z"),
            "contains records nothing"
        );
        assert!(!ids.contains("z"));
        assert!(ids.first_sighting("b"));
        assert!(ids.first_sighting("c")); // forgets "a"
        assert!(!ids.first_sighting("b"));
        assert!(ids.first_sighting("a"));
        assert!(ids.first_sighting(""));
        assert!(ids.first_sighting(""));
    }
}
