//! The `verify` feature: [`Fs::check`] after every commit, from the
//! outermost operation that saw it, once no other thread is inside the
//! engine.
//!
//! `Fs::check` needs a quiescent engine, so with the feature each public
//! operation holds a shared lock for as long as it runs (recursively: an
//! operation may call another), and the one that ends after a commit takes
//! the lock exclusively and checks. A violated invariant panics: it is a
//! bug found, with the operation that exposed it on the stack. Without
//! the feature the guard is empty and costs nothing.

#[cfg(feature = "verify")]
mod imp {
    use crate::fs::Fs;
    use parking_lot::{RwLock, RwLockReadGuard};
    use std::cell::Cell;
    use std::sync::atomic::{AtomicBool, Ordering};

    thread_local! {
        /// Operations of this thread under way, innermost last.
        static DEPTH: Cell<u32> = const { Cell::new(0) };
    }

    /// The lock every operation shares and a check waits for.
    #[derive(Default)]
    pub(in crate::fs) struct Quiesce {
        lock: RwLock<()>,
        due: AtomicBool,
    }

    /// One operation under way.
    pub(in crate::fs) struct OpGuard<'a> {
        fs: &'a Fs,
        shared: Option<RwLockReadGuard<'a, ()>>,
    }

    impl Quiesce {
        pub(in crate::fs) fn new() -> Quiesce {
            Quiesce::default()
        }

        pub(in crate::fs) fn commit_done(&self) {
            self.due.store(true, Ordering::Release);
        }
    }

    impl Fs {
        pub(in crate::fs) fn op(&self) -> OpGuard<'_> {
            DEPTH.with(|d| d.set(d.get() + 1));
            // Recursive: a waiting checker must not block an operation
            // that is already inside (it would wait for itself).
            OpGuard { fs: self, shared: Some(self.quiesce.lock.read_recursive()) }
        }
    }

    impl Drop for OpGuard<'_> {
        fn drop(&mut self) {
            drop(self.shared.take());
            let outermost = DEPTH.with(|d| {
                d.set(d.get() - 1);
                d.get() == 0
            });
            if outermost && self.fs.quiesce.due.swap(false, Ordering::AcqRel) {
                let _alone = self.fs.quiesce.lock.write();
                if let Err(e) = self.fs.check() {
                    panic!("invariant violated after a commit: {e}");
                }
            }
        }
    }
}

#[cfg(not(feature = "verify"))]
mod imp {
    use crate::fs::Fs;

    /// Nothing to share without the feature.
    pub(in crate::fs) struct Quiesce;

    /// An operation under way; empty without the feature.
    pub(in crate::fs) struct OpGuard;

    impl Quiesce {
        pub(in crate::fs) fn new() -> Quiesce {
            Quiesce
        }

        #[inline]
        pub(in crate::fs) fn commit_done(&self) {}
    }

    impl Fs {
        #[inline]
        pub(in crate::fs) fn op(&self) -> OpGuard {
            OpGuard
        }
    }
}

pub(super) use imp::Quiesce;

#[cfg(all(test, feature = "verify"))]
mod tests {
    use crate::{Fs, FsConfig};
    use mballoc::Geometry;

    #[test]
    #[should_panic(expected = "invariant violated after a commit")]
    fn a_commit_after_a_broken_invariant_panics() {
        let fs = Fs::new(FsConfig::new(Geometry::with_group_size(4096, 1024, 4096).unwrap())).unwrap();
        let f = fs.create().unwrap();
        // A used block that no file, preallocation or pending free owns.
        fs.alloc.claim(500, 1).unwrap();
        fs.fsync(f).unwrap();
    }
}
