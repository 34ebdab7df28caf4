//! Folio buffers kept for reuse. A large folio's buffer is memory the
//! process faults in and the kernel zeroes page by page when it is first
//! touched; a cache that drops written-back folios and makes new ones for
//! the next writes (a sequential writer, a stream of new files) would pay
//! that for every byte: a third of the mount server's time on sequential
//! writes, measured with `perf`. Buffers of dropped folios wait here, up
//! to [`POOL_BYTES`], and the next folio of their size takes one.
//!
//! The pool is the process's, shared by every volume: buffers are plain
//! memory, keyed by their size.

use parking_lot::Mutex;

/// The most memory the pool keeps.
pub const POOL_BYTES: usize = 64 << 20;

/// Buffers waiting for reuse, by size (few sizes: one per folio size in
/// use).
static POOL: Mutex<Vec<(usize, Vec<Vec<u8>>)>> = Mutex::new(Vec::new());

/// Only buffers at least this large are kept: smaller ones come from the
/// allocator's own free lists cheaply.
const MIN_POOLED: usize = 64 << 10;

/// An empty buffer with room for `size` bytes: a kept one if there is.
pub fn take(size: usize) -> Vec<u8> {
    if size >= MIN_POOLED {
        let mut pool = POOL.lock();
        if let Some((_, list)) = pool.iter_mut().find(|(s, _)| *s == size) {
            if let Some(mut buf) = list.pop() {
                buf.clear();
                return buf;
            }
        }
    }
    Vec::with_capacity(size)
}

/// Keep `buf` (whose capacity is its size) for a later [`take`], unless
/// the pool is full.
pub fn give(buf: Vec<u8>) {
    let size = buf.capacity();
    if size < MIN_POOLED {
        return;
    }
    let mut pool = POOL.lock();
    let held: usize = pool.iter().map(|(s, l)| s * l.len()).sum();
    if held + size > POOL_BYTES {
        return;
    }
    match pool.iter_mut().find(|(s, _)| *s == size) {
        Some((_, list)) => list.push(buf),
        None => pool.push((size, vec![buf])),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_given_buffer_is_taken_again_empty() {
        let size = 3 << 20; // a size no other test pools
        let mut b = super::take(size);
        b.extend_from_slice(&[7; 100]);
        let at = b.as_ptr();
        super::give(b);
        let again = super::take(size);
        assert_eq!((again.as_ptr(), again.len(), again.capacity()), (at, 0, size));
        super::give(vec![0; 10]); // small: not kept, no panic
    }
}
