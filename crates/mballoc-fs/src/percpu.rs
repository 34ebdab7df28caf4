//! State split so that threads on different CPUs never write one cache line:
//! counters kept per CPU slot and summed when read (the kernel's percpu
//! counters), and the file table split by inode number.

use crate::id_hash::IdMap;
use crossbeam_utils::CachePadded;
use parking_lot::RwLock;
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Counter shards; more than the CPUs of any machine this runs on is waste,
/// fewer only means some sharing.
pub(crate) const SLOTS: usize = 64;

static NEXT_CPU: AtomicUsize = AtomicUsize::new(0);
thread_local! {
    static CPU: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The calling thread's CPU slot: threads are numbered in order of first use.
pub(crate) fn cpu_slot() -> usize {
    CPU.with(|c| {
        c.get().unwrap_or_else(|| {
            let n = NEXT_CPU.fetch_add(1, Ordering::Relaxed);
            c.set(Some(n));
            n
        })
    })
}

/// One `T` per CPU slot, each in its own cache line.
pub(crate) struct PerCpu<T> {
    shards: Box<[CachePadded<T>]>,
}

impl<T: Default> Default for PerCpu<T> {
    fn default() -> Self {
        PerCpu { shards: (0..SLOTS).map(|_| CachePadded::new(T::default())).collect() }
    }
}

impl<T> PerCpu<T> {
    /// The calling thread's shard.
    pub(crate) fn local(&self) -> &T {
        &self.shards[cpu_slot() % self.shards.len()]
    }

    /// Every shard, to sum.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.shards.iter().map(|s| &**s)
    }
}

/// Shards of the file table.
const FILE_SHARDS: usize = 64;

type Shard<V> = CachePadded<RwLock<IdMap<V>>>;

/// Files by inode number, split over independently locked shards so that
/// looking up one's own file never shares a lock word with other threads.
pub(crate) struct FileTable<V> {
    shards: Box<[Shard<V>]>,
}

impl<V: Clone> FileTable<V> {
    pub(crate) fn new() -> Self {
        FileTable { shards: (0..FILE_SHARDS).map(|_| CachePadded::new(RwLock::new(IdMap::default()))).collect() }
    }

    fn shard(&self, id: u64) -> &RwLock<IdMap<V>> {
        &self.shards[(id % FILE_SHARDS as u64) as usize]
    }

    pub(crate) fn get(&self, id: u64) -> Option<V> {
        self.shard(id).read().get(&id).cloned()
    }

    pub(crate) fn insert(&self, id: u64, v: V) {
        self.shard(id).write().insert(id, v);
    }

    pub(crate) fn remove(&self, id: u64) -> Option<V> {
        self.shard(id).write().remove(&id)
    }

    /// Every entry, ascending by id (a snapshot: entries may come and go).
    pub(crate) fn entries(&self) -> Vec<(u64, V)> {
        let mut v: Vec<(u64, V)> = self
            .shards
            .iter()
            .flat_map(|s| s.read().iter().map(|(&k, v)| (k, v.clone())).collect::<Vec<_>>())
            .collect();
        v.sort_unstable_by_key(|e| e.0);
        v
    }
}
