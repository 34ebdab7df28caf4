//! Where a request's blocks come from, and how large a window to allocate.
//!
//! Two decisions are made for every data request, as ext4 makes them:
//!
//! * **Placement** ([`placement`]): a small file (predicted size at most
//!   `mb_stream_req` blocks) draws from its CPU's locality group, so small
//!   files written together end up packed together; a larger file is a
//!   *stream* with its own per-file preallocation windows and a stream goal.
//! * **Normalization** ([`window`]): the request grows to a window (16 KiB,
//!   32 KiB, … 1 MiB by predicted size, then 2/4/8 MiB aligned windows) so
//!   that the next writes find their blocks already set aside next to this
//!   one. The window is then cut so it covers no mapped block and no other
//!   preallocation of the file, and if it touches a mapped neighbour its
//!   physical goal is set to continue that neighbour.
//!
//! [`Normalization::Table`] is the Lustre (ldiskfs) variant: a tunable list of
//! window sizes and two knobs that replace `mb_stream_req`.

use crate::error::{FsError, Result};

/// How stream requests are grown into windows.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Normalization {
    /// The kernel's fixed size classes.
    #[default]
    KernelWindows,
    /// A tunable table of window sizes (ldiskfs `prealloc_table`).
    Table(PreallocTable),
}

/// The ldiskfs preallocation table: strictly increasing window sizes in
/// blocks, plus the request size (`mb_small_req`) and file size
/// (`mb_large_req`) from which a file stops using the locality group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreallocTable {
    sizes: Vec<u32>,
    small_req: u32,
    large_req: u32,
}

impl PreallocTable {
    /// A table; sizes must be non-empty, at most 64 entries, strictly
    /// increasing and non-zero.
    pub fn new(sizes: Vec<u32>, small_req: u32, large_req: u32) -> Result<Self> {
        if sizes.is_empty() || sizes.len() > 64 {
            return Err(FsError::InvalidConfig("prealloc_table needs 1 to 64 sizes".into()));
        }
        if sizes[0] == 0 || sizes.windows(2).any(|w| w[0] >= w[1]) {
            return Err(FsError::InvalidConfig("prealloc_table sizes must be non-zero and strictly increasing".into()));
        }
        Ok(PreallocTable { sizes, small_req, large_req })
    }

    /// ldiskfs's defaults without a RAID stripe: 4, 8, …, 2048 blocks,
    /// `mb_small_req` 256, `mb_large_req` 1024.
    pub fn lustre_default() -> Self {
        PreallocTable { sizes: (2..=11).map(|k| 1u32 << k).collect(), small_req: 256, large_req: 1024 }
    }

    /// The window sizes.
    pub fn sizes(&self) -> &[u32] {
        &self.sizes
    }

    /// `mb_small_req`: requests below it (in blocks) use the locality group.
    pub fn small_req(&self) -> u32 {
        self.small_req
    }

    /// `mb_large_req`: files from this size (in blocks) on stop using it.
    pub fn large_req(&self) -> u32 {
        self.large_req
    }

    /// Largest window size (table sizes are checked against the group size
    /// when the volume is built).
    pub fn largest(&self) -> u32 {
        *self.sizes.last().expect("non-empty table")
    }
}

/// Where a data request draws its blocks from (`ext4_mb_group_or_file`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// The CPU's locality group: small files packed together.
    LocalityGroup,
    /// A per-file stream: inode preallocations and a stream goal.
    Stream,
    /// Exactly the request: no normalization, no new preallocation.
    NoPrealloc,
}

/// Facts about one request that the decisions need.
#[derive(Debug, Clone, Copy)]
pub struct RequestShape {
    /// First logical block of the request.
    pub logical: u64,
    /// Blocks requested.
    pub len: u32,
    /// The file's size in blocks (rounded up).
    pub isize_blocks: u64,
    /// Whether some handle has the file open.
    pub open: bool,
}

/// `ext4_mb_group_or_file`: locality group or stream.
pub fn placement(norm: &Normalization, mb_stream_req: u32, group_prealloc: u32, r: &RequestShape) -> Placement {
    let end = r.logical + u64::from(r.len);
    // Writing the tail of a closed file: no point keeping a window for it.
    let inode_pa_ok = end != r.isize_blocks || r.open;
    let size = end.max(r.isize_blocks);
    let group_pa_ok = group_prealloc > 0
        && match norm {
            Normalization::KernelWindows => size <= u64::from(mb_stream_req),
            Normalization::Table(t) => r.len < t.small_req && size < u64::from(t.large_req),
        };
    if group_pa_ok {
        Placement::LocalityGroup
    } else if inode_pa_ok {
        Placement::Stream
    } else {
        Placement::NoPrealloc
    }
}

/// The mapped or preallocated neighbours that bound a window.
#[derive(Debug, Clone, Copy, Default)]
pub struct Neighbours {
    /// Last mapped logical block left of the request and its physical block.
    pub left: Option<(u64, u64)>,
    /// First mapped logical block right of the request and its physical block.
    pub right: Option<(u64, u64)>,
    /// End of the nearest inode preallocation to the left.
    pub left_pa_end: Option<u64>,
    /// Start of the nearest inode preallocation to the right.
    pub right_pa_start: Option<u64>,
}

/// A normalized request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// First logical block of the window.
    pub logical: u64,
    /// Window length in blocks.
    pub len: u32,
    /// A physical block to try first so the window continues a neighbour.
    pub merge_goal: Option<u64>,
}

/// Largest logical block number a file may map, plus one (ext4's
/// `EXT_MAX_BLOCKS`).
pub const MAX_LOGICAL_BLOCKS: u64 = 0xFFFF_FFFF;

/// Geometry facts the window needs.
#[derive(Debug, Clone, Copy)]
pub struct WindowGeometry {
    /// log2 of the block size.
    pub block_bits: u32,
    /// Blocks per group.
    pub blocks_per_group: u32,
    /// Blocks on the volume.
    pub total_blocks: u64,
}

/// What a window does with a request longer than itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cover {
    /// Widen to cover the whole request where the neighbours allow: an
    /// engine that maps a whole dirty run in one request needs it.
    Request,
    /// Stay the window (ext4): the allocator is asked for the window, and
    /// the rest of the request comes in the next one.
    WindowOnly,
}

/// `ext4_mb_normalize_request` for a stream request: pick the window, keep it
/// off mapped blocks and other preallocations, and find a merge goal.
///
/// With [`Cover::Request`] (the engine, which hands over whole dirty runs)
/// a request longer than its window widens the window; ext4 hands
/// writeback requests of at most 2,048 blocks and leaves the window as it
/// is ([`Cover::WindowOnly`]).
#[cfg(test)]
pub fn window(norm: &Normalization, geo: WindowGeometry, r: &RequestShape, nb: &Neighbours, cover: Cover) -> Window {
    window_under(&mballoc::KernelPolicy, norm, geo, r, nb, cover)
}

/// [`window`] with `policy` resizing the normalized window before the
/// neighbours trim it ([`mballoc::Policy::window`]); a window the policy
/// resized so that it no longer holds the request starts at the request.
pub fn window_under(
    policy: &dyn mballoc::Policy,
    norm: &Normalization,
    geo: WindowGeometry,
    r: &RequestShape,
    nb: &Neighbours,
    cover: Cover,
) -> Window {
    let bits = geo.block_bits;
    let o_start = r.logical;
    let o_end = o_start + u64::from(r.len);
    let size_blocks = o_end.max(r.isize_blocks);
    let (mut start, mut size) = match norm {
        Normalization::KernelWindows => kernel_window(bits, o_start, r.len, size_blocks),
        Normalization::Table(t) => table_window(t, o_start, o_end, size_blocks),
    };
    let info = mballoc::WindowInfo { logical: o_start, len: r.len, file_blocks: r.isize_blocks };
    let wanted = u64::from(policy.window(size.min(u64::from(u32::MAX)) as u32, &info)).max(1);
    if wanted != size {
        size = wanted;
        if !(start <= o_start && o_start < start + size) {
            start = o_start;
        }
    }
    let bpg = u64::from(geo.blocks_per_group);
    // Tiny groups: alignment must not move the window into another group's
    // worth of logical space.
    start = start.max(o_start / bpg * bpg);
    if start + size > MAX_LOGICAL_BLOCKS {
        size = MAX_LOGICAL_BLOCKS - start;
    }
    let mut end = start + size;
    // Stay off mapped blocks.
    if let Some((lleft, _)) = nb.left {
        if start <= lleft {
            start = lleft + 1;
        }
    }
    if let Some((lright, _)) = nb.right {
        end = end.min(lright);
    }
    // And off the file's other preallocations.
    if let Some(pe) = nb.left_pa_end {
        start = start.max(pe);
    }
    if let Some(ps) = nb.right_pa_start {
        end = end.min(ps);
    }
    // Cover the whole request if the neighbours allow it.
    let limit = nb.right.map_or(u64::MAX, |r| r.0).min(nb.right_pa_start.unwrap_or(u64::MAX));
    if cover == Cover::Request {
        end = end.max(o_end.min(limit));
    }
    if end - start > bpg {
        // Keep the part that holds the request.
        end = (start + bpg).max(o_end.min(limit)).min(end);
        start = start.max(end - bpg);
    }
    assert!(start <= o_start && o_start < end, "window [{start}, {end}) lost request block {o_start}");
    let len = (end - start) as u32;
    let mut merge_goal = None;
    if let Some((lright, pright)) = nb.right {
        if lright == end && pright >= u64::from(len) {
            merge_goal = Some(pright - u64::from(len));
        }
    }
    if let Some((lleft, pleft)) = nb.left {
        if lleft + 1 == start && pleft + 1 < geo.total_blocks {
            merge_goal = Some(pleft + 1);
        }
    }
    Window { logical: start, len, merge_goal }
}

/// The kernel's size classes, in blocks: `(start, size)`.
fn kernel_window(bits: u32, o_start: u64, o_len: u32, size_blocks: u64) -> (u64, u64) {
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * KIB;
    let bs = 1u64 << bits;
    let size = size_blocks * bs;
    let max = 2 * bs;
    let check = |limit: u64, chunk: u64| size <= limit || max <= chunk;
    let aligned = |w: u64| ((o_start * bs) / w * w, w);
    let (start_b, size_b) = if size <= 16 * KIB {
        (0, 16 * KIB)
    } else if size <= MIB {
        (0, size.next_power_of_two())
    } else if check(4 * MIB, 2 * KIB) {
        aligned(2 * MIB)
    } else if check(8 * MIB, 4 * KIB) {
        aligned(4 * MIB)
    } else if u64::from(o_len) * bs <= 8 * MIB || max <= 8 * KIB {
        aligned(8 * MIB)
    } else {
        (o_start * bs, u64::from(o_len) * bs)
    };
    ((start_b >> bits), (size_b >> bits).max(1))
}

/// The ldiskfs table: first entry at least the predicted size, else aligned
/// multiples of the largest entry covering the request.
fn table_window(t: &PreallocTable, o_start: u64, o_end: u64, size_blocks: u64) -> (u64, u64) {
    if let Some(&w) = t.sizes.iter().find(|&&w| u64::from(w) >= size_blocks) {
        return (0, u64::from(w));
    }
    let w = u64::from(t.largest());
    let start = o_start / w * w;
    (start, o_end.div_ceil(w) * w - start)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GEO: WindowGeometry = WindowGeometry { block_bits: 12, blocks_per_group: 32768, total_blocks: 1 << 24 };

    fn shape(logical: u64, len: u32, isize: u64) -> RequestShape {
        RequestShape { logical, len, isize_blocks: isize, open: true }
    }

    #[test]
    fn kernel_size_classes_with_4k_blocks() {
        let n = Normalization::KernelWindows;
        let w = |l, len, isz| window(&n, GEO, &shape(l, len, isz), &Neighbours::default(), Cover::Request);
        assert_eq!((w(0, 1, 1).logical, w(0, 1, 1).len), (0, 4)); // 16 KiB
        assert_eq!(w(0, 5, 5).len, 8); // 20 KiB -> 32 KiB
        assert_eq!(w(30, 1, 100).len, 128); // 400 KiB -> 512 KiB
        let big = w(700, 1, 700); // 2.8 MiB -> 2 MiB window at 2 MiB alignment
        assert_eq!((big.logical, big.len), (512, 512));
        let huge = w(5000, 1, 5000); // > 8 MiB -> 8 MiB aligned
        assert_eq!((huge.logical, huge.len), (4096, 2048));
        // A whole dirty run longer than the window is covered.
        let run = w(0, 3072, 3072);
        assert_eq!((run.logical, run.len), (0, 3072));
    }

    #[test]
    fn windows_stay_off_neighbours_and_merge_with_them() {
        let n = Normalization::KernelWindows;
        let nb = Neighbours { left: Some((9, 1009)), right: Some((14, 5000)), ..Default::default() };
        let w = window(&n, GEO, &shape(10, 1, 20), &nb, Cover::Request);
        assert_eq!((w.logical, w.len, w.merge_goal), (10, 4, Some(1010)));
        let nb = Neighbours { right: Some((8, 5000)), ..Default::default() };
        let w = window(&n, GEO, &shape(2, 1, 20), &nb, Cover::Request);
        assert_eq!((w.logical, w.len, w.merge_goal), (0, 8, Some(4992)));
        let nb = Neighbours { left_pa_end: Some(3), right_pa_start: Some(6), ..Default::default() };
        let w = window(&n, GEO, &shape(4, 1, 20), &nb, Cover::Request);
        assert_eq!((w.logical, w.len), (3, 3));
    }

    #[test]
    fn placement_follows_stream_req_and_the_table_knobs() {
        let k = Normalization::KernelWindows;
        assert_eq!(placement(&k, 16, 512, &shape(0, 4, 4)), Placement::LocalityGroup);
        assert_eq!(placement(&k, 16, 512, &shape(16, 4, 20)), Placement::Stream);
        let closed_tail = RequestShape { open: false, ..shape(16, 4, 20) };
        assert_eq!(placement(&k, 16, 512, &closed_tail), Placement::NoPrealloc);
        let t = Normalization::Table(PreallocTable::lustre_default());
        assert_eq!(placement(&t, 16, 512, &shape(0, 100, 500)), Placement::LocalityGroup);
        assert_eq!(placement(&t, 16, 512, &shape(0, 256, 256)), Placement::Stream);
        assert_eq!(placement(&t, 16, 512, &shape(1000, 1, 1024)), Placement::Stream);
        let w = window(&t, GEO, &shape(5000, 10, 5010), &Neighbours::default(), Cover::Request);
        assert_eq!((w.logical, w.len), (4096, 2048));
        let w = window(&t, GEO, &shape(0, 3, 3), &Neighbours::default(), Cover::Request);
        assert_eq!((w.logical, w.len), (0, 4));
    }

    #[test]
    fn table_validation() {
        assert!(PreallocTable::new(vec![], 1, 1).is_err());
        assert!(PreallocTable::new(vec![4, 4], 1, 1).is_err());
        assert!(PreallocTable::new(vec![0, 4], 1, 1).is_err());
        assert!(PreallocTable::new(vec![4, 8, 64], 1, 1).is_ok());
    }
}
