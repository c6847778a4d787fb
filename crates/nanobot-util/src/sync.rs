//! [`lock`]: a mutex lock that survives a panicked holder.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `m`, taking the data even when a thread panicked while holding it. Every mutex in nanobot guards
/// plain data that stays consistent between statements (maps, counters, handles), so a poisoned lock carries
/// no half-made state worth refusing; failing every later caller would turn one panic into many.
pub fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_still_opens() {
        let m = std::sync::Arc::new(Mutex::new(1));
        let m2 = m.clone();
        let _ = std::thread::spawn(move || {
            let _g = m2.lock().unwrap();
            panic!("poison it");
        })
        .join();
        assert!(m.is_poisoned());
        *lock(&m) += 1;
        assert_eq!(*lock(&m), 2);
    }
}
