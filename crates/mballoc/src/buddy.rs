//! One group's free-space state: the block bitmap, the buddy of maximal
//! aligned power-of-two free chunks, and the summary the kernel keeps in
//! `ext4_group_info`.
//!
//! Representation. Order 0 is the bitmap itself (bit set = block in use).
//! For orders `1..=max_order` a bit set at index `i` of order `k` means "the
//! aligned chunk `[i·2^k, (i+1)·2^k)` is entirely free and is not part of a
//! free chunk of order `k+1`": it is a *maximal* free buddy. (The kernel stores
//! the complement, 0 = maximal free; storing it this way round makes "first
//! free chunk of order k" a find-first-set.) A run of free blocks is therefore
//! represented by its greedy decomposition into aligned chunks, and every
//! operation keeps that decomposition canonical, incrementally:
//!
//! * `mark_used` splits only the chunks the extent touches and gives back the
//!   head and tail pieces;
//! * `free` inserts the greedy pieces of the freed range one by one, each
//!   merging upward with its buddy while the buddy is a maximal free chunk of
//!   the same order. Inserting an aligned chunk whose blocks were all in use
//!   into a canonical buddy and merging upward yields the canonical buddy of
//!   the new bitmap: only the chunk's ancestors change their "entirely free"
//!   status, and an entirely free sibling of an ancestor whose other half was
//!   in use is necessarily maximal.
//!
//! [`Buddy::regenerated`] rebuilds everything from the bitmap alone; the
//! invariant, checked by the tests after every operation, is that the
//! incremental state equals the regenerated one.

use crate::bits;

/// Most orders any geometry has: 64 KiB blocks give `16 + 2`.
pub const MAX_ORDERS: usize = 18;

/// The per-group summary (`ext4_group_info`'s counters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupInfo {
    /// Free blocks.
    pub free: u32,
    /// Maximal runs of free blocks.
    pub fragments: u32,
    /// First free block (the group length when the group is full).
    pub first_free: u32,
    /// Maximal free buddy chunks per order.
    pub counters: [u32; MAX_ORDERS],
    /// Highest order with a free chunk, −1 when the group is full.
    pub largest_free_order: i8,
    /// Bucket of the average fragment size (free / fragments), −1 when full.
    pub avg_fragment_order: i8,
}

/// The kernel's `mb_avg_fragment_size_order`: bucket 0 holds averages 1…3,
/// bucket `i ≥ 1` holds `[2^(i+1), 2^(i+2))`, clamped to the last order.
pub fn fragment_size_bucket(len: u32, num_orders: usize) -> u32 {
    debug_assert!(len > 0);
    let order = 31 - len.leading_zeros();
    order.saturating_sub(1).min(num_orders as u32 - 1)
}

/// Bitmap + buddy + info of one group.
#[derive(Clone, PartialEq, Eq)]
pub struct Buddy {
    len: u32,
    max_order: u32,
    num_orders: usize,
    bitmap: Vec<u64>,
    /// `chunks[k]` for `k >= 1`; `chunks[0]` is empty (order 0 is the bitmap).
    chunks: Vec<Vec<u64>>,
    info: GroupInfo,
}

impl std::fmt::Debug for Buddy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buddy").field("len", &self.len).field("info", &self.info).finish_non_exhaustive()
    }
}

impl Buddy {
    /// A group of `len` blocks, all free. `max_order` is the largest chunk
    /// order, `num_orders` the kernel's `MB_NUM_ORDERS` (bucket clamp).
    pub fn new_free(len: u32, max_order: u32, num_orders: usize) -> Buddy {
        assert!(len > 0 && (max_order as usize) < num_orders && num_orders <= MAX_ORDERS);
        let words = len.div_ceil(64) as usize;
        let mut bitmap = vec![0u64; words];
        // Padding past the group end reads as "in use" so no search runs off the end.
        bits::set_range(&mut bitmap, len, (words as u32) * 64);
        let chunks =
            (0..=max_order)
                .map(|k| {
                    if k == 0 {
                        Vec::new()
                    } else {
                        vec![0u64; ((words as u32 * 64) >> k).max(1).div_ceil(64) as usize]
                    }
                })
                .collect();
        let mut b = Buddy {
            len,
            max_order,
            num_orders,
            bitmap,
            chunks,
            info: GroupInfo {
                free: 0,
                fragments: 0,
                first_free: len,
                counters: [0; MAX_ORDERS],
                largest_free_order: -1,
                avg_fragment_order: -1,
            },
        };
        b.regenerate();
        b
    }

    /// Build from a bitmap (bit set = in use) of at least `len` bits.
    pub fn from_bitmap(len: u32, max_order: u32, num_orders: usize, used: &[u64]) -> Buddy {
        let mut b = Buddy::new_free(len, max_order, num_orders);
        let words = b.bitmap.len();
        b.bitmap.copy_from_slice(&used[..words]);
        bits::set_range(&mut b.bitmap, len, (words as u32) * 64);
        b.regenerate();
        b
    }

    /// Blocks in the group.
    pub fn len(&self) -> u32 {
        self.len
    }
    /// Whether the group has no blocks (never true; groups are non-empty).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The summary.
    pub fn info(&self) -> &GroupInfo {
        &self.info
    }
    /// The bitmap words (bit set = in use; bits past `len` are set).
    pub fn bitmap(&self) -> &[u64] {
        &self.bitmap
    }
    /// Largest chunk order of this group.
    pub fn max_order(&self) -> u32 {
        self.max_order
    }
    /// Whether block `i` is in use.
    pub fn is_used(&self, i: u32) -> bool {
        bits::test(&self.bitmap, i)
    }
    /// Whether every block of `[start, end)` is in use.
    pub fn all_used(&self, start: u32, end: u32) -> bool {
        bits::next_zero(&self.bitmap, start, end) == end
    }
    /// Whether every block of `[start, end)` is free.
    pub fn all_free(&self, start: u32, end: u32) -> bool {
        bits::next_one(&self.bitmap, start, end) == end
    }
    /// First free block at or after `from` (or `len`).
    pub fn next_free(&self, from: u32) -> u32 {
        bits::next_zero(&self.bitmap, from, self.len)
    }
    /// First used block at or after `from` (or `len`).
    pub fn next_used(&self, from: u32) -> u32 {
        bits::next_one(&self.bitmap, from, self.len)
    }
    /// Whether `[i·2^k, (i+1)·2^k)` is a maximal free chunk (k ≥ 1).
    pub fn is_free_chunk(&self, k: u32, i: u32) -> bool {
        k >= 1 && k <= self.max_order && bits::test(&self.chunks[k as usize], i)
    }

    /// Rebuild buddy and info from the bitmap (`ext4_mb_generate_buddy`).
    pub fn regenerate(&mut self) {
        for c in self.chunks.iter_mut() {
            c.fill(0);
        }
        let mut info = GroupInfo {
            free: 0,
            fragments: 0,
            first_free: bits::next_zero(&self.bitmap, 0, self.len),
            counters: [0; MAX_ORDERS],
            largest_free_order: -1,
            avg_fragment_order: -1,
        };
        let mut i = info.first_free;
        while i < self.len {
            let end = bits::next_one(&self.bitmap, i, self.len);
            info.fragments += 1;
            info.free += end - i;
            Self::add_pieces(&mut self.chunks, &mut info.counters, self.max_order, i, end - i);
            i = bits::next_zero(&self.bitmap, end, self.len);
        }
        self.info = info;
        self.update_orders();
    }

    /// A copy regenerated from this bitmap: the oracle for the incremental state.
    pub fn regenerated(&self) -> Buddy {
        let mut b = self.clone();
        b.regenerate();
        b
    }

    /// Split `[first, first+len)` into maximal aligned chunks and record them
    /// without merging (`mb_mark_free_simple`).
    fn add_pieces(
        chunks: &mut [Vec<u64>],
        counters: &mut [u32; MAX_ORDERS],
        max_order: u32,
        mut first: u32,
        mut len: u32,
    ) {
        while len > 0 {
            let align = (first | (1 << max_order)).trailing_zeros();
            let fit = 31 - len.leading_zeros();
            let k = align.min(fit);
            counters[k as usize] += 1;
            if k > 0 {
                bits::set(&mut chunks[k as usize], first >> k);
            }
            first += 1 << k;
            len -= 1 << k;
        }
    }

    /// Order of the maximal free chunk containing free block `i`.
    #[inline]
    fn order_of(&self, i: u32) -> u32 {
        debug_assert!(!self.is_used(i));
        for k in 1..=self.max_order {
            if bits::test(&self.chunks[k as usize], i >> k) {
                return k;
            }
        }
        0
    }

    /// Length of the free run starting at `start`, measured in whole buddy
    /// chunks until it reaches `needed` (`mb_find_extent`): the answer may
    /// exceed `needed`, and is 0 when `start` is in use.
    pub fn find_extent(&self, start: u32, needed: u32) -> u32 {
        if start >= self.len || self.is_used(start) {
            return 0;
        }
        let k = self.order_of(start);
        let mut end = ((start >> k) + 1) << k;
        while end - start < needed && end < self.len && !self.is_used(end) {
            // Maximal chunks partition the free blocks, so the chunk holding
            // `end` starts at `end`.
            end += 1 << self.order_of(end);
        }
        end.min(self.len) - start
    }

    /// Mark `[start, start+len)` used (`mb_mark_used`). Every block must be free.
    pub fn mark_used(&mut self, start: u32, len: u32) {
        let end = start + len;
        assert!(len > 0 && end <= self.len, "mark_used outside the group");
        debug_assert!(self.all_free(start, end), "mark_used over used blocks");
        let left_free = start > 0 && !self.is_used(start - 1);
        let right_free = end < self.len && !self.is_used(end);

        let mut pos = start;
        while pos < end {
            let k = self.order_of(pos);
            let cstart = (pos >> k) << k;
            let cend = cstart + (1 << k);
            self.info.counters[k as usize] -= 1;
            if k > 0 {
                bits::clear(&mut self.chunks[k as usize], cstart >> k);
            }
            Self::add_pieces(&mut self.chunks, &mut self.info.counters, self.max_order, cstart, pos - cstart);
            if end < cend {
                Self::add_pieces(&mut self.chunks, &mut self.info.counters, self.max_order, end, cend - end);
            }
            pos = cend;
        }
        bits::set_range(&mut self.bitmap, start, end);

        self.info.free -= len;
        match (left_free, right_free) {
            (true, true) => self.info.fragments += 1,
            (false, false) => self.info.fragments -= 1,
            _ => {}
        }
        if (start..end).contains(&self.info.first_free) {
            self.info.first_free = self.next_free(end);
        }
        self.update_orders();
    }

    /// Free `[start, start+len)` (`mb_free_blocks`). Every block must be in use.
    pub fn free(&mut self, start: u32, len: u32) {
        let end = start + len;
        assert!(len > 0 && end <= self.len, "free outside the group");
        debug_assert!(self.all_used(start, end), "free over free blocks");
        let left_free = start > 0 && !self.is_used(start - 1);
        let right_free = end < self.len && !self.is_used(end);
        bits::clear_range(&mut self.bitmap, start, end);

        let mut first = start;
        let mut rest = len;
        while rest > 0 {
            let k = (first | (1 << self.max_order)).trailing_zeros().min(31 - rest.leading_zeros());
            self.insert_merging(first, k);
            first += 1 << k;
            rest -= 1 << k;
        }

        self.info.free += len;
        match (left_free, right_free) {
            (true, true) => self.info.fragments -= 1,
            (false, false) => self.info.fragments += 1,
            _ => {}
        }
        self.info.first_free = self.info.first_free.min(start);
        self.update_orders();
    }

    /// Insert the free chunk `[pos, pos+2^k)` and merge it upward.
    fn insert_merging(&mut self, mut pos: u32, mut k: u32) {
        while k < self.max_order {
            let buddy = pos ^ (1 << k);
            let buddy_is_max_free = if k == 0 {
                // An order-0 piece's buddy lies outside the freed range (the
                // greedy split never leaves two order-0 siblings), and its
                // parent held `pos`, which was in use: a free buddy is maximal.
                !bits::test(&self.bitmap, buddy)
            } else {
                bits::test(&self.chunks[k as usize], buddy >> k)
            };
            if !buddy_is_max_free {
                break;
            }
            self.info.counters[k as usize] -= 1;
            if k > 0 {
                bits::clear(&mut self.chunks[k as usize], buddy >> k);
            }
            pos &= !(1 << k);
            k += 1;
        }
        self.info.counters[k as usize] += 1;
        if k > 0 {
            bits::set(&mut self.chunks[k as usize], pos >> k);
        }
    }

    fn update_orders(&mut self) {
        let info = &mut self.info;
        info.largest_free_order = -1;
        if info.free > 0 {
            for k in (0..=self.max_order as usize).rev() {
                if info.counters[k] > 0 {
                    info.largest_free_order = k as i8;
                    break;
                }
            }
        }
        info.avg_fragment_order = match info.free.checked_div(info.fragments) {
            Some(avg) => fragment_size_bucket(avg, self.num_orders) as i8,
            None => -1,
        };
    }

    /// First maximal free chunk of order at least `order` (the simple scan of
    /// CR_POWER2_ALIGNED): `(start, length)`.
    pub fn first_chunk_at_least(&self, order: u32) -> Option<(u32, u32)> {
        for k in order.max(1)..=self.max_order {
            if self.info.counters[k as usize] == 0 {
                continue;
            }
            let c = &self.chunks[k as usize];
            let n = (c.len() * 64) as u32;
            let i = bits::next_one(c, 0, n);
            // The counter says a chunk exists; a miss is a broken invariant.
            assert!(i < n, "order {k} counter disagrees with the buddy");
            return Some((i << k, 1 << k));
        }
        if order == 0 && self.info.counters[0] > 0 {
            let i = self.next_free(self.info.first_free);
            return Some((i, 1));
        }
        None
    }

    /// Maximal free runs `(start, len)` in ascending order.
    pub fn free_runs(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        let mut i = self.info.first_free;
        std::iter::from_fn(move || {
            if i >= self.len {
                return None;
            }
            let end = self.next_used(i);
            let run = (i, end - i);
            i = self.next_free(end);
            Some(run)
        })
    }
}
